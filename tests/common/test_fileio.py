"""codes.common.fileio: atomic writes leave a whole file with the usual mode, or nothing; a remembered digest
is trusted only for a file unchanged since."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time

import pytest

from codes.common import fileio
from codes.common.fileio import atomic_path, known_sha256


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


def test_a_remembered_digest_is_trusted_only_while_the_file_is_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIVOICE_ONNX_CACHE", str(tmp_path / "cache"))
    graph = tmp_path / "llm_decoder.onnx.data"
    graph.write_bytes(b"weights" * 1000)
    store = tmp_path / "cache" / "file-digests.json"

    # Written just now: hashed, not remembered (a second write in the same tick would keep its times).
    assert known_sha256([graph])[0] == hashlib.sha256(graph.read_bytes()).hexdigest()
    assert not store.exists() or str(graph.resolve()) not in json.loads(store.read_text())

    monkeypatch.setattr(fileio, "SETTLED_NS", 50_000_000)  # past any tick of the file's times
    while time.time_ns() - graph.stat().st_ctime_ns <= fileio.SETTLED_NS:
        time.sleep(0.01)
    assert known_sha256([graph])[0] == hashlib.sha256(graph.read_bytes()).hexdigest()
    known = json.loads(store.read_text())
    known[str(graph.resolve())][-1] = "remembered"
    store.write_text(json.dumps(known))
    assert known_sha256([graph])[0] == "remembered"  # unchanged: not read again

    times = graph.stat()
    graph.write_bytes(b"WEIGHTS" * 1000)  # same size, modification time put back: the change time moves
    os.utime(graph, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert known_sha256([graph])[0] == hashlib.sha256(b"WEIGHTS" * 1000).hexdigest()

    store.write_text("not json")
    assert known_sha256([graph])[0] == hashlib.sha256(b"WEIGHTS" * 1000).hexdigest()
