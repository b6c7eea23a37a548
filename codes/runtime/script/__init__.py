"""Scripts: dialogues, subtitles and segment lists spoken into one track (docs/scripts.md).

This is the package's front door: every driver outside it (inference.py, the server, the benchmarks)
imports from here, never from a module inside. A stage a module:

    read      parse_script(text, format, speakers, overlap) / read_script(path, ...) -> Script
              (segments.py: Segment, Break, Script and their bounds; text_input.py, parse.py, subtitles.py)
    check     check_bounds(script, ScriptBounds(max_segments, max_characters, max_seconds))
    speakers  parse_speakers(["Alice=a.npz", ...]) -> {name: VoiceSpec}; resolve_speakers(...) ->
              {name: SpeakerVoice} (a server resolves its voice names to Voice itself: parse_voice, resolve_voice)
    plan      plan_script(script, voices, tts, settings, seed, gap, ...) -> ScriptPlan (settled Requests, seeds,
              timeline slots); ScriptRun(plan, tts).take_jobs() / finish_job() hand out work items (or whole
              pieces) as their inputs (a speaker's reference, a chunk before) are known
    assemble  Assembly(run, kept, ...): kept pieces first, each spoken one placed on the Timeline, kept and
              counted; finish() -> RenderedScript (mix, stems, captions, each piece's audio)
    drive     render_plan (the runtime's StepEngine: drive.py), render_plan_on_ray (Ray actors: cluster.py);
              the server's stream is the third driver (codes/serve/core/script_stream.py)
    keep      piece_fingerprints(plan, build) (fingerprints.py); StoredPiece and its file (pieces.py); a
              ScriptLedger beside an output (ledger.py)
    words     align_captions(tts, plan, rendered) -> list[Caption] with Caption.words (words.py)
    write     caption_text(captions, "srt"|"vtt", rate); check_outputs / write_outputs (files.py)

speak_script is all of it in one call (speak.py).
"""

from codes.runtime.script.assembly import Assembly
from codes.runtime.script.cluster import RayPlacement
from codes.runtime.script.drive import render_plan
from codes.runtime.script.files import CAPTION_SUFFIXES, check_outputs, write_captions, write_outputs
from codes.runtime.script.fingerprints import piece_fingerprints
from codes.runtime.script.ledger import ScriptLedger
from codes.runtime.script.parse import FORMATS, parse_script, read_script
from codes.runtime.script.pieces import PIECE_SUFFIX, StoredPiece, read_piece, write_piece
from codes.runtime.script.plan import Job, ScriptPlan, ScriptRun, plan_script
from codes.runtime.script.segments import (Break, Script, ScriptBounds, Segment, check_bounds, check_break,
                                           natural_seconds)
from codes.runtime.script.speak import speak_script
from codes.runtime.script.speakers import (DEFAULT_SPEAKER, SpeakerVoice, VoiceSpec, parse_speakers, parse_voice,
                                           resolve_speakers, resolve_voice)
from codes.runtime.script.subtitles import OVERLAPS, caption_text, format_timestamp
from codes.runtime.script.text_input import check_name, decode
from codes.runtime.script.timeline import Caption, RenderedScript, Timeline, utterance_caption
from codes.runtime.script.words import align_captions, caption_words

__all__ = ["Assembly", "Break", "CAPTION_SUFFIXES", "Caption", "DEFAULT_SPEAKER", "FORMATS", "Job", "OVERLAPS",
           "PIECE_SUFFIX", "RayPlacement", "RenderedScript", "Script", "ScriptBounds", "ScriptLedger", "ScriptPlan",
           "ScriptRun", "Segment", "SpeakerVoice", "StoredPiece", "Timeline", "VoiceSpec", "align_captions",
           "caption_text", "caption_words", "check_bounds", "check_break", "check_name", "check_outputs", "decode", "format_timestamp",
           "natural_seconds", "parse_script", "parse_speakers", "parse_voice", "piece_fingerprints", "plan_script",
           "read_piece", "read_script", "render_plan", "resolve_speakers", "resolve_voice", "speak_script",
           "utterance_caption", "write_captions", "write_outputs", "write_piece"]
