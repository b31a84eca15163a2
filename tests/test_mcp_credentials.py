"""Per-call credentials: each MCP server's calls carry that server's own headers (static and forwarded), whichever
of the middleware's hooks plans the round. Real MCP servers written with the `mcp` SDK, under uvicorn on 127.0.0.1,
each recording the header it got on every call; 20 users at once through the official SDKs."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import orjson
import pytest
from mcp.server.mcpserver import Context, MCPServer
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from support import Route
from test_mcp import MCPHTTPServer, answer_with_results, ask, gateway, route

from agentic_middleware.mcp import MCPTools
from agentic_middleware.testing import RecordedRequest, ScriptedModel

__all__ = ["route"]  # the fixture, used by name

USERS = 20
TOKEN = "x-user-token"


def recording(name: str, seen: list[tuple[str, str]]) -> MCPServer:
    """A server whose one tool `<name>_whoami(user)` records, per call, the user it was called for and the token
    header the call carried."""
    server = MCPServer(name)

    @server.tool(name=f"{name}_whoami", description="Who the server thinks is calling.")
    def whoami(user: str, ctx: Context) -> str:
        request = ctx.request_context.request
        token = request.headers.get(TOKEN, "none") if request is not None else "none"
        seen.append((user, token))
        return f"{name} saw {token}"

    return server


@pytest.mark.parametrize("forwarding_first", [False, True])
async def test_forwarded_headers_reach_every_call_of_their_server_whichever_hook_plans_the_round(
    route: Route, forwarding_first: bool
) -> None:
    alpha_seen: list[tuple[str, str]] = []
    beta_seen: list[tuple[str, str]] = []
    alpha_server = MCPHTTPServer(lambda: recording("alpha", alpha_seen))
    beta_server = MCPHTTPServer(lambda: recording("beta", beta_seen))
    await alpha_server.start()
    await beta_server.start()

    def turn(request: RecordedRequest) -> Any:
        """The first turn calls both servers' tools for the user whose token came with the request."""
        user = request.headers[TOKEN]
        if len(request.body["messages"]) > 1:
            return answer_with_results(route)(request)
        return route.calls(("alpha_whoami", {"user": user}), ("beta_whoami", {"user": user}))

    # alpha sends the gateway's static token only; beta forwards the user's in place of its static one.
    alpha = MCPTools(alpha_server.url, headers={TOKEN: "gateway-alpha"})
    beta = MCPTools(beta_server.url, headers={TOKEN: "gateway-beta"}, forward_headers=[TOKEN])
    hooks = (beta, alpha) if forwarding_first else (alpha, beta)
    try:
        async with gateway(ScriptedModel(default=turn), *hooks) as app:
            users = [f"user-{n}" for n in range(USERS)]
            answers = await asyncio.gather(*(ask(route, app, default_headers={TOKEN: user}) for user in users))
    finally:
        await alpha_server.stop()
        await beta_server.stop()

    assert sorted(beta_seen) == sorted((user, user) for user in users)  # each call under its own user's identity
    assert sorted(alpha_seen) == sorted((user, "gateway-alpha") for user in users)  # never a forwarded token
    assert sorted(answers) == sorted(f"alpha saw gateway-alpha | beta saw {user}" for user in users)


async def test_a_forwarded_header_sent_twice_goes_as_the_client_sent_it_both_lines_in_order() -> None:
    """The client's two `x-user-token` lines both reach the MCP server, in order, in place of the static one: the
    server reads them as it would have read the client's (a gateway that authenticated the first line must not
    find the MCP server acting on the last). The SDKs send one line per header, so the client here is httpx."""
    seen: list[list[str]] = []
    server = MCPServer("lines")

    @server.tool(description="The token lines the call carried.")
    def tokens(ctx: Context) -> str:
        request = ctx.request_context.request
        seen.append(request.headers.getlist(TOKEN) if request is not None else [])
        return "seen"

    mcp = MCPHTTPServer(lambda: server)
    await mcp.start()
    route = Route("chat")
    model = ScriptedModel(
        default=lambda r: route.calls(("tokens", {})) if len(r.body["messages"]) == 1 else route.text("done")
    )
    hook = MCPTools(mcp.url, headers={TOKEN: "gateway"}, forward_headers=[TOKEN])
    try:
        async with gateway(model, hook) as app:
            client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://gateway")
            for lines in ([("x-user-token", "first"), ("X-User-Token", "second")], [], [("x-user-token", "only")]):
                answer = await client.post(route.path, json=route.request(), headers=lines)
                assert route.final_text(answer.json()) == "done"
    finally:
        await mcp.stop()
    assert seen == [["first", "second"], ["gateway"], ["only"]]


async def test_the_check_after_a_failed_call_carries_no_users_header() -> None:
    """A call whose connection breaks off is followed by a `tools/list` asking whether the session lives: that
    request is the gateway's, sent with the static headers only, never with the forwarded header of the user
    whose call failed (docs/mcp.md: headers go only with calls)."""
    posts: list[tuple[str, str]] = []  # (method, token) of each POST the server got
    server = MCPServer("failing")

    @server.tool(description="Broken off by the server's front.")
    def fails() -> str:
        return "never"

    inner = server.streamable_http_app()

    async def front(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        method = orjson.loads(body).get("method", "") if body else ""
        token = dict(scope["headers"]).get(TOKEN.encode(), b"none").decode()
        posts.append((method, token))
        if method == "tools/call":  # the connection breaks once the answer began: the call's outcome is unknown
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            await send({"type": "http.response.body", "body": b": working\n\n", "more_body": True})
            raise ConnectionAbortedError("the server's front broke off")
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await inner(scope, replay, send)

    class Fronted:
        def streamable_http_app(self) -> ASGIApp:
            return front

    mcp = MCPHTTPServer(lambda: Fronted())
    await mcp.start()
    route = Route("chat")
    model = ScriptedModel(route.calls(("fails", {})), route.text("done"))
    hook = MCPTools(mcp.url, headers={TOKEN: "gateway"}, forward_headers=[TOKEN])
    try:
        async with gateway(model, hook) as app:
            assert await ask(route, app, default_headers={TOKEN: "user-secret"}) == "done"
            async with asyncio.timeout(10):
                while [method for method, _ in posts].count("tools/list") < 2:  # the start's list, then the check
                    await asyncio.sleep(0.02)
    finally:
        await mcp.stop()
    assert ("tools/call", "user-secret") in posts
    assert [token for method, token in posts if method != "tools/call"] == ["gateway"] * (len(posts) - 1)
