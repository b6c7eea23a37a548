"""The exceptions the entry points turn into a one-line message and an exit code."""


class UserError(Exception):
    """Bad input from the user: the message names the problem and the fix, on one line."""


class GraphFailed(Exception):
    """ONNX Runtime failed while running a graph, where it raises no exception of its own type
    (I/O binding reports a failing kernel as a plain RuntimeError)."""


def run_cli(main) -> int:
    """Run an entry point's main(); a UserError becomes `error: ...` on stderr and exit 2, and an
    error raised inside ONNX Runtime becomes one `error:` line and exit 1 (never a traceback)."""
    import sys

    try:
        return main() or 0
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted; nothing was written", file=sys.stderr)
        return 130
    except Exception as exc:
        if not (isinstance(exc, GraphFailed) or type(exc).__module__.startswith("onnxruntime")):
            raise
        first_line = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        print(f"error: ONNX Runtime failed: {first_line}", file=sys.stderr)
        return 1
