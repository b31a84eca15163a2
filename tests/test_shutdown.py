"""A request cancelled from outside (a server stopping cancels the requests still running) runs its cleanup
hooks, and its response ends well-formed where it still can: an error event for a stream, a 503 otherwise."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from conftest import http_scope
from starlette.types import Message
from support import Route, ToolHook

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import RecordedRequest, ScriptedModel

ROUTES = [Route("messages"), Route("chat")]


async def cancel_mid_rerun(route: Route, body: dict[str, Any]) -> tuple[ToolHook, list[Message]]:
    """Runs a looped request whose rerun hangs in the model app, and cancels its task there."""
    rerun_arrived = asyncio.Event()

    async def hang(request: RecordedRequest) -> Any:
        rerun_arrived.set()
        await asyncio.Event().wait()

    hook = ToolHook()
    app = AgenticLoopMiddleware(ScriptedModel(route.calls(("lookup", {"q": 1})), hang), hooks=[hook], streaming=True)
    raw = orjson.dumps(body)
    incoming = [{"type": "http.request", "body": raw, "more_body": False}]
    sent: list[Message] = []

    async def receive() -> Message:
        if incoming:
            return incoming.pop()
        await asyncio.Event().wait()  # the client stays
        return {}

    async def send(message: Message) -> None:
        sent.append(message)

    task = asyncio.create_task(app(http_scope(route.path, raw), receive, send))
    await asyncio.wait_for(rerun_arrived.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    return hook, sent


@pytest.mark.parametrize("route", ROUTES, ids=str)
async def test_a_cancelled_looped_request_runs_its_cleanup_and_gets_a_503(route: Route) -> None:
    hook, sent = await cancel_mid_rerun(route, route.request())

    assert len(hook.cleanups) == 1
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 503
    assert (b"x-agentic-loop-ended-by", b"cancelled") in sent[0]["headers"]
    _, text = route.error(orjson.loads(sent[1]["body"]))
    assert "cancelled" in text


@pytest.mark.parametrize("route", ROUTES, ids=str)
async def test_a_cancelled_looped_stream_runs_its_cleanup_and_ends_with_an_error_event(route: Route) -> None:
    hook, sent = await cancel_mid_rerun(route, route.request(stream=True))

    assert len(hook.cleanups) == 1
    assert [m["type"] for m in sent].count("http.response.start") == 1
    assert sent[-1] == {"type": "http.response.body", "body": b""}  # the stream ends
    error = sent[-2]["body"]
    assert (b"event: error" if route.name == "messages" else b'data: {"error"') in error
    assert b"cancelled" in error
