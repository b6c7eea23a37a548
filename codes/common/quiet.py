"""Library output kept aside: tools print only their own lines unless --verbose.

torch's exporter, Olive, transformers, onnxruntime-genai and pydub write warnings, INFO lines
and progress bars from Python and from C++. `library_output` sends both file descriptors to a
temporary file for the span of a library call, and prints what was kept only when that call
fails with something other than a user error.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from contextlib import contextmanager

from codes.common.errors import UserError

_VERBOSE = {"on": bool(os.environ.get("OMNIVOICE_ONNX_VERBOSE"))}
REPLAY_CHARS = 8000  # the tail of a failing step's log, which names the failing pass


def set_verbose(on: bool) -> None:
    _VERBOSE["on"] = on


@contextmanager
def library_output(step: str):
    if _VERBOSE["on"]:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        saved = os.dup(1), os.dup(2)
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        failure = None
        try:
            yield
        except UserError:
            raise
        except BaseException as exc:
            failure = exc
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            if failure is not None and not isinstance(failure, KeyboardInterrupt):
                sink.seek(0)
                log = sink.read().decode("utf-8", errors="replace")
                if log.strip():
                    sys.stderr.write(log[-REPLAY_CHARS:] + f"\n(the output of {step} above, shown because it failed)\n")
