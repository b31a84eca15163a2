"""What the middleware leaves alone: other routes, streams, errors, answers no hook acts on."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gzip
from typing import Any

import pytest
from asgi_lifespan import LifespanManager
from conftest import anthropic_client, http_client, http_scope
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount
from starlette.routing import Route as StarletteRoute
from starlette.types import Message
from support import Route, ToolHook, post

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel, message, tool_use


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


async def test_an_answer_no_hook_acts_on_keeps_its_exact_bytes_and_headers(route: Route) -> None:
    raw = b'{"id": "x",  "odd":   "spacing", "n": 1.50}'
    reply = Response(raw, media_type="application/json", headers={"x-model": "m1"})
    async with http_client(ScriptedModel(reply)) as client:
        bare = await post(client, route, route.request())
    reply = Response(raw, media_type="application/json", headers={"x-model": "m1"})
    async with http_client(AgenticLoopMiddleware(ScriptedModel(reply), hooks=[ToolHook()])) as client:
        wrapped = await post(client, route, route.request())

    assert wrapped.content == raw
    assert wrapped.headers.raw == bare.headers.raw


async def test_the_client_body_reaches_the_app_byte_for_byte(route: Route) -> None:
    raw = b'{"model":"m",   "messages":[{"role":"user","content":"hi"}],"max_tokens":1,"extra":  true}'
    model = ScriptedModel(route.text("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()])) as client:
        await client.post(route.path, content=raw, headers={"content-type": "application/json"})
    assert model.requests[0].raw == raw


async def test_error_answers_and_non_json_answers_go_to_the_client_as_sent(route: Route) -> None:
    replies = [
        JSONResponse({"error": "overloaded"}, status_code=529),
        PlainTextResponse("plain words"),
        Response(gzip.compress(b"plain words"), media_type="text/plain", headers={"content-encoding": "gzip"}),
    ]
    model = ScriptedModel(*replies)
    hook = ToolHook()
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        overloaded = await post(client, route, route.request())
        plain = await post(client, route, route.request())
        compressed = await client.post(route.path, json=route.request(), headers={"accept-encoding": "identity"})

    assert (overloaded.status_code, overloaded.json()) == (529, {"error": "overloaded"})
    assert (plain.status_code, plain.text) == (200, "plain words")
    assert compressed.headers["content-encoding"] == "gzip" and compressed.content == b"plain words"  # decoded by httpx
    assert hook.gates == []  # hooks are not asked


async def test_a_reruns_error_answer_ends_the_loop_as_the_app_sent_it(route: Route) -> None:
    # Every try of the rerun is refused: once its retries are used up, the last answer goes on as it is.
    refused = JSONResponse({"error": "rate limited"}, status_code=429, headers={"retry-after": "0"})
    model = ScriptedModel(route.calls(("lookup", {"n": 1})), default=refused)
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()])) as client:
        response = await post(client, route, route.request())
    assert (response.status_code, response.json()) == (429, {"error": "rate limited"})


async def test_other_routes_methods_and_json_that_is_not_an_object_pass_through(route: Route) -> None:
    seen: list[tuple[str, str, bytes]] = []

    async def echo(request: Request) -> Response:
        body = await request.body()
        seen.append((request.method, request.url.path, body))
        return JSONResponse({"path": request.url.path, "tool_calls": [{"id": "1"}]})

    inner = Starlette(routes=[StarletteRoute("/{path:path}", echo, methods=["GET", "POST"])])
    hook = ToolHook()
    async with http_client(AgenticLoopMiddleware(inner, hooks=[hook])) as client:
        await client.get(route.path)
        await client.post("/v1/models", json={"x": 1})
        await client.post("/v1/models", content=b"{not json")
        await client.post(route.path, content=b"[1, 2]")

    assert [s[:2] for s in seen] == [("GET", route.path), *[("POST", "/v1/models")] * 2, ("POST", route.path)]
    assert [s[2] for s in seen[2:]] == [b"{not json", b"[1, 2]"]
    assert hook.gates == []


async def test_a_streaming_request_streams_through_chunk_by_chunk(route: Route) -> None:
    """Each chunk reaches the client while the app is still streaming: nothing is buffered."""
    release = asyncio.Event()

    async def events() -> Any:
        yield b"event: one\ndata: {}\n\n"
        await release.wait()
        yield b"event: two\ndata: {}\n\n"

    model = ScriptedModel(lambda request: StreamingResponse(events(), media_type="text/event-stream"))
    app = AgenticLoopMiddleware(model, hooks=[ToolHook()])
    raw = b'{"model": "m", "messages": [], "stream": true}'
    incoming = [{"type": "http.request", "body": raw, "more_body": False}]
    received: asyncio.Queue[Message] = asyncio.Queue()

    async def receive() -> Message:
        if incoming:
            return incoming.pop()
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError

    scope = http_scope(route.path, raw)
    task = asyncio.create_task(app(scope, receive, received.put))
    start = await asyncio.wait_for(received.get(), 5)
    first = await asyncio.wait_for(received.get(), 5)
    assert start["type"] == "http.response.start"
    assert first["body"] == b"event: one\ndata: {}\n\n" and first["more_body"] is True
    assert not task.done()
    release.set()
    second = await asyncio.wait_for(received.get(), 5)
    assert second["body"] == b"event: two\ndata: {}\n\n"
    await asyncio.wait_for(task, 5)
    assert model.requests[0].raw == raw


async def test_reruns_carry_the_clients_headers_without_accept_encoding(route: Route) -> None:
    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("done"))
    headers = {"authorization": "Bearer client-key", "x-api-key": "k", "accept-encoding": "gzip"}
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()])) as client:
        await post(client, route, route.request(), headers=headers)

    for request in model.requests:
        assert request.headers["authorization"] == "Bearer client-key"
        assert request.headers["x-api-key"] == "k"
        assert "accept-encoding" not in request.headers
        assert int(request.headers["content-length"]) == len(request.raw)


async def test_lifespan_passes_through_the_middleware() -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        events.append("startup")
        yield
        events.append("shutdown")

    inner = Starlette(lifespan=lifespan)
    app = Starlette(routes=[Mount("/", inner)], middleware=[Middleware(AgenticLoopMiddleware, hooks=[ToolHook()])])
    async with LifespanManager(AgenticLoopMiddleware(inner, hooks=[ToolHook()])):
        assert events == ["startup"]
    assert events == ["startup", "shutdown"]
    async with LifespanManager(app):
        pass


async def test_a_mounted_prefix_takes_part_through_routes() -> None:
    model = ScriptedModel(message(tool_use("my_tool", {"q": 1})), message("done"))
    gateway = Starlette(routes=[Mount("/llm", model)])
    routes = {"/llm/v1/messages": "messages"}
    gateway.add_middleware(AgenticLoopMiddleware, hooks=[ToolHook("my_tool")], routes=routes)

    client = anthropic_client(gateway, base_url="http://gateway/llm")
    reply = await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])

    assert reply.content[0].text == "done"  # type: ignore[union-attr]
    assert [request.path for request in model.requests] == ["/llm/v1/messages"] * 2


async def test_the_app_runs_in_the_callers_task_so_context_variables_work(route: Route) -> None:
    user: contextvars.ContextVar[str] = contextvars.ContextVar("user")
    seen: list[str] = []

    def reply(request: Any) -> Any:
        seen.append(user.get("unset"))
        return route.calls(("lookup", {"n": len(seen)})) if len(seen) == 1 else route.text("done")

    class SetUser:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            token = user.set("alice")
            try:
                await self.app(scope, receive, send)
            finally:
                user.reset(token)

    model = ScriptedModel(reply, reply)
    async with http_client(SetUser(AgenticLoopMiddleware(model, hooks=[ToolHook()]))) as client:
        await post(client, route, route.request())
    assert seen == ["alice", "alice"]
