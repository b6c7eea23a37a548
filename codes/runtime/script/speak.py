"""speak_script: a script to its audio and timeline in one call (the Python API, and inference.py --script)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import replace

from codes.common.errors import UserError
from codes.runtime.script.drive import render_plan
from codes.runtime.script.parse import parse_script, read_script
from codes.runtime.script.plan import plan_script
from codes.runtime.script.segments import Script
from codes.runtime.script.speakers import resolve_speakers
from codes.runtime.script.timeline import RenderedScript
from codes.runtime.script.words import align_captions

logger = logging.getLogger(__name__)


def speak_script(tts, script: Script | str | os.PathLike | None = None, speakers: Mapping | None = None, *,
                 text: str | None = None, script_format: str | None = None, gap: float = 0.0,
                 overlap: str = "error", seed: int | None = None, language: str | None = None,
                 speed: float | None = None, normalize_text: bool = False, postprocess: bool | None = None,
                 max_batch: int | None = None, settings=None, on_progress=None, on_audio=None, order: str = "length",
                 caption_words: bool = False, ledger=None, ray=None, **settings_overrides) -> RenderedScript:
    """A script spoken: `script` (a file's path, or a parsed Script) or `text` (a script's text, in
    script_format, default "text"), by `speakers` ({name: VOICE string, Voice or SpeakerVoice}, in order:
    the first speaks unmarked lines; none: one auto voice). Settings as OmniVoiceOnnx.generate takes them.
    Returns the mix, the stems, the captions and each made voice (docs/scripts.md). caption_words: each
    caption's words too (align_captions), on a build with word timings (refused before any work elsewhere).
    ledger: a ScriptLedger (ledger.py): the pieces it holds for this plan are used, and each piece spoken is
    kept in it. ray: a RayPlacement (cluster.py): the pieces are spoken by Ray actors (on_audio is not called)."""
    speakers = dict(speakers or {})
    if (script is None) == (text is None):
        raise UserError("give a script (a path or a Script) or its text, one of them")
    if caption_words:
        tts.check_word_timings()
    if text is not None:
        script = parse_script(text, script_format or "text", speakers, overlap)
    elif not isinstance(script, Script):
        script = read_script(script, script_format, speakers, overlap)
    settings = (settings or tts.defaults).replace(**settings_overrides)
    voices = resolve_speakers(speakers, tts, settings.preprocess_prompt)
    plan = plan_script(script, voices, tts, settings, seed, gap, postprocess, language, speed, normalize_text)
    for warning in plan.warnings:
        logger.warning(warning)
    kept = ledger.reusable(plan, tts.build_key()) if ledger is not None else None
    on_piece = ledger.keep if ledger is not None else None
    if ray is not None:
        from codes.runtime.script.cluster import render_plan_on_ray

        rendered = render_plan_on_ray(tts, plan, ray, on_progress, kept, on_piece)
    else:
        rendered = render_plan(tts, plan, max_batch, on_progress, on_audio, order, kept, on_piece)
    return replace(rendered, captions=align_captions(tts, plan, rendered)) if caption_words else rendered
