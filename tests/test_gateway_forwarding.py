"""The gateway's Upstream as a transparent proxy: redirects, proxies, TLS, headers both ways, its own errors.

The upstream is served by uvicorn on 127.0.0.1; the gateway's model app calls it over real HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from asgi_lifespan import LifespanManager
from conftest import anthropic_client, openai_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from test_gateway import raw_upstream

from agentic_middleware.config import Settings
from agentic_middleware.gateway import DemoModel, Upstream, create_app, model_app, serving
from agentic_middleware.gateway.environment import app_from_env

ROOT = Path(__file__).parent.parent
PATHS = ["/v1/messages", "/v1/chat/completions", "/v1/responses"]
PROXY_VARIABLES = ["http_proxy", "https_proxy", "no_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"]
PROXY_VARIABLES += ["ALL_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR"]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def recording(seen: list[tuple[Request, bytes]], response: Response) -> Starlette:
    async def answer(request: Request) -> Response:
        seen.append((request, await request.body()))
        return response

    return Starlette(routes=[Route(path, answer, methods=["POST"]) for path in PATHS])


@asynccontextmanager
async def forwarding(upstream_url: str, **options: bool) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client of the gateway's model app forwarding to `upstream_url` (no hooks: the forwarding alone)."""
    model = Upstream(upstream_url, **options)
    try:
        transport = httpx.ASGITransport(app=model_app(model))
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            yield client
    finally:
        await model.aclose()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_an_upstream_redirect_comes_back_unfollowed_and_no_key_leaves_for_its_host(status: int) -> None:
    elsewhere: list[tuple[Request, bytes]] = []
    moved = b'{"moved":true}'
    async with serving(recording(elsewhere, JSONResponse({"ok": True}))) as elsewhere_url:
        location = {"location": f"{elsewhere_url}/v1/messages"}
        redirect = Response(moved, status, media_type="application/json", headers=location)
        async with serving(recording([], redirect)) as upstream_url, forwarding(f"{upstream_url}/v1") as client:
            headers = {"x-api-key": "sk-ant-secret", "authorization": "Bearer secret"}
            response = await client.post("/v1/messages", json={"model": "m", "messages": []}, headers=headers)
    assert (response.status_code, response.content) == (status, moved)
    assert "location" not in response.headers
    assert elsewhere == []


PROXIED = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"via":"p"}'


async def via(upstream_url: str, monkeypatch: pytest.MonkeyPatch, no_proxy: str | None = None) -> str:
    """Who answered a call forwarded to `upstream_url` (`p`: the proxy the environment names), `no_proxy` set."""
    if no_proxy is not None:
        monkeypatch.setenv("no_proxy", no_proxy)
    async with forwarding(f"{upstream_url}/v1") as client:
        return str((await client.post("/v1/chat/completions", json={"model": "m", "messages": []})).json()["via"])


async def test_the_proxy_the_environment_names_is_used_and_no_proxy_bypasses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines: list[bytes] = []
    async with raw_upstream(PROXIED, lines) as proxy_url, serving(recording([], JSONResponse({"via": "direct"}))) as up:
        monkeypatch.setenv("HTTP_PROXY", proxy_url.removesuffix("/v1"))
        proxied = await via(up, monkeypatch)
        direct = await via(up, monkeypatch, "127.0.0.1")
    assert proxied == "p"
    assert lines == [f"POST {up}/v1/chat/completions HTTP/1.1".encode()]  # the absolute form a proxy gets
    assert direct == "direct"


@pytest.mark.parametrize("listed", ["10.0.0.0/8, 127.0.0.0/8", "127.0.0.1/32", "::1/128,127.0.0.0/24"])
async def test_an_ip_network_in_no_proxy_bypasses_the_proxy(monkeypatch: pytest.MonkeyPatch, listed: str) -> None:
    """`NO_PROXY=10.0.0.0/8`, as curl and Go read it and Kubernetes clusters write it: an upstream at an address of
    a listed network goes direct (the standard library reads no networks); one outside them goes through the proxy."""
    async with raw_upstream(PROXIED, []) as proxy_url, serving(recording([], JSONResponse({"via": "direct"}))) as up:
        monkeypatch.setenv("HTTP_PROXY", proxy_url.removesuffix("/v1"))
        assert await via(up, monkeypatch, listed) == "direct"
        assert await via(up, monkeypatch, "10.0.0.0/8,::1/128") == "p"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (no CA store trusts it) and its key."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    argv = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"]
    argv += ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)]
    subprocess.run(argv, check=True, capture_output=True, timeout=60)
    return cert, key


async def test_an_https_upstream_is_verified_against_ssl_cert_file_else_certifi(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    answer = recording([], JSONResponse({"ok": True}))
    async with serving(answer, ssl_certfile=str(cert), ssl_keyfile=str(key)) as upstream_url:
        async with forwarding(f"{upstream_url}/v1") as client:
            untrusted = await client.post("/v1/messages", json={})
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        async with forwarding(f"{upstream_url}/v1") as client:
            trusted = await client.post("/v1/messages", json={})
    assert untrusted.status_code == 502
    assert "certificate verify failed" in untrusted.json()["error"]["message"].lower()
    assert (trusted.status_code, trusted.json()) == (200, {"ok": True})


def test_certifi_is_the_ca_store_when_no_variable_names_one() -> None:
    import certifi

    from agentic_middleware.gateway.upstream import tls_context

    bundled = ssl.create_default_context(cafile=certifi.where()).get_ca_certs(binary_form=True)
    assert tls_context().get_ca_certs(binary_form=True) == bundled


async def test_the_clients_headers_query_and_missing_content_type_go_up_as_they_are() -> None:
    seen: list[tuple[Request, bytes]] = []
    async with serving(recording(seen, JSONResponse({}))) as upstream_url, forwarding(f"{upstream_url}/v1") as client:
        headers = [("anthropic-beta", "a-1"), ("anthropic-beta", "b-2"), ("x-api-key", "k"), ("cookie", "c=1")]
        await client.post("/v1/messages?beta=true", content=b'{"model":"m"}', headers=headers)
        await client.post("/v1/chat/completions?api-version=2024-10-21", content=b"{}", headers={"content-type": "x/y"})
    (messages, body), (chat, _) = seen
    assert body == b'{"model":"m"}'
    assert "content-type" not in messages.headers  # none was sent, none is made up
    assert messages.headers.getlist("anthropic-beta") == ["a-1", "b-2"]
    assert (messages.headers["x-api-key"], messages.headers.get("cookie")) == ("k", None)
    assert messages.url.query == "beta=true"
    assert (chat.url.query, chat.headers["content-type"]) == ("api-version=2024-10-21", "x/y")


async def test_repeated_retry_and_rate_limit_headers_come_back_and_others_do_not() -> None:
    answer = Response(b"{}", 429, media_type="application/json")
    sent = [
        ("x-request-id", "one"),
        ("x-request-id", "two"),
        ("retry-after", "1"),
        ("retry-after-ms", "1000"),
        ("x-should-retry", "true"),
        ("anthropic-ratelimit-requests-remaining", "0"),
        ("x-ratelimit-remaining-tokens", "5"),
        ("openai-processing-ms", "12"),
        ("cache-control", "no-cache"),
        ("set-cookie", "s=1"),
        ("location", "http://elsewhere/"),
        ("x-other", "no"),
    ]
    answer.raw_headers += [(name.encode(), value.encode()) for name, value in sent]
    async with serving(recording([], answer)) as upstream_url, forwarding(f"{upstream_url}/v1") as client:
        response = await client.post("/v1/messages", json={})
    assert response.status_code == 429
    assert response.headers.get_list("x-request-id") == ["one", "two"]
    for name, value in sent[2:9]:
        assert response.headers[name] == value, name
    assert not {"set-cookie", "location", "x-other", "content-encoding"} & set(response.headers)
    assert response.headers["content-length"] == "2"


async def test_the_gateways_own_404_and_405_are_json_errors_the_sdks_parse() -> None:
    app = model_app(DemoModel())
    with pytest.raises(anthropic.NotFoundError) as missing:
        await anthropic_client(app).messages.count_tokens(model="m", messages=[{"role": "user", "content": "x"}])
    assert missing.value.body == {"type": "error", "error": {"type": "invalid_request_error", "message": "Not Found"}}
    with pytest.raises(openai.NotFoundError) as unknown:
        await openai_client(app).models.list()
    assert unknown.value.code is None and unknown.value.message.endswith("Not Found")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        wrong = await client.get("/v1/chat/completions")
    assert (wrong.status_code, wrong.headers["allow"]) == (405, "POST")
    assert wrong.json()["error"]["message"] == "Method Not Allowed"


async def test_without_error_details_the_gateways_502_names_no_upstream_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    config = tmp_path / "gateway.yaml"
    config.write_text("agentic_middleware:\n  error_details: false\n")
    monkeypatch.setenv("AGENTIC_CONFIG", str(config))
    monkeypatch.setenv("AGENTIC_UPSTREAM", f"http://127.0.0.1:{port}/v1")
    async with LifespanManager(app_from_env()) as started:
        transport = httpx.ASGITransport(app=started.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            response = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
    assert response.status_code == 502
    error = response.json()["error"]
    assert (error["code"], error["message"]) == ("upstream", "the upstream failed: ClientConnectorError")
    assert str(port) not in response.text


def test_a_bad_upstream_with_workers_stops_the_start_once_with_exit_code_1() -> None:
    env = {**os.environ, "AGENTIC_UPSTREAM": "localhost:1234"}
    argv = [sys.executable, "-m", "agentic_middleware.gateway", "--port", "0", "--workers", "2"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "AGENTIC_UPSTREAM: the upstream must be an http(s) URL" in done.stderr
    assert "Traceback" not in done.stderr and "Started server process" not in done.stderr + done.stdout


async def handshake(url: str, path: str) -> tuple[int, bytes]:
    """A websocket opening handshake (RFC 6455) sent by hand: the answer's status and body."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    head += "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    writer.write(head.encode())
    answer = await asyncio.wait_for(reader.read(65536), 10)
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize("ws", ["none", "wsproto"], ids=["server-without-websockets", "server-with-websockets"])
async def test_a_websocket_handshake_gets_a_426_and_never_reaches_the_upstream(ws: str) -> None:
    """Codex's built-in openai provider tries the Responses websocket first and falls back to HTTP at once on a 426;
    forwarded (the upstream's 404 or 405), it retried for seconds, and under a server with websockets the gateway
    raised. Nothing of a handshake goes up: the gateway relays no websockets, and a turn over one would bypass the
    loop."""
    seen: list[tuple[Request, bytes]] = []
    async with serving(recording(seen, JSONResponse({}))) as upstream_url:
        app = create_app(Settings(), Upstream(f"{upstream_url}/v1"))
        async with serving(app, ws=ws) as url:
            status, body = await handshake(url, "/v1/responses")
            messages_status, messages_body = await handshake(url, "/v1/messages")
    assert (status, messages_status) == (426, 426) and seen == []
    assert "websockets" in json.loads(body)["error"]["message"]  # each in its route's error shape
    assert json.loads(messages_body)["type"] == "error"


def raw_request(url: str, head: bytes) -> bytes:
    """`head` sent as it is (no client library checks or rewrites it), and the whole answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


JSON_REPLY = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


async def test_a_header_goes_up_as_its_bytes_or_the_request_is_refused_with_nothing_sent() -> None:
    """aiohttp sends header values as UTF-8: a UTF-8 value goes up as its bytes (read as Latin-1 before, it went up
    as `caf\\xc3\\x83\\xc2\\xa9`), and one that is not UTF-8 is refused in the route's shape."""
    lines: list[bytes] = []
    heads: list[bytes] = []

    async def recorded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(JSON_REPLY)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(recorded, "127.0.0.1", 0)
    body = b'{"model":"m","messages":[]}'
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\nconnection: close\r\n"
    )
    async with server:
        model = Upstream(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
        async with serving(model_app(model)) as url:
            answers = []
            for value in ("caf\u00e9".encode(), b"caf\xe9"):
                head = request + b"openai-beta: " + value + b"\r\ncontent-length: %d\r\n\r\n" % len(body)
                answers.append(await asyncio.to_thread(raw_request, url, head + body))
        await model.aclose()
    assert answers[0].startswith(b"HTTP/1.1 200")
    assert answers[1].startswith(b"HTTP/1.1 400") and b'"code":"invalid_header"' in answers[1]
    assert b"the openai-beta header's value is not UTF-8 text" in answers[1]
    sent = [line for head in heads for line in head.split(b"\r\n") if line.startswith(b"openai-beta")]
    assert (sent, lines) == ([b"openai-beta: caf\xc3\xa9"], [])


async def test_a_header_with_a_control_character_is_refused_naming_the_header_not_its_value() -> None:
    """uvicorn refuses such a request itself; a server that does not (in process here) hands it on."""
    lines: list[bytes] = []
    async with raw_upstream(JSON_REPLY, lines) as upstream_url, forwarding(upstream_url) as client:
        answer = await client.post("/v1/chat/completions", content=b"{}", headers={"x-api-key": b"sk-se\x7fcret"})
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "invalid_header")
    assert "the x-api-key header's value is not UTF-8 text" in answer.text and "sk-se" not in answer.text
    assert lines == []


@pytest.mark.parametrize("key", ["sk-operator\n", "sk-\x00x", "sk-caf\u00e9"])
def test_an_upstream_key_that_cannot_be_sent_stops_the_start_without_echoing_it(key: str) -> None:
    """A trailing newline from a secret file is the usual one."""
    with pytest.raises(ValueError, match="the upstream API key holds a control character") as refused:
        Upstream("http://127.0.0.1:9/v1", api_key=key)
    assert "sk-" not in str(refused.value)


@pytest.mark.parametrize(
    "base", ["http://127.0.\t0.1:1893/v1", "http://127.0.0.1:18\n93/v1", "http://h/v1 ", "http://h ost"]
)
def test_an_upstream_url_with_a_control_character_or_a_space_stops_the_start(base: str) -> None:
    with pytest.raises(ValueError, match="control character or a space"):
        Upstream(base)


async def test_a_502_through_a_proxy_names_no_proxy_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp's error for a proxy that refuses a CONNECT names the proxy's URL, credentials and all."""
    refused = b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"
    async with raw_upstream(refused) as proxy_url:
        monkeypatch.setenv("HTTPS_PROXY", proxy_url.removesuffix("/v1").replace("http://", "http://user:PROXYSECRET@"))
        async with forwarding("https://upstream.example/v1") as client:
            answer = await client.post("/v1/messages", json={})
    assert answer.status_code == 502
    assert "PROXYSECRET" not in answer.text and "user:" not in answer.text


async def test_a_heads_length_is_the_length_of_the_body_a_get_brings_back() -> None:
    """A GET's body comes back decoded; a HEAD asks for the answer unencoded, so its length is that body's, not the
    length of what a gzip-encoding upstream would have sent."""
    from starlette.middleware.gzip import GZipMiddleware

    async def models(request: Request) -> Response:
        return JSONResponse({"data": ["m" * 40] * 100})

    app = Starlette(routes=[Route("/v1/models", models, methods=["GET", "HEAD"])])
    app.add_middleware(GZipMiddleware, minimum_size=10)
    async with serving(app) as upstream_url, forwarding(f"{upstream_url}/v1") as client:
        got = await client.get("/v1/models")
        head = await client.head("/v1/models")
    assert (got.status_code, head.status_code) == (200, 200)
    assert head.headers["content-length"] == str(len(got.content)) != "0"
