#!/usr/bin/env python3
"""Serve an omnivoice-onnx build behind OpenAI's speech API, with sentence streaming and step-level batching.

  python serve.py --model_dir models/omnivoice-cpu_int8 --port 8000
  curl -s localhost:8000/v1/audio/speech -H 'Content-Type: application/json' \\
       -d '{"model": "omnivoice", "input": "Hello there.", "voice": "alloy", "response_format": "wav"}' > hello.wav

It prints one "ready" line once the model is loaded and the port is listening.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
import time
from pathlib import Path

from codes.common.errors import UserError, run_cli


def parse_args(argv=None) -> argparse.Namespace:
    from codes.serve.limits import add_limit_flags
    from codes.serve.voices import PIN_SECONDS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", type=Path, help="a build folder (default: models/omnivoice-cpu)")
    p.add_argument("--higgs_dir", type=Path, help="a codec folder or a build holding one (default: the model's)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", dest="api_key", help="require 'Authorization: Bearer KEY' on /v1/ "
                                                     "(default: $OMNIVOICE_API_KEY; none: open)")
    p.add_argument("--voices_dir", type=Path, default=Path("voices"), help="saved voices (.npz), kept across restarts")
    p.add_argument("--max-batch", dest="max_batch", type=int, default=8, help="rows that share a decoding step")
    p.add_argument("--max-queue", dest="max_queue", type=int, default=64,
                   help="sentences queued or running before new requests get 429")
    p.add_argument("--pin-seconds", dest="pin_seconds", type=float, default=PIN_SECONDS,
                   help="length of a design voice's pinned reference; shorter makes every step cheaper "
                        "(default: %(default)s, see docs/DESIGN.md §pin-length)")
    p.add_argument("--preload-voices", dest="preload_voices", default="",
                   help="design voices to pin at startup, before /health turns 200: all, or NAME,NAME,...")
    p.add_argument("--max-ref-seconds", dest="max_ref_seconds", type=float,
                   help="trim saved voices longer than this when they are used (default: use them as given)")
    p.add_argument("--num-steps", dest="num_steps", type=int,
                   help="decoding steps for requests that do not say (Wyoming never does; default: 32, as upstream); "
                        "fewer is faster and rougher")
    p.add_argument("--provider", choices=("cpu", "cuda"), help="execution provider (default: the build's)")
    p.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: all cores)")
    doors = p.add_argument_group("other doors onto the same engine (Home Assistant, AI agents)")
    doors.add_argument("--wyoming-uri", dest="wyoming_uri",
                       help="also serve Wyoming (Home Assistant) here, e.g. tcp://0.0.0.0:10200")
    doors.add_argument("--wyoming-zeroconf", dest="wyoming_zeroconf", metavar="NAME",
                       help="announce the Wyoming server on the network under NAME, for Home Assistant to discover")
    doors.add_argument("--mcp-output-dir", dest="mcp_output_dir", type=Path,
                       help="MCP's speak also writes its audio here (and save_voice may read clips from here)")
    doors.add_argument("--mcp-stdio", dest="mcp_stdio", action="store_true",
                       help="serve MCP over stdin/stdout for an agent host that launches this command; no HTTP port, "
                            "logs on stderr")
    add_limit_flags(p.add_argument_group("limits (each refused before any heavy work)"))
    return p.parse_args(argv)


def _preload_names(value: str, known) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    if names == ["all"]:
        return list(known)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UserError(f"--preload-voices: unknown design voice(s) {', '.join(unknown)}; use all or some of "
                        f"{', '.join(known)}")
    return names


def main(argv=None) -> int:
    args = parse_args(argv)
    import uvicorn

    from codes.runtime.manifest import find_builds, read_manifest
    from codes.serve.app import create_app
    from codes.serve.draining import DrainingServer
    from codes.serve.mcp import McpDoor
    from codes.runtime.settings import GenerationSettings
    from codes.serve.service import MAX_STEPS, ServerConfig, ServerState
    from codes.serve.limits import limits_from_args
    from codes.serve.voices import DESIGN_VOICES, PIN_FOLDER, DesignPins, PinSettings, VoiceBook, Voices

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    for name, value in (("--max-batch", args.max_batch), ("--max-queue", args.max_queue)):
        if value < 1:
            raise UserError(f"{name} must be >= 1, got {value}")
    if args.mcp_stdio and (args.wyoming_uri or args.wyoming_zeroconf):
        raise UserError("--mcp-stdio serves MCP alone; drop --wyoming-uri, or run a second serve.py for Wyoming")
    if args.wyoming_zeroconf and not args.wyoming_uri:
        raise UserError("--wyoming-zeroconf announces the Wyoming server: give --wyoming-uri tcp://HOST:PORT too")
    limits = limits_from_args(args)
    model_dir, higgs_dir = find_builds(args.model_dir, args.higgs_dir)
    preload = _preload_names(args.preload_voices, DESIGN_VOICES)
    try:
        book = VoiceBook(args.voices_dir)
    except OSError as exc:
        raise UserError(f"cannot use --voices_dir {args.voices_dir} ({exc.strerror}); choose another folder") from None
    pins = DesignPins(args.voices_dir / PIN_FOLDER, read_manifest(model_dir).identity(),
                      PinSettings(seconds=args.pin_seconds), limits.max_pinned)
    voices = Voices(book, pins, args.max_ref_seconds)
    settings = GenerationSettings()
    if args.num_steps is not None:
        if not 1 <= args.num_steps <= MAX_STEPS:
            raise UserError(f"--num-steps must be between 1 and {MAX_STEPS}, got {args.num_steps}")
        settings = settings.replace(num_steps=args.num_steps)
    config = ServerConfig(args.voices_dir, args.api_key or os.environ.get("OMNIVOICE_API_KEY") or None, limits,
                          settings)
    state = ServerState(config, voices)

    def synthesizer():
        from codes.runtime.synthesis import OmniVoiceOnnx
        from codes.serve.speech import Synthesizer

        tts = OmniVoiceOnnx(model_dir, higgs_dir=higgs_dir, provider=args.provider, threads=args.threads)
        tts.codec.load_decoder()
        synth = Synthesizer(tts, args.max_batch, args.max_queue)
        synth.warm_up()
        synth.start()
        voices.preload(synth, preload)
        return synth

    def loaded(start: float) -> str:
        return (f"{model_dir.name}, loaded in {time.perf_counter() - start:.1f} s; design voices pinned: "
                f"{pins.synthesized} synthesized, {pins.loaded} from {pins.folder}")

    if args.mcp_stdio:
        return _mcp_stdio(state, synthesizer, loaded, args.mcp_output_dir)
    doors = [McpDoor(state, args.mcp_output_dir, args.host)]
    if args.wyoming_uri:
        from codes.serve.wyoming import WyomingDoor

        doors.append(WyomingDoor(state, args.wyoming_uri, args.wyoming_zeroconf))
    server = DrainingServer(state, uvicorn.Config(create_app(state, doors), host=args.host, port=args.port,
                                                   log_level="warning", timeout_graceful_shutdown=limits.drain_seconds))
    failure: list[BaseException] = []

    def load():
        start = time.perf_counter()
        try:
            synth = synthesizer()
        except BaseException as exc:  # reported by the main thread, which stops the server
            failure.append(exc)
            server.should_exit = True
            return
        state.synth = synth
        while not server.started and not server.should_exit:
            time.sleep(0.05)
        wyoming = f", wyoming: {args.wyoming_uri}" if args.wyoming_uri else ""
        print(f"ready: http://{args.host}:{args.port} (mcp: /mcp{wyoming}; {loaded(start)})", flush=True)

    threading.Thread(target=load, name="omnivoice-load", daemon=True).start()
    server.run()
    if state.synth is not None:
        state.synth.stop()
    if failure:
        raise failure[0]
    return 0 if server.started else 1


def _mcp_stdio(state, synthesizer, loaded, output_dir) -> int:
    """MCP on stdin/stdout: stdout carries only the protocol, so everything else goes to stderr."""
    import anyio

    from codes.serve.mcp import run_stdio

    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        state.synth = synthesizer()
    print(f"ready: mcp on stdio ({loaded(start)})", file=sys.stderr, flush=True)
    try:
        anyio.run(run_stdio, state, output_dir)
    finally:
        state.synth.stop()
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
