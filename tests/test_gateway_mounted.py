"""A gateway mounted under a prefix forwards the path it judged, without the mount's `root_path` (review today2 F3).

agentic-gateway inside a Starlette `Mount("/gw")`, or served by uvicorn with `--root-path /llm`, judges
`/v1/chat/completions`; the model server behind it serves that path, not `/gw/v1/chat/completions`, which it answers
404. The upstream here is a real catch-all server on uvicorn recording each request's path and query as sent; the
code before sent the prefix up on every call (the route, its alias, `count_tokens`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send
from test_policy import lookup
from test_policy_mounted import policy, under_uvicorn

from agentic_middleware import ServerTools, Settings
from agentic_middleware.gateway import Upstream, create_app, serving

CHAT = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
MESSAGE = {"role": "assistant", "content": "ok"}
REPLY = json.dumps(
    {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [{"index": 0, "message": MESSAGE}]}
).encode()
CALLS = [  # (what the client posts below the prefix, what the model server must get)
    ("/v1/chat/completions", b"/v1/chat/completions"),
    ("/chat/completions", b"/v1/chat/completions"),  # an alias, sent up as its route
    ("/v1/messages/count_tokens", b"/v1/messages/count_tokens"),
    ("/v1/chat/completions?api-version=2&x=%2F", b"/v1/chat/completions?api-version=2&x=%2F"),  # the query as sent
]


def recorder(seen: list[bytes]) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        query = scope["query_string"]
        seen.append(scope["raw_path"] + (b"?" + query if query else b""))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": REPLY})

    return app


OPEN: list[Upstream] = []  # the gateways' forwarders, closed after each test (no lifespan runs under a Mount)


@asynccontextmanager
async def upstream() -> AsyncIterator[tuple[str, list[bytes]]]:
    seen: list[bytes] = []
    try:
        async with serving(recorder(seen), lifespan="off") as url:
            yield url, seen
    finally:
        while OPEN:
            await OPEN.pop().aclose()


def gateway(url: str, **settings: Any) -> ASGIApp:
    settings.setdefault("hooks", (ServerTools([lookup]),))
    settings.setdefault("tool_policy", policy)
    OPEN.append(Upstream(url + "/v1"))
    return create_app(Settings(**settings), model=OPEN[-1])


async def post_all(client: httpx.AsyncClient, prefix: str) -> list[int]:
    statuses = []
    for path, _ in CALLS:
        for key in ("stranger", "bob"):
            reply = await client.post(prefix + path, json=CHAT, headers={"x-api-key": key})
            statuses.append(reply.status_code)
    return statuses


async def test_a_gateway_in_a_mount_forwards_the_path_without_the_mount() -> None:
    async with upstream() as (url, seen):
        outer = Starlette(routes=[Mount("/gw", app=gateway(url))])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=outer), base_url="http://gw") as client:
            statuses = await post_all(client, "/gw")
    assert statuses == [403, 200] * len(CALLS)  # a stranger is refused: judged as the route
    assert seen == [sent for _, sent in CALLS]


@pytest.mark.parametrize("root_path", ["/llm", "/v1"])
async def test_a_gateway_under_uvicorns_root_path_forwards_the_routed_path(root_path: str) -> None:
    """uvicorn's `--root-path` puts the prefix in `path` and in `raw_path`: a proxy that strips it sends `/v1/...`,
    which the gateway judges and forwards as `/v1/...` (a prefix that is itself `/v1` included)."""
    async with (
        upstream() as (url, seen),
        under_uvicorn(gateway(url), root_path) as base,
        httpx.AsyncClient(base_url=base) as client,
    ):
        statuses = await post_all(client, "")
    assert statuses == [403, 200] * len(CALLS)
    assert seen == [sent for _, sent in CALLS]


def prefix_out_of_raw_path(app: ASGIApp, root: str) -> ASGIApp:
    """An ASGI server that gives the `root_path` in `path` but leaves it out of `raw_path` (what the client sent)."""

    async def server(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = {**scope, "root_path": root, "path": root + scope["path"]}
        await app(scope, receive, send)

    return server


async def test_a_raw_path_without_the_prefix_goes_up_as_it_is() -> None:
    async with upstream() as (url, seen):
        app = prefix_out_of_raw_path(gateway(url), "/llm")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            statuses = await post_all(client, "")
            encoded = await client.post("/v1/chat/%63ompletions", json=CHAT, headers={"x-api-key": "bob"})
    assert statuses == [403, 200] * len(CALLS)
    assert encoded.status_code == 200
    assert seen == [sent for _, sent in CALLS] + [b"/v1/chat/%63ompletions"]  # percent-encoding kept


async def test_a_mounted_path_that_climbs_is_still_refused() -> None:
    async with upstream() as (url, seen):
        outer = Starlette(routes=[Mount("/gw", app=gateway(url, hooks=(), tool_policy=None))])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=outer), base_url="http://gw") as client:
            climbing = await client.post("/gw/v1/%2e%2e/admin", json=CHAT)
            listed = await client.post("/gw/v1/models?x=1", json=CHAT)
    assert climbing.status_code == 400
    assert "'..' segments" in climbing.text
    assert listed.status_code == 200
    assert seen == [b"/v1/models?x=1"]


@pytest.mark.parametrize("where", ["mount", "uvicorn"])
async def test_routes_written_with_the_mounts_prefix_judge_and_forward_without_it(where: str) -> None:
    """`routes={"/gw/v1/chat/completions": ...}`, the mount's prefix written in (as configuration.md once advised):
    the whole path is the route, judged and looped; what goes up is the path the model server serves, without the
    prefix, under a Starlette `Mount` and under uvicorn's `--root-path` alike (a real upstream on
    uvicorn records it)."""
    routes = {"/gw/v1/chat/completions": "chat_completions"}
    async with upstream() as (url, seen):
        app = gateway(url, routes=routes)
        if where == "mount":
            outer = Starlette(routes=[Mount("/gw", app=app)])
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=outer), base_url="http://gw") as client:
                refused = await client.post("/gw/v1/chat/completions", json=CHAT, headers={"x-api-key": "stranger"})
                reply = await client.post("/gw/v1/chat/completions", json=CHAT, headers={"x-api-key": "bob"})
        else:
            async with under_uvicorn(app, "/gw") as base, httpx.AsyncClient(base_url=base) as client:
                refused = await client.post("/v1/chat/completions", json=CHAT, headers={"x-api-key": "stranger"})
                reply = await client.post("/v1/chat/completions", json=CHAT, headers={"x-api-key": "bob"})
    assert refused.status_code == 403 and "this key may not call" in refused.text  # judged as the route it names
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"] == MESSAGE, reply.text
    assert seen == [b"/v1/chat/completions"]
