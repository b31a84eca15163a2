"""MCP sessions: a tool call runs at most once, one call's failure is its own, and sessions start and stop
together; against real MCP servers written with the `mcp` SDK (stdio, and streamable HTTP under uvicorn)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp.server.mcpserver import MCPServer
from mcp_recording_server import build as recording
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from support import Route
from test_mcp import HandshakeMCPTools, MCPHTTPServer, answer_with_results, ask, gateway, results, tools_class

from agentic_middleware import ConfigurationError, load_config
from agentic_middleware.mcp import MCPTools
from agentic_middleware.testing import ScriptedModel

__all__ = ["tools_class"]  # the fixture: each test runs with the 2026 protocol and with the handshake

RECORDING = str(Path(__file__).with_name("mcp_recording_server.py"))


async def _settled(check: Any, within: float = 30) -> None:
    async with asyncio.timeout(within):
        while not check():
            await asyncio.sleep(0.02)


def _runs(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@contextlib.contextmanager
def http_recording_server(runs: Path) -> Iterator[tuple[str, Any]]:
    """The recording server under uvicorn in a process of its own, on a socket this test holds: its URL, and a
    `restart()` that kills the process with SIGKILL and serves a new one on the same socket."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    processes: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        argv = [sys.executable, RECORDING, str(runs), "--fd", str(sock.fileno())]
        processes.append(subprocess.Popen(argv, pass_fds=[sock.fileno()]))

    start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", start
    finally:
        for process in processes:
            process.kill()
            process.wait(10)
        sock.close()


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


def _two_orders(route: Route) -> ScriptedModel:
    """order-42 in the first request, order-43 in the second; each answer says the tool's result."""

    def turn(request: Any) -> Any:
        if len(request.body["messages"]) > 1:
            return answer_with_results(route)(request)
        order = "order-43" if any("43" in str(m) for m in request.body["messages"]) else "order-42"
        return route.calls(("record", {"order": order}))

    return ScriptedModel(default=turn)


async def _ask(route: Route, app: Any, text: str) -> str:
    from conftest import anthropic_client, openai_client

    if route.name == "messages":
        reply = await anthropic_client(app).messages.create(
            model="m", max_tokens=100, messages=[{"role": "user", "content": text}]
        )
        return "".join(block.text for block in reply.content if block.type == "text")
    completion = await openai_client(app).chat.completions.create(
        model="m", messages=[{"role": "user", "content": text}]
    )
    return completion.choices[0].message.content or ""


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_call_in_flight_when_its_server_is_killed_runs_once_and_reads_outcome_unknown(
    tmp_path: Path, route: Route, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    runs = tmp_path / "runs"
    model = _two_orders(route)
    with contextlib.ExitStack() as stack:
        if transport == "stdio":
            server: Any = [sys.executable, RECORDING, str(runs)]
        else:
            server, restart = stack.enter_context(http_recording_server(runs))
        async with gateway(model, MCPTools(server, timeout=20)) as app:
            asking = asyncio.ensure_future(_ask(route, app, "order 42"))
            await _settled(lambda: len(_runs(runs)) == 1)  # the tool runs, for 2 s
            killed = int(_runs(runs)[0].split()[1])
            os.kill(killed, signal.SIGKILL)
            text = await asking
            assert _runs(runs) == [f"order-42 {killed}"]  # run once: not again on a new process
            assert "whether the tool ran is unknown" in text and "recorded" not in text
            if route.name == "messages":
                ((_, is_error),) = results(route, model.requests[1]).values()
                assert is_error is True
            # Once the session has seen the death (a later call racing that would read "unknown" too), a
            # reconnection serves later calls.
            await _settled(lambda: "the session dropped" in caplog.text)
            if transport == "http":
                restart()  # a new process on the same socket
            later = await _ask(route, app, "order 43")
    assert later == "recorded order-43"
    first, second = _runs(runs)
    assert first == f"order-42 {killed}" and second.startswith("order-43 ") and second != f"order-43 {killed}"


def _big_server() -> MCPServer:
    return recording(os.devnull)


@pytest.mark.parametrize("limit", [None, 1_000_000])
async def test_a_2_mb_result_over_http_arrives_and_three_calls_in_flight_are_unharmed(
    limit: int | None, tools_class: type[MCPTools], caplog: pytest.LogCaptureFixture
) -> None:
    route = Route("messages")
    mcp = MCPHTTPServer(_big_server)
    await mcp.start()
    calls = [("big", {"size": 2_000_000}, "b")] + [
        ("record", {"order": f"o{n}", "seconds": 1}, f"r{n}") for n in range(3)
    ]
    model = ScriptedModel(route.calls(*calls), route.text("done"))
    options = {} if limit is None else {"max_result_bytes": limit}
    try:
        async with gateway(model, tools_class(mcp.url, **options)) as app:
            assert await ask(route, app) == "done"
    finally:
        await mcp.stop()
    got = results(route, model.requests[1])
    if limit is None:
        assert got["b"] == ("x" * 2_000_000, False)
    else:
        content, is_error = got["b"]
        assert is_error and "over max_result_bytes=1000000" in content
    assert [got[f"r{n}"] for n in range(3)] == [(f"recorded o{n}", False) for n in range(3)]
    assert "dropped" not in caplog.text and "reconnect" not in caplog.text


class Answers413AsTheTypeScriptSDK:
    """The SDK's server behind the body limit of the TypeScript SDK's (npm `@modelcontextprotocol/sdk`, as
    `server-everything` serves it): a POST declared over 1 MiB is answered 413 with a JSON-RPC error of code -32000,
    the code the Python SDK gives a closed connection. (The Python SDK's own 413 is text.)"""

    def __init__(self, server: MCPServer) -> None:
        self.server = server

    def streamable_http_app(self) -> ASGIApp:
        app = self.server.streamable_http_app()

        async def limiting(scope: Scope, receive: Receive, send: Send) -> None:
            length = dict(scope.get("headers", [])).get(b"content-length", b"0")
            if scope["type"] != "http" or int(length) <= 1_048_576:
                await app(scope, receive, send)
                return
            said = "Payload Too Large: Request body must not exceed 1048576 bytes"
            body = orjson.dumps({"jsonrpc": "2.0", "error": {"code": -32000, "message": said}, "id": None})
            await send({"type": "http.response.start", "status": 413, "headers": [JSON]})
            await send({"type": "http.response.body", "body": body})

        return limiting


@pytest.mark.parametrize("limit", ["python-sdk", "typescript-sdk"])
async def test_a_413_is_that_calls_error_and_the_session_and_other_calls_go_on(
    tools_class: type[MCPTools], caplog: pytest.LogCaptureFixture, limit: str
) -> None:
    """The 413 of either SDK's servers, text or a JSON-RPC error of code -32000, is that call's error saying so
    (not "became unreachable ... whether the tool ran is unknown"), not made again; the session and the call beside
    it go on."""
    route = Route("messages")
    mcp = MCPHTTPServer(_big_server if limit == "python-sdk" else lambda: Answers413AsTheTypeScriptSDK(_big_server()))
    await mcp.start()
    calls = [("record", {"order": "y" * 10_000_000}, "huge"), ("record", {"order": "small", "seconds": 1}, "s")]
    model = ScriptedModel(route.calls(*calls), route.text("done"))
    try:
        async with gateway(model, tools_class(mcp.url)) as app:
            assert await ask(route, app) == "done"
    finally:
        await mcp.stop()
    got = results(route, model.requests[1])
    content, is_error = got["huge"]
    assert is_error and content.startswith("record failed: the MCP server answered HTTP 413: "), content
    assert "unreachable" not in content and "whether the tool ran" not in content
    if limit == "typescript-sdk":
        assert content.endswith(": Payload Too Large: Request body must not exceed 1048576 bytes")
    assert got["s"] == ("recorded small", False)
    assert "dropped" not in caplog.text and "reconnect" not in caplog.text


@pytest.mark.parametrize("utf8", [True, False], ids=["text", "not-utf-8"])
async def test_a_stdio_servers_stray_stdout_line_is_logged_not_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, utf8: bool
) -> None:
    """A stray line, even one that is not UTF-8 (which the SDK's strict decoding would leave the session hung on,
    every later call timing out), is passed over: the calls beside it and after it are served by the same process."""
    route = Route("messages")
    runs = tmp_path / "runs"
    noisy = {"bytes": not utf8}
    calls = [("noisy", noisy, "n"), ("record", {"order": "o1", "seconds": 1}, "r")]
    model = ScriptedModel(
        route.calls(*calls), route.text("done"), route.calls(("noisy", noisy, "again")), route.text("ok")
    )
    async with gateway(model, MCPTools([sys.executable, RECORDING, str(runs)], timeout=10)) as app:
        assert await ask(route, app) == "done"
        assert await ask(route, app) == "ok"
    got = results(route, model.requests[1])
    assert got["r"] == ("recorded o1", False)
    (run,) = _runs(runs)  # the concurrent call ran once
    pid = run.split()[1]
    assert got["n"] == (f"noisy pid={pid}", False)
    assert results(route, model.requests[3])["again"] == (f"noisy pid={pid}", False)  # the same process
    assert "passed over" in caplog.text and "dropped" not in caplog.text


async def test_calls_in_flight_when_the_server_forgot_the_session_each_read_their_own_404_and_run_once(
    tmp_path: Path,
) -> None:
    """Eight calls at once after the server restarted (the handshake protocol, whose sessions have ids): each is
    answered 404 to the old session's id, and the first 404 drops the session; the others are not cut under it
    (they would read "outcome unknown" for calls that ran nowhere), so every call is sent again on the new
    session and runs once."""
    route = Route("chat")
    runs = tmp_path / "runs"
    server = MCPHTTPServer(lambda: recording(str(runs)))
    await server.start()
    model = ScriptedModel(
        default=lambda r: (
            route.calls(("record", {"order": r.body["messages"][0]["content"], "seconds": 0.5}))
            if len(r.body["messages"]) == 1
            else answer_with_results(route)(r)
        )
    )
    orders = [f"c{n}" for n in range(8)]
    try:
        async with gateway(model, HandshakeMCPTools(server.url, timeout=20)) as app:
            assert await _ask(route, app, "warm") == "recorded warm"
            await server.stop()
            await server.start()  # a new server on the same port: it knows no session
            answers = await asyncio.gather(*(_ask(route, app, order) for order in orders))
    finally:
        await server.stop()
    assert answers == [f"recorded {order}" for order in orders]
    assert sorted(run.split()[0] for run in _runs(runs)) == sorted(["warm", *orders])


class Answers400ToUnknownSessions:
    """The SDK's server, answering a request for a session it does not know 400 with a JSON-RPC error, as the
    TypeScript SDK's example servers do (npm `@modelcontextprotocol/server-everything`: "Bad Request: No valid
    session ID provided") where the spec says 404."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server

    def streamable_http_app(self) -> ASGIApp:
        app = self.server.streamable_http_app()

        async def answering(scope: Scope, receive: Receive, send: Send) -> None:
            gone = False

            async def sending(message: Message) -> None:
                nonlocal gone
                if message["type"] == "http.response.start" and message["status"] == 404:
                    gone = True
                    body = orjson.dumps(
                        {"jsonrpc": "2.0", "error": {"code": -32000, "message": "Bad Request: No valid session ID"}}
                    )
                    await send({"type": "http.response.start", "status": 400, "headers": [JSON]})
                    await send({"type": "http.response.body", "body": body})
                elif not gone:
                    await send(message)

            await app(scope, receive, sending)

        return answering


JSON = (b"content-type", b"application/json")


async def test_a_server_that_forgot_the_session_and_answers_400_is_reconnected_and_the_call_not_rerun(
    tmp_path: Path, tools_class: type[MCPTools]
) -> None:
    """After the server restarts, the call sent with the old session's id gets a 400: that call's error (the
    server may not say why), then a `tools/list` finds the session gone and it is reopened, so later calls are
    served; the refused call is not run."""
    route = Route("chat")
    runs = tmp_path / "runs"
    server = MCPHTTPServer(lambda: Answers400ToUnknownSessions(recording(str(runs))))
    await server.start()
    model = ScriptedModel(
        default=lambda r: (
            route.calls(("record", {"order": r.body["messages"][0]["content"], "seconds": 0}))
            if len(r.body["messages"]) == 1
            else answer_with_results(route)(r)
        )
    )
    try:
        async with gateway(model, tools_class(server.url, timeout=10)) as app:
            assert await _ask(route, app, "o1") == "recorded o1"
            await server.stop()
            await server.start()  # a new server on the same port: it knows no session
            answers = [await _ask(route, app, "o2")]
            async with asyncio.timeout(20):
                while answers[-1] != f"recorded o{len(answers) + 1}":
                    await asyncio.sleep(0.1)
                    answers.append(await _ask(route, app, f"o{len(answers) + 2}"))
    finally:
        await server.stop()
    failed = answers[:-1]
    assert len(failed) <= 1  # only the call that found the session forgotten fails
    said = "record failed: the MCP server answered HTTP 400: "  # not "unreachable ... whether the tool ran is unknown"
    assert all(said in answer and "unknown" not in answer for answer in failed), failed
    assert [run.split()[0] for run in _runs(runs)] == ["o1", f"o{len(answers) + 1}"]  # never the refused one


class Gate:
    """An ASGI wrapper that holds each connection attempt (`initialize`, or the 2026 `server/discover`) of an MCP
    server while `holding`, writing down who was contacted."""

    def __init__(self, name: str, contacted: list[str], others: int) -> None:
        self.name = name
        self.contacted = contacted
        self.others = others  # how many other gates must be contacted before this one lets its server answer
        self.holding = True
        self.saw: list[str] | None = None  # who had been contacted when this one let its server answer
        self.attempts = 0  # connection attempts held
        self.release = asyncio.Event()

    def wrap(self, app: ASGIApp) -> ASGIApp:
        async def gated(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["method"] != "POST":
                await app(scope, receive, send)
                return
            messages: list[Message] = []
            while True:
                message = await receive()
                messages.append(message)
                if not message.get("more_body"):
                    break
            body = b"".join(m.get("body", b"") for m in messages)
            if self.holding and orjson.loads(body).get("method") in ("initialize", "server/discover"):
                self.attempts += 1
                if self.name not in self.contacted:
                    self.contacted.append(self.name)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5):  # the others are contacted meanwhile, if they start together
                        while len(self.contacted) <= self.others:
                            await asyncio.sleep(0.01)
                self.saw = list(self.contacted)
                await self.release.wait()

            async def replay() -> Message:
                return messages.pop(0) if messages else await receive()

            await app(scope, replay, send)

        return gated


class GatedServer(MCPHTTPServer):
    def __init__(self, gate: Gate) -> None:
        super().__init__(lambda: recording(os.devnull))
        self.gate = gate

    async def start(self) -> None:
        import uvicorn

        if self.sock.fileno() == -1:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(("127.0.0.1", self.port))
        app = self.gate.wrap(self.serving().streamable_http_app())
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
        self.task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started:
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def gated_servers(count: int) -> AsyncIterator[list[GatedServer]]:
    contacted: list[str] = []
    servers = [GatedServer(Gate(f"s{n}", contacted, count - 1)) for n in range(count)]
    for server in servers:
        await server.start()
    try:
        yield servers
    finally:
        for server in servers:
            server.gate.release.set()
            await server.stop()


async def test_two_servers_slow_to_answer_initialize_are_started_together() -> None:
    async with gated_servers(2) as (first, second):

        async def released() -> None:  # each server answers only once the other has been contacted (or 5 s)
            await _settled(lambda: first.gate.saw is not None and second.gate.saw is not None)
            first.gate.release.set()
            second.gate.release.set()

        releasing = asyncio.ensure_future(released())
        async with gateway(ScriptedModel(), MCPTools(first.url, prefix="a"), MCPTools(second.url, prefix="b")):
            pass
        await releasing
        # Both were contacted before either answered: started together, not one after the other.
        assert first.gate.saw == ["s0", "s1"] or first.gate.saw == ["s1", "s0"]
        assert second.gate.saw is not None and sorted(second.gate.saw) == ["s0", "s1"]


async def test_a_shutdown_during_a_hung_reconnection_does_not_wait_for_it(caplog: pytest.LogCaptureFixture) -> None:
    async with gated_servers(1) as (server,):
        server.gate.holding = False
        hook = MCPTools(server.url)
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(gateway(ScriptedModel(), hook))
            server.gate.holding = True  # the reconnection's initialize will hang
            await server.stop()
            await server.start()
            await _settled(lambda: server.gate.attempts > 0)  # reconnecting, held
            async with asyncio.timeout(15):  # the connection bound is 30 s; the shut-down does not wait it out
                await stack.aclose()
            assert not server.gate.release.is_set()  # the server never answered: the shut-down cut the wait


@pytest.mark.parametrize("limit", [None, 1_000_000])
async def test_a_large_stdio_result_arrives_whole_up_to_max_result_bytes(
    tmp_path: Path, limit: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    route = Route("messages")
    runs = tmp_path / "runs"
    calls = [("big", {"size": 3_000_000}, "b"), ("record", {"order": "o1", "seconds": 1}, "r")]
    model = ScriptedModel(route.calls(*calls), route.text("done"))
    options = {} if limit is None else {"max_result_bytes": limit}
    async with gateway(model, MCPTools([sys.executable, RECORDING, str(runs)], **options)) as app:
        assert await ask(route, app) == "done"
    got = results(route, model.requests[1])
    if limit is None:
        assert got["b"] == ("x" * 3_000_000, False)
    else:
        content, is_error = got["b"]
        assert is_error and "over max_result_bytes=1000000" in content
    assert got["r"] == ("recorded o1", False)
    assert len(_runs(runs)) == 1 and "dropped" not in caplog.text


def test_max_result_bytes_in_yaml_and_its_check(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("agentic_middleware:\n  mcp_servers:\n    - {url: 'http://x/mcp', max_result_bytes: 5000000}\n")
    (hook,) = load_config(config).hooks
    assert isinstance(hook, MCPTools) and hook.max_result_bytes == 5_000_000
    assert MCPTools("http://x/mcp").max_result_bytes == 32 * 1024 * 1024
    config.write_text("agentic_middleware:\n  mcp_servers:\n    - {url: 'http://x/mcp', max_result_bytes: big}\n")
    with pytest.raises(ConfigurationError, match=r"mcp_servers\[0\].*max_result_bytes must be a whole number"):
        load_config(config)
