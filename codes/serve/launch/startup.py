"""One server's setup from serve.py's flags: its state (voices, pins, limits) and its loaded model.

Plain serve.py and every Ray Serve replica (codes/serve/launch/deployment.py) build a server the same way:
`service_options` checks the flags once, in the command; `service_state` and `load_model` run
where the server runs (serve.py's process, or each replica's).
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from codes.common.errors import UserError
from codes.runtime.contract.settings import GenerationSettings
from codes.serve.core.state import ServerConfig, ServerState
from codes.serve.doors.contract import Door
from codes.serve.doors.playground.web_site import site_folder
from codes.serve.edge.limits import MAX_STEPS, Limits, limits_from_args
from codes.serve.edge.origins import BrowserRules, browser_rules
from codes.serve.voices.book import DESIGN_VOICES, VoiceBook
from codes.serve.voices.files import check_folders, encode_imported, import_folders
from codes.serve.voices.pins import PIN_FOLDER, DesignPins, PinSettings

SCRIPT_PIECES = "script-pieces"  # in --voices_dir: finished script segments, by key and fingerprint
from codes.serve.voices.resolver import Voices

logger = logging.getLogger("omnivoice.serve")


@dataclass(frozen=True)
class ServiceOptions:
    """What the flags say about one server; plain values, so a Ray replica can be given them."""

    model_dir: Path
    higgs_dir: Path | None  # None: the model folder holds its codec
    voices_dir: Path
    api_key: str | None
    limits: Limits
    max_batch: int
    max_queue: int
    pin_seconds: float
    preload: tuple[str, ...]
    max_ref_seconds: float | None
    provider: str | None
    threads: int | None
    settings: GenerationSettings  # what a request leaves out (--num-steps)
    host: str  # where the HTTP server listens
    mcp_output_dir: Path | None
    browsers: BrowserRules = BrowserRules()  # --allow-origin, --allow-host
    replica: str | None = None  # NAME/PID of a Ray Serve replica; None for plain serve.py
    voices_from: tuple[Path, ...] = ()  # wyoming-piper voice folders, only read (codes/serve/voices/files.py)
    normalize_text: bool = False  # --normalize-text: requests that do not say are normalized
    step_cost: tuple[float, float] | None = None  # --step-cost: the scheduler's cost model pinned; None: fitted
    asr_dir: Path | None = None  # --asr_dir: another build's recogniser (None: the model folder's, if any)
    web_site: Path | None = None  # served at /web/: --web-site, or the model folder when it is a web build

    def for_replica(self, name: str) -> "ServiceOptions":
        return replace(self, replica=f"{name}/{os.getpid()}")


def preload_names(value: str, known) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    if names == ["all"]:
        return list(known)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UserError(f"--preload-voices: unknown design voice(s) {', '.join(unknown)}; use all or some of "
                        f"{', '.join(known)}")
    return names


def step_cost(value: str | None) -> tuple[float, float] | None:
    """--step-cost FIXED,PER_TOKEN: two non-negative seconds, or None (the engine fits them)."""
    if value is None:
        return None
    try:
        fixed, per_token = (float(part) for part in value.split(","))
    except ValueError:
        fixed = per_token = -1.0
    if not (fixed >= 0 and per_token >= 0):
        raise UserError(f"--step-cost takes FIXED,PER_TOKEN: two seconds >= 0 such as 0.05,0.001; got {value!r}")
    return fixed, per_token


def service_options(args: argparse.Namespace) -> ServiceOptions:
    """The flags checked (UserError for a bad one) and the builds found."""
    from codes.runtime.contract.manifest import find_builds, recogniser_folder

    for name, value in (("--max-batch", args.max_batch), ("--max-queue", args.max_queue)):
        if value < 1:
            raise UserError(f"{name} must be >= 1, got {value}")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    settings = GenerationSettings()
    if args.num_steps is not None:
        if not 1 <= args.num_steps <= MAX_STEPS:
            raise UserError(f"--num-steps must be between 1 and {MAX_STEPS}, got {args.num_steps}")
        settings = settings.replace(num_steps=args.num_steps)
    limits = limits_from_args(args)
    model_dir, higgs_dir = find_builds(args.model_dir, args.higgs_dir)
    preload = preload_names(args.preload_voices, DESIGN_VOICES)
    voices_from = check_folders(getattr(args, "voices_from", None))
    asr_dir = getattr(args, "asr_dir", None)
    if asr_dir is not None:  # a folder without a recogniser is one line now, before the model loads
        recogniser_folder(asr_dir)
    web_site = site_folder(getattr(args, "web_site", None), model_dir)
    normalize = bool(getattr(args, "normalize_text", False))
    if normalize:  # a missing WeTextProcessing is one line now, not a 400 on every request
        from codes.runtime.text.normalize import check_available

        check_available()
    return ServiceOptions(model_dir, higgs_dir, args.voices_dir, args.api_key or os.environ.get("OMNIVOICE_API_KEY")
                          or None, limits, args.max_batch, args.max_queue, args.pin_seconds, tuple(preload),
                          args.max_ref_seconds, args.provider, args.threads, settings, args.host,
                          args.mcp_output_dir, browser_rules(args.allow_origin, args.allow_host),
                          voices_from=voices_from, normalize_text=normalize, asr_dir=asr_dir,
                          step_cost=step_cost(getattr(args, "step_cost", None)), web_site=web_site)


def voice_book(folder: Path) -> VoiceBook:
    """The saved voices' folder, made if need be; a folder that cannot be used is one line."""
    try:
        return VoiceBook(folder)
    except OSError as exc:
        raise UserError(f"cannot use --voices_dir {folder} ({exc.strerror}); choose another folder") from None


def service_state(options: ServiceOptions) -> ServerState:
    """The server's state before its model is loaded: saved voices, design pins, kept script segments, limits."""
    from codes.runtime.contract.manifest import read_manifest
    from codes.serve.core.kept_pieces import PieceStore

    book = voice_book(options.voices_dir)
    build_id = read_manifest(options.model_dir).identity()
    book.imported = import_folders(options.voices_from, book, build_id)
    pins = DesignPins(options.voices_dir / PIN_FOLDER, build_id, PinSettings(seconds=options.pin_seconds),
                      options.limits.max_pinned)
    voices = Voices(book, pins, options.max_ref_seconds)
    config = ServerConfig(options.voices_dir, options.api_key, options.limits, options.settings, options.replica,
                          options.browsers, normalize_text=options.normalize_text, web_site=options.web_site)
    limits = options.limits
    pieces = PieceStore(options.voices_dir / SCRIPT_PIECES, limits.script_cache_bytes, limits.script_cache_seconds) \
        if limits.script_cache_bytes > 0 else None
    return ServerState(config, voices, script_pieces=pieces)


class LoadStopped(Exception):
    """The start was asked to stop (a signal) before the model was ready."""


def load_model(options: ServiceOptions, voices: Voices, stop: threading.Event | None = None, made=None):
    """The model loaded, warmed, its engine started and the preloaded design voices pinned (blocking); the imported
    clips start encoding in the background. Each stage logs a "starting:" line (a signal's tests wait for them).
    `stop`, once set, ends it between stages (LoadStopped); `made(model)` hears of the model as soon as it exists,
    so that whoever sets `stop` can stop its engine too, which ends a pinning in progress."""
    from codes.runtime.synthesis import OmniVoiceOnnx
    from codes.serve.core.loaded_model import LoadedModel

    stop = stop or threading.Event()
    logger.info("starting: loading the model from %s", options.model_dir)
    tts = OmniVoiceOnnx(options.model_dir, higgs_dir=options.higgs_dir, provider=options.provider,
                        threads=options.threads, asr_dir=options.asr_dir)
    tts.codec.load_decoder()
    if options.normalize_text:  # the grammars load here (about a second), not in the first request
        from codes.runtime.text.normalize import check_available

        check_available()
    model = LoadedModel(tts, options.max_batch, options.max_queue, options.step_cost)
    if made is not None:
        made(model)
    try:
        _go_on(stop)
        logger.info("starting: warming up")
        model.warm_up()
        _go_on(stop)
        model.start()
        if options.preload:
            logger.info("starting: pinning %d design voice(s)", len(options.preload))
            voices.preload(model, list(options.preload))
    except BaseException:
        model.stop()
        raise
    encode_imported(voices.book.imported, model)
    return model


def _go_on(stop: threading.Event) -> None:
    if stop.is_set():
        raise LoadStopped


def doors(options: ServiceOptions, state: ServerState, wyoming_uri: str | None = None,
          wyoming_zeroconf: str | None = None) -> list[Door]:
    """What runs beside the HTTP API: MCP at /mcp always, Wyoming where asked."""
    from codes.serve.doors.mcp import McpDoor

    found = [McpDoor(state, options.mcp_output_dir, options.host)]
    if wyoming_uri:
        from codes.serve.doors.wyoming import WyomingDoor

        found.append(WyomingDoor(state, wyoming_uri, wyoming_zeroconf))
    return found


def pins_summary(state: ServerState) -> str:
    pins = state.voices.pins
    return f"design voices pinned: {pins.synthesized} synthesized, {pins.loaded} from {pins.folder}"
