"""Faults injected into the real engine: a noise source that raises (test_engine.py, test_hostile.py)."""

from __future__ import annotations

from codes.runtime.model.decoding import RandomNoise


class FailingNoise:
    """A noise source that raises on its nth draw: an item that breaks inside a decoding step."""

    def __init__(self, error: BaseException, after: int = 1):
        self.error, self.left, self.inner = error, after, RandomNoise(0)

    def uniform(self, shape):
        self.left -= 1
        if self.left < 0:
            raise self.error
        return self.inner.uniform(shape)


# A process whose PYTHONPATH starts with a folder holding this as sitecustomize.py (the driver, and Ray's
# workers, which inherit it) changes MODULE's OWNER.ATTRIBUTE (OWNER None: a function of the module itself):
#   "pause", after the call numbered AFTER has returned: it writes MARKER and waits there, so a test can kill it at
#            a known point (a real SIGKILL or SIGTERM on the real command, at a moment it chose);
#   "die_once": the first process of all to call it (MARKER decides which) kills itself there, as a lost node would;
#   "die_on_name": a call whose first argument's file name holds MARKER kills its process, as a segfault would;
#   "delay": every call waits AFTER seconds first (MARKER written then): work that takes long, as at full size.
HOOK = '''
import functools, importlib.abc, importlib.util, os, signal, sys, threading

MODULE, OWNER, ATTRIBUTE, ACTION, AFTER, MARKER = {module!r}, {owner!r}, {attribute!r}, {action!r}, {after!r}, {marker!r}

class _Fault(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            owner = getattr(module, OWNER) if OWNER else module
            original, calls = getattr(owner, ATTRIBUTE), [0]

            @functools.wraps(original)  # the same signature: Ray reads an actor method's
            def changed(*args, **kwargs):
                if ACTION == "delay":
                    open(MARKER, "w").close()
                    threading.Event().wait(AFTER)
                if ACTION == "die_on_name" and MARKER in os.path.basename(str(args[0])):
                    os.kill(os.getpid(), signal.SIGKILL)
                if ACTION == "die_once":
                    try:
                        os.close(os.open(MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                    except FileExistsError:
                        return original(*args, **kwargs)
                    os.kill(os.getpid(), signal.SIGKILL)
                result = original(*args, **kwargs)
                calls[0] += 1
                if ACTION == "pause" and calls[0] == AFTER:
                    open(MARKER, "w").close()
                    threading.Event().wait()  # until killed
                return result

            setattr(owner, ATTRIBUTE, changed)

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _Fault())
'''


def fault_hook(folder, module: str, owner: str | None, attribute: str, action: str, marker, after: int = 0) -> dict:
    """Write the hook into `folder`; returns the environment that loads it (PYTHONPATH first)."""
    import os
    from pathlib import Path

    assert action in ("pause", "die_once", "die_on_name", "delay"), action
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / "sitecustomize.py").write_text(
        HOOK.format(module=module, owner=owner, attribute=attribute, action=action, after=after, marker=str(marker)),
        encoding="utf-8")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
