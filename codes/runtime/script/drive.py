"""The runtime's driver: a plan's work items through a StepEngine together, decoded and placed as each
finishes (Ray's actors are the other driver: cluster.py; the server's stream a third: serve's script_stream)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import numpy as np

from codes.runtime.contract.settings import SCRIPT_MAX_BATCH
from codes.runtime.model.engine import StepEngine
from codes.runtime.script.assembly import Assembly
from codes.runtime.script.pieces import StoredPiece
from codes.runtime.script.plan import Job, ScriptPlan, ScriptRun
from codes.runtime.script.timeline import RenderedScript


def render_plan(tts, plan: ScriptPlan, max_batch: int | None = None, on_progress: Callable[[int, int, float], None] | None = None,
                on_audio: Callable[[np.ndarray], None] | None = None, order: str = "length",
                kept: Mapping[int, StoredPiece] | None = None,
                on_piece: Callable[[int, StoredPiece], None] | None = None) -> RenderedScript:
    """Every piece of the plan, up to max_batch work items sharing each decoding step; a chunk longer than a
    work item (Job.fits_a_work_item) is decoded whole beside the engine. on_progress(pieces done, total,
    audio seconds spoken); on_audio(block): the mix in timeline order, as it becomes final. order: which jobs
    go first (ScriptRun.take_jobs): "length" wastes least on padding, "timeline" gives on_audio its first block
    soonest. kept: pieces of an earlier run, by index, used as they are (a ledger's or a store's);
    on_piece(index, piece): each piece spoken, to keep. max_batch None: SCRIPT_MAX_BATCH for the model's
    provider."""
    if max_batch is None:
        max_batch = SCRIPT_MAX_BATCH.get(tts.provider, 1)
    run = ScriptRun(plan, tts)
    assembly = Assembly(run, kept, on_piece, on_progress, on_audio)
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
                    assembly.spoken(piece.index, tts.decode(piece.chunks, piece.ref_rms, piece.settings))
    finally:
        engine.stop()
        whole.shutdown(wait=True, cancel_futures=True)
    return assembly.finish(engine.steps_run)
