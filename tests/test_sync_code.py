"""Sync tool functions and sync hook methods run in worker threads: they stall no other request, and timeouts apply.

Concurrency is shown with `threading.Barrier`s, not clocks: two calls meet at a barrier only if they run at the
same time, and a call held on the event loop would keep the other from ever arriving.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import anyio.to_thread
import httpx
import pytest
from conftest import anthropic_client, http_client
from support import Route, post

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.testing import RecordedRequest, ScriptedModel

ROUTES = [Route("messages"), Route("chat")]


def tool_result_of(request: RecordedRequest) -> str:
    """The text of the last message the loop sent: the tool's result on a rerun, else the client's question."""
    last = request.body["messages"][-1]
    content = last["content"]
    if isinstance(content, list):  # Messages: a user turn of tool_result blocks
        return " ".join(str(block.get("content")) for block in content)
    return str(content)


def answering_model(route: Route, tool: str) -> ScriptedModel:
    """Calls `tool` on the first round, then answers with whatever the tool returned."""

    def reply(request: RecordedRequest) -> Any:
        if len(request.body["messages"]) == 1:
            return route.calls((tool, {}))
        return route.text(f"the tool said: {tool_result_of(request)}")

    return ScriptedModel(default=reply)


async def both(client: httpx.AsyncClient, route: Route) -> list[httpx.Response]:
    return list(await asyncio.wait_for(asyncio.gather(*(post(client, route, route.request()) for _ in range(2))), 30))


@pytest.mark.parametrize("route", ROUTES, ids=str)
async def test_two_requests_whose_sync_tool_blocks_run_at_the_same_time(route: Route) -> None:
    meeting = threading.Barrier(2, timeout=10)  # on the event loop, the first call would wait here alone

    @server_tool
    def blocking() -> str:
        meeting.wait()
        return "both calls ran at once"

    app = AgenticLoopMiddleware(answering_model(route, "blocking"), hooks=[ServerTools([blocking])])
    responses = await both(http_client(app), route)

    for response in responses:
        assert response.status_code == 200
        assert route.final_text(response.json()) == "the tool said: both calls ran at once"


@pytest.mark.parametrize("route", ROUTES, ids=str)
async def test_a_sync_tool_past_its_timeout_gives_a_timeout_error_and_its_late_result_is_dropped(route: Route) -> None:
    release, finished = threading.Event(), threading.Event()

    @server_tool
    def stuck() -> str:
        release.wait(30)
        finished.set()
        return "late result"

    model = answering_model(route, "stuck")
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([stuck], timeout=0.1)])
    try:
        response = await asyncio.wait_for(post(http_client(app), route, route.request()), 20)
        assert not finished.is_set()  # the answer came while the thread still ran
    finally:
        release.set()
    await asyncio.to_thread(finished.wait, 10)
    await asyncio.sleep(0.05)

    assert route.final_text(response.json()).endswith("stuck timed out after 0.1 s")
    assert len(model.requests) == 2  # the late result went nowhere


async def test_async_tools_run_on_the_event_loop_and_sync_tools_off_it() -> None:
    route = Route("messages")
    loop_thread = threading.get_ident()
    seen: dict[str, int] = {}

    @server_tool
    async def on_loop() -> str:
        seen["async"] = threading.get_ident()
        return "ok"

    @server_tool
    def off_loop() -> str:
        seen["sync"] = threading.get_ident()
        return "ok"

    model = ScriptedModel(route.calls(("on_loop", {}), ("off_loop", {})), route.text("done"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([on_loop, off_loop])])
    assert (await post(http_client(app), route, route.request())).status_code == 200
    assert seen["async"] == loop_thread
    assert seen["sync"] != loop_thread


class SyncGate:
    """A hook whose gate is a plain `def` that blocks until `gate` lets it through, then declines."""

    def __init__(self, gate: Any) -> None:
        self.gate = gate

    def async_should_run_agentic_loop(self, response: Any, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        self.gate()
        return False, {}


@pytest.mark.parametrize("route", ROUTES, ids=str)
async def test_a_sync_hook_method_does_not_hold_up_another_request(route: Route) -> None:
    meeting = threading.Barrier(2, timeout=10)
    model = ScriptedModel(default=lambda request: route.text("plain answer"))
    app = AgenticLoopMiddleware(model, hooks=[SyncGate(meeting.wait)])

    responses = await both(http_client(app), route)

    assert [response.status_code for response in responses] == [200, 200]  # a broken barrier would be a 500


@pytest.mark.parametrize("route", ROUTES, ids=str)
async def test_hook_timeout_applies_to_a_sync_hook_method(route: Route) -> None:
    release = threading.Event()
    model = ScriptedModel(default=lambda request: route.text("plain answer"))
    app = AgenticLoopMiddleware(model, hooks=[SyncGate(lambda: release.wait(30))], hook_timeout=0.1)
    try:
        response = await asyncio.wait_for(post(http_client(app), route, route.request()), 20)
    finally:
        release.set()

    assert response.status_code == 500
    assert "async_should_run_agentic_loop failed: timed out after hook_timeout=0.1 s" in route.error(response.json())[1]


async def test_sync_tools_past_their_timeout_keep_their_thread_slot_so_hung_calls_never_grow_the_threads() -> None:
    """A hung thread keeps its slot until it returns: hundreds of requests whose sync tool hangs never take the
    process past the thread limit, the calls that found no free slot are answered with a timeout the model reads,
    and none of them runs later."""
    route = Route("messages")
    release = threading.Event()
    ran = []

    @server_tool
    def hangs() -> str:
        ran.append(1)
        release.wait(60)
        return "late result"

    def reply(request: RecordedRequest) -> Any:
        if request.body["messages"][0]["content"] == "warm up":
            return route.text("ready")
        if len(request.body["messages"]) == 1:
            return route.calls(("hangs", {}))
        return route.text(f"the tool said: {tool_result_of(request)}")

    model = ScriptedModel(default=reply)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([hangs], timeout=0.3)])
    client = anthropic_client(app)
    limiter = anyio.to_thread.current_default_thread_limiter()

    async def ask(text: str = "hi") -> str:
        reply = await client.messages.create(
            model="scripted", max_tokens=100, messages=[{"role": "user", "content": text}]
        )
        return "".join(block.text for block in reply.content if block.type == "text")

    assert await asyncio.gather(*(ask("warm up") for _ in range(20))) == ["ready"] * 20  # the SDK's own threads exist
    baseline = threading.active_count()
    try:
        answers = []
        for wave in (60, 100, 140):  # each wave after the last one's calls were abandoned at their timeout
            answers += await asyncio.wait_for(asyncio.gather(*(ask() for _ in range(wave))), 60)
            assert threading.active_count() <= baseline + limiter.total_tokens
        assert limiter.borrowed_tokens == limiter.total_tokens  # every slot held by a thread that still runs
        assert answers == ["the tool said: hangs timed out after 0.3 s"] * 300
    finally:
        release.set()
    while limiter.borrowed_tokens:  # the hung threads return, and give their slots back
        await asyncio.sleep(0.01)
    assert len(ran) == limiter.total_tokens  # the calls that waited for a slot past their timeout never ran
