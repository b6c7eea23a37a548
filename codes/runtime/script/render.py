"""The runtime's driver: a plan's work items through a StepEngine together, decoded and placed as each
finishes; speak_script, the one call from a script to its audio and timeline; and the files it writes.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.runtime.engine import StepEngine
from codes.runtime.outputs import check_audio_output_path, check_output_path, write_audio
from codes.runtime.script.model import Script
from codes.runtime.script.parse import parse_script, read_script
from codes.runtime.script.plan import Job, ScriptPlan, ScriptRun, plan_script
from codes.runtime.script.placing import Placing
from codes.runtime.script.store import StoredPiece
from codes.runtime.script.speakers import resolve_speakers
from codes.runtime.script.subtitles import caption_text
from codes.runtime.script.timeline import RenderedScript
from codes.runtime.script.words import align_captions
from codes.common.fileio import atomic_path

logger = logging.getLogger(__name__)
CAPTION_SUFFIXES = {".srt": "srt", ".vtt": "vtt"}
# Segments sharing a step, by provider, unless asked. On a small CPU a step costs its positions, and a shared
# step pads each item to the longest: batched, the full-size cpu_int8 build spoke the benchmark's dialogue in
# 1.5x the time one by one took, and its SRT in 1.1x, at 2.5x the memory (bench/script_results.md). On a GPU a
# step's cost is mostly fixed (the engine's premise, docs/DESIGN.md §scheduling), so sharing comes nearly free.
DEFAULT_MAX_BATCH = {"cpu": 1, "cuda": 8}


def render_plan(tts, plan: ScriptPlan, max_batch: int | None = None, on_progress: Callable[[int, int, float], None] | None = None,
                on_audio: Callable[[np.ndarray], None] | None = None, order: str = "length",
                kept: Mapping[int, StoredPiece] | None = None,
                on_piece: Callable[[int, StoredPiece], None] | None = None) -> RenderedScript:
    """Every piece of the plan, up to max_batch work items sharing each decoding step; a chunk longer than a
    work item (Job.fits_a_work_item) is decoded whole beside the engine. on_progress(pieces done, total,
    audio seconds spoken); on_audio(block): the mix in timeline order, as it becomes final. order: which jobs
    go first (ScriptRun.take_jobs): "length" wastes least on padding, "timeline" gives on_audio its first block
    soonest. kept: pieces of an earlier run, by index, used as they are (a ledger's or a store's);
    on_piece(index, piece): each piece spoken, to keep. max_batch None: DEFAULT_MAX_BATCH for the model's
    provider."""
    if max_batch is None:
        max_batch = DEFAULT_MAX_BATCH.get(tts.provider, 1)
    run = ScriptRun(plan, tts)
    placing = Placing(run, kept, on_piece, on_progress, on_audio)
    engine = StepEngine(tts, max_batch=max_batch, max_queue=len(plan.pieces))  # at most one job a piece is out
    whole = ThreadPoolExecutor(max_workers=1, thread_name_prefix="omnivoice-whole")
    out: dict[Future, tuple[Job, object]] = {}

    def submit_ready():
        for job in run.take_jobs(order=order):
            if job.fits_a_work_item:
                item = engine.submit(job.request, job.settings, job.noise)
                out[item.future] = (job, item)
            else:
                out[whole.submit(tts.generate_whole, [job.request], job.settings, [job.noise])] = (job, None)

    engine.start()
    try:
        submit_ready()
        while out:
            finished_futures, _ = wait(list(out), return_when=FIRST_COMPLETED)
            for future in finished_futures:
                job, item = out.pop(future)
                codes = future.result() if item is not None else future.result()[0]
                finished = run.finish_job(job, codes, item.noise if item is not None else None)
                submit_ready()  # before decoding: the engine steps on while the codec runs
                for piece in finished:
                    placing.spoken(piece.index, tts.decode(piece.chunks, piece.ref_rms, piece.settings))
    finally:
        engine.stop()
        whole.shutdown(wait=True, cancel_futures=True)
    return placing.finish(engine.steps_run)


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


# --- files ------------------------------------------------------------------------------------


def stem_paths(stems: Path, speakers, output: Path) -> dict[str, Path]:
    """Each speaker's stem file: STEMS/<name> with the mix's extension (names are plain file names)."""
    return {name: stems / f"{name}{output.suffix}" for name in speakers}


def check_outputs(output: Path, captions: Path | None = None, stems: Path | None = None, speakers=(),
                  script: Path | None = None) -> None:
    """Fail before any compute where an output cannot be written, would be the script it is made from, or two
    would be one file."""
    check_audio_output_path(output)
    for flag, path in (("--output", output), ("--captions", captions)):
        if script is not None and path is not None and path.resolve() == Path(script).resolve():
            raise UserError(f"{flag} {path} is the script itself; write it to another file")
    if captions is not None:
        check_output_path(captions, "captions")
        if captions.suffix.lower() not in CAPTION_SUFFIXES:
            raise UserError(f"--captions {captions} needs .srt or .vtt, got {captions.suffix or 'no extension'!r}")
        if captions.resolve() == output.resolve():
            raise UserError(f"--captions {captions} is --output too; give the captions their own file")
    if stems is None:
        return
    if stems.exists() and not stems.is_dir():
        raise UserError(f"--stems {stems} is a file; give a folder (made if missing)")
    check_output_path(stems / "stem" if stems.is_dir() else stems, "stems")
    for name, path in stem_paths(stems, speakers, output).items():
        if path.resolve() in {output.resolve(), captions.resolve() if captions else None}:
            raise UserError(f"speaker {name}'s stem would be {path}, which is another output; "
                            "give --stems another folder")


def write_captions(path: Path, captions, sample_rate: int) -> None:
    """The captions as the file's extension says (.srt, .vtt), written whole."""
    with atomic_path(path) as tmp:
        tmp.write_text(caption_text(captions, CAPTION_SUFFIXES[path.suffix.lower()], sample_rate), encoding="utf-8")


def write_outputs(rendered: RenderedScript, output: Path, captions: Path | None = None, stems: Path | None = None,
                  float_wav: bool = False, part_folder: Path | None = None) -> list[Path]:
    """The mix, then the captions and each speaker's stem, each written whole; returns what was written.
    part_folder: where the mix is written before it is renamed into place (a ledger's folder)."""
    written = [output]
    write_audio(output, rendered.audio, rendered.sample_rate, float_wav, part_folder)
    if captions is not None:
        write_captions(captions, rendered.captions, rendered.sample_rate)
        written.append(captions)
    if stems is not None:
        stems.mkdir(exist_ok=True)
        for name, path in stem_paths(stems, rendered.stems, output).items():
            write_audio(path, rendered.stems[name], rendered.sample_rate, float_wav)
            written.append(path)
    return written
