"""Word-level captions (issue 44): each caption's words are its own piece's audio aligned with the text it spoke
(codes/runtime/script/words.py), on the track in samples; SRT writes a cue per word and WebVTT a cue per segment
with a timestamp per word, and both parse back to those times; inference.py --caption_words for a script and for
one --text utterance, and refused in one line, before any work, on a build that cannot time words."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from helpers.scripts import last_error_line, run_main, run_script
from helpers.synthesis_inputs import REF_TEXT, reference_clip, write_clip

from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.request import Voice
from codes.runtime.script import Caption, caption_text, parse_script, read_script, speak_script
from codes.runtime.script.subtitles import parse_timestamp
from codes.runtime.synthesis import OmniVoiceOnnx
from codes.runtime.text.normalize import normalize_text

RATE, PAD = 24000, 2400
STEPS = 4
DETERMINISTIC = GenerationSettings(num_steps=STEPS, position_temperature=0.0)
CLI = ("--num_steps", str(STEPS), "--position_temperature", "0", "--threads", "1", "--quiet")
BOB = "male, low pitch"
# Two speakers; the normalizer rewrites "Dr." and "$5"; a turn of only a tag has nothing to align.
DIALOGUE = "Alice: Dr. Jones paid $5 for the tea.\nBob: Thanks, Alice. [laughter]\nAlice: [laughter]\n"
DUB = ("WEBVTT\n\n00:00.300 --> 00:02.100\n<v Bob>Good morning, everyone.\n\n"
       "00:02.100 --> 00:03.500\n<v Alice>Morning, Bob.\n")


@pytest.fixture(scope="module")
def tts(asr_build):
    return OmniVoiceOnnx(asr_build, threads=1)


@pytest.fixture(scope="module")
def alice(tts, tmp_path_factory):
    folder = tmp_path_factory.mktemp("voices")
    clip = write_clip(folder / "alice.wav", reference_clip(RATE), RATE)
    path = folder / "alice.npz"
    tts.create_voice(clip, REF_TEXT).save(path)
    return path


def on_track(words, caption):
    """align_words' seconds from the speech's start, as samples on the track (the speech's end at most)."""
    return [{"word": w["word"], "start": min(caption.end, caption.start + round(w["start"] * RATE)),
             "end": min(caption.end, caption.start + round(w["end"] * RATE))} for w in words]


def assert_within_speech_and_increasing(captions):
    previous_end = 0
    for caption in captions:
        for word in caption.words:
            assert caption.start <= word["start"] <= word["end"] <= caption.end, (caption, word)
            assert word["start"] >= previous_end
            previous_end = word["end"]


def millis(samples: int) -> int:
    return round(samples / 24)


def assert_srt_holds_the_words(back, captions):
    """Each SRT cue read back is a word, or a run of them where words the alignment gave no length join the cue
    before, from its first word's start to its last's end; a caption whose words span no time is its segment's
    cue."""
    cues = [(s.text, round(s.start * 1000), round((s.start + s.duration) * 1000)) for s in back]
    at = 0
    for caption in captions:
        words = list(caption.words)
        if not words or millis(words[-1]["end"]) <= millis(words[0]["start"]):
            assert cues[at] == (caption.text, millis(caption.start), millis(caption.end))
            at += 1
            continue
        done = 0
        while done < len(words):
            text, start, end = cues[at]
            group = words[done:done + len(text.split(" "))]
            assert text == " ".join(w["word"] for w in group)
            assert start == millis(group[0]["start"]) and end == millis(group[-1]["end"]) > start
            done, at = done + len(group), at + 1
    assert at == len(cues)


def test_a_dialogues_words_are_its_pieces_aligned_together_with_the_text_each_spoke(tts, alice):
    rendered = speak_script(tts, text=DIALOGUE, speakers={"Alice": str(alice), "Bob": f"instruct:{BOB}"}, seed=5,
                            language="en", normalize_text=True, settings=DETERMINISTIC, caption_words=True)
    texts = [c.text for c in rendered.captions]
    assert texts == ["Dr. Jones paid $5 for the tea.", "Thanks, Alice. [laughter]", "[laughter]"]
    voice = Voice.load(alice)
    alone_runs = [dict(voice=voice), dict(instruct=BOB), dict(voice=voice)]
    spans = []
    for index, (caption, options) in enumerate(zip(rendered.captions, alone_runs)):
        wav = tts.generate(caption.text, language="en", normalize_text=True, seed=5 + index, settings=DETERMINISTIC,
                           **options)
        np.testing.assert_array_equal(rendered.pieces[index], wav)  # the piece is its alone run
        assert (caption.start, caption.end) == (rendered.offsets[index] + PAD, rendered.offsets[index] + len(wav) - PAD)
        spans.append((wav[PAD:len(wav) - PAD], normalize_text(caption.text, "en"), "en", caption.text))
    # the pieces share the aligner's windows: each caption's words are its piece's, packed with the others
    for caption, words in zip(rendered.captions, tts.align_pieces(spans)):
        assert list(caption.words) == on_track(words, caption)
    first, bob, tag_only = rendered.captions
    # Spoken "doctor" comes back as written; "$5" became two spoken words, each timed.
    assert [w["word"] for w in first.words] == ["Dr.", "Jones", "paid", "five", "dollars", "for", "the", "tea."]
    assert [w["word"] for w in bob.words] == ["Thanks,", "Alice."]
    assert tag_only.words == ()  # nothing to align: no words, no error
    assert_within_speech_and_increasing(rendered.captions)
    # The alignment starts its first word on the first frame it is given: the speech's, not the pad's.
    assert first.words[0]["start"] == first.start


def test_a_dub_through_inference_writes_word_cues_that_parse_back_to_the_words(asr_build, tts, alice, tmp_path):
    script = tmp_path / "script.vtt"
    script.write_text(DUB, encoding="utf-8")
    speakers = {"Bob": str(alice), "Alice": "instruct:female, low pitch"}
    rendered = speak_script(tts, script, speakers, seed=2, language="en", settings=DETERMINISTIC, caption_words=True)
    assert_within_speech_and_increasing(rendered.captions)
    assert all(c.words for c in rendered.captions)
    for kind in ("srt", "vtt"):
        result = run_script("inference.py", "--model_dir", asr_build, *CLI, "--script", script, "--language", "en",
                            "--speaker", f"Bob={alice}", "--speaker", "Alice=instruct:female, low pitch", "--seed", "2",
                            "--output", tmp_path / f"dub-{kind}.wav", "--captions", tmp_path / f"dub.{kind}",
                            "--caption_words")
        assert result.returncode == 0, result.stderr
    # The entry point's captions are the stage's, and its SRT a cue per word at the word's own times (to the
    # millisecond), the word its text, no speaker.
    assert (tmp_path / "dub.srt").read_text(encoding="utf-8") == caption_text(rendered.captions, "srt", RATE)
    assert (tmp_path / "dub.vtt").read_text(encoding="utf-8") == caption_text(rendered.captions, "vtt", RATE)
    back = read_script(tmp_path / "dub.srt", speakers=list(speakers)).segments
    assert_srt_holds_the_words(back, rendered.captions)
    # a cue per word, where words span time (the tiny random aligner may put a caption's words on one frame,
    # and such a caption is its segment's cue)
    assert all(s.speaker is None for s in back) and len(back) >= len(rendered.captions)
    # VTT: a cue per segment at the segment's times, in its voice span, its text the words; a tag per word after
    # the first, at its start.
    vtt = (tmp_path / "dub.vtt").read_text(encoding="utf-8")
    back = read_script(tmp_path / "dub.vtt", speakers=list(speakers)).segments
    assert [(s.speaker, s.text) for s in back] == [(c.speaker, " ".join(w["word"] for w in c.words))
                                                  for c in rendered.captions]
    assert [(round(s.start * 1000), round((s.start + s.duration) * 1000)) for s in back] == [
        (round(c.start / 24), round(c.end / 24)) for c in rendered.captions]
    for caption, block in zip(rendered.captions, vtt.split("\n\n")[1:]):
        tags = [parse_timestamp(t, "tag") for t in re.findall(r"<(\d\d:\d\d:\d\d\.\d{3})>", block)]
        # a tag before each word that starts after the cue's start and the tag before it, and before its end
        expected, last = [], round(caption.start / 24)
        for word in caption.words:
            if last < round(word["start"] / 24) < round(caption.end / 24):
                last = round(word["start"] / 24)
                expected.append(last)
        assert tags == expected and tags == sorted(set(tags))


def test_one_text_utterance_is_a_one_segment_track_through_inference(asr_build, tts, tmp_path):
    text = "Dr. Jones paid $5 for the tea."
    common = ("--model_dir", asr_build, *CLI, "--text", text, "--language", "en", "--normalize_text", "--seed", "4")
    result = run_script("inference.py", *common, "--output", tmp_path / "one.wav", "--captions", tmp_path / "one.srt",
                        "--caption_words")
    assert result.returncode == 0, result.stderr
    wav = tts.generate(text, language="en", normalize_text=True, seed=4, settings=DETERMINISTIC)
    caption = Caption(0, "default", text, PAD, len(wav) - PAD)
    words = on_track(tts.align_words(wav[PAD:-PAD], normalize_text(text, "en"), "en", written=text), caption)
    assert (tmp_path / "one.srt").read_text(encoding="utf-8") == caption_text([replace(caption, words=tuple(words))],
                                                                              "srt", RATE)
    assert_srt_holds_the_words(read_script(tmp_path / "one.srt").segments, [replace(caption, words=tuple(words))])
    # Segment level: one cue, the utterance's speech without its pads.
    result = run_main("inference.py", *common, "--output", tmp_path / "two.wav", "--captions", tmp_path / "two.vtt")
    assert result.returncode == 0, result.stderr
    back = read_script(tmp_path / "two.vtt", speakers=["default"]).segments
    assert [(s.text, s.start, s.duration) for s in back] == [(text, 0.1, round((len(wav) - 2 * PAD) / 24) / 1000)]


# ---------------------------------------------------------------------------
# The writers alone: what they make of words, and that it parses back
# ---------------------------------------------------------------------------

def test_word_captions_round_trip_through_our_parsers_and_keep_unspaced_scripts_joined():
    ms = 24  # samples per millisecond
    captions = [
        Caption(0, "Alice", "Hi & bye.", 100 * ms, 900 * ms, ({"word": "Hi", "start": 100 * ms, "end": 300 * ms},
                                                             {"word": "&", "start": 300 * ms, "end": 500 * ms},
                                                             {"word": "bye.", "start": 500 * ms, "end": 900 * ms})),
        Caption(1, "Bob", "你好。", 1000 * ms, 1600 * ms, ({"word": "你", "start": 1000 * ms, "end": 1200 * ms},
                                                        {"word": "好。", "start": 1200 * ms, "end": 1600 * ms})),
        Caption(2, "Alice", "[laughter]", 1700 * ms, 2000 * ms, ()),  # nothing aligned: its segment cue
        # the audio ended before the last word: it has no length, and joins the cue before
        Caption(3, "Bob", "One more.", 2000 * ms, 2500 * ms, ({"word": "One", "start": 2000 * ms, "end": 2500 * ms},
                                                             {"word": "more.", "start": 2500 * ms, "end": 2500 * ms})),
    ]
    srt = caption_text(captions, "srt", RATE)
    back = parse_script(srt, "srt").segments
    assert [(s.text, s.start, s.duration) for s in back] == [
        ("Hi", 0.1, 0.2), ("&", 0.3, 0.2), ("bye.", 0.5, 0.4), ("你", 1.0, 0.2), ("好。", 1.2, 0.4),
        ("[laughter]", 1.7, 0.3), ("One more.", 2.0, 0.5)]
    vtt = caption_text(captions, "vtt", RATE)
    assert "<v Alice>Hi <00:00:00.300>&amp; <00:00:00.500>bye." in vtt and "<v Bob>你<00:00:01.200>好。" in vtt
    assert "<v Bob>One more." in vtt  # a tag at the cue's end is not allowed, so none
    back = parse_script(vtt, "vtt", ["Alice", "Bob"]).segments
    assert [(s.speaker, s.text, s.start, s.duration) for s in back] == [
        ("Alice", "Hi & bye.", 0.1, 0.8), ("Bob", "你好。", 1.0, 0.6), ("Alice", "[laughter]", 1.7, 0.3),
        ("Bob", "One more.", 2.0, 0.5)]
    # Segment level as before where no caption has words.
    plain = [Caption(c.index, c.speaker, c.text, c.start, c.end) for c in captions]
    assert [s.text for s in parse_script(caption_text(plain, "srt", RATE), "srt").segments] == [c.text for c in plain]


# ---------------------------------------------------------------------------
# Bad input: one line, exit 2, nothing written, before any synthesis
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["script", "text"])
def test_a_build_without_a_recogniser_refuses_caption_words_in_one_line(served_build, tmp_path, how):
    (tmp_path / "d.txt").write_text("Hi there.\n", encoding="utf-8")
    what = ("--script", tmp_path / "d.txt") if how == "script" else ("--text", "Hi there.")
    outputs = [tmp_path / "out.wav", tmp_path / "out.srt"]
    result = run_main("inference.py", "--model_dir", served_build, *CLI, *what, "--output", outputs[0],
                      "--captions", outputs[1], "--caption_words")
    assert result.returncode == 2, result.stdout + result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == [last_error_line(result)]
    assert "has no aligner or recogniser" in last_error_line(result) and "--include-aligner" in last_error_line(result)
    assert "RTF" not in result.stdout and not any(path.exists() for path in outputs)


BAD = {
    "words without captions": (("--text", "Hi.", "--caption_words"), "--caption_words makes --captions word level"),
    "captions of a batch": (("--text_file", "{lines}", "--captions", "{tmp}/c.srt"), "--captions goes with --script or --text"),
    "captions of no format": (("--text", "Hi.", "--captions", "{tmp}/c.txt"), "needs .srt or .vtt"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_caption_flags_are_one_line(case, asr_build, tmp_path):
    args, expected = BAD[case]
    (tmp_path / "lines.txt").write_text("Hi.\n", encoding="utf-8")
    args = [a.format(tmp=tmp_path, lines=tmp_path / "lines.txt") for a in args]
    result = run_main("inference.py", "--model_dir", asr_build, *CLI, *args, "--output", tmp_path / "out.wav")
    assert result.returncode == 2 and expected in last_error_line(result), result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == [last_error_line(result)]
    assert not (tmp_path / "out.wav").exists() and not (tmp_path / "c.srt").exists()
