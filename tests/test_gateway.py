"""The gateway: the YAML-configured Starlette gateway, its demo model, and forwarding to an upstream over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from asgi_lifespan import LifespanManager
from conftest import anthropic_client, openai_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from agentic_middleware import ConfigurationError, load_config
from agentic_middleware.compression import CompressionHook
from agentic_middleware.gateway import DEMO_CONFIG, DemoModel, Upstream, create_app, model_app, serving
from agentic_middleware.gateway.cli import main
from agentic_middleware.mcp import MCPTools
from agentic_middleware.tools import ServerTools

ROOT = Path(__file__).parent.parent
PATIENT = {"startup_timeout": 60, "shutdown_timeout": 30}  # the example MCP server starts in a process of its own


def test_the_yaml_config_names_the_example_hooks_and_mcp_server() -> None:
    compression, search, clock = load_config(DEMO_CONFIG).hooks
    assert isinstance(compression, CompressionHook) and compression.threshold == 4000
    assert isinstance(search, ServerTools) and [getattr(tool, "name", None) for tool in search.tools] == ["web_search"]
    assert isinstance(clock, MCPTools) and clock.server == ["python", "-m", "agentic_middleware.gateway.clock"]
    assert load_config(DEMO_CONFIG).max_agentic_loops == 4


def test_a_broken_config_stops_the_gateway_at_creation(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("litellm_settings:\n  callbacks: [agentic_middleware.websearch.hook.no_such_hook]\n")
    with pytest.raises(ConfigurationError, match="no_such_hook"):
        create_app(config)


async def test_the_default_gateway_answers_with_web_search_and_mcp_on_every_route() -> None:
    async with LifespanManager(create_app(), **PATIENT) as started:
        await _default_gateway_answers(started.app)


async def _default_gateway_answers(app: Any) -> None:
    reply = await anthropic_client(app).messages.create(
        model="demo", max_tokens=100, messages=[{"role": "user", "content": "Who created Git?"}]
    )
    assert reply.content[0].text.startswith('According to "Git" (https://example.org/wiki/git): ')  # type: ignore[union-attr]
    completion = await openai_client(app).chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "Where is Nairobi National Park?"}]
    )
    assert completion.choices[0].message.content.startswith('According to "Nairobi"')  # type: ignore[union-attr]
    answer = await openai_client(app).responses.create(
        model="demo", input="Who created Git?", tools=[{"type": "web_search_preview"}]
    )
    assert answer.output_text.startswith('According to "Git"')
    assert [item.type for item in answer.output] == ["web_search_call", "message"]  # OpenAI's record of the search
    async with openai_client(app).responses.stream(model="demo", input="Where is Nairobi National Park?") as stream:
        streamed = await stream.get_final_response()
    assert streamed.output_text.startswith('According to "Nairobi"')
    completion = await openai_client(app).chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "What time is it in Nairobi?"}]
    )
    assert re.fullmatch(r"It is \d\d:\d\d in Nairobi \(UTC\+03:00\)\.", completion.choices[0].message.content or "")


async def test_the_gateway_forwards_to_an_upstream_over_http_under_both_sdks() -> None:
    upstream_model = DemoModel()
    async with (
        serving(model_app(upstream_model)) as upstream_url,
        serving(create_app(DEMO_CONFIG, Upstream(f"{upstream_url}/v1"))) as gateway_url,
        anthropic.AsyncAnthropic(base_url=gateway_url, api_key="x", max_retries=0) as claude,
        openai.AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key="x", max_retries=0) as gpt,
    ):
        reply = await claude.messages.create(
            model="demo",
            max_tokens=100,
            messages=[{"role": "user", "content": "What is the capital of Australia?"}],
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
        )
        completion = await gpt.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "How tall is Mount Everest?"}]
        )
        # Streaming clients get the loop too: the search runs, then the answer is streamed.
        async with claude.messages.stream(
            model="demo", max_tokens=100, messages=[{"role": "user", "content": "Who created Git?"}]
        ) as stream:
            streamed = await stream.get_final_message()
        chunks = await gpt.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "Hello again"}], stream=True
        )
        pieces = [chunk.choices[0].delta.content or "" async for chunk in chunks if chunk.choices]
        answer = await gpt.responses.create(model="demo", input="What is the capital of Australia?")

    # The client declared Anthropic's native web search: it gets the search's record, then the answer.
    assert [block.type for block in reply.content] == ["server_tool_use", "web_search_tool_result", "text"]
    assert reply.content[2].text.startswith('According to "Canberra"')  # type: ignore[union-attr]
    assert reply.usage.server_tool_use is not None and reply.usage.server_tool_use.web_search_requests == 1
    assert reply.stop_reason == "end_turn"
    assert completion.choices[0].message.content.startswith('According to "Mount Everest"')  # type: ignore[union-attr]
    assert streamed.content[0].text.startswith('According to "Git"')  # type: ignore[union-attr]
    assert "".join(pieces).startswith("You said: 'Hello again'.")
    assert answer.output_text.startswith('According to "Canberra"')
    assert upstream_model.calls == 9  # a search and an answer for each question, one call for the greeting


PATHS = ["/v1/messages", "/v1/chat/completions", "/v1/responses"]


def recording_upstream(seen: list[Request], response: Response) -> Starlette:
    async def answer(request: Request) -> Response:
        await request.body()
        seen.append(request)
        return response

    return Starlette(routes=[Route(path, answer, methods=["POST"]) for path in PATHS])


@asynccontextmanager
async def gateway_to(upstream: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the gateway (in-process), whose Upstream reaches `upstream` served by uvicorn."""
    async with serving(upstream) as upstream_url:
        forwarding = Upstream(f"{upstream_url}/v1")
        try:
            async with (
                LifespanManager(create_app(DEMO_CONFIG, forwarding), **PATIENT) as gateway,
                httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway.app), base_url="http://gw") as client,
            ):
                yield client
        finally:
            await forwarding.aclose()


@pytest.mark.parametrize("path", PATHS)
async def test_an_upstream_4xx_reaches_the_client_unchanged(path: str) -> None:
    error = b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}'
    seen: list[Request] = []
    upstream = recording_upstream(
        seen, Response(error, 401, media_type="application/json; charset=utf-8", headers={"request-id": "req_1"})
    )
    headers = {
        "x-api-key": "sk-1",
        "authorization": "Bearer sk-2",
        "anthropic-version": "2023-06-01",
        "openai-organization": "org-1",
        "cookie": "c=1",
    }
    async with gateway_to(upstream) as client:
        response = await client.post(path, json={"model": "m", "messages": [], "input": "x"}, headers=headers)

    assert response.status_code == 401
    assert response.content == error
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    assert response.headers["request-id"] == "req_1"
    (request,) = seen
    assert request.url.path == path
    for name, value in headers.items():
        assert request.headers.get(name) == (None if name == "cookie" else value)
    assert request.headers["host"] == f"127.0.0.1:{request.url.port}"


async def test_the_responses_route_is_forwarded_with_its_body_and_answer_unchanged() -> None:
    answer = b'{"id":"resp_1","object":"response","status":"completed","output":[]}'
    seen: list[Request] = []
    bodies: list[bytes] = []

    async def respond(request: Request) -> Response:
        bodies.append(await request.body())
        seen.append(request)
        return Response(answer, 200, media_type="application/json", headers={"x-request-id": "r1", "x-other": "no"})

    upstream = Starlette(routes=[Route("/v1/responses", respond, methods=["POST"])])
    body = b'{"model":"m","input":"Hello","store":false}'
    async with gateway_to(upstream) as client:
        response = await client.post("/v1/responses", content=body, headers={"content-type": "application/json"})
    assert (response.status_code, response.content, response.headers["x-request-id"]) == (200, answer, "r1")
    assert "x-other" not in response.headers
    assert seen[0].url.path == "/v1/responses"
    (forwarded,) = (json.loads(sent) for sent in bodies)  # the middleware declared the gateway's server tools
    assert {**forwarded, "tools": None} == {**json.loads(body), "tools": None}
    assert [tool["name"] for tool in forwarded["tools"]] == ["web_search", "local_time"]


async def test_cookies_the_upstream_sets_are_not_sent_up_with_the_next_request() -> None:
    seen: list[Request] = []
    upstream = recording_upstream(seen, Response(b"{}", media_type="application/json", headers={"set-cookie": "s=1"}))
    async with gateway_to(upstream) as client:
        first = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
        await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
    assert "set-cookie" not in first.headers  # only the listed headers come back
    assert [request.headers.get("cookie") for request in seen] == [None, None]


async def test_an_unreachable_upstream_is_a_502_in_each_routes_shape() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    forwarding = Upstream(f"http://127.0.0.1:{port}/v1")
    async with LifespanManager(create_app(DEMO_CONFIG, forwarding), **PATIENT) as started:
        await _unreachable(started.app, port)
    await forwarding.aclose()
    with pytest.raises(ValueError, match="http"):
        Upstream("localhost:8000")


async def _unreachable(gateway: Any, port: int) -> None:
    with pytest.raises(anthropic.APIStatusError) as raised:
        await anthropic_client(gateway).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert raised.value.status_code == 502
    assert f"upstream http://127.0.0.1:{port}/v1/messages failed" in raised.value.message
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw") as client:
        for path in ("/v1/chat/completions", "/v1/responses"):
            response = await client.post(path, json={"model": "m", "messages": [], "input": "x"})
            assert response.status_code == 502
            error = response.json()["error"]
            assert (error["type"], error["code"]) == ("server_error", "upstream")
            assert f"127.0.0.1:{port}{path} failed" in error["message"]


@asynccontextmanager
async def raw_upstream(reply: bytes, lines: list[bytes] | None = None) -> AsyncIterator[str]:
    """A server on a free port that answers every connection with `reply`, as raw bytes, then hangs up; each
    request's first line goes to `lines`."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if lines is not None:
            lines.append(head.split(b"\r\n")[0])
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


async def test_an_upstream_that_breaks_off_mid_body_is_a_502() -> None:
    cut = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"id":'
    async with raw_upstream(cut) as url:
        forwarding = Upstream(url)
        gateway = model_app(forwarding)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw") as client:
            response = await client.post("/v1/messages", json={"model": "m", "messages": []})
        await forwarding.aclose()
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "api_error"
    assert "failed" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "status_line",
    [b"HTTP/1.1 999 Weird", b"HTTP/1.1 101 Switching Protocols", b"HTTP/1.1 600 Beyond"],
    ids=["999", "101", "600"],
)
@pytest.mark.parametrize("route", ["/v1/messages", "/v1/models"])
async def test_an_upstream_status_no_client_can_be_given_is_a_502(status_line: bytes, route: str) -> None:
    """uvicorn answers only the final statuses 200 to 599 (it has a status line for 100-599, and a 1xx is no final
    answer): relayed, a 999 or a 101 broke the gateway's reply off and the client got an empty one. Under uvicorn,
    as a client meets it, a model route and a forwarded path both answer a 502 in the route's shape instead."""
    reply = status_line + b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    async with raw_upstream(reply) as upstream_url:
        forwarding = Upstream(upstream_url)
        async with serving(model_app(forwarding)) as url, httpx.AsyncClient(base_url=url) as client:
            if route == "/v1/models":
                response = await client.get(route)
            else:
                response = await client.post(route, json={"model": "m", "max_tokens": 5, "messages": []})
        await forwarding.aclose()
    assert response.status_code == 502
    status = status_line.split()[1].decode()
    error = response.json()["error"]
    assert error["message"] == f"the upstream answered with status {status}, which is no final HTTP status"
    if route == "/v1/messages":
        assert response.json()["type"] == "error" and error["type"] == "api_error"


@pytest.mark.parametrize("path", PATHS)
async def test_a_stream_is_forwarded_chunk_by_chunk(path: str) -> None:
    """The upstream mode's model app streams what the upstream streams (a stream no hook takes part in)."""
    first_arrived = asyncio.Event()

    async def events() -> AsyncIterator[bytes]:
        yield b'data: {"n": 1}\n\n'
        await first_arrived.wait()  # the second chunk only exists once the client has the first
        yield b'data: {"n": 2}\n\ndata: [DONE]\n\n'

    upstream = recording_upstream([], StreamingResponse(events(), media_type="text/event-stream"))
    async with (
        serving(upstream) as upstream_url,
        serving(model_app(Upstream(f"{upstream_url}/v1"))) as gateway_url,
        httpx.AsyncClient(base_url=gateway_url) as client,
        asyncio.timeout(3),
    ):
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
        async with client.stream("POST", path, json=body) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            chunks = response.aiter_bytes()
            assert await anext(chunks) == b'data: {"n": 1}\n\n'
            first_arrived.set()
            assert b"".join([chunk async for chunk in chunks]) == b'data: {"n": 2}\n\ndata: [DONE]\n\n'


async def test_a_stream_the_client_leaves_early_frees_its_upstream_connection() -> None:
    """One pooled connection: after a client leaves a stream halfway, the next request still gets through."""
    release = asyncio.Event()

    async def respond(request: Request) -> Response:
        body = await request.json()
        if not body.get("stream"):
            return Response(b'{"ok":true}', media_type="application/json")

        async def events() -> AsyncIterator[bytes]:
            yield b"data: 1\n\n"
            await release.wait()
            yield b"data: 2\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    upstream = Starlette(routes=[Route("/v1/chat/completions", respond, methods=["POST"])])
    async with (
        serving(upstream) as upstream_url,
        serving(model_app(Upstream(f"{upstream_url}/v1", connections=1))) as gateway_url,
        httpx.AsyncClient(base_url=gateway_url) as client,
        asyncio.timeout(5),
    ):
        async with client.stream("POST", "/v1/chat/completions", json={"stream": True}) as response:
            assert await anext(response.aiter_bytes()) == b"data: 1\n\n"
        # the client hung up with the upstream's stream still open; its one connection must not stay taken
        response = await client.post("/v1/chat/completions", json={"stream": False})
        release.set()
    assert response.json() == {"ok": True}


async def test_the_demo_model_answers_a_responses_stream_it_is_asked_for_directly() -> None:
    transport = httpx.ASGITransport(app=model_app(DemoModel()))
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as client:
        response = await client.post("/v1/responses", json={"model": "demo", "input": "Hello", "stream": True})
        bad = await client.post("/v1/responses", json={"model": "demo", "input": {"x": 1}})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert b"You said: 'Hello'" in response.content and b"response.completed" in response.content
    assert bad.status_code == 400 and "input string or list" in bad.json()["error"]["message"]


def test_the_gateway_serves_with_two_workers(tmp_path: Path) -> None:
    """`--workers 2` starts two uvicorn worker processes behind one socket; requests get the loop in either."""
    log = tmp_path / "gateway.log"
    argv = [sys.executable, "-m", "agentic_middleware.gateway", "--port", "0", "--workers", "2", "--no-access-log"]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "Application startup complete" not in log.read_text() or len(started(log)) < 2:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        port = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", log.read_text())
        assert port is not None, log.read_text()
        client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port[1]}", api_key="x", max_retries=0)
        for _ in range(4):
            reply = client.messages.create(
                model="demo", max_tokens=100, messages=[{"role": "user", "content": "Who created Git?"}]
            )
            assert reply.content[0].text.startswith('According to "Git"')  # type: ignore[union-attr]
    finally:
        process.terminate()
        process.wait(20)
    assert len(started(log)) == 2


async def test_sigterm_with_a_request_hung_upstream_cuts_it_after_the_shutdown_timeout(tmp_path: Path) -> None:
    """A stop is not held by a request in flight for the upstream's 600 s read timeout: `--shutdown-timeout` bounds
    it (uvicorn's own default waits for every connection to close)."""
    arrived = asyncio.Event()

    async def hanging(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            arrived.set()
            await asyncio.Event().wait()

    log = tmp_path / "gateway.log"
    async with serving(hanging) as upstream:
        argv = [sys.executable, "-m", "agentic_middleware.gateway", "--upstream", upstream, "--port", "0"]
        with log.open("wb") as out:
            process = subprocess.Popen([*argv, "--shutdown-timeout", "1"], cwd=ROOT, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + 60
            while (port := re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", log.read_text())) is None:
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()
                await asyncio.sleep(0.05)
            async with httpx.AsyncClient(timeout=120) as client:
                call = asyncio.create_task(client.get(f"http://127.0.0.1:{port[1]}/v1/models"))
                await asyncio.wait_for(arrived.wait(), 30)
                process.terminate()
                code = await asyncio.to_thread(process.wait, 60)
                with pytest.raises(httpx.HTTPError):
                    (await call).raise_for_status()
        finally:
            process.kill()
    assert code in (0, -15), log.read_text()  # uvicorn re-raises the SIGTERM it handled once it has stopped


def started(log: Path) -> list[str]:
    return re.findall(r"Started server process \[\d+\]", log.read_text())


def test_the_demo_command_prints_every_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--demo"]) == 0
    out = capsys.readouterr().out
    assert 'A: According to "Canberra"' in out
    assert 'A: According to "Mount Everest"' in out
    assert 'A: According to "Git"' in out
    assert "called 8 times for these 4 requests" in out
    assert re.search(r"A: It is \d\d:\d\d in Tokyo \(UTC\+09:00\)\.", out)


def test_serving_the_gateway_imports_neither_fastapi_nor_a_websocket_library() -> None:
    """What the start-up is made of: the app as each uvicorn worker builds it, in front of an upstream, loads neither
    FastAPI nor a websocket library: it serves with neither, and importing them cost each start about 0.2 s of CPU."""
    script = (
        "import sys, uvicorn\n"
        "from agentic_middleware.gateway.cli import main\n"
        "uvicorn.run = lambda target, **options: uvicorn.Config(target, **options).load()\n"
        "main(['--port', '0'])\n"
        "print(sorted({name.partition('.')[0] for name in sys.modules} & {'fastapi', 'websockets', 'wsproto'}))"
    )
    env = {"AGENTIC_UPSTREAM": "http://127.0.0.1:9/v1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


def worker_thresholds(**variables: str) -> list[int]:
    """The collector's thresholds in a fresh process once it built the gateway as each uvicorn worker does."""
    code = "import gc, json; from agentic_middleware.gateway.environment import app_from_env; app_from_env(); "
    code += "print(json.dumps(gc.get_threshold()))"
    environ = {key: value for key, value in os.environ.items() if not key.startswith("AGENTIC_")}
    done = subprocess.run([sys.executable, "-c", code], env={**environ, **variables}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    thresholds: list[int] = json.loads(done.stdout)
    return thresholds


def test_each_worker_sets_the_collectors_first_threshold_as_the_flag_or_variable_says() -> None:
    python = worker_thresholds(AGENTIC_GC_THRESHOLD="0")
    assert python[0] == 700  # 0: Python's own
    assert worker_thresholds() == [10_000, *python[1:]]  # the default (docs/performance.md, case 12)
    assert worker_thresholds(AGENTIC_GC_THRESHOLD="2500") == [2500, *python[1:]]
    with pytest.raises(SystemExit):  # a bad flag is argparse's error, before anything starts
        main(["--gc-threshold", "-1"])
