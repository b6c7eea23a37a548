"""Scripts: dialogues, subtitles and segment lists spoken into one track (issue 43; docs/scripts.md).

Stages, each reusable by any door (the runtime's CLI and Python call here; the server drives the same
plan with its own engine):

    parse     parse_script(text, format, speakers, overlap) / read_script(path, ...) -> Script
              (model.py: Segment, Break, Script; parse.py, subtitles.py); warnings in Script.warnings
    check     check_bounds(script, ScriptBounds(max_segments, max_characters, max_seconds))
    speakers  parse_speakers(["Alice=a.npz", ...]) -> {name: VoiceSpec}; resolve_speakers(...) ->
              {name: SpeakerVoice} (a server resolves its voice names to Voice itself)
    plan      plan_script(script, voices, tts, settings, seed, gap, postprocess, ...) -> ScriptPlan
              (settled Requests, seeds, timeline slots); ScriptRun(plan, tts).take_jobs() / finish_job()
              hand out work items as their inputs (a speaker's reference, a chunk before) are known
    assemble  Timeline(plan).add(index, wav) -> the mix's next final samples, in timeline order;
              finish() -> RenderedScript (mix, stems, captions, each piece's audio)
    words     align_captions(tts, plan, rendered) -> list[Caption] with Caption.words (words.py: each piece's
              own audio aligned with the text it spoke, times in samples on the track); caption_words(...) for
              one caption as its piece is placed; tts.check_word_timings() first refuses a build without them
    write     caption_text(captions, "srt"|"vtt", rate): segment level, or word level where captions have words

The runtime's driver, render_plan, runs a plan on a StepEngine; speak_script is all of it in one call.
"""

from codes.runtime.script.model import Break, Script, ScriptBounds, Segment, check_bounds
from codes.runtime.script.parse import parse_script, read_script
from codes.runtime.script.plan import ScriptPlan, ScriptRun, plan_script
from codes.runtime.script.render import check_outputs, render_plan, speak_script, write_outputs
from codes.runtime.script.speakers import SpeakerVoice, VoiceSpec, parse_speakers, resolve_speakers
from codes.runtime.script.subtitles import caption_text
from codes.runtime.script.timeline import Caption, RenderedScript, Timeline, utterance_caption
from codes.runtime.script.words import align_captions, caption_words

__all__ = ["Break", "Caption", "RenderedScript", "Script", "ScriptBounds", "ScriptPlan", "ScriptRun", "Segment",
           "SpeakerVoice", "Timeline", "VoiceSpec", "align_captions", "caption_text", "caption_words", "check_bounds",
           "check_outputs", "parse_script", "parse_speakers", "plan_script", "read_script", "render_plan",
           "resolve_speakers", "speak_script", "utterance_caption", "write_outputs"]
