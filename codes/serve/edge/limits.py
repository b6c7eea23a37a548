"""The server's limits: one place for each, its flag, its default and what refusing it answers.

Every limit is checked before any heavy work (reading a body past it, decoding a clip, matching an
instruct, pinning, decoding), so one client cannot make the server slow for the others.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

from codes.common.errors import UserError

MAX_STEPS = 256  # decoding steps a request (num_steps) or the server's default (--num-steps) may ask for

@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1 << 20  # a speech request's JSON body (413)
    max_upload_bytes: int = 20 << 20  # a voice upload's multipart body (413)
    max_input_chars: int = 4096  # `input` (400)
    max_instructions_chars: int = 500  # `instructions`: a voice design is a few items (400)
    max_language_chars: int = 64  # `language` (400)
    max_ref_seconds_upload: float = 30.0  # a voice upload's clip (400): a clone prompt needs a few seconds
    max_transcript_chars: int = 1000  # a voice upload's transcript (400)
    max_voices: int = 1000  # saved voices in --voices_dir (409)
    max_pinned: int = 64  # pinned design voices held in memory, least recently used first out
    max_concurrent: int = 64  # requests in flight (429)
    request_timeout: float = 300.0  # seconds to a request's first audio (504)
    max_request_seconds: float = 900.0  # seconds for a whole request (the stream then ends with an error)
    body_seconds: float = 30.0  # for a request's whole body to arrive (408)
    write_seconds: float = 30.0  # an HTTP client that reads none of its response for this long is let go
    drain_seconds: float = 30.0  # on SIGTERM, how long running requests may take to finish
    max_connections: int = 1000  # open HTTP connections (codes/serve/edge/connections.py): file descriptors stay bounded
    header_seconds: float = 10.0  # for a request's headers to arrive, from its connection or its previous answer (408)
    max_header_bytes: int = 64 << 10  # a request's line and headers (431)
    keep_alive_seconds: float = 5.0  # an HTTP connection idle between requests is closed (uvicorn's default)
    wyoming_max_connections: int = 16  # open Wyoming connections (the next gets an error event and is closed)
    wyoming_idle_seconds: float = 30.0  # a Wyoming client that sends nothing while nothing is spoken is closed
    wyoming_write_seconds: float = 30.0  # a Wyoming client that reads no audio for this long is closed
    ws_max_connections: int = 64  # open connections to /v1/audio/speech/stream (the next gets an error)
    ws_max_message_bytes: int = 1 << 20  # one message on the stream, a start's ref_audio included
    ws_max_chars: int = 32768  # text one stream connection may send in all (each utterance: --max-input-chars)
    ws_max_messages: int = 20000  # messages one stream connection may send
    ws_idle_seconds: float = 30.0  # a stream client that sends nothing while none of its audio is made is closed
    ws_write_seconds: float = 30.0  # a stream client that reads no audio for this long is closed
    max_script_bytes: int = 4 << 20  # a script request's JSON body (413): a 60-minute SRT is about 100 KB
    max_script_segments: int = 2000  # segments (cues, turns) of one script (400): a 60-minute film has about 800
    max_script_chars: int = 200_000  # characters of speech in one script (400)
    max_script_seconds: float = 3600.0  # how long one script's track may last (400)
    max_scripts: int = 2  # scripts in flight at once (429): each holds its track in memory until it ends
    script_seconds: float = 14400.0  # a whole script request, from its arrival (the request then ends with an error)
    script_cache_bytes: int = 1 << 30  # finished script segments kept on disk for a resubmission (0: none)
    script_cache_seconds: float = 3600.0  # how long a kept segment lasts since it was last used


HELP = {
    "max_body_bytes": "largest speech request body, in bytes, besides a ref_audio clip's base64 (413 beyond)",
    "max_upload_bytes": "largest voice upload or speech request ref_audio clip, in bytes (413 beyond)",
    "max_input_chars": "longest `input` (400 beyond)",
    "max_instructions_chars": "longest `instructions` (400 beyond)",
    "max_language_chars": "longest `language` (400 beyond)",
    "max_ref_seconds_upload": "longest uploaded reference clip or ref_audio, in seconds (400 beyond)",
    "max_transcript_chars": "longest uploaded clip's transcript or ref_text (400 beyond)",
    "max_voices": "most saved voices in --voices_dir (409 beyond)",
    "max_pinned": "pinned design voices kept in memory (least recently used leave; their files stay)",
    "max_concurrent": "requests in flight at once (429 beyond)",
    "request_timeout": "seconds a request may wait for its first audio (504 beyond)",
    "max_request_seconds": "seconds a whole request may take (its stream then ends with an error)",
    "body_seconds": "seconds a request's whole body may take to arrive (408 beyond)",
    "write_seconds": "seconds an HTTP client may leave its response unread before it is let go, which frees "
                     "its slot",
    "drain_seconds": "on SIGTERM, seconds running requests may take to finish before they are ended",
    "max_connections": "open HTTP connections; past it the one waiting longest for a request's headers is closed "
                       "(503 when every one is in a request); kept below the file-descriptor limit",
    "header_seconds": "seconds a request's line and headers may take to arrive (408 beyond); a connection that "
                      "sends nothing is closed",
    "max_header_bytes": "largest request line and headers, in bytes (431 beyond)",
    "keep_alive_seconds": "seconds an HTTP connection may stay idle between requests before it is closed",
    "wyoming_max_connections": "open Wyoming connections at once (the next gets an error event and is closed)",
    "wyoming_idle_seconds": "seconds a Wyoming client may send nothing while none of its audio is being made "
                            "(a synthesize-start and then silence included); it is then closed",
    "wyoming_write_seconds": "seconds a Wyoming client may leave its audio unread before it is closed",
    "ws_max_connections": "open /v1/audio/speech/stream connections at once (the next gets an error and is closed)",
    "ws_max_message_bytes": "largest message on /v1/audio/speech/stream, in bytes (an error and the connection "
                            "closed beyond)",
    "ws_max_chars": "characters of text one stream connection may send in all, across cancels (each utterance "
                    "also within --max-input-chars)",
    "ws_max_messages": "messages one stream connection may send",
    "ws_idle_seconds": "seconds a stream client may send nothing while none of its audio is being made; it is "
                       "then closed",
    "ws_write_seconds": "seconds a stream client may leave its audio unread before it is closed",
    "max_script_bytes": "largest script request body, in bytes (413 beyond)",
    "max_script_segments": "most segments (turns, cues) in one script (400 beyond)",
    "max_script_chars": "most characters of speech in one script (400 beyond)",
    "max_script_seconds": "longest track one script may make, in seconds (400 beyond; a text script's length is "
                          "estimated from its text)",
    "max_scripts": "scripts spoken at once (429 beyond); each also counts against --max-concurrent",
    "script_seconds": "seconds a whole script request may take (it then ends with an error)",
    "script_cache_bytes": "bytes of finished script segments kept in --voices_dir/script-pieces for a resubmission "
                          "of the script by the same key, which then speaks only the segments that changed "
                          "(least recently used leave first; 0 keeps none)",
    "script_cache_seconds": "seconds a kept script segment lasts since it was last used",
}
FLAGS = {"max_ref_seconds_upload": "--max-upload-seconds"}  # where the flag is not the field's name


def flag(name: str) -> str:
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def add_limit_flags(parser: argparse.ArgumentParser) -> None:
    defaults = Limits()
    for field in fields(Limits):
        parser.add_argument(flag(field.name), dest=field.name, type=type(getattr(defaults, field.name)),
                            default=getattr(defaults, field.name),
                            help=f"{HELP[field.name]} (default: %(default)s)")


def limits_from_args(args: argparse.Namespace) -> Limits:
    limits = Limits(**{field.name: getattr(args, field.name) for field in fields(Limits)})
    for field in fields(Limits):
        if not getattr(limits, field.name) > 0:
            raise UserError(f"{flag(field.name)} must be > 0, got {getattr(limits, field.name)}")
    return limits


def excerpt(text: str, length: int = 40) -> str:
    """A string as an error message may quote it: never more than `length` characters of it."""
    return repr(text if len(text) <= length else text[:length] + "...")
