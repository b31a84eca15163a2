"""MCP servers that go away, option values of the wrong shape, several servers in one turn, and name clashes:
against real MCP servers written with the `mcp` SDK (tests/mcp_server.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mcp.server.mcpserver import MCPServer
from support import Route
from test_mcp import MCPHTTPServer, answer_with_results, ask, declared, gateway, mcp_http, results, route

from agentic_middleware import ConfigurationError, ServerTools, load_config, server_tool
from agentic_middleware.mcp import MCPTools
from agentic_middleware.testing import ScriptedModel

__all__ = ["mcp_http", "route"]  # the fixtures, used by name


async def test_a_single_name_is_one_name_not_its_characters(mcp_http: MCPHTTPServer, route: Route) -> None:
    hook = MCPTools(mcp_http.url, allowed_tools="[dw]e*", denied_tools="weather", forward_headers="Authorization")
    assert (hook.allowed_tools, hook.denied_tools, hook.forward_headers) == (
        ("[dw]e*",),
        ("weather",),
        ("authorization",),
    )
    model = ScriptedModel(route.text("ok"))
    async with gateway(model, hook) as app:
        await ask(route, app)
    assert declared(route, model.requests[0]) == ["define"]
    with pytest.raises(ConfigurationError, match="denied_tools must be a name or a list of names"):
        MCPTools(mcp_http.url, denied_tools=[3])  # type: ignore[list-item]


def test_a_single_name_in_yaml_is_one_name(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "agentic_middleware:\n  mcp_servers:\n    - url: http://127.0.0.1:9/mcp\n"
        "      allowed_tools: search\n      denied_tools: delete_all\n      forward_headers: x-user\n"
    )
    (hook,) = load_config(config).hooks
    assert isinstance(hook, MCPTools)
    assert (hook.allowed_tools, hook.denied_tools, hook.forward_headers) == (("search",), ("delete_all",), ("x-user",))


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("{url: 'http://127.0.0.1:9/mcp', required: 'false'}", r"mcp_servers\[1\].*required must be true or false"),
        ("{url: 'http://127.0.0.1:9/mcp', headers: {X-N: 5}}", r"mcp_servers\[1\].*headers must map names to strings"),
        ("{url: 'http://'}", r"mcp_servers\[1\].*a host"),
        ("{url: 'http://x/mcp', headers: {A: os.environ/AM_NOT_SET_9}}", r"mcp_servers\[1\]\.headers\.A.*AM_NOT_SET_9"),
    ],
)
def test_yaml_values_of_the_wrong_type_stop_the_start_with_the_entrys_position(
    tmp_path: Path, entry: str, error: str
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(f"agentic_middleware:\n  mcp_servers:\n    - url: http://127.0.0.1:9/mcp\n    - {entry}\n")
    with pytest.raises(ConfigurationError, match=error):
        load_config(config)


async def test_a_call_to_a_server_that_went_away_says_unreachable_not_timed_out(
    mcp_http: MCPHTTPServer, route: Route
) -> None:
    model = ScriptedModel(
        default=lambda r: (
            route.calls(("define", {"word": "gone"})) if len(r.body["messages"]) == 1 else answer_with_results(route)(r)
        )
    )
    async with gateway(model, MCPTools(mcp_http.url, timeout=30)) as app:
        assert await ask(route, app) == "gone: a word"
        await mcp_http.stop()
        text = await ask(route, app)
    assert "unreachable" in text and "timed out" not in text


async def test_one_turn_calling_several_servers_and_local_tools_runs_them_all_in_one_rerun(
    mcp_http: MCPHTTPServer, route: Route
) -> None:
    @server_tool
    def local() -> str:
        return "here"

    calls = [("a_define", {"word": "one"}, "c1"), ("b_define", {"word": "two"}, "c2"), ("local", {}, "c3")]
    model = ScriptedModel(route.calls(*calls), answer_with_results(route))
    hooks = [MCPTools(mcp_http.url, prefix="a"), MCPTools(mcp_http.url, prefix="b"), ServerTools([local])]
    async with gateway(model, *hooks) as app:
        text = await ask(route, app)
    assert len(model.requests) == 2
    assert text == "one: a word | two: a word | here"


def _clashing() -> MCPServer:
    server = MCPServer("clashing")
    server.add_tool(lambda: "dotted", name="get.user", description="The dotted one.")
    server.add_tool(lambda: "underscored", name="get_user", description="The underscored one.")
    return server


async def test_two_tools_of_one_server_with_one_model_name_are_named_in_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = MCPHTTPServer(_clashing)
    await server.start()
    try:
        hook = MCPTools(server.url)
        async with gateway(ScriptedModel(), hook):
            assert hook.declared_tool_names() == ["get_user"]
            assert await hook.by_name["get_user"].run() is not None
    finally:
        await server.stop()
    warning = next(r.getMessage() for r in caplog.records if "would both be declared" in r.getMessage())
    assert "'get.user' and 'get_user' would both be declared as 'get_user': 'get.user' is served" in warning


async def test_an_image_alone_on_chat_is_a_note_without_a_blank_first_line(mcp_http: MCPHTTPServer) -> None:
    route = Route("chat")
    model = ScriptedModel(route.calls(("picture", {}, "c1")), route.text("done"))
    async with gateway(model, MCPTools(mcp_http.url)) as app:
        await ask(route, app)
    assert results(route, model.requests[1])["c1"][0].startswith("[image image/png: not shown")


async def test_max_connections_bounds_the_pool_and_a_call_fits_beside_those_in_flight(
    mcp_http: MCPHTTPServer,
) -> None:
    route = Route("messages")
    slow = ScriptedModel(route.calls(("slow", {}, "s1"), ("slow", {}, "s2")), route.text("slow done"))
    quick = ScriptedModel(route.calls(("define", {"word": "fits"}, "q1")), answer_with_results(route))
    hook = MCPTools(mcp_http.url, timeout=30, max_connections=4)  # the change stream, two slow calls, one more
    async with gateway(slow, hook) as slow_app, gateway(quick, hook) as quick_app:
        waiting = asyncio.ensure_future(ask(route, slow_app))
        async with asyncio.timeout(30):
            while mcp_http.connections() < 3:
                await asyncio.sleep(0.02)
        assert await ask(route, quick_app) == "fits: a word"
        assert not waiting.done()
        assert await waiting == "slow done"
    with pytest.raises(ConfigurationError, match="max_connections must be a whole number of at least 2"):
        MCPTools(mcp_http.url, max_connections=1)
