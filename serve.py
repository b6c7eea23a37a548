#!/usr/bin/env python3
"""Serve an omnivoice-onnx build behind OpenAI's speech API, with sentence streaming and step-level batching.

  python serve.py --model_dir models/omnivoice-cpu_int8 --port 8000
  curl -s localhost:8000/v1/audio/speech -H 'Content-Type: application/json' \\
       -d '{"model": "omnivoice", "input": "Hello there.", "voice": "alloy", "response_format": "wav"}' > hello.wav

It prints one "ready" line once the model is loaded and the port is listening.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codes.common.errors import run_cli


def parse_args(argv=None) -> argparse.Namespace:
    from codes.serve.launch.deployment import add_cluster_flags
    from codes.serve.edge.limits import add_limit_flags
    from codes.serve.voices.pins import PIN_SECONDS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", type=Path, help="a build folder (default: models/omnivoice-cpu)")
    p.add_argument("--higgs_dir", type=Path, help="a codec folder or a build holding one (default: the model's)")
    p.add_argument("--asr_dir", type=Path,
                   help="a recogniser folder (asr/) or a build holding one, to transcribe clips uploaded or sent "
                        "without their transcript (default: the model folder's, if it has one)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", dest="api_key", help="require 'Authorization: Bearer KEY' on /v1/ "
                                                     "(default: $OMNIVOICE_API_KEY; none: open)")
    p.add_argument("--allow-origin", dest="allow_origin", action="append", metavar="ORIGIN",
                   help="a web page origin (scheme://host[:port]) that may call the server besides its own pages; "
                        "repeatable (others: 403)")
    p.add_argument("--allow-host", dest="allow_host", action="append", metavar="NAME",
                   help="a host name the server answers to without --api-key, besides localhost and IP addresses; "
                        "repeatable (others: 403, against DNS rebinding)")
    p.add_argument("--voices_dir", type=Path, default=Path("voices"),
                   help="saved voices (.npz, or upstream's .pt), kept across restarts")
    p.add_argument("--voices-from", dest="voices_from", type=Path, action="append", metavar="DIR",
                   help="also offer the voices of a wyoming-piper voice folder (DIR/<language>/<voice>/ with ref.wav "
                        "and ref.txt, or instruct.txt), named after their folders; DIR is only read (clips are "
                        "encoded once into --voices_dir/imported/); repeatable")
    p.add_argument("--max-batch", dest="max_batch", type=int, default=8, help="rows that share a decoding step")
    p.add_argument("--step-cost", dest="step_cost", metavar="FIXED,PER_TOKEN",
                   help="pin the scheduler's cost model (a step's seconds, and seconds per token) instead of fitting "
                        "it to this machine's steps, e.g. 1,0 to let first chunks always share steps")
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
    p.add_argument("--normalize-text", dest="normalize_text", action="store_true",
                   help="write numbers, dates and currency as words before speaking, as upstream's normalize_text "
                        "(a request's normalize_text field overrides it; needs WeTextProcessing, checked at start)")
    p.add_argument("--provider", choices=("cpu", "cuda"), help="execution provider (default: the build's)")
    p.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: all cores; with --ray, per replica: 1)")
    p.add_argument("--web-site", dest="web_site", type=Path, metavar="DIR",
                   help="serve this folder at /web/, outside the API key, cross-origin isolated: a web build "
                        "(optimize.py --device web), whose page speaks in the browser itself (default: the model "
                        "folder, when it is a web build)")
    doors = p.add_argument_group("other doors onto the same engine (Home Assistant, AI agents)")
    doors.add_argument("--wyoming-uri", dest="wyoming_uri",
                       help="also serve Wyoming (Home Assistant) here, e.g. tcp://127.0.0.1:10200. Wyoming has no "
                            "authentication (--api-key does not guard it): anyone who reaches the port can use the "
                            "server, so bind 0.0.0.0 or a LAN address only on a trusted network, behind a firewall")
    doors.add_argument("--wyoming-zeroconf", dest="wyoming_zeroconf", metavar="NAME",
                       help="announce the Wyoming server on the network under NAME, for Home Assistant to discover")
    doors.add_argument("--mcp-output-dir", dest="mcp_output_dir", type=Path,
                       help="MCP's speak also writes its audio here (and save_voice may read clips from here)")
    doors.add_argument("--mcp-stdio", dest="mcp_stdio", action="store_true",
                       help="serve MCP over stdin/stdout for an agent host that launches this command; no HTTP port, "
                            "logs on stderr")
    add_limit_flags(p.add_argument_group("limits (each refused before any heavy work)"))
    add_cluster_flags(p.add_argument_group("a cluster (Ray Serve replicas behind Ray's HTTP proxy)"))
    return p.parse_args(argv)


def main(argv=None) -> int:
    from codes.serve.launch.run import run

    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(run_cli(main))
