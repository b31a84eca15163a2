"""The tool policy holds on every request of a model route, whatever the loop does with it (review policy F1).

A stream the loop passes by (`streaming=False`, or no hook asking for it), a body over `max_body_bytes`, a
middleware with no hook at all: the caller the function refuses is refused, and a caller whose policy judges names
does not reach the app's hosted tools it may not use. Each test fails on the code before, which read the policy only
for requests the loop took part in, and passed the rest to the app as they came.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import http_client
from starlette.types import Scope
from test_policy import Model, lookup

from agentic_middleware import AgenticLoopMiddleware, RequestRefused, ServerTools, ToolPolicy

POLICIES = {
    "bob": ToolPolicy(denied_tools=["web_search", "db_*"]),
    "carol": ToolPolicy(max_agentic_loops=1),  # judges no name: a body it cannot read may pass, as without one
}
SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 1}
DB = {"type": "url", "url": "https://db.internal/mcp", "name": "db"}
ROUTES = {
    "messages": ("/v1/messages", {"messages": [{"role": "user", "content": "go"}], "max_tokens": 9}),
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "go"}]}),
    "responses": ("/v1/responses", {"input": "go"}),
}


def by_key(scope: Scope) -> ToolPolicy | None:
    """The policy of the caller its key names; anyone else is refused, as the docs' example does."""
    key = dict(scope["headers"]).get(b"x-api-key", b"").decode()
    if key == "alice":
        return None
    if key not in POLICIES:
        raise RequestRefused("unknown caller", status=403)
    return POLICIES[key]


def body_of(route: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", **ROUTES[route][1], **extra}


async def post(app: Any, route: str, key: str, body: Any) -> Any:
    async with http_client(app) as client:
        return await client.post(ROUTES[route][0], json=body, headers={"x-api-key": key})


def middleware(model: Model, hooks: list[object] | None = None, **options: Any) -> AgenticLoopMiddleware:
    return AgenticLoopMiddleware(
        model, hooks=[ServerTools([lookup])] if hooks is None else hooks, tool_policy=by_key, **options
    )


PASSED_BY = {
    "streaming_false": lambda model: middleware(model, streaming=False),
    "hook_declines_streams": lambda model: middleware(model, [ServerTools([lookup], agentic_loop_streaming=False)]),
    "no_hooks": lambda model: middleware(model, []),
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("how", list(PASSED_BY))
async def test_a_stream_the_loop_passes_by_is_still_judged(how: str, route: str) -> None:
    """A stranger's stream gets 403 before the app is called; Bob's stream reaches the app without the web search and
    the MCP server he may not use, and is still a stream; Alice's goes as she sent it."""
    model = Model()
    app = PASSED_BY[how](model)
    tools = [SEARCH] if route == "messages" else [{"type": "web_search"}]
    extra = {"mcp_servers": [DB]} if route == "messages" else {"web_search_options": {}} if route == "chat" else {}
    body = body_of(route, stream=True, tools=tools, **extra)
    reply = await post(app, route, "stranger", body)
    assert reply.status_code == 403, reply.text
    assert "unknown caller" in reply.text and model.requests == []

    reply = await post(app, route, "bob", body)
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
    sent = model.requests[0].body
    assert sent["stream"] is True and not {"tools", "mcp_servers", "web_search_options"} & set(sent)

    model.requests.clear()
    reply = await post(app, route, "alice", body)
    assert reply.status_code == 200 and model.requests[0].body == body


@pytest.mark.parametrize("route", list(ROUTES))
async def test_a_body_over_max_body_bytes_is_refused_413_under_a_policy_that_judges_names(route: str) -> None:
    """The policy cannot read a body past the limit, so a caller it judges is refused it (413 in the route's shape),
    and a stranger is refused (403) as anywhere; a caller without a policy, or with one that judges no name, passes
    through as without a policy."""
    model = Model()
    app = middleware(model, max_body_bytes=2000)
    extra = {"mcp_servers": [DB]} if route == "messages" else {}
    body = body_of(route, tools=[SEARCH], metadata={"pad": "x" * 3000}, **extra)
    reply = await post(app, route, "stranger", body)
    assert reply.status_code == 403, reply.text
    reply = await post(app, route, "bob", body)
    assert reply.status_code == 413, reply.text
    assert "max_body_bytes=2000" in reply.text
    error = reply.json()["error"]
    assert error["type" if route == "messages" else "code"] == "request_too_large"
    assert model.requests == []
    for key in ("alice", "carol"):
        reply = await post(app, route, key, body)
        assert reply.status_code == 200, reply.text
    assert [request.body for request in model.requests] == [body, body]


async def test_a_body_that_is_not_an_object_is_refused_under_a_policy_that_judges_names() -> None:
    """Nothing the policy can look at: 400 for Bob, the app as before for Alice."""
    model = Model()
    app = middleware(model, [])
    assert (await post(app, "chat", "bob", [SEARCH])).status_code == 400
    assert model.requests == []
    assert (await post(app, "chat", "stranger", [SEARCH])).status_code == 403


@pytest.mark.parametrize(("key", "closed"), [("stranger", True), ("bob", True), ("carol", False), ("alice", False)])
async def test_a_websocket_on_a_model_route_is_closed_for_a_caller_the_policy_refuses_or_judges(
    key: str, closed: bool
) -> None:
    """Nothing reads a socket's messages: a caller the policy refuses, or whose tools it judges, is closed out (1008)
    before the app sees the socket; one it does not judge reaches the app."""
    reached: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope)
        await send({"type": "websocket.accept"})

    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "websocket.connect"}

    async def send(event: Any) -> None:
        sent.append(event)

    headers = [(b"x-api-key", key.encode())]
    scope = {"type": "websocket", "path": "/v1/responses", "headers": headers, "asgi": {"version": "3.0"}}
    await AgenticLoopMiddleware(app, hooks=[], tool_policy=by_key)(scope, receive, send)
    assert (sent[0]["type"], bool(reached)) == (("websocket.close", False) if closed else ("websocket.accept", True))
    if closed:
        assert sent[0]["code"] == 1008


@pytest.mark.parametrize(
    "path", ["/v1/messages/", "/v1/chat/completions/", "/v1/responses/compact", "/v1/messages/count_tokens"]
)
async def test_the_paths_beside_a_model_route_are_judged_too(path: str) -> None:
    """A trailing slash (an app with a catch-all answers it as the route), a compaction and a token count, with no
    hook mounted: a stranger is refused, and Bob's web search does not reach the app; Alice's does."""
    model = Model()
    app = middleware(model, [])
    route = "messages" if path.startswith("/v1/messages") else "chat" if "chat" in path else "responses"
    body = body_of(route, tools=[SEARCH])
    async with http_client(app) as client:
        assert (await client.post(path, json=body, headers={"x-api-key": "stranger"})).status_code == 403
        for key in ("bob", "alice"):
            await client.post(path, json=body, headers={"x-api-key": key})
    assert [request.path for request in model.requests] == [path, path]
    assert [request.body.get("tools") for request in model.requests] == [None, [SEARCH]]
