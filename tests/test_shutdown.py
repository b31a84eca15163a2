"""A request cancelled from outside (a server stopping cancels the requests still running) runs its cleanup
hooks, and its response ends well-formed where it still can: an error event for a stream, a 503 otherwise.

In-process with `task.cancel()`, under uvicorn and hypercorn stopping with a grace period shorter than the loop, and
under the uvicorn CLI stopped by SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
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
    assert sent[-1]["more_body"] is False  # the error event ends the stream
    error = sent[-1]["body"]
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


async def _until(found: Callable[[], Any], process: asyncio.subprocess.Process, what: str, within: float) -> Any:
    """Polls `found` until it gives something, failing if the server ended or `within` seconds passed first."""
    deadline = asyncio.get_running_loop().time() + within
    while not (result := found()):
        assert process.returncode is None, f"uvicorn ended before {what}"
        assert asyncio.get_running_loop().time() < deadline, f"no {what} within {within:g} s"
        await asyncio.sleep(0.05)
    return result


@pytest.mark.parametrize("gateway", ["async_cleanup", "sync_cleanup", "blocking_tool"])
async def test_uvicorn_stopped_by_sigterm_past_its_grace_period_answers_and_cleans_up(
    gateway: str, tmp_path: Path
) -> None:
    """`uvicorn app --timeout-graceful-shutdown 1` and SIGTERM, as an operator runs it: uvicorn cancels the requests
    still running, shuts the app down and ends the process at once; the middleware holds the shut-down until the
    cancelled loops have run their cleanup hooks and sent their 503 and error event."""
    record, log = tmp_path / "record", tmp_path / "uvicorn.log"
    record.touch()
    command = [sys.executable, "-m", "uvicorn", f"shutdown_app:{gateway}", "--app-dir", str(Path(__file__).parent)]
    with log.open("w") as stderr:
        server = await asyncio.create_subprocess_exec(
            *command,
            *("--host", "127.0.0.1", "--port", "0", "--timeout-graceful-shutdown", "1", "--log-level", "info"),
            env={**os.environ, "SHUTDOWN_RECORD": str(record)},
            stderr=stderr,
        )
    try:
        running = await _until(
            lambda: re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", log.read_text()), server, "start", 60
        )
        route = Route("messages")
        url = f"http://127.0.0.1:{running.group(1)}{route.path}"
        async with httpx.AsyncClient(timeout=60) as client:
            asked = [asyncio.create_task(client.post(url, json=route.request(stream=s))) for s in (False, True)]
            await _until(lambda: record.read_text().count("waiting") == 2, server, "two loops waiting", 30)
            server.send_signal(signal.SIGTERM)
            plain, streamed = await asyncio.wait_for(asyncio.gather(*asked), 30)
        code = await asyncio.wait_for(server.wait(), 30)
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()

    assert code == -signal.SIGTERM  # uvicorn ends the process by the signal it was stopped with
    assert plain.status_code == 503
    assert "cancelled" in route.error(plain.json())[1]
    assert streamed.status_code == 200
    name, data = streamed.text.rstrip("\n").rsplit("\n\n", 1)[-1].split("\n")
    assert name == "event: error" and "cancelled" in orjson.loads(data.removeprefix("data: "))["error"]["message"]
    if gateway != "blocking_tool":  # ServerTools has no cleanup hook
        assert record.read_text().splitlines().count("cleanup done") == 2
