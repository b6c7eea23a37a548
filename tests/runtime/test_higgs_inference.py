"""higgs_inference.py: the codec round trip, encode-only and decode-only, and its errors."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
from helpers.codec_builds import codec_build
from helpers.scripts import last_error_line, run_script

from codes.export.generated_higgs import speech_like_signal


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory):
    return codec_build(tmp_path_factory, "fp32")[0]


@pytest.fixture()
def stereo_44k(tmp_path):
    mono = speech_like_signal(2.0, sample_rate=44100, seed=3)
    path = tmp_path / "in.wav"
    soundfile.write(path, np.stack([mono, 0.5 * mono], axis=1), 44100, subtype="FLOAT")
    return path


def leftovers(folder):
    """Files an interrupted atomic write would leave (.name.XXXX temporaries)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_round_trip_then_decode_only_gives_the_same_audio(models_dir, stereo_44k, tmp_path):
    rt, codes_path, decoded = tmp_path / "rt.wav", tmp_path / "codes.npy", tmp_path / "decoded.wav"
    run_script("higgs_inference.py", "--models-dir", models_dir, "--input", stereo_44k, "--output", rt,
               "--codes_out", codes_path, check=True)
    codes = np.load(codes_path)
    assert codes.dtype == np.int64 and codes.shape == (8, 50)  # 2 s at 25 frames/s
    audio, rate = soundfile.read(rt)
    assert rate == 24000 and audio.shape == (50 * 960,) and np.abs(audio).max() > 0.01
    run_script("higgs_inference.py", "--models-dir", models_dir, "--codes_in", codes_path, "--output", decoded,
               check=True)
    np.testing.assert_array_equal(soundfile.read(decoded)[0], audio)
    assert not leftovers(tmp_path)


def test_encode_only_writes_just_the_codes(models_dir, stereo_44k, tmp_path):
    codes_path = tmp_path / "only.npy"
    run_script("higgs_inference.py", "--models-dir", models_dir, "--input", stereo_44k, "--codes_out", codes_path,
               check=True)
    assert np.load(codes_path).shape == (8, 50)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav", "only.npy"]


def _bad_inputs(tmp_path):
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "text.wav").write_text("not audio at all\n")
    soundfile.write(tmp_path / "short.wav", np.zeros(900, np.float32), 24000)
    np.save(tmp_path / "shape.npy", np.zeros((7, 5), np.int64))
    np.save(tmp_path / "dtype.npy", np.zeros((8, 5), np.float32))
    np.save(tmp_path / "range.npy", np.full((8, 5), 1024, np.int64))
    (tmp_path / "a_folder.wav").mkdir()


BAD = {
    "missing input": (["--input", "{t}/nope.wav", "--output", "{t}/out.wav"], "not found"),
    "empty input": (["--input", "{t}/empty.wav", "--output", "{t}/out.wav"], "cannot read audio"),
    "non-audio input": (["--input", "{t}/text.wav", "--output", "{t}/out.wav"], "cannot read audio"),
    "shorter than a hop": (["--input", "{t}/short.wav", "--output", "{t}/out.wav"], "960-sample hop"),
    "codes wrong shape": (["--codes_in", "{t}/shape.npy", "--output", "{t}/out.wav"], "shape"),
    "codes wrong dtype": (["--codes_in", "{t}/dtype.npy", "--output", "{t}/out.wav"], "integers"),
    "codes out of range": (["--codes_in", "{t}/range.npy", "--output", "{t}/out.wav"], "0..1023"),
    "codes not npy": (["--codes_in", "{t}/text.wav", "--output", "{t}/out.wav"], "not a .npy"),
    "output folder missing": (["--input", "{t}/short.wav", "--output", "{t}/no/such/out.wav"], "does not exist"),
    "output is a folder": (["--input", "{t}/short.wav", "--output", "{t}/a_folder.wav"], "is a folder"),
    "codes output folder missing": (["--input", "{t}/short.wav", "--codes_out", "{t}/no/out.npy"], "does not exist"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_a_one_line_error_and_writes_nothing(models_dir, tmp_path, case):
    _bad_inputs(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    args, message = BAD[case]
    result = run_script("higgs_inference.py", "--models-dir", models_dir,
                        *[a.format(t=tmp_path) for a in args])
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert last_error_line(result).startswith("error: ") and message in last_error_line(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
