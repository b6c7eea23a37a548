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
              finish() -> RenderedScript (mix, stems, captions); caption_text(captions, "srt"|"vtt", rate)

The runtime's driver, render_plan, runs a plan on a StepEngine; speak_script is all of it in one call.
"""

from codes.runtime.script.model import Break, Script, ScriptBounds, Segment, check_bounds
from codes.runtime.script.parse import parse_script, read_script
from codes.runtime.script.plan import ScriptPlan, ScriptRun, plan_script
from codes.runtime.script.render import check_outputs, render_plan, speak_script, write_outputs
from codes.runtime.script.speakers import SpeakerVoice, VoiceSpec, parse_speakers, resolve_speakers
from codes.runtime.script.subtitles import caption_text
from codes.runtime.script.timeline import Caption, RenderedScript, Timeline

__all__ = ["Break", "Caption", "RenderedScript", "Script", "ScriptBounds", "ScriptPlan", "ScriptRun", "Segment",
           "SpeakerVoice", "Timeline", "VoiceSpec", "caption_text", "check_bounds", "check_outputs", "parse_script",
           "parse_speakers", "plan_script", "read_script", "render_plan", "resolve_speakers", "speak_script",
           "write_outputs"]
