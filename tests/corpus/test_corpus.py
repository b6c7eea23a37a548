"""corpus.py on a real local Ray (this machine's cores) and the tiny fp32 build, run as a user would.

One run of a 40-row corpus (plus bad rows) is shared by the tests that read its outputs; the
rerun, the killed run and the other input formats each start their own corpus.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from helpers.faults import fault_hook
from helpers.scripts import ROOT, last_error_line, run_script
from helpers.synthesis_inputs import ASR_ONLY, FP32_BUILD, REF_TEXT, reference_clip, write_clip

from codes.common.errors import UserError
from codes.corpus.rows import RowError, check_id, row_seed
from codes.runtime.contract.specs import SAMPLE_RATE
from codes.runtime.text.duration import estimate_target_tokens, frames_for_duration

FAST = ("--num_steps", "4", "--no_postprocess")  # no silence removal: each file's length is exact
HOP = 960  # samples per codec frame
PAD = 2 * int(0.1 * SAMPLE_RATE)  # the silence post-processing adds on each side
LANGUAGES = ["en", "zh", "fr", "de", "ja", "es", "English", None]
INSTRUCTS = ["female, low pitch", "male, british accent", None, None]
TEXTS = ["Hello there, this line is number {i}.", "A short one, {i}.", "The quick brown fox jumps over lazy dog {i}.",
         "Line {i} is spoken with care, and it takes a little longer than the others do."]
UNSAFE_IDS = ["../escape", "a/b", "..", ".hidden", "", "x" * 300, "tab\there"]


def corpus(*args) -> subprocess.CompletedProcess:
    return run_script("corpus.py", *args)


def wav_samples(path: Path) -> np.ndarray:
    samples, rate = soundfile.read(path, dtype="int16")
    assert rate == SAMPLE_RATE
    return samples


def results_of(out: Path) -> list[dict]:
    table = pq.read_table(out / "results.parquet").to_pylist()
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert table == lines
    return table


def expected_samples(row: dict, voice) -> int:
    if row.get("duration"):
        frames = frames_for_duration(row["duration"])
    else:
        cloned = row.get("voice") or row.get("ref_audio")
        frames = estimate_target_tokens(row["text"], voice.text if cloned else None,
                                        voice.codes.shape[1] if cloned else None, row.get("speed") or 1.0)
    return frames * HOP + PAD


@pytest.fixture(scope="module")
def build(builds):
    return builds.get(*FP32_BUILD)


@pytest.fixture(scope="module")
def inputs(build, tmp_path_factory):
    """A folder with a reference clip, a voice saved from it by inference.py, and 40 good rows plus bad ones."""
    folder = tmp_path_factory.mktemp("corpus-input")
    write_clip(folder / "ref.wav", reference_clip(), SAMPLE_RATE)
    run_script("inference.py", "--model_dir", build, "--text", "Saving a voice.", "--ref_audio", folder / "ref.wav",
               "--ref_text", REF_TEXT, "--save_voice", folder / "voice.npz", "--num_steps", "2", "--quiet",
               "--output", folder / "saved.wav", check=True)
    good = []
    for i in range(39):
        row = {"id": f"line-{i:02d}", "text": TEXTS[i % len(TEXTS)].format(i=i)}
        if LANGUAGES[i % len(LANGUAGES)]:
            row["language"] = LANGUAGES[i % len(LANGUAGES)]
        if i % 5 == 1:
            row["voice"] = "voice.npz"  # relative: to the input's folder
        elif i % 5 == 3:
            row.update(ref_audio=str(folder / "ref.wav"), ref_text=REF_TEXT)
        elif INSTRUCTS[i % len(INSTRUCTS)]:
            row["instruct"] = INSTRUCTS[i % len(INSTRUCTS)]
        if i % 7 == 2:
            row["duration"] = 1.5
        if i % 9 == 4:
            row["speed"] = 1.3
        if i % 6 == 0:
            row["seed"] = 1000 + i
        good.append(row)
    good.append({"id": "odd-language", "text": "Spoken without a language.", "language": "klingon"})
    bad = [
        {"id": "empty-text", "text": "   "},
        {"id": "missing-voice", "text": "Nobody saved this voice.", "voice": "missing.npz"},
        {"id": "twice", "text": "First of two."},
        {"id": "twice", "text": "Second of two."},
        *({"id": unsafe, "text": "Never written."} for unsafe in UNSAFE_IDS),
    ]
    # One file where file names ignore case (macOS, Windows): lines 35 and 36.
    same_file = [{"id": "Case", "text": "Upper."}, {"id": "case", "text": "Lower."}]
    lines = [json.dumps(row) for row in good[:20]] + ["", '["not", "an", "object"]'] \
        + [json.dumps(row) for row in bad] + ["{not json"] + [json.dumps(row) for row in same_file] \
        + [json.dumps(row) for row in good[20:]]
    (folder / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder, good


@pytest.fixture(scope="module")
def first_run(build, inputs, tmp_path_factory):
    folder, good = inputs
    out = tmp_path_factory.mktemp("corpus-run") / "out"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file\n")
    start = time.perf_counter()
    result = corpus("--model_dir", build, "--input", folder / "rows.jsonl", "--output", out, "--batch-size", "4", *FAST)
    assert result.returncode == 0, result.stderr
    return out, result, time.perf_counter() - start


def test_every_good_row_is_spoken_at_its_expected_length(first_run, inputs):
    from codes.runtime.request import Voice

    out, result, _ = first_run
    folder, good = inputs
    voice = Voice.load(folder / "voice.npz")  # the reference rows clone the same clip, so the same length
    by_id = {r["id"]: r for r in results_of(out) if r["status"] == "ok"}
    assert sorted(by_id) == sorted(row["id"] for row in good)
    for row in good:
        record = by_id[row["id"]]
        samples = wav_samples(out / record["audio_path"])
        assert record["audio_path"] == f"audio/{row['id']}.wav"
        assert len(samples) == expected_samples(row, voice), row
        assert record["audio_seconds"] == pytest.approx(len(samples) / SAMPLE_RATE)
        assert record["audio_bytes"] == (out / record["audio_path"]).stat().st_size
        assert record["synthesis_seconds"] > 0 and record["actor"]
        assert record["seed"] == row.get("seed", row_seed(row["id"], 0))
        assert np.abs(samples).max() > 0
    assert (out / "notes.txt").read_text() == "the user's own file\n"
    assert "40 spoken" in result.stdout and "audio seconds per second" in result.stdout


def test_bad_rows_are_error_records_with_clear_messages(first_run):
    out, result, _ = first_run
    records = results_of(out)
    assert len(records) == 40 + 4 + len(UNSAFE_IDS) + 2 + 2  # every non-blank line, once
    errors = {r["row"]: r for r in records if r["status"] == "error"}
    assert all(r["audio_path"] is None and r["error"] for r in errors.values())
    by_id = {r["id"]: r["error"] for r in errors.values() if r["id"] is not None}
    assert by_id["empty-text"] == "text is empty; give at least one word to speak"
    assert "voice file" in by_id["missing-voice"] and "missing.npz not found" in by_id["missing-voice"]
    twice = [r for r in errors.values() if r["id"] == "twice"]
    assert len(twice) == 2 and all('id "twice" is used by 2 rows (line 25, line 26)' in r["error"] for r in twice)
    for row_id in ("Case", "case"):
        assert by_id[row_id].startswith('ids "Case" and "case" (equal but for case, so one file where file names '
                                        'ignore case) are used by 2 rows (line 35, line 36)')
    assert errors["line 22"]["error"].startswith('the row is not a JSON object, got ["not", "an", "object"]')
    assert errors["line 34"]["error"].startswith("the line is not valid JSON")
    unsafe = [r for r in records if r["row"] in {f"line {n}" for n in range(27, 27 + len(UNSAFE_IDS))}]
    assert len(unsafe) == len(UNSAFE_IDS)
    assert all(r["status"] == "error" and "ids name files in OUT_DIR/audio/" in r["error"] for r in unsafe)
    assert f"{len(records) - 40} failed" in result.stdout


def test_unsafe_ids_write_nothing_anywhere(first_run):
    out, _, _ = first_run
    base = out.parent
    written = sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())
    assert all(p.startswith("out/") for p in written)
    assert not [p for p in written if "escape" in p or "hidden" in p or "x" * 50 in p]
    assert sorted(p.name for p in (out / "audio").iterdir()) == sorted(p.name for p in (out / "audio").glob("*.wav"))


def test_unknown_language_warns_and_speaks_language_agnostic(first_run):
    out, _, _ = first_run
    record = next(r for r in results_of(out) if r["id"] == "odd-language")
    assert record["status"] == "ok"
    assert "Language 'klingon' is not recognized" in record["warning"]


def test_a_row_equals_inference_py_with_the_same_inputs_and_seed(first_run, inputs, build, tmp_path):
    out, _, _ = first_run
    folder, good = inputs
    row = next(r for r in good if r.get("voice") and r.get("seed") is None and r.get("instruct") is None)
    seed = row_seed(row["id"], 0)
    args = ["--model_dir", build, "--text", row["text"], "--voice", folder / "voice.npz", "--seed", seed,
            "--output", tmp_path / "single.wav", "--quiet", *FAST]
    if row.get("language"):
        args += ["--language", row["language"]]
    for key in ("duration", "speed"):
        if row.get(key):
            args += [f"--{key}", row[key]]
    run_script("inference.py", *args, check=True)
    assert np.array_equal(wav_samples(tmp_path / "single.wav"), wav_samples(out / "audio" / f"{row['id']}.wav"))


def test_rerun_skips_everything_then_redoes_exactly_two_deleted_files(first_run, inputs, build):
    out, _, first_seconds = first_run
    folder, good = inputs
    audio = out / "audio"
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in audio.iterdir()}

    start = time.perf_counter()
    rerun = corpus("--model_dir", build, "--input", folder / "rows.jsonl", "--output", out, "--batch-size", "4", *FAST)
    rerun_seconds = time.perf_counter() - start
    assert rerun.returncode == 0, rerun.stderr
    assert "0 spoken" in rerun.stdout and "40 skipped" in rerun.stdout
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in audio.iterdir()} == before
    assert "nothing to speak: no actor started" in rerun.stdout
    # What is left is the fixed cost of starting Ray and reading the rows (a few seconds on an idle machine).
    assert rerun_seconds < max(first_seconds, 30)

    deleted = ["line-03.wav", "line-17.wav"]
    for name in deleted:
        (audio / name).unlink()
    redo = corpus("--model_dir", build, "--input", folder / "rows.jsonl", "--output", out, "--batch-size", "4", *FAST)
    assert redo.returncode == 0, redo.stderr
    assert "2 spoken" in redo.stdout and "38 skipped" in redo.stdout
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in audio.iterdir()}
    assert {name for name in after if after[name][0] != before[name][0]} == set(deleted)
    assert all(after[name][1] == before[name][1] for name in deleted)  # the same seed, the same audio
    assert sum(r["status"] == "ok" for r in results_of(out)) == 40


def _session_processes(session: int) -> list[int]:
    """Live processes of one session: the corpus run and the Ray processes it started."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session and fields[0] != "Z":
                found.append(int(entry))
    return found


def test_a_killed_run_resumes_complete_with_no_corrupt_file(build, tmp_path):
    rows = [{"id": f"k{i:02d}", "text": f"Sentence number {i} of the run that is killed, spoken at length.",
             "duration": 2.0} for i in range(16)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    args = [sys.executable, str(ROOT / "corpus.py"), "--model_dir", str(build), "--input", str(tmp_path / "rows.jsonl"),
            "--output", str(out), "--actors", "1", "--batch-size", "1", "--num_steps", "16", "--no_postprocess"]
    with open(tmp_path / "killed.log", "w") as log:
        run = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and run.poll() is None:
            if len(list((out / "audio").glob("*.wav"))) >= 2:
                break
            time.sleep(0.05)
        assert run.poll() is None, "the run ended before it could be killed"
        # Kill the run and every Ray process it started, as a crash would.
        for pid in [run.pid] + _session_processes(run.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        run.wait()
        deadline = time.monotonic() + 30
        while _session_processes(run.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    finished = sorted((out / "audio").glob("*.wav"))
    assert 2 <= len(finished) < len(rows)
    for path in finished:  # whatever is under a final name is complete
        assert len(wav_samples(path)) == 50 * HOP + PAD
    assert not (out / "results.parquet").exists()

    resumed = corpus("--model_dir", build, "--input", tmp_path / "rows.jsonl", "--output", out, "--actors", "1",
                     "--batch-size", "1", "--num_steps", "16", "--no_postprocess")
    assert resumed.returncode == 0, resumed.stderr
    records = results_of(out)
    assert [r["status"] for r in records] == ["ok"] * len(rows)
    assert sorted(p.name for p in (out / "audio").iterdir()) == [f"{r['id']}.wav" for r in rows]  # no temporaries
    for record in records:
        assert len(wav_samples(out / record["audio_path"])) == 50 * HOP + PAD


def test_parquet_input_and_files_corpus_py_did_not_write(build, inputs, tmp_path):
    folder, _ = inputs
    rows = [{"id": "007", "text": "Parquet keeps the leading zeros.", "language": "en", "seed": 5, "duration": None},
            {"id": "p2", "text": "A second parquet row.", "language": None, "seed": None, "duration": 1.2},
            {"id": "theirs", "text": "Someone else's file has this name.", "language": None, "seed": None,
             "duration": None}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    out = tmp_path / "out"
    (out / "audio").mkdir(parents=True)
    (out / "audio" / "theirs.wav").write_bytes(b"not ours")
    result = corpus("--model_dir", build, "--input", tmp_path / "rows.parquet", "--output", out, *FAST)
    assert result.returncode == 0, result.stderr
    records = {r["id"]: r for r in results_of(out)}
    assert records["007"]["status"] == records["p2"]["status"] == "ok"
    assert records["007"]["seed"] == 5 and records["007"]["row"] == "row 1"
    assert len(wav_samples(out / "audio" / "p2.wav")) == frames_for_duration(1.2) * HOP + PAD
    assert records["theirs"]["status"] == "error" and "corpus.py did not write it" in records["theirs"]["error"]
    assert (out / "audio" / "theirs.wav").read_bytes() == b"not ours"


def test_csv_input_and_errors_from_the_actors(build, inputs, tmp_path):
    folder, _ = inputs
    (tmp_path / "broken.npz").write_text("not a voice")
    (tmp_path / "rows.csv").write_text(
        "id,text,language,voice,seed,duration,speaker\n"
        '001,"CSV text, with a comma.",en,,3,,ann\n'
        f"c2,A voice that cannot be read.,,{tmp_path / 'broken.npz'},,,bob\n"
        "c3,A bad seed.,,,x,,\n"
        "c4,A bad duration.,,,,-1,\n", encoding="utf-8")
    out = tmp_path / "out"
    result = corpus("--model_dir", build, "--input", tmp_path / "rows.csv", "--output", out, "--format", "flac", *FAST)
    assert result.returncode == 0, result.stderr
    records = {r["id"]: r for r in results_of(out)}
    assert records["001"]["status"] == "ok" and records["001"]["audio_path"] == "audio/001.flac"
    assert records["001"]["seed"] == 3 and "unknown key(s) ignored: speaker" in records["001"]["warning"]
    assert soundfile.info(out / "audio" / "001.flac").format == "FLAC"
    assert records["c2"]["status"] == "error" and "cannot read voice file" in records["c2"]["error"]
    assert records["c2"]["actor"]  # it reached an actor, which recorded the failure and went on
    assert records["c3"]["error"] == '"seed" must be a whole number from 0 to 2**63-1, got "x"'
    assert records["c4"]["error"] == '"duration" must be a number of seconds > 0, got "-1"'


@pytest.mark.parametrize("case", ["no input", "input kind", "output is a file", "foreign results", "batch size"])
def test_bad_command_input_is_one_error_line_and_writes_nothing(build, inputs, tmp_path, case):
    folder, _ = inputs
    source, out = folder / "rows.jsonl", tmp_path / "out"
    extra = []
    if case == "no input":
        source = tmp_path / "missing.jsonl"
    elif case == "input kind":
        source = tmp_path / "rows.txt"
        source.write_text("{}\n")
    elif case == "output is a file":
        out.write_text("a file")
    elif case == "foreign results":
        out.mkdir()
        (out / "results.parquet").write_text("someone else's")
    else:
        extra = ["--batch-size", "-1"]  # 0 is upstream's "by --batch_duration"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = corpus("--model_dir", build, "--input", source, "--output", out, *extra)
    assert result.returncode == 2, result.stderr
    assert last_error_line(result).startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("unsafe", UNSAFE_IDS + [None, True, 1.5, "a\\b", "trailing "])
def test_check_id_refuses_names_that_are_not_plain_files(unsafe):
    with pytest.raises(RowError):
        check_id(unsafe)


def test_check_id_and_row_seed():
    assert check_id("line-01") == "line-01" and check_id(7) == "7" and check_id("voix é") == "voix é"
    assert row_seed("a", 0) == row_seed("a", 0) != row_seed("a", 1) != row_seed("b", 1)
    assert 0 <= row_seed("a", 0) < 2**63


def test_the_actor_side_imports_no_torch():
    script = ("import sys, codes.corpus.run, codes.corpus.worker, codes.runtime.synthesis, ray.data\n"
              "print(sorted(m for m in ('torch', 'torchaudio', 'transformers', 'omnivoice') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_ledger_survives_a_half_written_line_and_owns_only_what_it_claimed(tmp_path):
    from codes.corpus.ledger import Ledger, check_output_dir, record

    out = tmp_path / "out"
    check_output_dir(out)
    ledger = Ledger(out)
    ledger.append([record(id="a", status="pending", audio_path="audio/a.wav", fingerprint="f")])
    ledger.append([record(id="a", status="ok", audio_path="audio/a.wav", fingerprint="f", audio_bytes=3)])
    (out / "audio" / "a.wav").write_bytes(b"abc")
    with open(out / ".results" / "ledger.jsonl", "a", encoding="utf-8") as journal:
        journal.write('{"id": "b", "status": "pen')  # a run killed mid-line
    with pytest.raises(UserError, match="another corpus.py run is using"):
        Ledger(out)
    ledger._lock.close()

    again = Ledger(out)
    assert again.is_done("audio/a.wav", "f") and not again.is_done("audio/a.wav", "other request")
    assert again.claims("audio/a.wav") and not again.claims("audio/b.wav")
    (out / "audio" / ".a.wav.0123456789ab.wav").write_bytes(b"partial")  # ours: beside a file the ledger names
    (out / "audio" / ".b.wav.0123456789ab.wav").write_bytes(b"not ours")
    assert again.remove_temporaries() == 1
    assert sorted(p.name for p in (out / "audio").iterdir()) == [".b.wav.0123456789ab.wav", "a.wav"]
    (out / "audio" / "a.wav").write_bytes(b"abcd")  # changed since: no longer the file the ledger recorded
    assert not again.is_done("audio/a.wav", "f")
    again.close()
    lines = (out / ".results" / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["status"] for line in lines] == ["ok"]


def test_a_crashing_row_is_failed_then_skipped_until_retry_failed_and_a_replaced_clip_is_spoken_again(build, tmp_path):
    """One corpus, three runs (each Ray start costs seconds): a row that kills its actor, a row cloning a
    reference clip that is then replaced under the same name, and a plain row."""
    write_clip(tmp_path / "ref.wav", reference_clip(), SAMPLE_RATE)
    rows = [{"id": "long-plain", "text": "A plain row, long enough to be spoken first in the batch."},
            {"id": "cloned", "text": "A cloned row, spoken second.", "ref_audio": "ref.wav", "ref_text": REF_TEXT},
            {"id": "crash", "text": "Dies."}]  # shortest: spoken last, after its batch-mates were published
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    # An actor that comes to write a file whose name holds "crash" dies, as a segfault in the runtime would kill it.
    hook = fault_hook(tmp_path / "hook", "codes.corpus.worker", None, "encode_audio", "die_on_name", "crash")
    out = tmp_path / "out"
    args = ["--model_dir", build, "--input", tmp_path / "rows.jsonl", "--output", out, "--actors", "1",
            "--batch-size", "4", *FAST]

    crashed = run_script("corpus.py", *args, env=hook)
    assert crashed.returncode == 0, crashed.stderr
    first = {r["id"]: r for r in results_of(out)}
    assert first["long-plain"]["status"] == first["cloned"]["status"] == "ok"
    assert first["crash"]["status"] == "error"
    assert first["crash"]["error"].startswith("its actor died while speaking this row")
    assert "--retry-failed" in first["crash"]["error"]
    # The batch was retried on a new actor: the rows the dead one published were taken as they were.
    assert first["crash"]["actor"] != first["cloned"]["actor"] == first["long-plain"]["actor"]
    assert sorted(p.name for p in (out / "audio").iterdir()) == ["cloned.wav", "long-plain.wav"]
    assert not list((out / ".results" / "speaking").iterdir()) and not list((out / ".results" / "written").iterdir())
    cloned_before = (out / "audio" / "cloned.wav").read_bytes()

    write_clip(tmp_path / "ref.wav", reference_clip(seed=1), SAMPLE_RATE)  # same name, other contents
    rerun = corpus(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert "1 spoken, 1 failed, 1 skipped" in rerun.stdout
    assert "1 row that took an actor down before not spoken again (--retry-failed tries them)" in rerun.stdout
    second = {r["id"]: r for r in results_of(out)}
    assert second["crash"] == first["crash"]
    assert second["cloned"]["fingerprint"] != first["cloned"]["fingerprint"]
    assert (out / "audio" / "cloned.wav").read_bytes() != cloned_before
    assert second["long-plain"] == first["long-plain"]

    retried = corpus(*args, "--retry-failed")
    assert retried.returncode == 0, retried.stderr
    assert "1 spoken, 0 failed, 2 skipped" in retried.stdout
    assert {r["id"]: r["status"] for r in results_of(out)} == {"long-plain": "ok", "cloned": "ok", "crash": "ok"}


@pytest.fixture(scope="module")
def synthesizer(build, tmp_path_factory):
    """One actor's callable, in this process, over an OUT_DIR a Ledger set up: no process boundary is under test."""
    from codes.corpus.ledger import Ledger, check_output_dir
    from codes.corpus.worker import Synthesizer
    from codes.runtime.contract.settings import GenerationSettings

    out = tmp_path_factory.mktemp("corpus-actor") / "out"
    check_output_dir(out)
    Ledger(out).close()
    return Synthesizer(str(build), None, None, 1, GenerationSettings(num_steps=2, postprocess_output=False).to_dict(),
                       str(out))


def _work_item(row_id: str) -> dict:
    request = {"text": f"Row {row_id}.", "language": None, "instruct": None, "voice": None, "ref_audio": None,
               "ref_text": None, "duration": 0.5, "speed": None, "seed": 1}
    return dict(id=row_id, row="line 1", audio_path=f"audio/{row_id}.wav", request=json.dumps(request),
                fingerprint=f"stamp-{row_id}")


def test_a_file_that_appears_while_its_row_is_spoken_is_kept_and_the_row_fails(synthesizer):
    out = synthesizer.out_dir
    (out / "audio" / "theirs.wav").write_bytes(b"someone else's, written after the run planned")
    done = synthesizer.speak(_work_item("theirs"))
    assert done["status"] == "error"
    assert done["error"] == (f"{out / 'audio' / 'theirs.wav'} appeared while this run was speaking the row and was "
                             "kept; move it away and run again to speak it")
    assert (out / "audio" / "theirs.wav").read_bytes() == b"someone else's, written after the run planned"
    assert sorted(p.name for p in (out / "audio").iterdir()) == ["theirs.wav"]  # no temporary left
    assert not list((out / ".results" / "written").iterdir())


def test_a_row_whose_marker_outlived_its_actor_is_failed_and_a_published_row_is_not_spoken_twice(synthesizer):
    out = synthesizer.out_dir
    (out / ".results" / "speaking" / "died-on.wav").write_text("host:123")  # what a crashed actor leaves
    crashed = synthesizer.speak(_work_item("died-on"))
    assert crashed["status"] == "error" and crashed["error"].startswith(
        "its actor died while speaking this row (a crash in the runtime, or killed for memory), actor host:123")
    assert not (out / "audio" / "died-on.wav").exists()

    first = synthesizer.speak(_work_item("spoken"))
    assert first["status"] == "ok" and first["audio_sha256"]
    assert (out / ".results" / "written" / "spoken.wav.json").is_file()  # the ledger would take it in
    assert synthesizer.speak(_work_item("spoken")) == first  # a retried batch: the same record, no second file


def _clip_alone(row_id: str, clip: Path) -> dict:
    """A work item whose row gives a reference clip and no transcript."""
    item = _work_item(row_id)
    item["request"] = json.dumps({**json.loads(item["request"]), "ref_audio": str(clip)})
    return item


def test_a_row_without_its_transcript_is_transcribed_or_names_include_asr(synthesizer, build, builds, tmp_path):
    from codes.corpus.ledger import Ledger, check_output_dir
    from codes.corpus.worker import Synthesizer
    from codes.runtime.contract.settings import GenerationSettings

    clip = write_clip(tmp_path / "ref.wav", reference_clip(), SAMPLE_RATE)
    refused = synthesizer.speak(_clip_alone("no-recogniser", clip))
    assert refused["status"] == "error" and "\n" not in refused["error"]
    assert "unless the build has a recogniser" in refused["error"] and "--include-asr" in refused["error"]
    assert not (synthesizer.out_dir / "audio" / "no-recogniser.wav").exists()

    out = tmp_path / "out"
    check_output_dir(out)
    Ledger(out).close()
    lent = Synthesizer(str(build), None, None, 1, GenerationSettings(num_steps=2, postprocess_output=False).to_dict(),
                       str(out), asr_dir=str(builds.get(*ASR_ONLY)))
    assert lent.speak(_clip_alone("heard", clip))["status"] == "ok"
    run_script("inference.py", "--model_dir", build, "--asr_dir", builds.get(*ASR_ONLY), "--text", "Row heard.",
               "--ref_audio", clip, "--duration", "0.5", "--seed", "1", "--num_steps", "2", "--no_postprocess",
               "--threads", "1", "--quiet", "--output", tmp_path / "single.wav", check=True)  # the actor's threads
    assert np.array_equal(wav_samples(tmp_path / "single.wav"), wav_samples(out / "audio" / "heard.wav"))


def test_only_rows_without_a_transcript_depend_on_the_recogniser(tmp_path):
    """A row with its transcript keeps its fingerprint whatever recogniser the build has (so adding one redoes
    nothing); a row without one is redone when the recogniser changes."""
    from codes.corpus.ledger import Ledger, check_output_dir
    from codes.corpus.rows import check_row
    from codes.corpus.run import CorpusOptions, _plan

    clip = write_clip(tmp_path / "ref.wav", reference_clip(), SAMPLE_RATE)
    _, request, _ = check_row({"id": "heard", "text": "x", "ref_audio": "ref.wav"}, str(tmp_path), 0)
    assert request["ref_audio"] == str(clip) and request["ref_text"] is None  # a clip alone is a good row
    checked = [dict(id=row_id, row=f"line {i}", request=json.dumps({**request, "ref_text": text}), frames=10,
                    error=None, warning=None)
               for i, (row_id, text) in enumerate((("given", REF_TEXT), ("heard", None)), 1)]
    out = tmp_path / "out"
    check_output_dir(out)
    ledger = Ledger(out)
    options = CorpusOptions(input="rows.jsonl", output=out)
    stamps = [{t["id"]: t["fingerprint"] for t in _plan(checked, ledger, options, ("build", recogniser))[1]}
              for recogniser in (None, "recogniser-a", "recogniser-b")]
    ledger.close()
    assert len({s["given"] for s in stamps}) == 1 and len({s["heard"] for s in stamps}) == 3


def test_only_files_this_command_wrote_are_replaced(tmp_path):
    from codes.common.fileio import sha256_file
    from codes.corpus.ledger import CRASHED, Ledger, check_output_dir, record
    from codes.corpus.run import CorpusOptions, _plan

    out = tmp_path / "out"
    check_output_dir(out)
    ledger = Ledger(out)
    (out / "audio" / "ours.wav").write_bytes(b"audio an actor wrote")
    written = record(id="ours", status="ok", audio_path="audio/ours.wav", fingerprint="old", audio_bytes=20,
                     audio_sha256=sha256_file(out / "audio" / "ours.wav"))
    ledger.append([written,
                   record(id="failed", status="error", error="boom", audio_path="audio/failed.wav", fingerprint="f"),
                   record(id="crashed", status="error", error=CRASHED, audio_path="audio/crashed.wav",
                          fingerprint="f"),
                   record(id="claimed", status="pending", audio_path="audio/claimed.wav", fingerprint="f")])
    for name in ("failed", "crashed", "claimed"):  # a user's files, placed where rows once failed
        (out / "audio" / f"{name}.wav").write_bytes(b"the user's")
    assert ledger.wrote("audio/ours.wav")
    assert not any(ledger.wrote(f"audio/{name}.wav") for name in ("failed", "crashed", "claimed"))

    checked = [dict(id=name, row=f"line {i}", request=_work_item(name)["request"], frames=10, error=None,
                    warning=None)
               for i, name in enumerate(("ours", "failed", "crashed", "claimed"), 1)]
    options = CorpusOptions(input="rows.jsonl", output=out, retry_failed=True)
    results, todo, _ = _plan(checked, ledger, options, ("build", None))
    assert [t["id"] for t in todo] == ["ours"]  # a new request for our file: it is removed, to be spoken again
    assert not (out / "audio" / "ours.wav").exists()
    for result in results[1:]:
        assert result["status"] == "error" and "exists and corpus.py did not write it" in result["error"]
    assert {p.name: p.read_bytes() for p in (out / "audio").iterdir()} == {
        f"{name}.wav": b"the user's" for name in ("failed", "crashed", "claimed")}

    (out / "audio" / "ours.wav").write_bytes(b"x" * written["audio_bytes"])  # ours replaced, same size
    ledger.append([written])
    assert not ledger.wrote("audio/ours.wav")
    ledger.close()


def test_an_upstream_test_list_runs_as_upstreams_batch_tool_is_run(build, tmp_path):
    """omnivoice-infer-batch's list and flags: RES_DIR/<id>.wav per row, language_id reaching the model, paths
    relative to the list, a bad row failed on its own."""
    folder = tmp_path / "lists"
    (folder / "clips").mkdir(parents=True)
    write_clip(folder / "clips" / "ref.wav", reference_clip(), SAMPLE_RATE)
    rows = [
        {"id": "clone", "text": "I have 3 apples.", "ref_audio": "clips/ref.wav", "ref_text": REF_TEXT,
         "language_id": "en", "language_name": "English", "duration": None, "speed": 1.1},
        {"id": "design", "text": "Ich habe 25 Äpfel.", "instruct": "female, low pitch", "language_id": "de",
         "language_name": "German", "duration": 2.0},
        {"id": "plain", "text": "No language, no voice."},
        {"id": "broken", "text": None},
    ]
    (folder / "test.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    res_dir = tmp_path / "res"
    done = corpus("--model", build, "--test_list", folder / "test.jsonl", "--res_dir", res_dir, "--num_step", "4",
                  "--postprocess_output", "false", "--denoise", "true", "--batch_size", "0", "--batch_duration", "30",
                  "--normalize_text")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in res_dir.glob("*.wav")) == ["clone.wav", "design.wav", "plain.wav"]
    assert not (res_dir / "audio").exists()
    by_id = {r["id"]: r for r in results_of(res_dir)}
    assert by_id["broken"]["status"] == "error" and 'no "text"' in by_id["broken"]["error"]
    assert by_id["design"]["warning"] is None  # language_id and language_name are known keys

    args = ["--model_dir", build, "--text", "Ich habe 25 Äpfel.", "--instruct", "female, low pitch", "--duration", "2",
            "--seed", row_seed("design", 0), "--num_steps", "4", "--no_postprocess", "--normalize_text", "--quiet"]
    run_script("inference.py", *args, "--language", "de", "--output", tmp_path / "de.wav", check=True)
    assert np.array_equal(wav_samples(tmp_path / "de.wav"), wav_samples(res_dir / "design.wav"))

    again = corpus("--model", build, "--test_list", folder / "test.jsonl", "--res_dir", res_dir, "--num_step", "4",
                   "--postprocess_output", "false", "--batch_size", "0", "--batch_duration", "30", "--normalize_text")
    assert again.returncode == 0 and "0 spoken, 1 failed, 3 skipped" in again.stdout, again.stdout


def test_lang_id_is_every_rows_language_and_language_id_is_language():
    from codes.corpus.rows import check_row

    _, request, warnings = check_row({"id": "a", "text": "x", "language_id": "de", "language_name": "German"}, None, 0)
    assert request["language"] == "de" and "language_id" not in request and warnings == []
    _, request, _ = check_row({"id": "a", "text": "x", "language_id": "de"}, None, 0, lang_id="fr")
    assert request["language"] == "fr"
    _, request, _ = check_row({"id": "a", "text": "x", "language": "en", "language_id": "en"}, None, 0)
    assert request["language"] == "en"
    with pytest.raises(RowError, match='"language" "en" and "language_id" "de" differ'):
        check_row({"id": "a", "text": "x", "language": "en", "language_id": "de"}, None, 0)
