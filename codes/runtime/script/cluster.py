"""A script's pieces spread over Ray actors (inference.py --script ... --ray), on a local Ray or a cluster.

Each actor loads the build once and speaks whole pieces: a piece's chunks with its own noise (seed + index),
decoded, as `inference.py --text SEGMENT` speaks it alone, so the track equals a local run's. The driver
keeps the plan (ScriptRun: a made speaker's reference first, then the pieces settled on it), the ledger and
the timeline. An actor that dies is restarted by Ray and its piece is run again (on another node where its
node is gone); a piece that fails past that ends the run, with the finished pieces kept in the ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from codes.common.errors import UserError
from codes.common.ray_start import actor_resources, ray_cause, start_ray
from codes.runtime.script.assembly import Assembly
from codes.runtime.script.pieces import StoredPiece
from codes.runtime.script.plan import ScriptPlan, ScriptRun

RETRIES = 2  # restarts of a lost actor, and runs of the piece it held


@dataclass(frozen=True)
class RayPlacement:
    address: str | None = None  # None: a local Ray on this machine's cores
    actors: int | None = None  # None: as many as the CPUs (or GPUs) allow
    threads_per_actor: int = 1
    verbose: bool = False


class PieceSpeaker:
    """One actor: the build loaded once, speaking whole pieces."""

    def __init__(self, model_dir: str, higgs_dir: str | None, asr_dir: str | None, provider: str | None, threads: int):
        from codes.runtime.synthesis import OmniVoiceOnnx

        self.tts = OmniVoiceOnnx(model_dir, higgs_dir=higgs_dir, provider=provider, threads=threads, asr_dir=asr_dir)

    def speak(self, index: int, request, settings, seed: int | None):
        from codes.runtime.request import item_noises

        noise = item_noises(seed, 1, first=index)[0]
        chunks = self.tts.generate_codes([request], settings, [noise])[0]
        voice = request.voice
        return index, chunks, self.tts.decode(chunks, voice.rms if voice else None, settings)


def render_plan_on_ray(tts, plan: ScriptPlan, placement: RayPlacement,
                       on_progress: Callable[[int, int, float], None] | None = None,
                       kept: Mapping[int, StoredPiece] | None = None,
                       on_piece: Callable[[int, StoredPiece], None] | None = None):
    """render_plan's result, the pieces spoken by Ray actors. `tts` is the driver's model: it settles a made
    speaker's later pieces; the actors load the same build from its folders (which every node must see)."""
    import ray
    from ray.util import ActorPool

    run = ScriptRun(plan, tts)
    assembly = Assembly(run, kept, on_piece, on_progress, None)
    if run.done:
        return assembly.finish()
    start_ray(placement.address, placement.verbose)
    try:
        actors, threads, gpus = actor_resources(placement.actors, placement.threads_per_actor, None, tts.provider)
        actors = min(actors, len(plan.pieces) - assembly.reused)
        remote = ray.remote(num_cpus=threads, num_gpus=gpus or None, max_restarts=RETRIES,
                            max_task_retries=RETRIES)(PieceSpeaker)
        folders = tts.folders()
        pool = ActorPool([remote.remote(*folders, tts.provider, threads) for _ in range(actors)])

        jobs = {}

        def submit_ready():
            for job in run.take_jobs(whole=True):
                jobs[job.piece] = job
                pool.submit(lambda actor, args: actor.speak.remote(*args),
                            (job.piece, job.request, job.settings, plan.seed))

        submit_ready()
        try:
            while pool.has_next():
                index, chunks, wav = pool.get_next_unordered()
                run.finish_job(jobs.pop(index), chunks)
                submit_ready()
                assembly.spoken(index, np.asarray(wav, dtype=np.float32))
        except ray.exceptions.RayError as exc:
            raise UserError(f"the Ray actors failed: {ray_cause(exc)}; the segments finished are kept, "
                            "run the same command again to resume") from None
    finally:
        ray.shutdown()
    return assembly.finish()

