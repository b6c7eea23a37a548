"""Scripts spoken into one track (inference.py --script, codes.runtime.script.speak_script): each segment equals
what it gives alone with its voice, length and seed (segment i: seed + i), breaks and gaps are exact samples, a
cue's speech starts at round(start x 24000), captions parse back to those times, stems sum to the mix, the
segments share decoding steps, and every bad input is one line, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
from helpers.scripts import last_error_line, run_main, run_script
from helpers.synthesis_inputs import ASR_BUILD, REF_TEXT, reference_clip, write_clip

from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.request import Voice, item_noises
from codes.runtime.script import (ScriptRun, Timeline, caption_text, parse_script, plan_script, read_script,
                                  render_plan, resolve_speakers, speak_script)
from codes.runtime.synthesis import OmniVoiceOnnx

DATA = Path(__file__).resolve().parents[1] / "data" / "scripts"
RATE, PAD = 24000, 2400
STEPS = 4
DETERMINISTIC = GenerationSettings(num_steps=STEPS, position_temperature=0.0)
CLI = ("--num_steps", str(STEPS), "--position_temperature", "0", "--threads", "1", "--quiet")
BOB = "male, low pitch"


@pytest.fixture(scope="module")
def model_dir(served_build):
    return served_build  # the tiny fp32 build, its fp32 codec inside: segments can equal their alone runs


@pytest.fixture(scope="module")
def tts(model_dir):
    return OmniVoiceOnnx(model_dir, threads=1)


@pytest.fixture(scope="module")
def alice(tts, tmp_path_factory) -> Path:
    """A saved voice file, cloned from a clip."""
    folder = tmp_path_factory.mktemp("voices")
    clip = write_clip(folder / "alice.wav", reference_clip(RATE), RATE)
    path = folder / "alice.npz"
    tts.create_voice(clip, REF_TEXT).save(path)
    return path


def alone(tts, text, seed, settings=DETERMINISTIC, **options):
    return tts.generate(text, seed=seed, settings=settings, **options)


def piece(rendered, index, length):
    return rendered.audio[rendered.offsets[index]:rendered.offsets[index] + length]


def stems_sum(stems) -> np.ndarray:
    total = np.zeros_like(next(iter(stems.values())))
    for stem in stems.values():
        total += stem
    return total


def read_int16(path) -> np.ndarray:
    return soundfile.read(path, dtype="int16")[0]


def test_a_dialogue_places_each_turn_after_the_last_with_its_breaks_and_gaps(tts, alice):
    speakers = {"Alice": str(alice), "Bob": f"instruct:{BOB}"}
    rendered = speak_script(tts, DATA / "dialogue.txt", speakers, gap=0.25, seed=11, settings=DETERMINISTIC,
                            max_batch=8)
    voice = Voice.load(alice)
    texts = [c.text for c in rendered.captions]
    assert texts == ["Welcome to the show.", "Today: two voices.", "Thanks, Alice. [laughter] Note: this line is "
                     "still Bob's.", "Goodbye."]
    expected = [alone(tts, texts[0], 11, voice=voice), alone(tts, texts[1], 12, voice=voice),
                alone(tts, texts[2], 13, instruct=BOB), alone(tts, texts[3], 14, voice=voice)]
    # Each piece as inference.py writes it, pads included, with exactly the silence between: the 0.3 s break,
    # the 0.25 s gap where Bob takes over, and the 0.5 s break plus the gap where Alice does again.
    silences = [0, 7200, 6000, 12000 + 6000]
    offset = 0
    for index, (wav, silence) in enumerate(zip(expected, silences)):
        offset += silence
        assert rendered.offsets[index] == offset
        np.testing.assert_array_equal(piece(rendered, index, len(wav)), wav)
        offset += len(wav)
    assert len(rendered.audio) == offset
    gaps = [(rendered.offsets[i] + len(expected[i]), rendered.offsets[i + 1]) for i in range(3)]
    assert all(not rendered.audio[a:b].any() for a, b in gaps)
    # Bob was designed once: his turn's codes and text are his voice for any later turn (rms None).
    made = rendered.voices["Bob"]
    np.testing.assert_array_equal(made.codes, tts.generate(texts[2], instruct=BOB, seed=13, settings=DETERMINISTIC,
                                                           return_codes=True)[1])
    assert (made.text, made.rms) == (texts[2], None)
    assert list(rendered.stems) == ["Alice", "Bob"]
    np.testing.assert_array_equal(stems_sum(rendered.stems), rendered.audio)
    assert not rendered.stems["Bob"][:rendered.offsets[2]].any()
    # The four turns shared decoding steps: fewer steps than four runs of STEPS.
    assert rendered.steps < 4 * STEPS


def test_the_cli_writes_the_mix_captions_and_stems_and_a_turn_equals_inference_text(model_dir, alice, tmp_path):
    out = tmp_path / "out"
    result = run_script("inference.py", "--model_dir", model_dir, *CLI, "--script", DATA / "dialogue.txt",
                        "--speaker", f"Alice={alice}", "--speaker", f"Bob=instruct:{BOB}", "--gap", "0.25",
                        "--seed", "11", "--max_batch", "8", "--output", tmp_path / "mix.wav", "--captions", tmp_path / "mix.srt",
                        "--stems", out)
    assert result.returncode == 0, result.stderr
    assert "RTF" in result.stdout and "'Note'" in result.stderr  # the stray "Note:" is named, and spoken
    mix = read_int16(tmp_path / "mix.wav")
    stems = {path.stem: read_int16(path) for path in sorted(out.iterdir())}
    assert list(stems) == ["Alice", "Bob"]
    np.testing.assert_array_equal(stems["Alice"] + stems["Bob"], mix)  # no two speakers sound at once
    captions = read_script(tmp_path / "mix.srt").segments
    alone_runs = {3: ("Goodbye.", "--voice", alice), 2: (captions[2].text, "--instruct", BOB)}
    for index, (text, *voice) in alone_runs.items():
        result = run_script("inference.py", "--model_dir", model_dir, *CLI, "--text", text, *voice,
                            "--seed", str(11 + index), "--output", tmp_path / f"alone{index}.wav")
        assert result.returncode == 0, result.stderr
        wav = read_int16(tmp_path / f"alone{index}.wav")
        speech_start = round(captions[index].start * RATE)
        # the caption says where its speech starts, to the millisecond; the pad is before it
        offset = next(o for o in range(speech_start - PAD - 12, speech_start - PAD + 13)
                      if np.array_equal(mix[o:o + len(wav)], wav))
        assert abs((offset + PAD) / RATE - captions[index].start) <= 0.0005
        assert abs((offset + len(wav) - PAD) / RATE - (captions[index].start + captions[index].duration)) <= 0.001


def test_an_srt_dub_starts_each_cues_speech_at_its_time_and_holds_its_length(tts, alice, tmp_path):
    rendered = speak_script(tts, DATA / "dub.srt", {"Narrator": str(alice), "Alice": "auto"}, seed=3,
                            settings=DETERMINISTIC)
    script = read_script(DATA / "dub.srt", speakers=["Narrator", "Alice"])
    voice = Voice.load(alice)
    for index, cue in enumerate(script.segments):
        cloned = {"voice": voice} if cue.speaker is None else {}
        # without post-processing, as a cue is spoken unless asked
        wav = alone(tts, cue.text, 3 + index, duration=cue.duration, postprocess_output=False, **cloned)
        assert len(wav) == int(cue.duration * 25) * 960 + 2 * PAD
        speech_start = round(cue.start * RATE)
        assert rendered.offsets[index] == speech_start - PAD
        np.testing.assert_array_equal(piece(rendered, index, len(wav)), wav)
        caption = rendered.captions[index]
        assert (caption.start, caption.end) == (speech_start, speech_start + len(wav) - 2 * PAD)
    assert [c.speaker for c in rendered.captions] == ["Narrator", "Alice", "Narrator"]
    assert len(rendered.audio) == rendered.offsets[-1] + len(wav) >= round(4.7 * RATE)
    for kind in ("srt", "vtt"):  # captions parse back to the cues' own times
        back = parse_script(caption_text(rendered.captions, kind, RATE), kind, ["Narrator", "Alice"]).segments
        assert [s.start for s in back] == [s.start for s in script.segments]
    np.testing.assert_array_equal(stems_sum(rendered.stems), rendered.audio)


def test_the_track_lasts_until_the_last_cues_end_and_mixed_overlaps_sum(tts):
    srt = ("00:00:00,000 --> 00:00:00,800\nFirst at zero.\n\n"
           "00:00:00,500 --> 00:00:01,000\n>> Bob: Over it.\n\n"
           "00:00:02,000 --> 00:00:04,000\nLast.\n")
    script = parse_script(srt, "srt", ["Alice", "Bob"], overlap="mix")
    rendered = speak_script(tts, script, {"Alice": "auto", "Bob": "auto"}, seed=0, settings=DETERMINISTIC)
    first = alone(tts, "First at zero.", 0, duration=0.8, postprocess_output=False)
    np.testing.assert_array_equal(rendered.stems["Alice"][:len(first) - PAD], first[PAD:])  # its pad before 0 dropped
    assert rendered.offsets[:2] == [-PAD, 12000 - PAD]
    np.testing.assert_array_equal(stems_sum(rendered.stems), rendered.audio)
    assert rendered.stems["Alice"][12000:19200].any() and rendered.stems["Bob"][12000:19200].any()  # both speak
    # The last cue: 2.0 s of speech from 2.0 s, its pad after: the track is longer than the cue's end.
    assert len(rendered.audio) == 4 * RATE + PAD
    long_end = parse_script("00:00:00,000 --> 00:00:09,000\nHi.\n", "srt")
    assert len(speak_script(tts, long_end, {}, settings=DETERMINISTIC.replace(num_steps=1)).audio) >= 9 * RATE


def test_a_vtt_speaks_each_voice_span_and_a_designed_voice_carries_to_its_later_cues(tts, alice, tmp_path):
    speakers = {"Alice": "instruct:female, low pitch", "Bob": str(alice)}
    rendered = speak_script(tts, DATA / "voices.vtt", speakers, seed=7, settings=DETERMINISTIC)
    script = read_script(DATA / "voices.vtt", speakers=speakers)
    bob, morning, nobody = script.segments
    wavs = [alone(tts, bob.text, 7, voice=Voice.load(alice), duration=bob.duration, postprocess_output=False)]
    first, codes = tts.generate(morning.text, instruct="female, low pitch", duration=morning.duration, seed=8,
                                settings=DETERMINISTIC, postprocess_output=False, return_codes=True)
    wavs.append(first)
    # the unmarked cue is the first declared speaker's, Alice's: cloning her first cue, with her instruct
    reference = Voice(codes, morning.text, None)
    wavs.append(alone(tts, nobody.text, 9, voice=reference, instruct="female, low pitch", duration=nobody.duration,
                      postprocess_output=False))
    for index, (cue, wav) in enumerate(zip(script.segments, wavs)):
        assert rendered.offsets[index] == round(cue.start * RATE) - PAD
        np.testing.assert_array_equal(piece(rendered, index, len(wav)), wav)
    assert [c.speaker for c in rendered.captions] == ["Bob", "Alice", "Alice"]
    np.testing.assert_array_equal(rendered.voices["Alice"].codes, codes)


def test_jsonl_segments_with_noise_equal_their_seeded_runs_batched_or_one_by_one(tts, alice):
    noisy = GenerationSettings(num_steps=STEPS)  # position noise on: each segment's own seed matters
    speakers = {"Alice": str(alice), "Bob": "auto"}
    blocks = []
    batched = speak_script(tts, DATA / "segments.jsonl", speakers, seed=21, settings=noisy, on_audio=blocks.append,
                           max_batch=8)
    one_by_one = speak_script(tts, DATA / "segments.jsonl", speakers, seed=21, settings=noisy)  # the CPU's default
    np.testing.assert_array_equal(np.concatenate(blocks), batched.audio)  # handed out in order, as it was final
    np.testing.assert_array_equal(one_by_one.audio, batched.audio)
    assert batched.steps < one_by_one.steps == 3 * STEPS
    voice = Voice.load(alice)
    expected = [alone(tts, "Hello there.", 21, noisy, voice=voice, language="en"),
                alone(tts, "A line with its own length.", 22, noisy, duration=1.5),
                alone(tts, "The default speaker, a little faster.", 23, noisy, voice=voice, speed=1.2)]
    for index, wav in enumerate(expected):
        np.testing.assert_array_equal(piece(batched, index, len(wav)), wav)
    assert batched.offsets[1] == len(expected[0]) + 6000  # the 0.25 s break
    assert len(batched.audio) == batched.offsets[2] + len(expected[2])


def test_long_segments_are_chunked_as_upstream_and_a_made_voice_is_the_first_chunk(tts):
    # A small chunking threshold makes short texts long: chunked like upstream's long texts (30 s by default).
    chunked = DETERMINISTIC.replace(audio_chunk_threshold=1.0, audio_chunk_duration=0.6)
    text = "The first sentence is here. A second follows it. And then a third one ends."
    script = parse_script(f"Carol: {text}\nCarol: Short one.\n", "text", ["Carol"])
    rendered = speak_script(tts, script, {"Carol": "auto"}, seed=4, settings=chunked)
    request = tts.settle(text)[0]
    chunks = tts.generate_codes([request], chunked, item_noises(4, 1))[0]
    assert len(chunks) >= 2
    wav = tts.decode(chunks, None, chunked)
    np.testing.assert_array_equal(piece(rendered, 0, len(wav)), wav)
    reference = rendered.voices["Carol"]
    np.testing.assert_array_equal(reference.codes, chunks[0])
    later = alone(tts, "Short one.", 5, chunked, voice=reference)
    np.testing.assert_array_equal(piece(rendered, 1, len(later)), later)
    # A cue longer than a work item, whose one chunk is too: decoded whole, beside the engine, as upstream does.
    cue = parse_script("00:00:01,000 --> 00:00:03,000\nHi.\n", "srt")
    long_cue = speak_script(tts, cue, {}, seed=6, settings=chunked)
    wav = alone(tts, "Hi.", 6, chunked, duration=2.0, postprocess_output=False)
    np.testing.assert_array_equal(piece(long_cue, 0, len(wav)), wav)


def test_another_engine_drives_the_same_plan_to_the_same_track(tts, alice):
    """What a server does with its own engine: take the plan's jobs, feed their codes back, decode finished
    pieces into the timeline in any order."""
    speakers = resolve_speakers({"Alice": str(alice), "Bob": f"instruct:{BOB}"}, tts)
    script = read_script(DATA / "dialogue.txt", speakers=speakers)
    plan = plan_script(script, speakers, tts, DETERMINISTIC, seed=11, gap=0.25)
    run, timeline = ScriptRun(plan, tts), Timeline(plan)
    while not run.done:
        jobs = run.take_jobs()
        assert jobs
        for job in reversed(jobs):  # out of order: the timeline still hands out the mix in order
            (codes,) = tts.generate_whole([job.request], job.settings, [job.noise])
            for finished in run.finish_job(job, codes):
                timeline.add(finished.index, tts.decode(finished.chunks, finished.ref_rms, finished.settings))
    driven = timeline.finish(run.made_voices)
    engine = render_plan(tts, plan)
    np.testing.assert_array_equal(driven.audio, engine.audio)
    assert driven.offsets == engine.offsets and driven.captions == engine.captions


def test_a_clip_with_its_transcript_is_a_speaker(tts, tmp_path):
    clip = write_clip(tmp_path / "ref.wav", reference_clip(RATE), RATE)
    made = resolve_speakers({"Dana": f"clip:{clip}|{REF_TEXT}"}, tts)["Dana"].voice
    expected = tts.create_voice(clip, REF_TEXT)
    np.testing.assert_array_equal(made.codes, expected.codes)
    assert (made.text, made.rms) == (expected.text, expected.rms)


def test_a_clip_alone_is_transcribed_where_the_build_has_a_recogniser(builds, tmp_path):
    with_asr = OmniVoiceOnnx(builds.get(*ASR_BUILD), threads=1)
    clip = write_clip(tmp_path / "ref.wav", reference_clip(RATE), RATE)
    made = resolve_speakers({"Dana": str(clip)}, with_asr)["Dana"].voice
    expected = with_asr.create_voice(clip)  # the recogniser's transcript
    np.testing.assert_array_equal(made.codes, expected.codes)
    assert made.text == expected.text == with_asr.transcribe_reference(clip) and made.text


# ---------------------------------------------------------------------------
# Bad input: one line naming the problem and where, exit 2, nothing written
# ---------------------------------------------------------------------------

OVERLAPPING = "1\n00:00:01,000 --> 00:00:03,000\nOne.\n\n2\n00:00:02,000 --> 00:00:04,000\nTwo.\n"
BAD = {
    "malformed timestamp": ("dub.srt", "1\n00:00:01,000 --> 00:00:02,000\nOne.\n\n2\n00:00:03,00x --> 00:00:04,000\nTwo.\n",
                            (), "cue 2 (line 6): malformed timestamp"),
    "zero-length cue": ("dub.srt", "00:00:01,000 --> 00:00:01,000\nOne.\n", (), "cue 1 (line 1)"),
    "negative-length cue": ("dub.vtt", "WEBVTT\n\n00:00:02.000 --> 00:00:01.000\nOne.\n", (), "cue 1 (line 3)"),
    "overlapping cues": ("dub.srt", OVERLAPPING, (), "cue 2 (line 6) starts at 2 s, before cue 1 (line 2)"),
    "unknown speaker": ("dub.vtt", "WEBVTT\n\n00:01.000 --> 00:02.000\n<v Carol>Hi.\n", ("--speaker", "Alice=auto"),
                        "unknown speaker 'Carol'"),
    "unreadable voice file": ("d.txt", "Alice: Hi.\n", ("--speaker", "Alice=missing.npz"),
                              "speaker Alice: cannot read voice file missing.npz"),
    "a voice file that is no voice": ("d.txt", "Alice: Hi.\n", ("--speaker", "Alice={script}"),
                                      "speaker Alice: cannot read voice file"),
    "break over the limit": ("d.txt", 'Hi. <break time="61s"/> Ho.\n', (), "line 1: a pause of 61 s is over the limit"),
    "binary junk": ("d.txt", b"\x00\x01\x02\x03junk", (), "holds binary data"),
    "undecodable encoding": ("d.txt", "caf\u00e9".encode("latin-1"), (), "is not UTF-8 text"),
    "gap with cues": ("dub.srt", "00:00:01,000 --> 00:00:02,000\nOne.\n", ("--gap", "0.5"), "--gap is for text scripts"),
    "a single-text voice flag": ("d.txt", "Hi.\n", ("--instruct", "female"), "--instruct does not go with --script"),
    "captions of no format": ("d.txt", "Hi.\n", ("--captions", "{tmp}/c.txt"), "needs .srt or .vtt"),
    "captions over the script": ("dub.srt", "00:00:01,000 --> 00:00:02,000\nOne.\n", ("--captions", "{script}"),
                                 "is the script itself"),
    "a stem over the mix": ("d.txt", "Hi.\n", ("--speaker", "out=auto", "--captions", "{tmp}/out.srt", "--stems",
                                               "{tmp}"), "which is another output"),
    "a speaker without a voice": ("d.txt", "Hi.\n", ("--speaker", "Alice"), "needs NAME=VOICE"),
    "a clip alone without a recogniser": ("d.txt", "Hi.\n", ("--speaker", "Alice={clip}"), "--include-asr"),
    "a missing script": (None, None, (), "cannot read script"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_error_line_and_writes_nothing(case, model_dir, tmp_path):
    name, content, extra, expected = BAD[case]
    script = tmp_path / (name or "missing.txt")
    if content is not None:
        script.write_bytes(content.encode() if isinstance(content, str) else content)
    clip = write_clip(tmp_path / "clip.wav", reference_clip(RATE), RATE)
    extra = [str(a).format(script=script, tmp=tmp_path, clip=clip) for a in extra]
    outputs = [tmp_path / "out.wav", tmp_path / "stems", tmp_path / "out.srt"]
    own = [] if "--captions" in extra else ["--captions", outputs[2]]
    own += [] if "--stems" in extra else ["--stems", outputs[1]]
    result = run_main("inference.py", "--model_dir", model_dir, *CLI, "--script", script, *extra,
                      "--output", outputs[0], *own)
    assert result.returncode == 2, result.stdout + result.stderr
    line = last_error_line(result)
    assert line.startswith("error: ") and expected in line, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error")] == [line]
    assert not any(path.exists() for path in outputs)


def test_the_entry_point_refuses_overlapping_cues_in_one_line(model_dir, tmp_path):
    (tmp_path / "dub.srt").write_text(OVERLAPPING, encoding="utf-8")
    result = run_script("inference.py", "--model_dir", model_dir, "--script", tmp_path / "dub.srt",
                        "--output", tmp_path / "out.wav")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'dub.srt'}: cue 2 (line 6) starts at 2 s, before cue 1 (line 2) ends at 3 s; "
        "fix the times or pass --overlap trim|mix"]
    assert not (tmp_path / "out.wav").exists()
