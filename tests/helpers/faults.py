"""Faults injected into the real engine: a noise source that raises (test_engine.py, test_hostile.py)."""

from __future__ import annotations

from codes.runtime.decoding import RandomNoise


class FailingNoise:
    """A noise source that raises on its nth draw: an item that breaks inside a decoding step."""

    def __init__(self, error: BaseException, after: int = 1):
        self.error, self.left, self.inner = error, after, RandomNoise(0)

    def uniform(self, shape):
        self.left -= 1
        if self.left < 0:
            raise self.error
        return self.inner.uniform(shape)


# A process whose PYTHONPATH starts with a folder holding this as sitecustomize.py stops, for good, inside
# MODULE.CLASS.METHOD once that method has returned AFTER times: it writes MARKER and waits there, so a test can
# kill it at a known point (a real SIGKILL or SIGTERM on the real command, at a moment it chose). AFTER 0: the
# first process of all to call the method (MARKER decides which) kills itself there, as a lost node would.
PAUSE_HOOK = '''
import functools, importlib.abc, importlib.util, os, signal, sys, threading

MODULE, CLASS, METHOD, AFTER, MARKER = {module!r}, {cls!r}, {method!r}, {after!r}, {marker!r}

class _PauseAfter(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            owner = getattr(module, CLASS)
            original, calls = getattr(owner, METHOD), [0]

            @functools.wraps(original)  # the same signature: Ray reads an actor method's
            def paused(*args, **kwargs):
                if AFTER == 0:  # die once, in whichever process comes first: a lost worker
                    try:
                        os.close(os.open(MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                    except FileExistsError:
                        return original(*args, **kwargs)
                    os.kill(os.getpid(), signal.SIGKILL)
                result = original(*args, **kwargs)
                calls[0] += 1
                if calls[0] == AFTER:
                    open(MARKER, "w").close()
                    threading.Event().wait()  # until killed
                return result

            setattr(owner, METHOD, paused)

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _PauseAfter())
'''


def pause_hook(folder, module: str, cls: str, method: str, after: int, marker) -> dict:
    """Write the hook into `folder`; returns the environment that loads it (PYTHONPATH first)."""
    import os
    from pathlib import Path

    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / "sitecustomize.py").write_text(
        PAUSE_HOOK.format(module=module, cls=cls, method=method, after=after, marker=str(marker)), encoding="utf-8")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
