"""A bounded wait keeps a cancel (docs/DESIGN.md §deadlines): on Python 3.11 `asyncio.wait_for` drops one that
arrives as its write fails, which left a barge-in's utterance holding its slot for ever."""

from __future__ import annotations

import ast
import asyncio

from starlette.websockets import WebSocketDisconnect

from codes.serve.edge.errors import ClientStalled, bounded_write
from helpers.scripts import ROOT


def test_a_cancel_that_meets_a_failing_write_still_cancels():
    async def scenario() -> asyncio.Task:
        writing, closed = asyncio.Event(), asyncio.Event()

        async def write():  # a socket write that fails as the client's close is read
            writing.set()
            await closed.wait()
            raise WebSocketDisconnect(1006)

        sender = asyncio.create_task(bounded_write(write(), 30, "ws_write_seconds"))
        await writing.wait()
        closed.set()  # the write fails, and in the same turn the reader cancels the sender (barge-in)
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        return sender

    assert asyncio.run(scenario()).cancelled()


def test_a_write_past_its_bound_is_a_stalled_client():
    stalls = []

    async def scenario():
        never = asyncio.Event()
        try:
            await bounded_write(never.wait(), 0.01, "ws_write_seconds", stalls.append)
        except ClientStalled as exc:
            return str(exc)

    reason = asyncio.run(scenario())
    assert stalls == [reason] and "--ws-write-seconds" in reason


def test_no_wait_in_the_code_is_an_asyncio_wait_for():
    calls = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in (ROOT / "codes").rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Attribute) and node.attr == "wait_for"]
    assert calls == []
