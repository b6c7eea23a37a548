"""A book read aloud (inference.py --script book.epub|.md|.txt, codes.runtime.book): the book file's chapter
marks (M4B, MP3) where each chapter's first speech starts; each chapter's file the book's own samples; the
track the script path's for the same segments; a read-along EPUB that epubcheck passes, its overlays on the
captions' samples; per-chapter loudness and ACX; the ledger (an edited sentence re-spoken alone, a killed run
resumed); progress by chapter; and every bad input one line, exit 2, nothing written."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile
from helpers.faults import fault_hook
from helpers.scripts import ROOT, last_error_line, run_main

from codes.checks.sample_book import markdown, plain_text, sample_book, write_epub
from codes.runtime.book import Reading, book_script, parse_book, read_marks
from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.script import parse_script, speak_script
from codes.runtime.synthesis import OmniVoiceOnnx

RATE = 24000
STEPS = 4
CLI = ("--num_steps", str(STEPS), "--position_temperature", "0", "--threads", "1", "--quiet", "--seed", "3")
NARRATOR = ("--speaker", "Narrator=instruct:female, low pitch")
SUMMARY = re.compile(r"^spoke (\d+) of (\d+) segments, reused (\d+)$", re.M)
BOOK = sample_book(240, 3)
EPUBCHECK = "/usr/share/java/epubcheck.jar"  # Debian's epubcheck (make test installs it)


@pytest.fixture(scope="module")
def model_dir(served_build):
    return served_build  # the tiny fp32 build with its fp32 codec: a book's samples can equal the script path's


@pytest.fixture(scope="module")
def epub(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("book") / "harbour.epub"
    path.write_bytes(write_epub(BOOK))
    return path


def speak(model_dir, book: Path, output: Path, *extra) -> subprocess.CompletedProcess:
    result = run_main("inference.py", "--model_dir", model_dir, *CLI, *NARRATOR, "--script", book, "--output",
                      output, *extra)
    assert result.returncode == 0, result.stderr
    return result


def caption_starts(srt: Path) -> list[float]:
    return [s.start for s in parse_script(srt.read_text(encoding="utf-8"), "srt").segments]


@pytest.fixture(scope="module")
def spoken_wav(model_dir, epub, tmp_path_factory):
    """The EPUB into a WAV, with chapter WAVs, SRT captions and a read-along EPUB."""
    folder = tmp_path_factory.mktemp("spoken")
    result = speak(model_dir, epub, folder / "book.wav", "--chapters", folder / "chapters", "--chapter_format", "wav",
                   "--captions", folder / "book.srt", "--read_along", folder / "read-along.epub",
                   "--dialogue_voice", "instruct:male, high pitch")
    return folder, result


def test_the_books_track_is_the_script_paths_for_its_sentences_and_each_chapter_file_is_its_part(
        spoken_wav, model_dir, epub):
    folder, result = spoken_wav
    book = book_script(parse_book(epub.read_bytes(), "epub", source=str(epub)), Reading(dialogue_speaker="Dialogue"))
    track, rate = soundfile.read(folder / "book.wav", dtype="int16")
    assert rate == RATE
    tts = OmniVoiceOnnx(model_dir, threads=1)
    rendered = speak_script(tts, book.script, {"Narrator": "instruct:female, low pitch",
                                               "Dialogue": "instruct:male, high pitch"},
                            settings=GenerationSettings(num_steps=STEPS, position_temperature=0.0), seed=3)
    expected = np.round(np.clip(rendered.audio, -1, 1) * 32767).astype(np.int16)
    assert len(track) == len(expected) and np.abs(track.astype(int) - expected).max() <= 1  # 16-bit rounding
    chapters = sorted((folder / "chapters").glob("*.wav"))
    assert [p.name for p in chapters] == ["01 - Chapter 1 The Harbour.wav", "02 - Chapter 2 The Map.wav",
                                          "03 - Chapter 3 The Crossing.wav"]
    starts = [rendered.offsets[i] for i in book.chapter_starts] + [len(track)]
    for path, first, end in zip(chapters, starts, starts[1:]):
        np.testing.assert_array_equal(soundfile.read(path, dtype="int16")[0], track[first:end])
    assert {s.speaker for s in book.script.segments} == {None, "Dialogue"}
    assert SUMMARY.search(result.stdout).groups() == (str(len(book.script.segments)),) * 2 + ("0",)
    assert len(caption_starts(folder / "book.srt")) == len(book.script.segments)


def test_the_read_along_epub_passes_epubcheck_and_times_every_sentence_on_its_chapters_audio(spoken_wav, epub):
    from ebooklib import epub as ebook
    from lxml import etree

    folder, _ = spoken_wav
    path = folder / "read-along.epub"
    check = subprocess.run(["java", "-jar", EPUBCHECK, str(path)], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "No errors or warnings detected" in check.stdout, check.stdout + check.stderr
    opened = ebook.read_epub(str(path))
    assert opened.get_metadata("DC", "title")[0][0] == BOOK.title
    starts = caption_starts(folder / "book.srt")
    overlays = sorted(name for name in zipfile.ZipFile(path).namelist() if name.endswith(".smil"))
    assert len(overlays) == 3
    clips = []
    for name in overlays:
        root = etree.fromstring(zipfile.ZipFile(path).read(name))
        audio = root.findall(".//{http://www.w3.org/ns/SMIL}audio")
        clips.append([float(a.get("clipBegin").rstrip("s")) for a in audio])
    chapter_lengths = [soundfile.info(p).frames / RATE for p in sorted((folder / "chapters").glob("*.wav"))]
    offsets = np.cumsum([0.0] + chapter_lengths[:-1])
    on_track = [offset + clip for offset, chapter in zip(offsets, clips) for clip in chapter]
    assert len(on_track) == len(starts)
    np.testing.assert_allclose(on_track, starts, atol=0.0015)  # SMIL's milliseconds, SRT's milliseconds


@pytest.mark.parametrize("suffix", [".m4b", ".mp3"])
def test_a_book_files_chapter_marks_are_where_each_chapters_first_speech_starts(model_dir, epub, tmp_path, suffix):
    output = tmp_path / f"book{suffix}"
    speak(model_dir, epub, output, "--captions", tmp_path / "book.srt")
    book = book_script(parse_book(epub.read_bytes(), "epub"))
    starts = caption_starts(tmp_path / "book.srt")
    marks = read_marks(output)
    assert [title for title, _ in marks] == [c.title for c in BOOK.chapters]
    # MP4's chapter list keeps 100 ns, ID3's CHAP milliseconds; the SRT's starts are milliseconds
    np.testing.assert_allclose([start for _, start in marks], [starts[i] for i in book.chapter_starts], atol=0.0011)
    import mutagen

    tags = mutagen.File(str(output))
    if suffix == ".m4b":
        assert tags["\xa9nam"] == [BOOK.title] and tags["\xa9ART"] == [BOOK.author] and tags["covr"]
    else:
        assert str(tags["TIT2"]) == BOOK.title and str(tags["TPE1"]) == BOOK.author and tags.tags.getall("APIC")


def test_acx_chapters_pass_its_rules_and_loudness_levels_each_chapter(model_dir, tmp_path):
    book = tmp_path / "harbour.md"
    book.write_text(markdown(BOOK), encoding="utf-8")
    acx = speak(model_dir, book, tmp_path / "book.m4b", "--chapters", tmp_path / "acx", "--acx")
    table = [line for line in acx.stdout.splitlines() if line.startswith("| 0")]
    assert len(table) == 3 and all(line.endswith("| pass |") for line in table), acx.stdout
    from codes.runtime.book import measure

    for path in sorted((tmp_path / "acx").glob("*.mp3")):
        import mutagen

        info = mutagen.File(str(path)).info
        assert info.sample_rate == 44100 and info.bitrate == 192000 and str(info.bitrate_mode) == "BitrateMode.CBR"
    leveled = speak(model_dir, book, tmp_path / "loud.wav", "--chapters", tmp_path / "loud", "--loudness", "-23",
                    "--no_ledger")
    assert "| LUFS |" in leveled.stdout
    for path in sorted((tmp_path / "loud").glob("*.wav")):
        samples, rate = soundfile.read(path, dtype="float32")
        m = measure(samples, rate)
        assert abs(m.lufs + 23) < 0.2 or m.true_peak == pytest.approx(-1.0, abs=0.2), (path, m)


def test_an_edited_sentence_is_spoken_again_alone_and_the_book_equals_a_fresh_run(model_dir, tmp_path):
    book = tmp_path / "harbour.txt"
    book.write_text(plain_text(BOOK), encoding="utf-8")
    output = tmp_path / "book.wav"
    first = speak(model_dir, book, output, "--script_format", "book")
    total = int(SUMMARY.search(first.stdout).group(2))
    book.write_text(plain_text(BOOK).replace("counting the gulls", "counting the crows", 1), encoding="utf-8")
    again = speak(model_dir, book, output, "--script_format", "book")
    assert SUMMARY.search(again.stdout).groups() == ("1", str(total), str(total - 1))
    fresh = tmp_path / "fresh.wav"
    speak(model_dir, book, fresh, "--script_format", "book", "--no_ledger")
    np.testing.assert_array_equal(soundfile.read(output)[0], soundfile.read(fresh)[0])


def test_a_killed_book_resumes_and_progress_names_the_chapter(model_dir, epub, tmp_path):
    hooks, output = tmp_path / "hooks", tmp_path / "book.m4b"
    marker = hooks / "paused"
    env = {**os.environ, **fault_hook(hooks, "codes.runtime.script.ledger", "ScriptLedger", "keep", "pause", marker, 4)}
    args = [sys.executable, str(ROOT / "inference.py"), "--model_dir", str(model_dir), *CLI, *NARRATOR,
            "--script", str(epub), "--output", str(output)]
    run = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), run.communicate()
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=120)
    assert not output.exists()
    resumed = run_main("inference.py", "--model_dir", model_dir, *[a for a in CLI if a != "--quiet"], *NARRATOR,
                       "--script", epub, "--output", output)
    assert resumed.returncode == 0, resumed.stderr
    spoke, total, reused = map(int, SUMMARY.search(resumed.stdout).groups())
    assert reused >= 4 and spoke + reused == total
    assert "chapter 3/3 Chapter 3: The Crossing" in resumed.stderr and "chapter 1/3" in resumed.stderr
    assert len(read_marks(output)) == 3


def _args(model_dir, *extra):
    return ("inference.py", "--model_dir", model_dir, *CLI, *extra)


def test_bad_books_and_flags_are_one_line_exit_2_and_nothing_written(model_dir, epub, tmp_path):
    locked = tmp_path / "locked.epub"
    shutil.copy(epub, locked)
    with zipfile.ZipFile(locked, "a") as archive:
        archive.writestr("META-INF/rights.xml", "<rights/>")
    script = tmp_path / "dialogue.txt"
    script.write_text("Hello there.\n", encoding="utf-8")
    cases = [
        (("--script", locked, "--output", tmp_path / "a.m4b"), "is locked with DRM"),
        (("--script", tmp_path / "missing.epub", "--output", tmp_path / "a.m4b"), "cannot read book"),
        (("--script", epub, "--output", tmp_path / "a.m4b", "--read_along", tmp_path / "r.zip"), "needs .epub"),
        (("--script", epub, "--output", tmp_path / "a.m4b", "--stems", tmp_path / "stems"), "--stems is for scripts"),
        (("--script", epub, "--output", tmp_path / "a.m4b", "--skip", "chapters"), "'chapters' is not one"),
        (("--script", epub, "--output", tmp_path / "a.m4b", "--loudness", "-19", "--acx"), "give one of them"),
        (("--script", epub, "--output", tmp_path / "a.m4b", "--read_along", epub), "is the book itself"),
        (("--script", epub, "--output", tmp_path / "a.m4b", "--chapter_gap", "90"), "over the limit of 60 s"),
        (("--script", epub, "--output", tmp_path / "a.m4b", "--speaker", "Dialogue=auto", "--dialogue_voice", "auto"),
         "do not declare it with --speaker too"),
        (("--script", script, "--output", tmp_path / "a.wav", "--chapters", tmp_path / "c"), "is for books"),
        (("--text", "Hi.", "--output", tmp_path / "a.wav", "--acx"), "--acx goes with --script"),
    ]
    for args, message in cases:
        result = run_main(*_args(model_dir, *args))
        assert result.returncode == 2 and message in last_error_line(result), (args, result.stderr)
        assert last_error_line(result).startswith("error: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dialogue.txt", "locked.epub"]


def test_with_word_captions_the_read_along_times_every_word_within_its_sentence(asr_build, tmp_path):
    from lxml import etree

    book = tmp_path / "harbour.md"
    book.write_text(markdown(sample_book(60, 2)), encoding="utf-8")
    path = tmp_path / "read-along.epub"
    speak(asr_build, book, tmp_path / "book.wav", "--read_along", path, "--caption_words", "--language", "en",
          "--captions", tmp_path / "book.vtt")
    check = subprocess.run(["java", "-jar", EPUBCHECK, str(path)], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "No errors or warnings detected" in check.stdout, check.stdout + check.stderr
    smil = "{http://www.w3.org/ns/SMIL}"
    sentences = words = 0
    for name in sorted(n for n in zipfile.ZipFile(path).namelist() if n.endswith(".smil")):
        root = etree.fromstring(zipfile.ZipFile(path).read(name))
        for seq in root.iter(f"{smil}seq"):
            pars = seq.findall(f"{smil}par")
            if not pars or seq.getparent().tag != f"{smil}seq":
                continue
            sentences += 1
            clips = [(float(p.find(f"{smil}audio").get("clipBegin")[:-1]), float(p.find(f"{smil}audio").get("clipEnd")[:-1]))
                     for p in pars]
            assert all(begin <= end for begin, end in clips) and clips == sorted(clips)
            words += len(pars)
    assert sentences > 0 and words > sentences  # every sentence a seq of its words
