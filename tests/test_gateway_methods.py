"""Methods on the model routes: only an upper-case POST is judged, and nothing else with a body gets past.

Review `paths` F1: under uvicorn's h11 parser (plain `uvicorn`, the `[gateway]` extra, `--http h11`) a `post
/v1/messages` reached the app with its case as sent; the middleware judged only `POST`, and aiohttp sent it up as a
`POST` the guardrail never saw. F2: a `PUT`/`PATCH` (or a `GET`/`DELETE`/`OPTIONS` with a body) on a model route went
up unjudged, body included. The requests here are written over a raw socket, so no client tidies the method.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

import httpx
import orjson
import pytest
from conftest import http_scope
from guardrail_kit import SAID, WORD, WordBlock, body_for
from starlette.responses import JSONResponse
from support import ToolHook, client_receive, read_body
from test_gateway_routes import answer

from agentic_middleware import AgenticLoopMiddleware, Settings
from agentic_middleware.gateway import Upstream, create_app, serving
from agentic_middleware.gateway.app import model_app
from agentic_middleware.testing import ScriptedModel, chat_completion, message


async def raw_request(
    url: str, method: str, path: str, body: dict[str, Any] | None = None, chunked: bool = False, headers: str = ""
) -> tuple[int, Any]:
    """The status and body (JSON parsed) of one request written byte for byte as given: the method keeps its case, the
    path its spelling. A body goes with its `Content-Length`, or `chunked` in one chunk; `headers` are added."""
    parts = urllib.parse.urlsplit(url)
    content = orjson.dumps(body) if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
    head += headers
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
        content = f"{len(content):x}\r\n".encode() + content + b"\r\n0\r\n\r\n"
    elif body is not None:
        head += f"Content-Length: {len(content)}\r\n"
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(head.encode() + b"\r\n" + content)
    await writer.drain()
    data = await reader.read()
    writer.close()
    status_line, _, rest = data.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    json = payload.startswith((b"{", b"["))  # else the text (`/metrics`), or None for no body
    return int(status_line.split()[1]), orjson.loads(payload) if json else payload.decode() or None


CASED = [
    ("post", "/v1/messages"),
    ("Post", "/v1/chat/completions"),
    ("pOST", "/v1/responses"),
    ("post", "/chat/completions"),  # an alias, rewritten to the route
    ("post", "/v1/responses/compact"),
    ("post", "/v1/completions"),  # a path no hook judges
]


async def test_under_h11_a_post_in_another_case_is_refused_and_never_goes_up() -> None:
    model = ScriptedModel(default=answer)
    async with serving(model) as upstream:
        gateway = create_app(Settings(hooks=(WordBlock(),)), Upstream(upstream + "/v1"))
        async with serving(gateway, http="h11") as url:
            refused = [await raw_request(url, method, path, body_for(path)) for method, path in CASED]
            listed = await raw_request(url, "post", "/v1/messages/count_tokens", body_for("/v1/messages"))
            lower_get = await raw_request(url, "get", "/v1/models")
            blocked = await raw_request(url, "POST", "/v1/messages", body_for("/v1/messages"))
            clean = await raw_request(url, "POST", "/v1/messages", body_for("/v1/messages", "hi"))
    for status, error in [*refused, listed, lower_get]:
        assert status == 400, error
        assert "upper case" in (error["error"]["message"])
    assert refused[1][1]["error"]["code"] == "invalid_method"  # OpenAI's shape; Anthropic's under /v1/messages
    assert refused[0][1]["type"] == "error"
    assert blocked[0] == 400 and WORD in blocked[1]["error"]["message"] and clean[0] == 200
    assert [request.path for request in model.requests] == ["/v1/messages"]
    assert WORD.encode() not in model.requests[0].raw


async def test_the_forwarding_model_alone_never_sends_up_a_method_it_would_change() -> None:
    """`model_app` without the middleware (an upstream of its own): aiohttp would upper-case `post`; refused."""
    model = ScriptedModel(default=answer)
    async with serving(model) as upstream, serving(model_app(Upstream(upstream + "/v1")), http="h11") as url:
        status, error = await raw_request(url, "post", "/v1/models", {"model": "m"})
    assert status == 400 and error["error"]["code"] == "invalid_method"
    assert model.requests == []


class CatchAll:
    """An app that answers every method on every path as it came (a proxy's catch-all), recording what it got."""

    def __init__(self) -> None:
        self.got: list[tuple[str, str, bytes]] = []

    def app(self) -> Any:
        async def anything(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            self.got.append((scope["method"], scope["path"], await read_body(receive)))
            reply = JSONResponse(message("ok") if "messages" in scope["path"] else chat_completion("ok"))
            await reply(scope, receive, send)

        return anything


async def asgi_call(app: Any, method: str, path: str, body: bytes = b"") -> tuple[int, dict[bytes, bytes], Any]:
    """One request given to an ASGI app as a raw scope, the method as a server hands it on."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({**http_scope(path, body), "method": method}, client_receive(body), send)
    start = sent[0]
    payload = b"".join(message.get("body", b"") for message in sent[1:])
    return start["status"], dict(start["headers"]), orjson.loads(payload) if payload else None


@pytest.mark.parametrize("method", ["post", "Post", "pOST"])
async def test_the_middleware_refuses_a_post_in_another_case_on_a_model_route(method: str) -> None:
    upstream = CatchAll()
    guarded = AgenticLoopMiddleware(upstream.app(), hooks=[WordBlock()])
    policed = AgenticLoopMiddleware(upstream.app(), hooks=[ToolHook()], tool_policy=lambda scope: None)
    bare = AgenticLoopMiddleware(upstream.app(), hooks=[ToolHook()])
    said = orjson.dumps(body_for("/v1/messages"))
    status, headers, error = await asgi_call(guarded, method, "/v1/messages", said)
    assert status == 405 and headers[b"allow"] == b"POST" and "upper case" in error["error"]["message"]
    assert error["type"] == "error"  # Anthropic's shape
    chat = orjson.dumps(body_for("/v1/chat/completions"))
    for path in ("/v1/chat/completions", "/v1/chat/completions/", "/v1/responses/compact"):
        status, _, error = await asgi_call(guarded, method, path, chat)
        assert status == 405 and error["error"]["code"] == "method_not_allowed"
    assert (await asgi_call(policed, method, "/v1/messages", said))[0] == 405
    assert upstream.got == []
    # Nothing to judge: the app gets it as before, and a path that is no model route goes on too.
    assert (await asgi_call(bare, method, "/v1/messages", said))[0] == 200
    assert (await asgi_call(guarded, method, "/v1/embeddings", said))[0] == 200
    assert [(got[0], got[1]) for got in upstream.got] == [(method, "/v1/messages"), (method, "/v1/embeddings")]


async def test_the_middleware_refuses_other_methods_with_a_body_on_a_model_route() -> None:
    upstream = CatchAll()
    guarded = AgenticLoopMiddleware(upstream.app(), hooks=[WordBlock()])
    said = orjson.dumps(body_for("/v1/chat/completions"))
    for method in ("PUT", "PATCH", "GET", "DELETE", "OPTIONS"):
        status, headers, error = await asgi_call(guarded, method, "/v1/chat/completions", said)
        assert status == 405 and headers[b"allow"] == b"POST", method
        assert error["error"]["code"] == "method_not_allowed"
    status, _, _ = await asgi_call(guarded, "PUT", "/v1/messages/count_tokens", said)
    assert status == 405 and upstream.got == []
    for method in ("GET", "DELETE", "OPTIONS", "HEAD"):  # no body: nothing to judge, it goes on
        assert (await asgi_call(guarded, method, "/v1/chat/completions"))[0] == 200
    assert (await asgi_call(guarded, "PUT", "/v1/files/f1", said))[0] == 200  # not a model route
    assert [got[:2] for got in upstream.got] == [
        ("GET", "/v1/chat/completions"),
        ("DELETE", "/v1/chat/completions"),
        ("OPTIONS", "/v1/chat/completions"),
        ("HEAD", "/v1/chat/completions"),
        ("PUT", "/v1/files/f1"),
    ]


BODIED = [
    ("PUT", "/v1/messages"),
    ("PATCH", "/v1/chat/completions"),
    ("PUT", "/responses"),  # an alias
    ("PATCH", "/v1/responses/compact"),  # listed in forward_unjudged by default: for a POST only
    ("PUT", "/v1/messages/count_tokens"),
    ("DELETE", "/v1/messages"),
    ("GET", "/v1/chat/completions"),
    ("OPTIONS", "/v1/responses"),
    ("GET", "/chat/completions/"),
]


async def test_with_a_guardrail_the_gateway_refuses_other_methods_with_a_body_on_a_model_route() -> None:
    model = ScriptedModel(default=answer)
    settings = Settings(hooks=(WordBlock(),), forward_unjudged=["/v1/responses/compact", "/v1/embeddings"])
    async with serving(model) as upstream, serving(create_app(settings, Upstream(upstream + "/v1"))) as url:
        client = httpx.AsyncClient(base_url=url)
        async with client:
            refused = [await client.request(method, path, json=body_for(path)) for method, path in BODIED]
            bare = [await client.request(method, "/v1/messages") for method in ("GET", "DELETE", "OPTIONS")]
            listed = await client.put("/v1/embeddings", json={"model": "m", "input": SAID})
    for (method, path), answered in zip(BODIED, refused, strict=True):
        assert answered.status_code == 403, (method, path, answered.text)
        if "messages" in path:
            assert answered.json()["type"] == "error"
        else:
            assert answered.json()["error"]["code"] == "path_not_forwarded"
    assert [answered.status_code for answered in bare] == [200, 200, 200] and listed.status_code == 200
    assert [request.path for request in model.requests] == ["/v1/messages"] * 3 + ["/v1/embeddings"]
    assert all(request.raw == b"" for request in model.requests[:3])


UNLISTED = [
    ("GET", "/V1/messages"),  # a spelling an upstream matching paths case-insensitively takes for the route
    ("GET", "//v1/messages"),  # one merging slashes
    ("HEAD", "/v1/messages;x"),
    ("OPTIONS", "/V1/messages"),
    ("DELETE", "/V1/chat/completions"),
    ("GET", "/v1/completions"),
    ("GET", "/v1/messages/batches"),
    ("GET", "/v1/models"),
    ("GET", "/health"),
]
WEBSOCKET = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
WEBSOCKET += "Sec-WebSocket-Version: 13\r\n"


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_with_refusing_on_a_get_head_options_or_delete_with_a_body_is_refused_on_every_unlisted_path(
    http: str,
) -> None:
    """Review `gateway` F1: a GET, HEAD, OPTIONS or DELETE with a body was refused on the model paths alone, so on
    `/V1/messages`, `//v1/messages` or `/v1/completions` it went up, body and all, to an upstream that may read it as
    a model call whatever the method. Now it is refused on every path `forward_unjudged` does not list, under a
    guardrail or a tool policy alone; without a body, what the clients send goes up as before. The gateway is served
    as the CLI serves it (no websockets: a handshake gets its 426)."""
    model = ScriptedModel(default=answer)
    guarded = Settings(hooks=(WordBlock(),), forward_unjudged=["/v1/files/{id}"])
    policed = Settings(hooks=(ToolHook(),), tool_policy=lambda scope: None)
    async with serving(model) as upstream:
        for settings in (guarded, policed):
            async with serving(create_app(settings, Upstream(upstream + "/v1")), http=http, ws="none") as url:
                refused = [await raw_request(url, method, path, body_for(path)) for method, path in UNLISTED]
                refused.append(await raw_request(url, "GET", "/V1/messages", body_for("/v1/messages"), chunked=True))
                ordinary = [
                    await raw_request(url, "GET", "/v1/models"),
                    await raw_request(url, "HEAD", "/api/hello"),  # Claude Code's check that the API is up
                    await raw_request(url, "DELETE", "/v1/responses/resp_1"),
                    await raw_request(url, "GET", "/health"),
                    await raw_request(url, "GET", "/metrics"),
                    await raw_request(url, "GET", "/V1/messages"),  # no body: nothing to judge
                ]
                websocket = await raw_request(url, "GET", "/v1/responses", headers=WEBSOCKET)
            for (method, path), (status, error) in zip([*UNLISTED, ("GET", "/V1/messages")], refused, strict=True):
                assert status == 403, (settings, method, path, error)
                if method != "HEAD":  # a HEAD's answer has no body
                    assert (
                        "with a body" in error["error"]["message"] and "forward_unjudged" in error["error"]["message"]
                    )
            assert [status for status, _ in ordinary] == [200] * 6 and websocket[0] == 426
        async with serving(create_app(guarded, Upstream(upstream + "/v1")), http=http) as url:
            listed = await raw_request(url, "GET", "/v1/files/f1", {"model": "m", "input": SAID})
    assert listed[0] == 200  # the operator listed it: a path that is no model path goes up with its body
    ordinary_paths = ["/v1/models", "/api/hello", "/v1/responses/resp_1", "/V1/messages"]
    assert [request.path for request in model.requests] == ordinary_paths * 2 + ["/v1/files/f1"]
    assert all(request.raw == b"" for request in model.requests[:-1])
