"""The middleware in an app mounted under a prefix: a Starlette `Mount`, uvicorn's `--root-path` (review policy F5).

ASGI gives a mounted app the whole path in `path` and the prefix in `root_path`; the app's router routes by what is
left. The middleware judged `path` as it was, so under a mount no model route matched and every request passed by
unjudged: the tool policy, the loop and every check. It matches as the router does now. Each test fails on the code
before (the prefixed routes' test excepted: it guards what worked then).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from servers import serving
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send
from test_policy import RAN, ROUTES, Model, delete_everything, lookup

from agentic_middleware import AgenticLoopMiddleware, RequestRefused, ServerTools, Settings, ToolPolicy
from agentic_middleware.gateway import create_app

PATHS = {"messages": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}
BODIES: dict[str, dict[str, Any]] = {
    "messages": {"messages": [{"role": "user", "content": "go"}], "max_tokens": 9},
    "chat": {"messages": [{"role": "user", "content": "go"}]},
    "responses": {"input": "go"},
}


def policy(scope: Scope) -> ToolPolicy:
    """Bob may not delete; anyone else is refused."""
    if dict(scope["headers"]).get(b"x-api-key") != b"bob":
        raise RequestRefused("this key may not call", status=403)
    return ToolPolicy(denied_tools=["delete_*"])


class Routed:
    """The model app as an app's router hands it a request: by its path without the mount's `root_path`."""

    def __init__(self, model: Model) -> None:
        self.model = model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = {**scope, "path": scope["path"].removeprefix(scope.get("root_path", "")), "root_path": ""}
        await self.model(scope, receive, send)


def mounted(model: Model, **options: Any) -> Starlette:
    options.setdefault("tool_policy", policy)
    middleware = AgenticLoopMiddleware(Routed(model), hooks=[ServerTools([lookup, delete_everything])], **options)
    return Starlette(routes=[Mount("/llm", app=middleware)])


@contextlib.asynccontextmanager
async def under_uvicorn(app: ASGIApp, root_path: str) -> AsyncIterator[str]:
    """`app` served by uvicorn with `--root-path`: it puts the prefix before every path, as a proxy that strips it
    expects; yields the base URL."""
    async with serving("uvicorn", app, root_path=root_path) as served:
        yield f"http://127.0.0.1:{served.port}"


@pytest.fixture(autouse=True)
def no_runs_yet() -> None:
    RAN.clear()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ROUTES)
async def test_under_a_mount_every_model_route_is_judged_and_looped(route: str, stream: bool) -> None:
    """`Mount("/llm", app=<the middleware>)`: a caller the policy refuses gets 403 on `/llm/v1/...` before the app
    is called; Bob's request is looped (the model's `lookup` runs on the server) and judged (his model is not shown
    `delete_everything`)."""
    model = Model(("lookup", {"key": "k"}))
    body = {"model": "m", **BODIES[route], **({"stream": True} if stream else {})}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=mounted(model)), base_url="http://t") as client:
        reply = await client.post("/llm" + PATHS[route], json=body, headers={"x-api-key": "stranger"})
        assert reply.status_code == 403 and "this key may not call" in reply.text and model.requests == []
        reply = await client.post("/llm" + PATHS[route], json=body, headers={"x-api-key": "bob"})
    assert reply.status_code == 200, reply.text
    assert RAN == {"lookup": 1} and (stream or "value of k" in reply.text)
    names = [tool.get("name") or tool["function"]["name"] for tool in model.requests[0].body["tools"]]
    assert names == ["lookup"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/llm/v1/messages/", 403),  # a trailing slash: judged as its route
        ("POST", "/llm/v1/responses/compact", 403),
        ("POST", "/llm/v1/messages/count_tokens", 403),
        ("PUT", "/llm/v1/chat/completions", 405),  # only a POST is judged on a model route
    ],
)
async def test_under_a_mount_the_paths_beside_a_model_route_are_judged_too(method: str, path: str, status: int) -> None:
    model = Model()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=mounted(model)), base_url="http://t") as client:
        reply = await client.request(method, path, json={"model": "m", "input": "go"}, headers={"x-api-key": "x"})
    assert reply.status_code == status, reply.text
    assert model.requests == []


async def test_under_a_mount_routes_written_with_its_prefix_still_judge() -> None:
    """`routes={"/llm/v1/chat/completions": ...}`, as configuration.md once advised for a mounted app: still judged."""
    model = Model()
    app = mounted(model, routes={"/llm/v1/chat/completions": "chat_completions"})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        body = {"model": "m", **BODIES["chat"]}
        reply = await client.post("/llm/v1/chat/completions", json=body, headers={"x-api-key": "stranger"})
    assert reply.status_code == 403 and model.requests == []


@pytest.mark.parametrize("route", ROUTES)
async def test_under_uvicorns_root_path_every_model_route_is_judged(route: str) -> None:
    """uvicorn `--root-path /llm` (behind a proxy that strips the prefix): the client's `/v1/...` reaches the app as
    `path` `/llm/v1/...`; the policy refuses the stranger and loops Bob's request."""
    model = Model(("lookup", {"key": "k"}))
    middleware = AgenticLoopMiddleware(Routed(model), hooks=[ServerTools([lookup])], tool_policy=policy)
    async with under_uvicorn(middleware, "/llm") as base, httpx.AsyncClient(base_url=base) as client:
        body = {"model": "m", **BODIES[route]}
        reply = await client.post(PATHS[route], json=body, headers={"x-api-key": "stranger"})
        assert reply.status_code == 403 and model.requests == []
        reply = await client.post(PATHS[route], json=body, headers={"x-api-key": "bob"})
    assert reply.status_code == 200 and RAN == {"lookup": 1}


async def test_the_gateway_under_a_mount_judges_its_routes_and_their_spellings() -> None:
    """`agentic-gateway`'s app mounted at `/gw`: its spellings of a model route (`/chat/completions`) are judged as
    the route, and a path it does not judge is still refused; before, the gateway's paths saw `/gw/...` and refused
    every model call as a path it does not forward."""
    app = create_app(Settings(hooks=(ServerTools([lookup]),), tool_policy=policy))
    outer = Starlette(routes=[Mount("/gw", app=app)])
    body = {"model": "m", **BODIES["chat"]}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=outer), base_url="http://t") as client:
        for path in ("/gw/v1/chat/completions", "/gw/chat/completions"):
            refused = await client.post(path, json=body, headers={"x-api-key": "stranger"})
            assert refused.status_code == 403 and "this key may not call" in refused.text, (path, refused.text)
            reply = await client.post(path, json=body, headers={"x-api-key": "bob"})
            assert reply.status_code == 200 and reply.json()["object"] == "chat.completion", (path, reply.text)
        reply = await client.post("/gw/v1/completions", json=body, headers={"x-api-key": "bob"})
        assert reply.status_code == 403 and reply.json()["error"]["code"] == "path_not_forwarded"
