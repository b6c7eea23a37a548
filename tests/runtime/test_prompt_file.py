"""codes/runtime/voices/prompt_file.py: upstream's .pt voice prompts and wyoming-piper's ref.rvq read without torch
and without trusting pickle, and ours written so upstream reads them back exactly.

The files are made here with the real torch and omnivoice packages (the build environment has both);
each hostile one is refused in one line naming the problem, and nothing in it runs.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest
import torch
from helpers.scripts import last_error_line, run_script
from omnivoice.models.omnivoice import VoiceClonePrompt

from codes.runtime.request import Voice
from codes.runtime.voices import prompt_file
from codes.runtime.voices.prompt_file import MAX_FILE_BYTES, PromptFileError, is_prompt_file, prompt_bytes, read_prompt

TEXT = "This is what the reference clip says."


def codes_of(frames: int = 50, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1024, size=(8, frames), dtype=np.int64)


def saved(obj, path) -> bytes:
    torch.save(obj, path)
    return path.read_bytes()


def refused(data: bytes) -> str:
    with pytest.raises(PromptFileError) as caught:
        read_prompt(data, "hostile.pt")
    message = str(caught.value)
    assert "\n" not in message and "hostile.pt" in message
    return message


def test_a_prompt_saved_by_upstream_reads_as_upstream_loads_it(tmp_path):
    codes = codes_of()
    VoiceClonePrompt(torch.from_numpy(codes), TEXT, 0.0473).save(str(tmp_path / "upstream.pt"))
    data = (tmp_path / "upstream.pt").read_bytes()
    assert is_prompt_file(data)
    read_codes, text, rms = read_prompt(data, "upstream.pt")
    assert read_codes.dtype == np.int64 and np.array_equal(read_codes, codes) and text == TEXT and rms == 0.0473
    voice = Voice.load(tmp_path / "upstream.pt")
    assert np.array_equal(voice.codes, codes) and voice.text == TEXT and voice.rms == 0.0473


def test_a_voice_saved_as_pt_loads_in_upstream_with_identical_tokens_text_and_rms(tmp_path):
    codes = codes_of(77, seed=3)
    for rms in (0.0473, 0.31, None):  # None: a pinned design voice's synthesized reference sets no loudness
        path = tmp_path / f"ours-{rms}.pt"
        Voice(codes, "Ünïcödé text, 中文.", rms).save(path)
        prompt = VoiceClonePrompt.load(str(path))  # torch.load(weights_only=True)
        assert prompt.ref_audio_tokens.dtype == torch.int64 and list(prompt.ref_audio_tokens.shape) == [8, 77]
        assert np.array_equal(prompt.ref_audio_tokens.numpy(), codes)
        assert prompt.ref_text == "Ünïcödé text, 中文." and prompt.ref_rms == rms
        mapped = torch.load(path, weights_only=True, mmap=True)  # storages aligned as torch aligns them
        assert np.array_equal(mapped["ref_audio_tokens"].numpy(), codes)
        again = Voice.load(path)
        assert np.array_equal(again.codes, codes) and again.rms == rms
    assert prompt_bytes(codes, TEXT, 0.5) == prompt_bytes(codes, TEXT, 0.5)  # the same voice, the same bytes


def test_our_npz_and_upstream_pt_are_told_apart_by_content_not_name(tmp_path):
    voice = Voice(codes_of(), TEXT, 0.2)
    voice.save(tmp_path / "ours.npz")
    (tmp_path / "really-a-pt.npz").write_bytes(voice.to_bytes("pt"))
    (tmp_path / "really-an-npz.pt").write_bytes(voice.to_bytes("npz"))
    for name in ("ours.npz", "really-a-pt.npz", "really-an-npz.pt"):
        loaded = Voice.load(tmp_path / name)
        assert np.array_equal(loaded.codes, voice.codes) and loaded.text == TEXT and loaded.rms == 0.2


def test_wyoming_piper_ref_rvq_without_format_version_and_tensors_that_are_views(tmp_path):
    codes = codes_of(40, seed=1)
    # wyoming-piper saves the three keys alone; a tensor may be a view into a larger storage, any int type
    wider = torch.from_numpy(np.concatenate([codes_of(40, seed=9), codes], axis=1).astype(np.int32))
    for tokens in (torch.from_numpy(codes), wider[:, 40:], torch.from_numpy(codes.T.copy()).t()):
        data = saved({"ref_audio_tokens": tokens, "ref_text": TEXT, "ref_rms": 0.05}, tmp_path / "ref.rvq")
        read_codes, text, rms = read_prompt(data, "ref.rvq")
        assert np.array_equal(read_codes, codes) and read_codes.dtype == np.int64 and text == TEXT and rms == 0.05


class _System:
    """What a malicious pickle does: os.system at load time."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_a_pickle_that_calls_os_system_is_refused_by_name_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    for where in ("ref_audio_tokens", "ref_text", "format_version"):
        payload = {"format_version": 1, "ref_audio_tokens": torch.from_numpy(codes_of()), "ref_text": TEXT,
                   "ref_rms": 0.1, where: _System(f"touch {marker}")}
        message = refused(saved(payload, tmp_path / "evil.pt"))
        assert "system" in message and "refused, nothing was run" in message
    # the CLI: one line, exit 2, refused before any model is looked for
    result = run_script("inference.py", "--model_dir", tmp_path / "no-model", "--text", "Hi.",
                        "--voice", tmp_path / "evil.pt", "--output", tmp_path / "out.wav")
    assert result.returncode == 2 and "system" in last_error_line(result)
    assert not marker.exists() and not (tmp_path / "out.wav").exists()


def test_other_globals_are_refused_even_harmless_looking_ones(tmp_path):
    tokens = torch.from_numpy(codes_of())
    for extra, named in ((torch.zeros(2, dtype=torch.bfloat16), "BFloat16Storage"),
                         (torch.nn.Parameter(torch.zeros(2)), "_rebuild_parameter"),
                         (np.zeros(2), "numpy")):
        payload = {"ref_audio_tokens": tokens, "ref_text": TEXT, "ref_rms": 0.1, "extra": extra}
        assert named in refused(saved(payload, tmp_path / "x.pt"))


def _with_member(data: bytes, name: str, member: bytes, compress=zipfile.ZIP_STORED) -> bytes:
    """A copy of a torch.save zip with one member's bytes replaced."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            body = member if info.filename.endswith(name) else source.read(info)
            target.writestr(info.filename, body, compress_type=compress if info.filename.endswith(name) else 0)
    return out.getvalue()


def test_a_zip_bomb_is_refused_from_its_declared_size_and_a_lying_one_from_what_it_inflates_to(tmp_path):
    good = prompt_bytes(codes_of(), TEXT, 0.1)
    bomb = _with_member(good, "data.pkl", b"\0" * (200 << 20), zipfile.ZIP_DEFLATED)
    assert len(bomb) < 1 << 20  # 200 MB in a fraction of one
    assert "claims 209715200 bytes" in refused(bomb)
    # the same member declaring 100 bytes: read no further than that, then refused
    with zipfile.ZipFile(io.BytesIO(bomb)) as archive:
        info = archive.getinfo("archive/data.pkl")
    liar = bytearray(bomb)
    central = bomb.index(b"PK\x01\x02")  # data.pkl is the first member: its central entry comes first
    struct.pack_into("<I", liar, info.header_offset + 22, 100)
    struct.pack_into("<I", liar, central + 24, 100)
    assert "data.pkl cannot be read (Bad CRC-32" in refused(bytes(liar))


def test_a_truncated_zip_is_refused(tmp_path):
    good = prompt_bytes(codes_of(), TEXT, 0.1)
    for cut in (len(good) // 2, len(good) - 10, 200):
        assert "damaged or truncated zip" in refused(good[:cut])


def test_wrong_shapes_dtypes_ranges_and_types_are_refused(tmp_path):
    cases = [
        ({"ref_audio_tokens": torch.zeros(7, 20, dtype=torch.int64)}, "shape [7, 20]"),
        ({"ref_audio_tokens": torch.zeros(1, 8, 20, dtype=torch.int64)}, "shape [1, 8, 20]"),
        ({"ref_audio_tokens": torch.zeros(8, dtype=torch.int64)}, "shape [8]"),
        ({"ref_audio_tokens": torch.zeros(8, 0, dtype=torch.int64)}, "shape [8, 0]"),
        ({"ref_audio_tokens": torch.zeros(8, 20)}, "float32"),
        ({"ref_audio_tokens": torch.zeros(8, 20, dtype=torch.bool)}, "bool"),
        ({"ref_audio_tokens": torch.full((8, 20), 1024)}, "hold 1024..1024; codes lie in 0..1023"),
        ({"ref_audio_tokens": torch.full((8, 20), -1)}, "hold -1..-1"),
        ({"ref_audio_tokens": [[1, 2]] * 8}, "not a tensor"),
        ({"ref_text": 42}, "a int"),
        ({"ref_text": "  "}, "empty"),
        ({"ref_rms": "loud"}, "'loud'"),
        ({"ref_rms": float("nan")}, "nan"),
        ({"ref_rms": -1.0}, "-1.0"),
        ({"format_version": 2}, "format_version is 2"),
    ]
    for change, expected in cases:
        payload = {"format_version": 1, "ref_audio_tokens": torch.from_numpy(codes_of()), "ref_text": TEXT,
                   "ref_rms": 0.1, **change}
        assert expected in refused(saved(payload, tmp_path / "bad.pt")), change
    assert "not the dict" in refused(saved([torch.zeros(8, 3)], tmp_path / "list.pt"))
    assert "no ref_text" in refused(saved({"ref_audio_tokens": torch.zeros(8, 3, dtype=torch.int64), "ref_rms": 0.1},
                                          tmp_path / "missing.pt"))


def test_a_storage_claiming_2_gb_is_refused_before_it_is_read():
    good = prompt_bytes(codes_of(), TEXT, 0.1)  # numel 400: BININT2 after the location "cpu"
    claim = b"X\x03\x00\x00\x00cpu" + pickle.BININT2 + struct.pack("<H", 400)
    assert claim in good
    with zipfile.ZipFile(io.BytesIO(good)) as archive:
        pickled = archive.read("archive/data.pkl").replace(claim, claim[:-3] + pickle.BININT + struct.pack("<i", 1 << 28))
    message = refused(_with_member(good, "data.pkl", pickled))
    assert "claims 268435456 elements (2147483648 bytes)" in message
    # a tensor that reaches past its (honest) storage
    with zipfile.ZipFile(io.BytesIO(good)) as archive:
        pickled = archive.read("archive/data.pkl").replace(pickle.BININT1 + b"\x08" + pickle.BININT1 + b"\x32",
                                                          pickle.BININT1 + b"\x08" + pickle.BININT1 + b"\x64", 1)
    assert "reaches past its storage" in refused(_with_member(good, "data.pkl", pickled))


def test_a_file_past_the_size_cap_and_other_non_voices_are_one_line_errors(tmp_path):
    (tmp_path / "huge.pt").write_bytes(b"PK\x03\x04" + b"data.pkl" + b"\0" * MAX_FILE_BYTES)
    (tmp_path / "text.pt").write_text("not a voice")
    legacy = io.BytesIO()
    torch.save({"ref_audio_tokens": torch.zeros(8, 3, dtype=torch.int64)}, legacy, _use_new_zipfile_serialization=False)
    (tmp_path / "legacy.pt").write_bytes(legacy.getvalue())
    for name in ("huge.pt", "text.pt", "legacy.pt"):
        with pytest.raises(prompt_file.UserError) as caught:
            Voice.load(tmp_path / name)
        assert "\n" not in str(caught.value) and name in str(caught.value)


def test_save_voice_never_replaces_a_file(tmp_path):
    (tmp_path / "taken.pt").write_bytes(b"mine")
    with pytest.raises(FileExistsError):
        Voice(codes_of(), TEXT, 0.1).save(tmp_path / "taken.pt", exclusive=True)
    assert (tmp_path / "taken.pt").read_bytes() == b"mine"


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_our_npz_is_read_within_bounds_too_since_uploads_may_be_npz(tmp_path):
    good = dict(codes=codes_of(), text=np.array(TEXT), rms=np.array(0.1), format_version=np.array(1))
    assert Voice.from_bytes(_npz(**good), "ok.npz").text == TEXT

    def npz_refused(data: bytes) -> str:
        with pytest.raises(prompt_file.UserError) as caught:
            Voice.from_bytes(data, "hostile.npz")
        assert "\n" not in str(caught.value) and "hostile.npz" in str(caught.value)
        return str(caught.value)

    assert "holds Python objects" in npz_refused(_npz(**{**good, "text": np.array([TEXT, 1], dtype=object)}))
    # a bomb: 200 MB of codes deflated into a fraction of one, refused from its declared size
    bomb = io.BytesIO()
    np.savez_compressed(bomb, **{**good, "codes": np.zeros((8, 3_276_800), np.int64)})
    assert len(bomb.getvalue()) < 1 << 20 and "claims 209715328 bytes" in npz_refused(bomb.getvalue())
    # a header that claims a shape past the bytes that follow it: refused before numpy allocates it
    raw = _npz(**good)
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        header_claim = archive.read("codes.npy").replace(b"(8, 50)", b"(8, 99)")
    assert "claims shape [8, 99]" in npz_refused(_with_member(raw, "codes.npy", header_claim))
    assert "got [7, 50]" in npz_refused(_npz(**{**good, "codes": codes_of()[:7]}))
    assert "format version" in npz_refused(_npz(**{**good, "format_version": np.array(2)}))
    assert "damaged or truncated zip" in npz_refused(raw[: len(raw) // 2])


def test_a_pickle_cannot_change_the_allowed_globals_for_later_files():
    """BUILD on an allowed global (setting its defaults, or a storage type's dtype) fails, so one file
    cannot change how the next one is read."""
    good = prompt_bytes(codes_of(), TEXT, 0.1)
    with zipfile.ZipFile(io.BytesIO(good)) as archive:
        pickled = archive.read("archive/data.pkl")
    storage_type = pickle.GLOBAL + b"torch\nLongStorage\n"
    rebuild = pickle.GLOBAL + b"torch._utils\n_rebuild_tensor_v2\n"
    slot_state = (pickle.NONE + pickle.EMPTY_DICT + pickle.MARK + pickle.BINUNICODE + struct.pack("<I", 12)
                  + b"__defaults__" + pickle.NONE + pickle.SETITEMS + pickle.TUPLE2 + pickle.BUILD)
    for target in (storage_type, rebuild):
        changed = _with_member(good, "data.pkl", pickled.replace(target, target + slot_state, 1))
        refused(changed)
    again = read_prompt(good, "good.pt")  # still read as before
    assert np.array_equal(again[0], codes_of())
