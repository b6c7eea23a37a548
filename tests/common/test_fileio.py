"""codes.common.fileio: atomic writes leave a whole file with the usual mode, or nothing."""

from __future__ import annotations

import os
import stat

import pytest

from codes.common.fileio import atomic_path


def test_atomic_path_gives_the_umask_mode_without_changing_the_umask(tmp_path, monkeypatch):
    before = os.umask(0o027)
    try:  # setting the umask to read it made another thread's new files world-writable for a moment
        monkeypatch.setattr(os, "umask", lambda *_: pytest.fail("atomic_path changed the process umask"))
        with atomic_path(tmp_path / "out.json") as tmp:
            tmp.write_text("{}")
    finally:
        monkeypatch.undo()
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["out.json"]


def test_an_exclusive_write_keeps_the_first_file_and_leaves_no_temporary(tmp_path):
    with atomic_path(tmp_path / "voice.npz", exclusive=True) as tmp:
        tmp.write_bytes(b"first")
    with pytest.raises(FileExistsError):
        with atomic_path(tmp_path / "voice.npz", exclusive=True) as tmp:
            tmp.write_bytes(b"second")
    assert (tmp_path / "voice.npz").read_bytes() == b"first" and os.listdir(tmp_path) == ["voice.npz"]
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "broken.npz") as tmp:
            raise RuntimeError("the body failed")
    assert os.listdir(tmp_path) == ["voice.npz"]
