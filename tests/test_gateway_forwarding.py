"""The gateway's Upstream as a transparent proxy: redirects, proxies, TLS, headers both ways, its own errors.

The upstream is served by uvicorn on 127.0.0.1; the gateway's model app calls it over real HTTP, through each of the
two HTTP clients (`client`: aiohttp and pyreqwest)."""

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
from agentic_middleware.gateway.http_client import ClientName

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


@pytest.fixture(params=["aiohttp", "pyreqwest"])
def http_client(request: pytest.FixtureRequest) -> ClientName:
    name: ClientName = request.param
    return name


@asynccontextmanager
async def forwarding(upstream_url: str, client: ClientName, **options: bool) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client of the gateway's model app forwarding to `upstream_url` (no hooks: the forwarding alone)."""
    model = Upstream(upstream_url, client=client, **options)
    try:
        transport = httpx.ASGITransport(app=model_app(model))
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            yield client
    finally:
        await model.aclose()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_an_upstream_redirect_comes_back_unfollowed_and_no_key_leaves_for_its_host(
    status: int, http_client: ClientName
) -> None:
    elsewhere: list[tuple[Request, bytes]] = []
    moved = b'{"moved":true}'
    async with serving(recording(elsewhere, JSONResponse({"ok": True}))) as elsewhere_url:
        location = {"location": f"{elsewhere_url}/v1/messages"}
        redirect = Response(moved, status, media_type="application/json", headers=location)
        async with (
            serving(recording([], redirect)) as upstream_url,
            forwarding(f"{upstream_url}/v1", http_client) as gateway,
        ):
            headers = {"x-api-key": "sk-ant-secret", "authorization": "Bearer secret"}
            response = await gateway.post("/v1/messages", json={"model": "m", "messages": []}, headers=headers)
    assert (response.status_code, response.content) == (status, moved)
    assert "location" not in response.headers
    assert elsewhere == []


PROXIED = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"via":"p"}'


async def test_the_proxy_the_environment_names_is_used_and_no_proxy_bypasses_it(
    monkeypatch: pytest.MonkeyPatch, http_client: ClientName
) -> None:
    lines: list[bytes] = []
    async with raw_upstream(PROXIED, lines) as proxy_url, serving(recording([], JSONResponse({"via": "direct"}))) as up:
        monkeypatch.setenv("HTTP_PROXY", proxy_url.removesuffix("/v1"))
        async with forwarding(f"{up}/v1", http_client) as gateway:
            proxied = await gateway.post("/v1/chat/completions", json={"model": "m", "messages": []})
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with forwarding(f"{up}/v1", http_client) as gateway:
            direct = await gateway.post("/v1/chat/completions", json={"model": "m", "messages": []})
    assert proxied.json() == {"via": "p"}
    assert lines == [f"POST {up}/v1/chat/completions HTTP/1.1".encode()]  # the absolute form a proxy gets
    assert direct.json() == {"via": "direct"}


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A certificate for 127.0.0.1 signed by a CA of its own (no CA store trusts it), its key, and the CA's."""
    folder = tmp_path_factory.mktemp("tls")
    ca, ca_key, csr = folder / "ca.pem", folder / "ca-key.pem", folder / "leaf.csr"
    cert, key, extensions = folder / "cert.pem", folder / "key.pem", folder / "leaf.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    new_key = ["-newkey", "rsa:2048", "-nodes"]
    for argv in (
        ["openssl", "req", "-x509", *new_key, "-days", "2", "-subj", "/CN=test CA", "-keyout", ca_key, "-out", ca],
        ["openssl", "req", *new_key, "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr],
        [
            "openssl",
            "x509",
            "-req",
            "-in",
            csr,
            "-CA",
            ca,
            "-CAkey",
            ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            extensions,
            "-out",
            cert,
        ],
    ):
        subprocess.run([str(part) for part in argv], check=True, capture_output=True, timeout=60)
    return cert, key, ca


async def test_an_https_upstream_is_verified_against_ssl_cert_file_else_the_default_store(
    certificate: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch, http_client: ClientName
) -> None:
    cert, key, ca = certificate
    answer = recording([], JSONResponse({"ok": True}))
    async with serving(answer, ssl_certfile=str(cert), ssl_keyfile=str(key)) as upstream_url:
        async with forwarding(f"{upstream_url}/v1", http_client) as gateway:
            untrusted = await gateway.post("/v1/messages", json={})
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        async with forwarding(f"{upstream_url}/v1", http_client) as gateway:
            trusted = await gateway.post("/v1/messages", json={})
    assert untrusted.status_code == 502
    failure = {"aiohttp": "certificate verify failed", "pyreqwest": "invalid peer certificate: unknownissuer"}
    assert failure[http_client] in untrusted.json()["error"]["message"].lower()
    assert (trusted.status_code, trusted.json()) == (200, {"ok": True})


def test_certifi_is_the_ca_store_when_no_variable_names_one() -> None:
    import certifi

    from agentic_middleware.gateway.http_aiohttp import tls_context

    bundled = ssl.create_default_context(cafile=certifi.where()).get_ca_certs(binary_form=True)
    assert tls_context().get_ca_certs(binary_form=True) == bundled


async def test_the_clients_headers_query_and_missing_content_type_go_up_as_they_are(http_client: ClientName) -> None:
    seen: list[tuple[Request, bytes]] = []
    async with (
        serving(recording(seen, JSONResponse({}))) as upstream_url,
        forwarding(f"{upstream_url}/v1", http_client) as gateway,
    ):
        headers = [("anthropic-beta", "a-1"), ("anthropic-beta", "b-2"), ("x-api-key", "k"), ("cookie", "c=1")]
        await gateway.post("/v1/messages?beta=true", content=b'{"model":"m"}', headers=headers)
        await gateway.post(
            "/v1/chat/completions?api-version=2024-10-21", content=b"{}", headers={"content-type": "x/y"}
        )
    (messages, body), (chat, _) = seen
    assert body == b'{"model":"m"}'
    assert "content-type" not in messages.headers  # none was sent, none is made up
    assert messages.headers.getlist("anthropic-beta") == ["a-1", "b-2"]
    assert (messages.headers["x-api-key"], messages.headers.get("cookie")) == ("k", None)
    assert messages.url.query == "beta=true"
    assert (chat.url.query, chat.headers["content-type"]) == ("api-version=2024-10-21", "x/y")


async def test_repeated_retry_and_rate_limit_headers_come_back_and_others_do_not(http_client: ClientName) -> None:
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
    async with serving(recording([], answer)) as upstream_url, forwarding(f"{upstream_url}/v1", http_client) as gateway:
        response = await gateway.post("/v1/messages", json={})
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, http_client: ClientName
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    config = tmp_path / "gateway.yaml"
    config.write_text("agentic_middleware:\n  error_details: false\n")
    monkeypatch.setenv("AGENTIC_CONFIG", str(config))
    monkeypatch.setenv("AGENTIC_UPSTREAM", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("AGENTIC_HTTP_CLIENT", http_client)
    async with LifespanManager(app_from_env()) as started:
        transport = httpx.ASGITransport(app=started.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            response = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
    assert response.status_code == 502
    error = response.json()["error"]
    kind = {"aiohttp": "ClientConnectorError", "pyreqwest": "ConnectError"}[http_client]
    assert (error["code"], error["message"]) == ("upstream", f"the upstream failed: {kind}")
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
