/** Bad input from the user: the message names the problem and the fix, on one line (codes/common/errors.py). */
export class UserError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = "UserError";
  }
}
