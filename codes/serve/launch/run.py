"""How serve.py runs, once its flags are parsed: one process's server (uvicorn, with the model loaded
beside it so /health answers while it loads), MCP on stdin/stdout, or Ray Serve replicas
(codes/serve/launch/deployment.py). Each prints one "ready" line once it takes requests.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
import time

from codes.common.errors import UserError


def run(args: argparse.Namespace) -> int:
    from codes.serve.launch.deployment import check_cluster_flags

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    check_cluster_flags(args)
    _check_door_flags(args)
    if args.ray:  # the same app on Ray Serve replicas behind Ray's HTTP proxy
        from codes.serve.launch.deployment import serve_on_ray

        return serve_on_ray(args)
    import uvicorn

    from codes.serve.doors.http import create_app
    from codes.serve.edge.connections import bounded_http, fit_descriptors
    from codes.serve.edge.draining import DrainingServer
    from codes.serve.launch.startup import doors, load_model, pins_summary, service_options, service_state

    options = service_options(args)
    state = service_state(options)
    if args.mcp_stdio:
        return _mcp_stdio(options, state)
    fit_descriptors(options.limits, wyoming=bool(args.wyoming_uri))
    app = create_app(state, doors(options, state, args.wyoming_uri, args.wyoming_zeroconf))
    server = DrainingServer(state, uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                                                   timeout_graceful_shutdown=options.limits.drain_seconds,
                                                   **bounded_http(options.limits),
                                                   ws_max_size=options.limits.ws_max_message_bytes))
    failure: list[BaseException] = []
    stop, made = threading.Event(), []  # made: the model, as soon as it exists

    def load():
        start = time.perf_counter()
        try:
            model = load_model(options, state.voices, stop, made.append)
        except BaseException as exc:  # reported by the main thread, which stops the server
            if not stop.is_set():
                failure.append(exc)
                server.should_exit = True
            return
        while not server.started and not server.should_exit:
            time.sleep(0.05)
        if server.should_exit or stop.is_set():  # a signal came while it loaded: the run is ending
            return
        state.model = model
        wyoming = f", wyoming: {args.wyoming_uri}" if args.wyoming_uri else ""
        print(f"ready: http://{args.host}:{args.port} (mcp: /mcp{wyoming}; {options.model_dir.name}, loaded in "
              f"{time.perf_counter() - start:.1f} s; {pins_summary(state)})", flush=True)

    loader = threading.Thread(target=load, name="omnivoice-load", daemon=True)
    loader.start()
    interrupted = False
    try:
        server.run()  # on Ctrl-C, uvicorn drains and then raises KeyboardInterrupt here
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        _stop_loading(loader, stop, made, options.limits.drain_seconds, 130 if interrupted else 1)
    if failure:
        raise failure[0]
    return 0 if server.started else 1


def _stop_loading(loader: threading.Thread, stop: threading.Event, made: list, seconds: float, status: int) -> None:
    """Stop the model, and a load still going on: it ends between its stages, or at once when pinning (its engine
    stops). One still inside a stage (ONNX Runtime making sessions, warming up) after `seconds` is not waited for:
    the process ends at once, since the interpreter's own end would free the sessions under that call."""
    stop.set()
    for model in made:
        model.stop()
    loader.join(timeout=seconds)
    if loader.is_alive():
        logging.getLogger("omnivoice.serve").warning("the model was still loading %g s after the signal; ending "
                                                     "without waiting for it", seconds)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(status)


def _check_door_flags(args) -> None:
    if args.mcp_stdio and (args.wyoming_uri or args.wyoming_zeroconf or args.ray):
        raise UserError("--mcp-stdio serves MCP alone, in this process; drop --wyoming-uri and --ray")
    if args.wyoming_zeroconf and not args.wyoming_uri:
        raise UserError("--wyoming-zeroconf announces the Wyoming server: give --wyoming-uri tcp://HOST:PORT too")
    if args.wyoming_uri and args.ray:
        raise UserError("--wyoming-uri is not served through Ray's HTTP proxy; run serve.py without --ray for Home "
                        "Assistant (or one beside the cluster)")


def _mcp_stdio(options, state) -> int:
    """MCP on stdin/stdout: stdout carries only the protocol, so everything else goes to stderr."""
    import anyio

    from codes.serve.doors.mcp import run_stdio
    from codes.serve.launch.startup import load_model, pins_summary

    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        state.model = load_model(options, state.voices)
    print(f"ready: mcp on stdio ({options.model_dir.name}, loaded in {time.perf_counter() - start:.1f} s; "
          f"{pins_summary(state)})", file=sys.stderr, flush=True)
    try:
        anyio.run(run_stdio, state, options.mcp_output_dir)
    finally:
        state.model.stop()
    return 0
