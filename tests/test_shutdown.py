"""A request cancelled from outside (a server stopping cancels the requests still running) runs its cleanup
hooks, and its response ends well-formed where it still can: an error event for a stream, a 503 otherwise.

In-process with `task.cancel()`, and under uvicorn and hypercorn stopping with a grace period shorter than the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from conftest import http_scope
from servers import SERVERS, serving
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


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_server_stopping_past_its_grace_period_leaves_the_loop_cleaned_up_and_answered(
    server: str, stream: bool
) -> None:
    """The server's graceful shut-down ends before the loop does, so the server cancels the request's task."""
    route = Route("messages")
    rerun_arrived = asyncio.Event()

    async def hang(request: RecordedRequest) -> Any:
        rerun_arrived.set()
        await asyncio.Event().wait()

    hook = ToolHook()
    app = AgenticLoopMiddleware(ScriptedModel(route.calls(("lookup", {"q": 1})), hang), hooks=[hook], streaming=True)
    async with serving(server, app, graceful_timeout=0.3) as served, httpx.AsyncClient(timeout=20) as client:
        url = f"http://127.0.0.1:{served.port}{route.path}"
        asked = asyncio.create_task(client.post(url, json=route.request(stream=stream)))
        await asyncio.wait_for(rerun_arrived.wait(), 10)
        await served.stop()
        response = await asyncio.wait_for(asked, 10)

    assert len(hook.cleanups) == 1
    if stream:
        assert response.status_code == 200
        assert response.text.endswith("\n\n")
        name, data = response.text.rstrip("\n").rsplit("\n\n", 1)[-1].split("\n")
        assert name == "event: error" and "cancelled" in orjson.loads(data.removeprefix("data: "))["error"]["message"]
    else:
        assert response.status_code == 503
        assert "cancelled" in route.error(response.json())[1]
