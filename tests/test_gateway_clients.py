"""What differs between the gateway's two HTTP clients (aiohttp and pyreqwest) and what must not: the URL that goes
up, a header's bytes, a live stream's first event, a returned header that is not text, the client named at start.

The gateway runs under uvicorn on 127.0.0.1; the upstream is a raw server that records what reached it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from agentic_middleware.gateway import Upstream, cli, model_app, serving
from agentic_middleware.gateway.http_client import ClientName, client_name

JSON = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


@pytest.fixture(params=["aiohttp", "pyreqwest"])
def http_client(request: pytest.FixtureRequest) -> ClientName:
    name: ClientName = request.param
    return name


@asynccontextmanager
async def recording(reply: bytes, heads: list[bytes], hold: asyncio.Event | None = None) -> AsyncIterator[str]:
    """A server answering every request with `reply` as raw bytes (then, with `hold`, one more event once it is
    set, and the stream's end); each request's head goes to `heads`."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(reply)
        await writer.drain()
        if hold is not None:
            await hold.wait()
            writer.write(b"e\r\ndata: second\n\n\r\n0\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


def raw_request(url: str, head: bytes) -> bytes:
    """`head` sent as it is (no client library checks or rewrites it), and the whole answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


@asynccontextmanager
async def gateway(upstream_url: str, client: ClientName) -> AsyncIterator[str]:
    model = Upstream(upstream_url, client=client)
    try:
        async with serving(model_app(model)) as url:
            yield url
    finally:
        await model.aclose()


async def test_what_a_url_may_not_hold_goes_up_percent_encoded_as_the_url_standard_writes_it(
    http_client: ClientName,
) -> None:
    """pyreqwest parses URLs as the URL standard does (a `\\` in an http path is a `/` to it, a `'` in a query
    `%27`); so that both clients send the URL the gateway checked, those characters go up percent-encoded."""
    heads: list[bytes] = []
    target = b'/v1/models/a\\b{c}|^`<>"%41?q=\'x\'&r="y"&s=%2F&t={}'  # what uvicorn takes as it is
    async with recording(JSON, heads) as upstream, gateway(upstream, http_client) as url:
        answer = await asyncio.to_thread(
            raw_request, url, b"GET " + target + b" HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n"
        )
    assert answer.startswith(b"HTTP/1.1 200")
    [head] = heads
    sent = b"/v1/models/a%5Cb%7Bc%7D%7C%5E%60%3C%3E%22%41?q=%27x%27&r=%22y%22&s=%2F&t=%7B%7D"
    assert head.split(b"\r\n")[0] == b"GET " + sent + b" HTTP/1.1"


async def test_a_header_goes_up_as_its_bytes_or_the_request_is_refused_with_nothing_sent(
    http_client: ClientName,
) -> None:
    """Both clients send header values as UTF-8: one that is UTF-8 goes up as its bytes; one that is not (a Latin-1
    byte) would go up as other bytes, and is refused in the route's shape (aiohttp sent `caf\xc3\x83\xc2\xa9` for a
    UTF-8 `café` before)."""
    heads: list[bytes] = []
    body = b'{"model":"m","messages":[]}'
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\nconnection: close\r\n"
    )
    async with recording(JSON, heads) as upstream, gateway(upstream, http_client) as url:
        for value in ("caf\u00e9".encode(), b"caf\xe9"):
            head = request + b"openai-beta: " + value + b"\r\ncontent-length: %d\r\n\r\n" % len(body)
            answers = await asyncio.to_thread(raw_request, url, head + body)
            if value == b"caf\xe9":
                assert answers.startswith(b"HTTP/1.1 400")
                assert b'"code":"invalid_header"' in answers and b'"type":"invalid_request_error"' in answers
            else:
                assert answers.startswith(b"HTTP/1.1 200")
    sent = [line for head in heads for line in head.split(b"\r\n") if line.startswith(b"openai-beta")]
    assert sent == [b"openai-beta: caf\xc3\xa9"]


async def test_a_live_streams_first_event_reaches_the_client_while_the_upstream_still_holds_the_rest(
    http_client: ClientName,
) -> None:
    """The upstream sends its second event only once the client has the first: a client that read ahead into the
    body before handing on the head (pyreqwest's default, 64 KB) would wait for ever."""
    more = asyncio.Event()
    first = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    first += b"e\r\ndata: first!\n\n\r\n"
    async with (
        recording(first, [], hold=more) as upstream,
        gateway(upstream, http_client) as url,
        httpx.AsyncClient(base_url=url) as client,
        client.stream("POST", "/v1/chat/completions", json={"stream": True}) as streaming,
    ):
        chunks = streaming.aiter_bytes()
        got = await asyncio.wait_for(anext(chunks), 10)  # a guard against a hang, not a timing
        more.set()
        rest = b"".join([chunk async for chunk in chunks])
    assert (got, rest) == (b"data: first!\n\n", b"data: second\n\n")


async def test_a_returned_header_that_is_not_text_comes_back_through_aiohttp_and_is_left_out_by_pyreqwest(
    http_client: ClientName,
) -> None:
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nx-request-id: caf\xe9\r\nrequest-id: r1\r\n"
    async with (
        recording(reply + b"Content-Length: 2\r\n\r\n{}", []) as upstream,
        gateway(upstream, http_client) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        response = await client.post("/v1/chat/completions", json={})
    assert (response.status_code, response.headers["request-id"]) == (200, "r1")
    returned = response.headers.raw
    assert ((b"x-request-id", b"caf\xe9") in returned) == (http_client == "aiohttp")


def test_auto_is_pyreqwest_when_installed_and_a_missing_or_unknown_client_names_its_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert client_name("auto") == "pyreqwest"  # the test group installs the fast extra
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *args: None)
    assert client_name("auto") == "aiohttp"
    with pytest.raises(ValueError, match=r"pip install 'agentic-middleware\[fast\]'"):
        client_name("pyreqwest")
    monkeypatch.undo()
    monkeypatch.setenv("AGENTIC_HTTP_CLIENT", "requests")
    assert cli.main(["--upstream", "http://127.0.0.1:9/v1", "--port", "0"]) == 1
    assert "--http-client / AGENTIC_HTTP_CLIENT: the HTTP client must be one of auto, aiohttp, pyreqwest" in (
        capsys.readouterr().err
    )


async def test_a_header_with_a_control_character_is_refused_naming_the_header_not_its_value(
    http_client: ClientName,
) -> None:
    """uvicorn refuses such a request itself; a server that does not (in process here) hands it on."""
    heads: list[bytes] = []
    async with recording(JSON, heads) as upstream:
        model = Upstream(upstream, client=http_client)
        transport = httpx.ASGITransport(app=model_app(model))
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            answer = await client.post("/v1/chat/completions", content=b"{}", headers={"x-api-key": b"sk-se\x7fcret"})
        await model.aclose()
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "invalid_header")
    assert "the x-api-key header's value is not UTF-8 text" in answer.text and "sk-se" not in answer.text
    assert heads == []


@pytest.mark.parametrize("key", ["sk-operator\n", "sk-\x00x", "sk-caf\u00e9"])
def test_an_upstream_key_that_cannot_be_sent_stops_the_start_without_echoing_it(
    key: str, http_client: ClientName
) -> None:
    """A trailing newline from a secret file: sent, pyreqwest refused the key on every request with an error
    holding it, which the client read."""
    with pytest.raises(ValueError, match="the upstream API key holds a control character") as refused:
        Upstream("http://127.0.0.1:9/v1", api_key=key, client=http_client)
    assert "sk-" not in str(refused.value)


@pytest.mark.parametrize("base", ["https://API.example.com:443/v1", "http://My-GPU-Box:8000/v1", "http://h/open ai/v1"])
def test_a_base_url_the_url_standard_writes_otherwise_is_taken_by_both_clients(
    base: str, http_client: ClientName
) -> None:
    """The URL standard lower-cases a host and drops a default port: the same server. A space in the base's path
    goes up percent-encoded, as in a client's."""
    upstream = Upstream(base, client=http_client)
    assert upstream.root.endswith("/open%20ai") or upstream.root.lower().startswith(("https://api", "http://my-gpu"))


async def test_a_head_asks_for_the_answer_unencoded_through_pyreqwest_so_its_length_is_a_gets() -> None:
    heads: list[bytes] = []
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 42\r\n\r\n"
    async with (
        recording(reply, heads) as upstream,
        gateway(upstream, "pyreqwest") as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        response = await client.head("/v1/models")
    assert (response.status_code, response.headers["content-length"]) == (200, "42")
    assert b"\r\naccept-encoding: identity\r\n" in heads[0]
