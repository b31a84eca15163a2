"""A looped request's objects are freed when it ends, by reference counting alone.

An object of a request left in a reference cycle stays alive, with everything it reaches (the request's whole
history, on a looped request), until a later garbage collection, which then runs inside some other request. So the
test runs whole requests with the collector off, and asks it afterwards to find what only it could have freed: nothing.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import types
from collections import Counter
from typing import Any

import orjson
import pytest
from conftest import http_scope
from starlette.types import Message, Receive, Scope, Send
from support import client_receive, read_body

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool, sse
from agentic_middleware.native import Source, search_result
from agentic_middleware.surfaces import ToolResult
from agentic_middleware.testing import chat_completion, function_call, message, response, tool_call, tool_use

PATHS = {"messages": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}
JSON, SSE = b"application/json", b"text/event-stream"
SOURCES = [Source("https://docs.test/1", "Page 1", "Some text of the page.", "2 days")]


@server_tool
async def lookup(key: str) -> str:
    """Looks a key up."""
    return f"value of {key}"


@server_tool(name="web_search", description="Search the web.")
async def web_search(query: str) -> ToolResult:
    return search_result(query, SOURCES)


def answer(route: str, first: bool, tool: str) -> dict[str, Any]:
    """The model's answer: a call of `tool` to the first request, text once it has the result."""
    arguments = {"query": "q"} if tool == "web_search" else {"key": "k"}
    if route == "messages":
        return message("Let me look.", tool_use(tool, arguments)) if first else message("done")
    if route == "chat":
        return chat_completion("Let me look.", [tool_call(tool, arguments)]) if first else chat_completion("done")
    return response(function_call(tool, arguments)) if first else response("done")


def events(route: str, body: dict[str, Any]) -> list[bytes]:
    if route == "messages":
        return list(sse.messages_events(body))
    if route == "chat":
        return list(sse.chat_chunks(body, include_usage=True))
    return list(sse.responses_events(body))


def model_app(route: str, tool: str) -> Any:
    """A model app of plain ASGI calls (so that any cycle found is the middleware's): JSON, or a stream when asked."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raw = await read_body(receive)
        request = orjson.loads(raw)
        history = request["input"] if route == "responses" else request["messages"]
        body = answer(route, isinstance(history, str) or len(history) == 1, tool)
        if not request.get("stream"):
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", JSON)]})
            await send({"type": "http.response.body", "body": orjson.dumps(body)})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", SSE)]})
        for event in events(route, body):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


async def call(app: Any, route: str, stream: bool, native: bool) -> bytes:
    """One request through the ASGI interface; the client stays connected until its answer is complete."""
    body: dict[str, Any] = {"model": "m", "stream": stream}
    if route == "responses":
        body["input"] = "go"
    else:
        body["messages"] = [{"role": "user", "content": "go"}]
    if route == "messages":
        body["max_tokens"] = 64
    if native:
        body["tools"] = [{"type": "web_search_20250305", "name": "web_search"}]
    raw = orjson.dumps(body)
    sent: list[bytes] = []

    async def send(message_: Message) -> None:
        sent.append(message_.get("body", b""))

    await app(http_scope(PATHS[route], raw), client_receive(raw), send)
    return b"".join(sent)


CASES = [
    pytest.param("messages", "live", False, id="messages-live"),
    pytest.param("chat", "live", False, id="chat-live"),
    pytest.param("responses", "live", False, id="responses-live"),
    pytest.param("messages", "live", True, id="messages-live-native-records"),
    pytest.param("messages", "buffered", False, id="messages-buffered-stream"),
    pytest.param("chat", None, False, id="chat-json"),
]


@pytest.mark.parametrize(("route", "mode", "native"), CASES)
async def test_a_looped_request_leaves_nothing_for_the_garbage_collector(
    route: str, mode: str | None, native: bool
) -> None:
    tool = "web_search" if native else "lookup"
    hook = ServerTools([lookup, web_search], native={"web_search": "web_search"})
    streaming = "buffered" if mode == "buffered" else None  # else the default: live
    app = AgenticLoopMiddleware(model_app(route, tool), hooks=[hook], streaming=streaming)
    stream = mode is not None
    await call(app, route, stream, native)  # first use: what is made once (caches, imports) is made here
    await asyncio.sleep(0)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage, to name it
    try:
        for _ in range(3):
            body = await call(app, route, stream, native)
            assert b"done" in body
            await asyncio.sleep(0)  # as a server does between requests: the event loop runs its callbacks
        found = gc.collect()
        kinds = Counter(type(thing) for thing in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    ours = [f"{kind.__qualname__} x{n}" for kind, n in kinds.items() if kind.__module__.startswith("agentic")]
    assert found == 0, f"{found} objects of 3 requests waited in reference cycles, among them: {', '.join(ours)}"


@pytest.mark.parametrize("route", ["messages", "chat", "responses"])
async def test_while_a_rerun_streams_the_judged_round_and_the_request_bytes_are_let_go(route: str) -> None:
    """A gateway holds thousands of streams in their last round: what an earlier round or the request's first call
    needed (the judged answer, the client's request bytes) is not held for the rest of the stream."""
    first = answer(route, True, "lookup")
    streaming = asyncio.Event()
    go_on = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raw = await read_body(receive)
        history = orjson.loads(raw)["input" if route == "responses" else "messages"]
        rerun = not isinstance(history, str) and len(history) > 1
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", SSE)]})
        stream = events(route, answer(route, False, "lookup") if rerun else first)
        for event in stream[:-1]:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        if rerun:
            streaming.set()
            await go_on.wait()
        await send({"type": "http.response.body", "body": stream[-1], "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    body: dict[str, Any] = {"model": "m", "stream": True, "max_tokens": 64}
    body["input" if route == "responses" else "messages"] = [{"role": "user", "content": "go " + "x" * 1000}]
    raw = orjson.dumps(body)

    async def send(message_: Message) -> None:
        pass

    middleware = AgenticLoopMiddleware(app, hooks=[ServerTools([lookup])])
    request = asyncio.ensure_future(middleware(http_scope(PATHS[route], raw), client_receive(raw), send))
    try:
        await asyncio.wait_for(streaming.wait(), 5)
        gc.collect()
        content = {"messages": "content", "chat": "choices", "responses": "output"}[route]
        judged = [  # the first round's answer as the hooks read it (not the stream's opening, which a relay may keep)
            o
            for o in gc.get_objects()
            if isinstance(o, dict) and o is not first and o.get("id") == first["id"] and o.get(content)
        ]
        holders = [
            r.cr_code.co_qualname
            for r in gc.get_referrers(raw)
            if isinstance(r, types.CoroutineType) and "agentic_middleware" in r.cr_code.co_filename
        ]
    finally:
        go_on.set()
        await asyncio.wait_for(request, 5)
    assert judged == []
    assert holders == []


@pytest.mark.parametrize("route", ["messages", "chat", "responses"])
async def test_while_a_round_streams_its_own_request_bytes_are_not_held_by_the_loop(route: str) -> None:
    """A round's request (the turn's whole history, written anew each rerun) is the app's once it has read it: the
    loop does not keep it for the round's retries while the round streams (a retry writes it again), so an app that
    lets go of its body frees it."""
    first = answer(route, True, "lookup")
    streaming = asyncio.Event()
    go_on = asyncio.Event()
    bodies: list[bytes] = []  # each call's bytes, as the app read them: to ask who else holds them

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        bodies.append(await read_body(receive))
        history = orjson.loads(bodies[-1])["input" if route == "responses" else "messages"]
        rerun = not isinstance(history, str) and len(history) > 1
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", SSE)]})
        stream = events(route, answer(route, False, "lookup") if rerun else first)
        for event in stream[:-1]:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        if rerun:
            streaming.set()
            await go_on.wait()
        await send({"type": "http.response.body", "body": stream[-1], "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    body: dict[str, Any] = {"model": "m", "stream": True, "max_tokens": 64}
    body["input" if route == "responses" else "messages"] = [{"role": "user", "content": "go " + "x" * 1000}]
    raw = orjson.dumps(body)

    async def send(message_: Message) -> None:
        pass

    middleware = AgenticLoopMiddleware(app, hooks=[ServerTools([lookup])])
    request = asyncio.ensure_future(middleware(http_scope(PATHS[route], raw), client_receive(raw), send))
    try:
        await asyncio.wait_for(streaming.wait(), 5)
        gc.collect()
        holders = [
            r.cr_code.co_qualname
            for sent in bodies
            for r in gc.get_referrers(sent)
            if isinstance(r, types.CoroutineType) and "agentic_middleware" in r.cr_code.co_filename
        ]
    finally:
        go_on.set()
        await asyncio.wait_for(request, 5)
    assert len(bodies) == 2  # the first call and the rerun, which streams while the holders are looked for
    assert holders == []


@pytest.mark.parametrize("route", ["messages", "chat", "responses"])
async def test_a_reruns_request_bytes_the_app_keeps_are_an_allocation_of_their_own_size(route: str) -> None:
    """An app may keep the bytes it read for as long as its answer streams (minutes, on a live round): a rerun's body
    is handed over in an allocation of its own size, not orjson's output buffer (4 KB or more however short the
    JSON), which thousands of held streams with a tool round each would keep for nothing."""
    bodies: list[bytes] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        bodies.append(await read_body(receive))
        history = orjson.loads(bodies[-1])["input" if route == "responses" else "messages"]
        first = isinstance(history, str) or len(history) == 1
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", JSON)]})
        await send({"type": "http.response.body", "body": orjson.dumps(answer(route, first, "lookup"))})

    body: dict[str, Any] = {"model": "m", "max_tokens": 64}
    body["input" if route == "responses" else "messages"] = [{"role": "user", "content": "go"}]
    raw = orjson.dumps(body)

    async def send(message_: Message) -> None:
        pass

    tracemalloc.start(25)
    try:
        await AgenticLoopMiddleware(app, hooks=[ServerTools([lookup])])(
            http_scope(PATHS[route], raw), client_receive(raw), send
        )
        rerun = bodies[-1]
        where = tracemalloc.get_object_traceback(rerun)
        blocks = [trace.size for trace in tracemalloc.take_snapshot().traces if trace.traceback == where]
    finally:
        tracemalloc.stop()
    assert len(bodies) == 2 and len(rerun) < 2048  # a short rerun body, which orjson writes into 4 KB or more
    assert blocks and max(blocks) < len(rerun) + 64  # the bytes object's header and its data, nothing more
