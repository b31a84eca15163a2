"""Load and soak, bounded in count and time, on 127.0.0.1 only: nothing lost, nothing mixed, nothing kept."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import sys
from typing import Any

import httpx
import orjson
import uvicorn
from conftest import http_scope
from support import Route, ToolHook

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import RecordedRequest, ScriptedModel


def echo_model(route: Route) -> ScriptedModel:
    """Calls `lookup` with the marker it was asked about, then answers with what the tool returned."""

    def reply(request: RecordedRequest) -> Any:
        messages = request.body["messages"]
        if len(messages) == 1:
            return route.calls(("lookup", {"marker": messages[0]["content"]}))
        return route.text(json.dumps(messages[-1]))

    return ScriptedModel(default=reply)


async def test_500_concurrent_looped_requests_under_uvicorn_each_get_their_own_answer() -> None:
    route = Route("messages")
    app = AgenticLoopMiddleware(echo_model(route), hooks=[ToolHook()])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", backlog=1024))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        limits = httpx.Limits(max_connections=500, max_keepalive_connections=500)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=60) as client:

            async def one(n: int) -> tuple[str, str]:
                marker = f"marker-{n:04d}"
                response = await client.post(route.path, json=route.request(marker))
                return marker, route.final_text(response.json())

            answers = await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(500))), 120)
    finally:
        server.should_exit = True
        await serving

    assert len(answers) == 500
    for marker, text in answers:
        assert f'lookup result for {{\\"marker\\": \\"{marker}\\"}}' in text, (marker, text)


async def test_10000_looped_requests_keep_memory_and_tasks_flat() -> None:
    route = Route("chat")
    hook = ToolHook()
    app = AgenticLoopMiddleware(echo_model(route), hooks=[hook])
    model: ScriptedModel = app.app  # type: ignore[assignment]

    async def request(n: int) -> bytes:
        raw = orjson.dumps(route.request(f"m{n}"))
        incoming = [{"type": "http.request", "body": raw, "more_body": False}]
        sent: list[bytes] = []

        async def receive() -> Any:
            if incoming:
                return incoming.pop()
            await asyncio.get_running_loop().create_future()  # the client stays connected until its answer
            raise AssertionError("unreachable")

        async def send(message: Any) -> None:
            sent.append(message.get("body", b""))

        await app(http_scope(route.path, raw), receive, send)
        return b"".join(sent)

    def measure() -> int:
        """Memory blocks Python holds (cheap, unlike tracemalloc), once the test's own records are dropped."""
        model.requests.clear()
        hook.gates.clear(), hook.plans.clear(), hook.cleanups.clear()
        gc.collect()
        return sys.getallocatedblocks()

    tasks_before = len(asyncio.all_tasks())
    readings = []
    for n in range(10_000):
        body = await request(n)
        await asyncio.sleep(0)  # as a server does between requests: the loop runs its callbacks
        if n % 2_500 == 2_499:
            assert f"m{n}" in body.decode()
            readings.append(measure())

    growth = readings[-1] - readings[0]
    assert growth < 2_000, f"{growth} more memory blocks after 7,500 more requests: {readings}"
    assert len(asyncio.all_tasks()) == tasks_before
