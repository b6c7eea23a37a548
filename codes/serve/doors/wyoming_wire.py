"""Wyoming's wire, bounded: events read with every length checked before a byte of it is read, and
written with a deadline.

The `wyoming` package's reader (wyoming.event.async_read_event) reads whatever `data_length` and
`payload_length` a header claims, so one connection could make the server allocate without end; this
reader refuses first (docs/DESIGN.md §wyoming-bounds). The wire format is the package's: a JSON header
line, then `data_length` bytes of JSON merged into its `data`, then `payload_length` bytes.
"""

from __future__ import annotations

import asyncio
import json

from wyoming.event import Event
from wyoming.version import __version__ as WYOMING_VERSION

from codes.serve.edge.limits import flag

MAX_HEADER_BYTES = 64 << 10  # a header line: a type and a few small fields; the library's own stream limit
MAX_PAYLOAD_BYTES = 64 << 10  # a TTS server is sent no audio: room for a stray small event, no more


class EventRefused(Exception):
    """What the client sent is past a bound or not an event: it gets an `error` event and the
    connection is closed, since the rest of its bytes can no longer be framed."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


async def read_event(reader: asyncio.StreamReader, max_data_bytes: int) -> Event | None:
    """The next event, or None when the client closed between events. The reader's stream limit must
    be MAX_HEADER_BYTES (see `listen`), which bounds the header line before it is all in memory."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        raise EventRefused(f"an event header is over {MAX_HEADER_BYTES} bytes; put large fields in the event's "
                           "data", "event_too_large") from None
    except ConnectionError:
        return None
    header = _header(line)
    data_length = _length(header, "data_length", max_data_bytes, flag("max_body_bytes"))
    payload_length = _length(header, "payload_length", MAX_PAYLOAD_BYTES, None)
    data = header.get("data") or {}
    try:
        if data_length:
            extra = _json_object(await reader.readexactly(data_length), "data")
            data = {**data, **extra}
        payload = await reader.readexactly(payload_length) if payload_length else None
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return Event(type=header["type"], data=data, payload=payload)


def _header(line: bytes) -> dict:
    header = _json_object(line, "header")
    if not isinstance(header.get("type"), str):
        raise EventRefused("an event header has no \"type\"; send {\"type\": ...} on one line", "bad_event")
    if not isinstance(header.get("data", {}), dict):
        raise EventRefused("an event's \"data\" is not a JSON object; send {\"data\": {...}}", "bad_event")
    return header


def _json_object(raw: bytes, what: str) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise EventRefused(f"an event's {what} is not a JSON object; send Wyoming events", "bad_event")
    return value


def _length(header: dict, field: str, most: int, flag: str | None) -> int:
    """A header's declared length, refused before anything is read if it is not 0..most."""
    length = header.get(field) or 0
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise EventRefused(f"an event's {field} {length!r} is not a byte count; send a whole number", "bad_event")
    if length > most:
        where = f" ({flag})" if flag else ""
        raise EventRefused(f"an event's {field} {length} is over the {most} bytes this server reads{where}; "
                           "send less in one event", "event_too_large")
    return length


def encoded(event: Event) -> bytes:
    """An event as the wire carries it, for one built once and sent many times (describe's info):
    the package's format with compact JSON."""
    data = json.dumps(event.data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    header = {"type": event.type, "version": WYOMING_VERSION, "data_length": len(data)}
    return json.dumps(header, separators=(",", ":")).encode("utf-8") + b"\n" + data
