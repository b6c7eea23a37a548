"""Script files into the script model: text scripts, SRT, WebVTT and JSONL as editors write them, and every
bad input refused in one line that says where (codes/runtime/script/). No model: these are pure functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from codes.common.errors import UserError
from codes.runtime.script import Break, ScriptBounds, caption_text, check_bounds, parse_script, read_script
from codes.runtime.script.segments import MAX_BREAK_SECONDS, MAX_PACE, pace
from codes.runtime.script.speakers import VoiceSpec, parse_speakers, parse_voice
from codes.runtime.script.subtitles import format_timestamp, parse_timestamp
from codes.runtime.script.timeline import Caption

DATA = Path(__file__).resolve().parents[1] / "data" / "scripts"


def refused(script: str, script_format: str, speakers=("Alice", "Bob"), **options) -> str:
    with pytest.raises(UserError) as caught:
        parse_script(script, script_format, speakers, source="s", **options)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_an_srt_with_a_bom_crlf_styling_and_a_missing_number_reads_as_written():
    raw = (DATA / "dub.srt").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and b"\r\n" in raw and b"<i>" in raw and b"{\\an8}" in raw
    script = read_script(DATA / "dub.srt", speakers=["Alice"])
    assert script.timed and script.warnings == ()
    got = [(s.text, s.speaker, s.start, s.duration, s.where) for s in script.segments]
    assert got == [("Hello there.", None, 0.5, 1.2, "cue 1 (line 2)"),
                   ("How are you?", "Alice", 2.0, 1.04, "cue 2 (line 5)"),  # no number, "." for ",", >> ALICE:
                   ("Fine, thanks.", None, 3.5, 1.2, "cue 3 (line 9)")]  # dialogue dashes go, lines join


def test_a_vtt_takes_its_speakers_from_voice_spans_and_skips_notes_styles_and_settings():
    script = read_script(DATA / "voices.vtt", speakers=["Alice", "Bob"])
    got = [(s.text, s.speaker, s.start, s.duration) for s in script.segments]
    assert got == [("Good morning.", "Bob", 0.2, 1.2),  # hours left out, <c> stripped, </v> closed
                   ("Morning, Bob.", "Alice", 1.8, 1.1),  # <v.quiet Alice> with no </v>, an inline timestamp
                   ("Nobody's voice.", None, 3.0, 1.0)]


def test_a_text_script_switches_only_at_declared_speakers_and_cuts_turns_at_breaks():
    script = read_script(DATA / "dialogue.txt", speakers=["alice", "BOB"])
    assert not script.timed
    got = [(i.seconds,) if isinstance(i, Break) else (i.speaker, i.text) for i in script.items]
    assert got == [("alice", "Welcome to the show."), (0.3,), ("alice", "Today: two voices."),
                   ("BOB", "Thanks, Alice. [laughter] Note: this line is still Bob's."), (0.5,),
                   ("alice", "Goodbye.")]
    assert len(script.warnings) == 1 and "line 3" in script.warnings[0] and "'Note'" in script.warnings[0]


def test_upstream_tags_phones_and_pinyin_pass_through_and_unmarked_lines_are_the_default_speakers():
    text = 'First [laughter] line. Say [B EY1 S] twice.\n我们 ZHE2 里 <break time="1.5s"/> end\nAlice: Hi.'
    script = parse_script(text, "text", ["Alice"])
    assert [(None, i.seconds) if isinstance(i, Break) else (i.speaker, i.text) for i in script.items] == [
        (None, "First [laughter] line. Say [B EY1 S] twice. 我们 ZHE2 里"), (None, 1.5), (None, "end"), ("Alice", "Hi.")]


def test_jsonl_segments_carry_their_fields_and_breaks():
    script = read_script(DATA / "segments.jsonl", speakers=["Alice", "Bob"])
    assert not script.timed
    first, pause, second, third = script.items
    assert (first.speaker, first.language, pause.seconds, second.duration, third.speaker, third.speed) == \
        ("Alice", "en", 0.25, 1.5, None, 1.2)


def test_jsonl_with_start_times_is_timed_and_sorted():
    script = parse_script('{"text": "Two.", "start": 2, "duration": 1}\n{"text": "One.", "start": 0.5, "duration": 1}',
                          "jsonl")
    assert script.timed and [(s.text, s.start) for s in script.segments] == [("One.", 0.5), ("Two.", 2.0)]


def test_overlapping_cues_are_refused_naming_both_unless_trimmed_or_mixed():
    srt = "1\n00:00:01,000 --> 00:00:03,000\nFirst.\n\n2\n00:00:02,500 --> 00:00:04,000\nSecond.\n"
    message = refused(srt, "srt")
    assert "cue 2 (line 6)" in message and "cue 1 (line 2)" in message and "--overlap" in message
    trimmed = parse_script(srt, "srt", overlap="trim").segments
    assert [(s.start, s.duration) for s in trimmed] == [(1.0, 1.5), (2.5, 1.5)]
    mixed = parse_script(srt, "srt", overlap="mix").segments
    assert [(s.start, s.duration) for s in mixed] == [(1.0, 2.0), (2.5, 1.5)]
    same_start = srt.replace("00:00:02,500", "00:00:01,000")
    assert "--overlap mix" in refused(same_start, "srt", overlap="trim")
    # Cues that abut are no overlap, where the float sum of start and length is past the next start (0.1 + 0.2).
    abutting = "00:00:00,100 --> 00:00:00,300\nOne.\n\n00:00:00,300 --> 00:00:00,500\nTwo.\n"
    assert [(s.start, s.duration) for s in parse_script(abutting, "srt").segments] == [(0.1, 0.2), (0.3, 0.2)]


def test_a_cue_too_short_for_its_text_is_named_in_a_warning_never_cut():
    srt = "00:00:01,000 --> 00:00:01,500\nThis sentence has far too many words for half a second.\n"
    script = parse_script(srt, "srt", source="fast.srt")
    assert script.segments[0].duration == 0.5  # kept as asked
    (warning,) = script.warnings
    ratio = pace(script.segments[0].text, 0.5)
    assert ratio > MAX_PACE and "fast.srt cue 1 (line 1)" in warning and f"{ratio:.1f}x" in warning


def test_timestamps_round_trip_in_whole_milliseconds():
    for text, millis in [("00:00:03,040", 3040), ("1:02:03.5", 3723500), ("00:01.250", 1250), ("12:34,56", 754560)]:
        assert parse_timestamp(text, "here") == millis
    assert format_timestamp(3723500, ",") == "01:02:03,500" and format_timestamp(1250, ".") == "00:00:01.250"


def test_captions_written_parse_back_to_their_sample_times():
    captions = [Caption(0, "Alice", "One & two.", 2400, 38400), Caption(1, "Bob", "Three.", 50000, 73999)]
    for kind in ("srt", "vtt"):
        script = parse_script(caption_text(captions, kind, 24000), kind, ["Alice", "Bob"])
        times = [(round(s.start * 24000), round((s.start + s.duration) * 24000)) for s in script.segments]
        assert times == [(2400, 38400), (49992, 73992)]  # to the millisecond (2083.3 and 3083.3 ms)
        assert [s.text for s in script.segments] == ["One & two.", "Three."]
        assert [s.speaker for s in script.segments] == (["Alice", "Bob"] if kind == "vtt" else [None, None])
    escaped = caption_text([Caption(0, "Alice", "a <b> & c", 0, 24000)], "vtt", 24000)
    assert parse_script(escaped, "vtt", ["Alice"]).segments[0].text == "a <b> & c"


def test_voices_are_files_clips_designs_or_auto():
    assert parse_voice("auto") == VoiceSpec("auto")
    assert parse_voice("instruct: female, low pitch") == VoiceSpec("instruct", "female, low pitch")
    assert parse_voice("me.npz") == VoiceSpec("file", "me.npz")
    assert parse_voice("me.WAV") == VoiceSpec("clip", "me.WAV")
    assert parse_voice("clip:take 2.raw|What I said.") == VoiceSpec("clip", "take 2.raw", "What I said.")
    assert parse_voice("alloy", paths=False) == VoiceSpec("name", "alloy")
    assert list(parse_speakers(["Alice=a.npz", "Dr. Bob=auto"])) == ["Alice", "Dr. Bob"]


def test_bounds_name_the_first_one_a_script_is_over():
    script = read_script(DATA / "dub.srt", speakers=["Alice"])
    check_bounds(script, ScriptBounds(max_segments=3, max_characters=100, max_seconds=4.7))
    assert "3 segments" in _bound(script, ScriptBounds(max_segments=2))
    assert "characters" in _bound(script, ScriptBounds(max_characters=20))
    assert "4.7 s" in _bound(script, ScriptBounds(max_seconds=4.0))


def _bound(script, bounds) -> str:
    with pytest.raises(UserError) as caught:
        check_bounds(script, bounds)
    return str(caught.value)


BAD_INPUTS = {
    "malformed timestamp": ("1\n00:00:01,000 --> 00:00:02,000\nOne.\n\n2\n00:00:03;000 --> 00:00:04,000\nTwo.\n", "srt",
                            ["cue 2 (line 6)", "malformed timestamp '00:00:03;000'"]),
    "minutes past 59": ("00:61:00,000 --> 00:62:00,000\nOne.\n", "srt", ["cue 1 (line 1)", "malformed timestamp"]),
    "zero length": ("00:00:01,000 --> 00:00:01,000\nOne.\n", "srt", ["cue 1 (line 1)", "length > 0"]),
    "negative length": ("WEBVTT\n\n00:02.000 --> 00:01.000\nOne.\n", "vtt", ["cue 1 (line 3)", "length > 0"]),
    "no timing line": ("1\nOne.\n", "srt", ["cue 1 (line 1)", "no timing line"]),
    "vtt without its header": ("00:01.000 --> 00:02.000\nOne.\n", "vtt", ["WEBVTT"]),
    "unknown vtt voice": ("WEBVTT\n\n00:01.000 --> 00:02.000\n<v Carol>Hi.\n", "vtt",
                          ["cue 1 (line 3)", "unknown speaker 'Carol'", "--speaker Carol=VOICE"]),
    "two speakers in a cue": ("WEBVTT\n\n00:01.000 --> 00:02.000\n<v Alice>Hi.</v> <v Bob>Hey.\n", "vtt",
                              ["cue 1 (line 3)", "several speakers"]),
    "unknown jsonl speaker": ('{"text": "Hi.", "speaker": "Carol"}\n', "jsonl", ["line 1", "unknown speaker 'Carol'"]),
    "jsonl not an object": ('{"text": "Hi."}\n[1, 2]\n', "jsonl", ["line 2", "not a JSON object"]),
    "jsonl bad value": ('{"text": "Hi.", "duration": -1}\n', "jsonl", ["line 1", '"duration" must be > 0']),
    "jsonl unknown key": ('{"text": "Hi.", "voice": "x"}\n', "jsonl", ["line 1", "unknown key(s) voice"]),
    "jsonl half timed": ('{"text": "Hi.", "start": 1, "duration": 1}\n{"text": "Ho."}\n', "jsonl",
                         ["line 2", '"start" and "duration"']),
    "break over the limit": (f'Alice: Hi. <break time="{MAX_BREAK_SECONDS + 1:g}s"/>\n', "text",
                             ["line 1", f"over the limit of {MAX_BREAK_SECONDS:g} s"]),
    "malformed break": ("Hi.\nAlice: Hi. <break time=500ms/>\n", "text", ["line 2", "malformed break"]),
    "jsonl break over the limit": ('{"break": 3600}\n{"text": "Hi."}\n', "jsonl", ["line 1", "over the limit"]),
    "no text": ("\n\n  \n", "text", ["holds no text"]),
    "binary junk": (b"RIFF\x00\x00\x00\x00WAVEfmt ", "text", ["binary data", "line 1"]),
    "undecodable encoding": ("Alice: caf\u00e9\n\nBob: na\u00efve".encode("latin-1"), "text",
                             ["not UTF-8", "line 1", "save it as UTF-8"]),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_one_line_that_says_where(name):
    script, script_format, expected = BAD_INPUTS[name]
    message = refused(script, script_format)
    for part in expected:
        assert part in message, message


def test_utf16_with_a_bom_reads_as_utf8_does():
    text = "1\n00:00:01,000 --> 00:00:02,000\nCafé.\n"
    for encoded in ("\ufeff" + text).encode("utf-16-le"), ("\ufeff" + text).encode("utf-16-be"):
        assert parse_script(encoded, "srt").segments == parse_script(text, "srt").segments


def test_speaker_declarations_are_checked():
    for declaration, expected in [("Alice", "NAME=VOICE"), ("../x=a.npz", "not a name"), ("Bob=", "empty"),
                                  ("Bob=instruct:", "needs attributes"), ("Bob=a.npz|text", "goes with a clip")]:
        with pytest.raises(UserError, match=expected.replace("|", r"\|")):
            parse_speakers([declaration])
    with pytest.raises(UserError, match="declared twice"):
        parse_speakers(["Alice=auto", "ALICE=auto"])
