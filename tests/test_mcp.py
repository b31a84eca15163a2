"""MCP servers as server tools, against real MCP servers written with the `mcp` SDK (tests/mcp_server.py), over
streamable HTTP on 127.0.0.1 and over stdio, on both routes, judged by the official SDKs."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import anthropic
import openai
import pytest
import uvicorn
from asgi_lifespan import LifespanManager
from conftest import anthropic_client, openai_client
from mcp.server.mcpserver import MCPServer
from mcp_server import build
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from support import Route

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, ServerTools, load_config, server_tool
from agentic_middleware.gateway.serve import serving
from agentic_middleware.mcp import MCPTools
from agentic_middleware.testing import RecordedRequest, ScriptedModel, function_call, response

# Starting a stdio server imports the SDK in a new process: seconds on a loaded machine, past the manager's 5 s.
PATIENT = {"startup_timeout": 60, "shutdown_timeout": 30}
STDIO = [sys.executable, str(Path(__file__).with_name("mcp_server.py"))]


class MCPHTTPServer:
    """The test MCP server under uvicorn on 127.0.0.1; `restart()` stops it and serves a fresh one on the same port."""

    def __init__(self, serving: Callable[[], Any] = build) -> None:
        self.serving = serving  # makes the MCP server
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.server: uvicorn.Server | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.sock.fileno() == -1:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(("127.0.0.1", self.port))
        self.server = uvicorn.Server(
            uvicorn.Config(self.serving().streamable_http_app(), log_level="warning", timeout_graceful_shutdown=1)
        )
        self.task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started:
            assert not self.task.done(), self.task
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        assert self.server is not None and self.task is not None
        self.server.should_exit = True
        await self.task
        self.sock.close()

    def connections(self) -> int:
        assert self.server is not None
        return len(self.server.server_state.connections)


@pytest.fixture
async def mcp_http() -> AsyncIterator[MCPHTTPServer]:
    server = MCPHTTPServer()
    await server.start()
    yield server
    if server.sock.fileno() != -1:
        await server.stop()


@pytest.fixture(params=["http", "stdio"])
async def mcp_server(request: pytest.FixtureRequest) -> AsyncIterator[str | list[str]]:
    """Where the MCP server is: a URL, or a stdio command."""
    if request.param == "stdio":
        yield STDIO
        return
    server = MCPHTTPServer()
    await server.start()
    yield server.url
    await server.stop()


class HandshakeMCPTools(MCPTools):
    mode = "legacy"  # the handshake protocol (before 2026), as most deployed servers speak it


@pytest.fixture(params=["2026", "handshake"])
def tools_class(request: pytest.FixtureRequest) -> type[MCPTools]:
    return MCPTools if request.param == "2026" else HandshakeMCPTools


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


@asynccontextmanager
async def gateway(model: Any, *hooks: object) -> AsyncIterator[AgenticLoopMiddleware]:
    """The middleware in front of `model`, started and shut down through its ASGI lifespan."""
    app = AgenticLoopMiddleware(model, hooks=list(hooks))
    async with LifespanManager(app, **PATIENT):  # type: ignore[arg-type]
        yield app


async def ask(route: Route, app: Any, **client_options: Any) -> Any:
    """One request with the route's official SDK; its final text."""
    if route.name == "messages":
        reply = await anthropic_client(app, **client_options).messages.create(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        )
        return "".join(block.text for block in reply.content if block.type == "text")
    completion = await openai_client(app, **client_options).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    return completion.choices[0].message.content


def declared(route: Route, request: RecordedRequest) -> list[str]:
    tools = request.body.get("tools") or []
    return [tool["name"] if route.name == "messages" else tool["function"]["name"] for tool in tools]


def results(route: Route, request: RecordedRequest) -> dict[str, Any]:
    """The tool results of a rerun by call id: (content, is_error)."""
    messages = request.body["messages"]
    if route.name == "messages":
        return {r["tool_use_id"]: (r["content"], r.get("is_error", False)) for r in messages[-1]["content"]}
    return {m["tool_call_id"]: (m["content"], None) for m in messages if m.get("role") == "tool"}


def answer_with_results(route: Route) -> Callable[[RecordedRequest], Any]:
    """A model turn that says the tool results it was given."""
    return lambda request: route.text(" | ".join(str(content) for content, _ in results(route, request).values()))


async def test_an_mcp_servers_tools_are_declared_and_run_on_both_routes(
    mcp_server: str | list[str], route: Route
) -> None:
    model = ScriptedModel(route.calls(("define", {"word": "ossify"}, "c1")), answer_with_results(route))
    async with gateway(model, MCPTools(mcp_server)) as app:
        text = await ask(route, app)

    assert text == "ossify: a word"
    assert {"define", "weather", "picture", "whoami"} <= set(declared(route, model.requests[0]))
    schema = next(
        tool.get("input_schema") or tool["function"]["parameters"]
        for tool in model.requests[0].body["tools"]
        if (tool.get("name") or tool["function"]["name"]) == "define"
    )
    assert schema == {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}  # no titles


class Note(BaseModel):
    title: str
    body: str = ""


UNTITLED = Note(title="Untitled")
SORTS = {"const": {"title": "asc"}, "enum": [{"title": "asc"}], "examples": [{"type": "array"}]}


def _notes() -> MCPServer:
    """A server whose tool's schema holds `title` keys as data (a default, examples, a const, an enum), beside the
    titles pydantic writes and a parameter named `title`."""
    server = MCPServer("notes")

    @server.tool(description="Create a note.")
    def create_note(
        note: Annotated[Note, Field(examples=[{"title": "Groceries", "body": "milk"}])] = UNTITLED,
        sort: Annotated[dict[str, Any], Field(json_schema_extra=SORTS)] = {"field": "title"},  # noqa: B006
        title: str = "x",
    ) -> str:
        return "created"

    return server


async def test_title_keys_in_a_declared_schemas_data_are_kept_and_its_schema_titles_dropped(route: Route) -> None:
    """Only the schema's own `title`s are dropped: a `title` key in a default, the examples, a const or an enum is
    the value the model should send, and a parameter named `title` is a parameter (`{"title": "asc"}` was `{}`)."""
    server = MCPHTTPServer(_notes)
    await server.start()
    model = ScriptedModel(route.text("ok"))
    try:
        async with gateway(model, MCPTools(server.url)) as app:
            await ask(route, app)
    finally:
        await server.stop()
    (tool,) = model.requests[0].body["tools"]
    schema = tool.get("input_schema") or tool["function"]["parameters"]
    note = {"title": {"type": "string"}, "body": {"default": "", "type": "string"}}
    assert schema == {
        "type": "object",
        "properties": {
            "note": {
                "properties": note,
                "required": ["title"],
                "type": "object",
                "default": {"title": "Untitled", "body": ""},
                "examples": [{"body": "milk", "title": "Groceries"}],
            },
            "sort": {
                "additionalProperties": True,
                "const": {"title": "asc"},
                "default": {"field": "title"},
                "enum": [{"title": "asc"}],
                "examples": [{"type": "array"}],  # data: not given `items` as an array schema would be
                "type": "object",
            },
            "title": {"default": "x", "type": "string"},
        },
    }


async def test_allow_and_deny_lists_and_a_prefix(mcp_http: MCPHTTPServer, route: Route) -> None:
    hook = MCPTools(mcp_http.url, prefix="dict", allowed_tools=["def*", "weather"], denied_tools=["weather"])
    model = ScriptedModel(route.calls(("dict_define", {"word": "apt"}, "c1")), answer_with_results(route))
    async with gateway(model, hook) as app:
        text = await ask(route, app)

    assert declared(route, model.requests[0]) == ["dict_define"]
    assert text == "apt: a word"  # the server was called with its own name, `define`


async def test_errors_timeouts_structured_content_and_images(mcp_server: str | list[str], route: Route) -> None:
    calls = [("broken", {}, "c1"), ("slow", {}, "c2"), ("weather", {"city": "Lyon"}, "c3"), ("picture", {}, "c4")]
    model = ScriptedModel(route.calls(*calls), route.text("done"))
    async with gateway(model, MCPTools(mcp_server, timeout=1.0)) as app:
        assert await ask(route, app) == "done"

    got = results(route, model.requests[1])
    broken, slow, weather, picture = (got[f"c{n}"] for n in range(1, 5))
    if route.name == "messages":
        assert broken == ("Error executing tool broken: the index is offline", True)
        assert slow == ("slow timed out after 1 s", True)
        assert weather == ('{"city":"Lyon","celsius":21.5}', False)
        content, is_error = picture
        assert not is_error and content[0]["type"] == "image"
        assert content[0]["source"]["media_type"] == "image/png" and content[0]["source"]["data"].startswith("iVBOR")
    else:
        assert broken[0].endswith("Error executing tool broken: the index is offline")
        assert slow[0].endswith("slow timed out after 1 s")
        assert weather[0] == '{"city":"Lyon","celsius":21.5}'
        assert "[image image/png: not shown" in picture[0]


async def test_the_next_call_reconnects_after_the_http_server_restarted(
    mcp_http: MCPHTTPServer, route: Route, tools_class: type[MCPTools]
) -> None:
    model = ScriptedModel(
        default=lambda r: (
            route.calls(("define", {"word": "again"}))
            if len(r.body["messages"]) == 1
            else answer_with_results(route)(r)
        )
    )
    async with gateway(model, tools_class(mcp_http.url)) as app:
        assert await ask(route, app) == "again: a word"
        await mcp_http.stop()
        await mcp_http.start()
        assert await ask(route, app) == "again: a word"


async def test_the_next_call_reconnects_after_the_stdio_server_died(
    route: Route, tools_class: type[MCPTools], caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedModel(
        default=lambda r: route.calls(("whoami", {})) if len(r.body["messages"]) == 1 else answer_with_results(route)(r)
    )
    async with gateway(model, tools_class(STDIO)) as app:
        first = await ask(route, app)
        pid = int(first.rpartition("pid=")[2])
        os.kill(pid, signal.SIGKILL)
        # The session sees the server's stdout close; a call racing that would read that its outcome is unknown.
        assert await _settled(lambda: "the session dropped" in caplog.text)
        second = await ask(route, app)
    assert second.startswith("authorization=none pid=") and int(second.rpartition("pid=")[2]) != pid


async def test_a_server_down_at_start_leaves_its_tools_out_or_fails_a_required_start(route: Route) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"  # bound, not listening: connections are refused

        @server_tool
        def local() -> str:
            return "here"

        model = ScriptedModel(route.text("no tools"))
        async with gateway(model, MCPTools(nobody, timeout=2), ServerTools([local])) as app:
            assert await ask(route, app) == "no tools"
        assert declared(route, model.requests[0]) == ["local"]

        with pytest.raises(BaseException, match="unreachable"):
            async with gateway(ScriptedModel(), MCPTools(nobody, timeout=2, required=True)):
                pass


@pytest.mark.parametrize("forward", [True, False])
async def test_the_clients_authorization_reaches_the_mcp_server_only_when_configured(
    mcp_http: MCPHTTPServer, route: Route, forward: bool
) -> None:
    model = ScriptedModel(route.calls(("whoami", {})), answer_with_results(route))
    hook = MCPTools(mcp_http.url, headers={"X-Static": "1"}, forward_headers=["Authorization"] if forward else ())
    async with gateway(model, hook) as app:
        # The openai SDK sends its key as `Authorization: Bearer`; the anthropic one is given the header.
        bearer = {"default_headers": {"Authorization": "Bearer user-7"}}
        credentials: dict[str, Any] = bearer if route.name == "messages" else {"api_key": "user-7"}
        text = await ask(route, app, **credentials)
    assert text.startswith("authorization=Bearer user-7 " if forward else "authorization=none ")


async def test_the_tool_list_is_fetched_again_when_the_server_says_it_changed(
    mcp_server: str | list[str], route: Route, tools_class: type[MCPTools]
) -> None:
    hook = tools_class(mcp_server)
    model = ScriptedModel(route.calls(("grow", {})), answer_with_results(route), route.text("ok"))
    async with gateway(model, hook) as app:
        assert await ask(route, app) == "grew"
        async with asyncio.timeout(5):
            while "grown" not in hook.declared_tool_names():
                await asyncio.sleep(0.02)
        await ask(route, app)
    assert "grown" in declared(route, model.requests[2])


async def test_two_hooks_declaring_the_same_tool_fail_the_start_and_a_prefix_mends_it(mcp_http: MCPHTTPServer) -> None:
    with pytest.raises(BaseException, match=r"'define' is declared by both .*prefix"):
        async with gateway(ScriptedModel(), MCPTools(mcp_http.url), MCPTools(STDIO)):
            pass
    async with gateway(ScriptedModel(), first := MCPTools(mcp_http.url), second := MCPTools(STDIO, prefix="b")):
        assert "define" in first.declared_tool_names() and "b_define" in second.declared_tool_names()


async def test_an_app_served_without_lifespan_opens_the_session_on_first_use(mcp_http: MCPHTTPServer) -> None:
    route = Route("chat")
    model = ScriptedModel(route.calls(("define", {"word": "lazy"})), answer_with_results(route))
    app = AgenticLoopMiddleware(model, hooks=[MCPTools(mcp_http.url)])
    assert await ask(route, app) == "lazy: a word"
    await app.lifecycle.stop()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _leftovers(before: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    return {task for task in asyncio.all_tasks() - before if task is not asyncio.current_task()}


async def _settled(check: Callable[[], bool]) -> bool:
    async with asyncio.timeout(5):
        while not check():
            await asyncio.sleep(0.02)
    return True


async def test_start_and_shutdown_leave_no_task_process_or_connection_behind(mcp_http: MCPHTTPServer) -> None:
    route = Route("chat")
    call = route.calls(("s_whoami", {}))  # the stdio server's pid
    model = ScriptedModel(default=lambda r: call if len(r.body["messages"]) == 1 else answer_with_results(route)(r))
    before = asyncio.all_tasks()

    def stdio_pid(text: str) -> int:
        return int(text.rpartition("pid=")[2])

    # Through asgi-lifespan's LifespanManager.
    async with gateway(model, MCPTools(mcp_http.url), MCPTools(STDIO, prefix="s")) as app:
        pid = stdio_pid(await ask(route, app))
        assert mcp_http.connections() >= 1
        os.kill(pid, 0)  # the stdio server runs
    assert await _settled(lambda: not _leftovers(before) and mcp_http.connections() == 0)
    assert _gone(pid)

    # Through uvicorn, with the official SDK over a real connection.
    async with serving(
        AgenticLoopMiddleware(model, hooks=[MCPTools(mcp_http.url), MCPTools(STDIO, prefix="s")])
    ) as url:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client:
            completion = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        pid = stdio_pid(completion.choices[0].message.content or "")
        os.kill(pid, 0)
    assert await _settled(lambda: not _leftovers(before) and mcp_http.connections() == 0)
    assert _gone(pid)


async def test_the_wrapped_apps_lifespan_still_runs_around_the_hooks(mcp_http: MCPHTTPServer) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        events.append("app started")
        yield
        events.append("app stopped")

    class Recorder(MCPTools):
        async def async_startup(self) -> None:
            events.append("hook starting")
            await super().async_startup()

        async def async_shutdown(self) -> None:
            events.append("hook stopping")
            await super().async_shutdown()

    app = AgenticLoopMiddleware(Starlette(lifespan=lifespan), hooks=[Recorder(mcp_http.url)])
    async with LifespanManager(app, **PATIENT):  # type: ignore[arg-type]
        assert events == ["app started", "hook starting"]
    assert events == ["app started", "hook starting", "hook stopping", "app stopped"]


def test_yaml_mcp_servers_build_the_hooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCS_KEY", "secret")
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "agentic_middleware:\n"
        "  mcp_servers:\n"
        "    - url: http://127.0.0.1:9/mcp\n"
        "      prefix: docs\n"
        "      allowed_tools: [search]\n"
        "      headers: {Authorization: os.environ/DOCS_KEY}\n"
        "      forward_headers: [x-user]\n"
        "      timeout: 5\n"
        "    - command: [python, -m, my_server]\n"
        "      required: true\n"
    )
    http, stdio = load_config(config).hooks
    assert isinstance(http, MCPTools) and isinstance(stdio, MCPTools)
    assert (http.server, http.prefix, http.allowed_tools, http.headers) == (
        "http://127.0.0.1:9/mcp",
        "docs",
        ("search",),
        {"Authorization": "secret"},
    )
    assert (http.forward_headers, http.timeout) == (("x-user",), 5)
    assert (stdio.server, stdio.required) == (["python", "-m", "my_server"], True)

    config.write_text("agentic_middleware:\n  mcp_servers:\n    - url: ftp://x\n")
    with pytest.raises(ConfigurationError, match=r"mcp_servers\[0\].*http:// or https://"):
        load_config(config)
    config.write_text("agentic_middleware:\n  mcp_servers:\n    - url: http://x/mcp\n      prefixx: a\n")
    with pytest.raises(ConfigurationError, match=r"unknown option.*prefixx"):
        load_config(config)


def test_importing_the_package_does_not_import_mcp() -> None:
    code = "import sys, agentic_middleware; print('mcp' in sys.modules, 'agentic_middleware.mcp' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split() == [
        "False",
        "False",
    ]


async def test_mcp_tools_run_on_the_responses_route_with_images_as_input_images(mcp_http: MCPHTTPServer) -> None:
    calls = function_call("define", {"word": "gist"}, "c1"), function_call("picture", {}, "c2")
    model = ScriptedModel(response(*calls), response("seen"))
    async with gateway(model, MCPTools(mcp_http.url)) as app:
        result = await openai_client(app).responses.create(model="m", input="hi")

    assert result.output_text == "seen"
    assert {"define", "picture"} <= {tool["name"] for tool in model.requests[0].body["tools"]}
    outputs = {item["call_id"]: item["output"] for item in model.requests[1].body["input"] if "output" in item}
    assert outputs["c1"] == "gist: a word"
    (image,) = outputs["c2"]
    assert image["type"] == "input_image" and image["image_url"].startswith("data:image/png;base64,iVBOR")


async def test_forwarded_headers_are_not_mixed_between_concurrent_requests(mcp_http: MCPHTTPServer) -> None:
    route = Route("chat")
    call = route.calls(("whoami", {}))
    model = ScriptedModel(default=lambda r: call if len(r.body["messages"]) == 1 else answer_with_results(route)(r))
    async with gateway(model, MCPTools(mcp_http.url, forward_headers=["authorization"])) as app:
        answers = await asyncio.gather(*(ask(route, app, api_key=f"user-{n}") for n in range(8)))
    assert [answer.partition(" pid=")[0] for answer in answers] == [f"authorization=Bearer user-{n}" for n in range(8)]


def test_a_required_server_down_fails_the_gateways_start_under_uvicorn(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        config = tmp_path / "gateway.yaml"
        config.write_text(
            "agentic_middleware:\n"
            f"  mcp_servers: [{{url: 'http://127.0.0.1:{sock.getsockname()[1]}/mcp', required: true}}]\n"
        )
        argv = [sys.executable, "-m", "agentic_middleware.gateway", "--port", "0", "--config", str(config)]
        done = subprocess.run(argv, cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3  # uvicorn's exit status for a failed start-up
    assert "Application startup failed" in done.stderr and "is unreachable" in done.stderr


async def test_without_lifespan_a_required_server_down_answers_503_in_the_routes_shape() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        app = AgenticLoopMiddleware(
            ScriptedModel(), hooks=[MCPTools(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", required=True)]
        )
        with pytest.raises(anthropic.APIStatusError) as raised:
            await ask(Route("messages"), app)
    assert raised.value.status_code == 503
    assert "server tools are unavailable" in raised.value.message and "unreachable" in raised.value.message


async def test_a_streaming_client_gets_the_answer_an_mcp_tool_made(mcp_http: MCPHTTPServer) -> None:
    route = Route("messages")
    model = ScriptedModel(route.calls(("define", {"word": "flow"})), answer_with_results(route))
    async with (
        gateway(model, MCPTools(mcp_http.url)) as app,
        anthropic_client(app).messages.stream(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        final = await stream.get_final_message()
    assert [block.text for block in final.content if block.type == "text"] == ["flow: a word"]


async def test_a_server_without_a_change_stream_keeps_its_session(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "agentic_middleware")
    server = MCPServer("quiet", subscriptions=False)  # serves no `subscriptions/listen`
    server.tool(name="echo", description="Echo.")(lambda text: text)
    route = Route("chat")
    call = route.calls(("echo", {"text": "same session"}))
    model = ScriptedModel(default=lambda r: call if len(r.body["messages"]) == 1 else answer_with_results(route)(r))
    async with serving(server.streamable_http_app()) as url, gateway(model, MCPTools(f"{url}/mcp")) as app:
        assert await ask(route, app) == "same session"
        await asyncio.sleep(0.3)
        assert await ask(route, app) == "same session"
    assert "no change stream" in caplog.text
    assert "dropped" not in caplog.text and "connection failed" not in caplog.text
