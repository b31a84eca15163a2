"""What third-party MCP servers send, read once and declared so every provider takes it: a real MCP server written with
the `mcp` SDK that answers as npm's `@modelcontextprotocol/server-filesystem` and `server-memory` do (content and
structured content that repeat each other), declares a description as long as `server-sequential-thinking`'s and a
tool that runs only as an MCP task, on all three routes through the official SDKs."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any

import pytest
from conftest import openai_client
from mcp.server.mcpserver import MCPServer
from mcp_server import PIXEL
from mcp_types import CallToolResult, ImageContent, TextContent, Tool, ToolExecution
from support import Route
from test_mcp import (
    HandshakeMCPTools,
    MCPHTTPServer,
    answer_with_results,
    ask,
    declared,
    gateway,
    mcp_http,
    results,
    route,
)

from agentic_middleware.mcp import MCPTools, tool_result
from agentic_middleware.testing import ScriptedModel, function_call, response

__all__ = ["mcp_http", "route"]  # the fixtures, used by name

FILE = "".join(f"line {n}: the quick brown fox jumps over the lazy dog\n" for n in range(4000))  # ~220 KB
ENTITIES = [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]
GRAPH = {"entities": ENTITIES, "relations": [{"from": "Ada", "to": "Babbage", "relationType": "worked with"}]}
THINKING = ("A detailed tool for dynamic and reflective problem-solving through thoughts. " * 37)[:2781]
IMAGE = {"type": "image", "data": base64.b64encode(PIXEL).decode(), "mimeType": "image/png"}


class LookalikeServer(MCPServer):
    """Lists `research` as a tool that must run as a task, as a 2025-11-25 server with tasks does."""

    async def list_tools(self) -> list[Tool]:
        return [
            tool.model_copy(update={"execution": ToolExecution(task_support="required")})
            if tool.name == "research"
            else tool
            for tool in await super().list_tools()
        ]


def lookalike() -> MCPServer:
    server = LookalikeServer("lookalike")

    @server.tool(description="Read a file as text (server-filesystem's answer).")
    def read_text_file(path: str) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=FILE)], structured_content={"content": FILE})

    @server.tool(description="Read an image (server-filesystem's answer: the block, and again as structured content).")
    def read_media_file(path: str) -> CallToolResult:
        return CallToolResult(
            content=[ImageContent(type="image", data=IMAGE["data"], mime_type="image/png")],
            structured_content={"content": [IMAGE]},
        )

    @server.tool(description="Create entities (server-memory's answer: pretty JSON, and the value in one key).")
    def create_entities(entities: list[dict[str, Any]]) -> CallToolResult:
        text = json.dumps(ENTITIES, indent=2)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content={"entities": ENTITIES})

    @server.tool(description="The whole graph (server-memory's answer: pretty JSON, and the same as structured).")
    def read_graph() -> CallToolResult:
        text = json.dumps(GRAPH, indent=2)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=GRAPH)

    @server.tool(description=THINKING)
    def sequentialthinking(thought: str) -> str:
        return "noted"

    @server.tool(description="A long research job, run only as an MCP task.")
    def research(topic: str) -> str:
        return "never called"

    return server


@pytest.fixture
async def lookalike_url() -> Any:
    server = MCPHTTPServer(lookalike)
    await server.start()
    yield server.url
    await server.stop()


CALLS = [
    ("read_text_file", {"path": "/a.txt"}, "c1"),
    ("create_entities", {"entities": ENTITIES}, "c2"),
    ("read_graph", {}, "c3"),
    ("read_media_file", {"path": "/a.png"}, "c4"),
]


async def test_content_the_structured_content_repeats_is_sent_once_and_images_never_as_base64_text(
    lookalike_url: str, route: Route
) -> None:
    model = ScriptedModel(route.calls(*CALLS), route.text("done"))
    async with gateway(model, MCPTools(lookalike_url)) as app:
        assert await ask(route, app) == "done"

    got = results(route, model.requests[1])
    text, entities, graph, media = (got[f"c{n}"] for n in range(1, 5))
    assert text[0] == FILE  # once, not as JSON and then again as text
    assert entities[0] == json.dumps(ENTITIES, indent=2)
    assert graph[0] == json.dumps(GRAPH, separators=(",", ":"))  # the text that is the structured JSON: compact
    assert not any(is_error for _, is_error in got.values())
    if route.name == "messages":
        (image,) = media[0]  # the image, and nothing else
        assert image["type"] == "image" and image["source"]["data"] == IMAGE["data"]
    else:
        assert media[0].startswith("[image image/png: not shown") and IMAGE["data"] not in media[0]


async def test_on_responses_a_media_file_is_one_input_image_and_a_wrapped_text_is_sent_once(lookalike_url: str) -> None:
    calls = (
        function_call("read_media_file", {"path": "/a.png"}, "c1"),
        function_call("read_text_file", {"path": "/a.txt"}, "c2"),
    )
    model = ScriptedModel(response(*calls), response("seen"))
    async with gateway(model, MCPTools(lookalike_url)) as app:
        assert (await openai_client(app).responses.create(model="m", input="hi")).output_text == "seen"
    outputs = {item["call_id"]: item["output"] for item in model.requests[1].body["input"] if "output" in item}
    (image,) = outputs["c1"]
    assert image["type"] == "input_image" and image["image_url"] == f"data:image/png;base64,{IMAGE['data']}"
    assert outputs["c2"] == FILE


async def test_long_descriptions_are_shortened_where_the_provider_limits_them_and_task_only_tools_left_out(
    lookalike_url: str, route: Route, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agentic_middleware")
    model = ScriptedModel(route.calls(("sequentialthinking", {"thought": "a"})), answer_with_results(route))
    async with gateway(model, HandshakeMCPTools(lookalike_url)) as app:  # a 2025-11-25 server, as they are deployed
        assert await ask(route, app) == "noted"

    names = declared(route, model.requests[0])
    assert "sequentialthinking" in names and "research" not in names
    (description,) = (
        tool.get("description") or tool["function"]["description"]
        for tool in model.requests[0].body["tools"]
        if (tool.get("name") or tool["function"]["name"]) == "sequentialthinking"
    )
    if route.name == "chat":
        assert len(description) <= 1024 and description.endswith("…") and THINKING.startswith(description[:-1])
    else:
        assert description == THINKING  # Anthropic's Messages API takes it whole
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert any("'research' runs only as an MCP task" in message for message in warnings)
    assert any("sequentialthinking: its description is 2781 characters" in message for message in warnings)


async def test_a_description_over_chats_limit_goes_whole_on_responses(lookalike_url: str) -> None:
    model = ScriptedModel(response("ok"))
    async with gateway(model, MCPTools(lookalike_url)) as app:
        await openai_client(app).responses.create(model="m", input="hi")
    (tool,) = (tool for tool in model.requests[0].body["tools"] if tool["name"] == "sequentialthinking")
    assert tool["description"] == THINKING


async def test_a_name_clash_names_both_servers(lookalike_url: str) -> None:
    other = MCPHTTPServer(lookalike)
    await other.start()
    try:
        with pytest.raises(
            BaseException, match=rf"declared by both MCPTools \({lookalike_url}\) and MCPTools \({other.url}\)"
        ):
            async with gateway(ScriptedModel(), MCPTools(lookalike_url), MCPTools(other.url)):
                pass
    finally:
        await other.stop()


def test_structured_content_that_says_more_than_the_content_is_kept() -> None:
    # server-memory's delete_entities: two keys, one of them the text; and structured content with no content at all.
    said = tool_result(
        CallToolResult(
            content=[TextContent(type="text", text="Entities deleted successfully")],
            structured_content={"success": True, "message": "Entities deleted successfully"},
        )
    )
    assert said.content == '{"success":true,"message":"Entities deleted successfully"}\nEntities deleted successfully'
    assert tool_result(CallToolResult(content=[], structured_content={"items": []})).content == '{"items":[]}'
    wrapped = CallToolResult(content=[TextContent(type="text", text="5")], structured_content={"result": 5})
    assert tool_result(wrapped).content == "5"


async def test_a_tool_a_server_adds_under_a_name_another_server_serves_is_left_out_with_a_warning(
    mcp_http: MCPHTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The test server's `grow` adds a tool `grown`, which another server already serves.
    caplog.set_level(logging.WARNING, "agentic_middleware")
    other = MCPServer("other")
    other.tool(name="grown", description="The other server's.")(lambda: "the other server's grown")
    holder = MCPHTTPServer(lambda: other)
    await holder.start()
    route = Route("messages")
    model = ScriptedModel(
        route.calls(("grow", {})), answer_with_results(route), route.calls(("grown", {})), answer_with_results(route)
    )
    growing = MCPTools(mcp_http.url)
    try:
        async with gateway(model, MCPTools(holder.url), growing) as app:
            assert await ask(route, app) == "grew"
            async with asyncio.timeout(5):
                while "grown" not in growing.declared_tool_names():
                    await asyncio.sleep(0.02)
            assert await ask(route, app) == "the other server's grown"
    finally:
        await holder.stop()
    # Declared once, as the server that runs it declares it (not one server's declaration and another's call).
    (grown,) = (tool for tool in model.requests[2].body["tools"] if tool["name"] == "grown")
    assert grown["description"] == "The other server's."
    assert any(
        f"MCP server {mcp_http.url}: tool 'grown' is left out: MCPTools ({holder.url}) serves one"
        in record.getMessage()
        for record in caplog.records
    )


def smuggling() -> MCPServer:
    """A server whose images are not images: words in the media type, or as the data."""
    server = MCPServer("smuggling")

    @server.tool(description="An image whose media type is words.")
    def typed() -> CallToolResult:
        return CallToolResult(content=[ImageContent(type="image", data=IMAGE["data"], mime_type="image/pineapple")])

    @server.tool(description="An image whose data is words.")
    def worded() -> CallToolResult:
        return CallToolResult(content=[ImageContent(type="image", data="the pineapple is here", mime_type="image/png")])

    @server.tool(description="A real image, its media type in capitals.")
    def shouted() -> CallToolResult:
        return CallToolResult(content=[ImageContent(type="image", data=IMAGE["data"], mime_type="IMAGE/PNG")])

    return server


@pytest.mark.parametrize("wire", ["messages", "responses"])
async def test_an_mcp_image_that_is_none_is_an_error_result_and_a_real_one_an_image(wire: str) -> None:
    server = MCPHTTPServer(smuggling)
    await server.start()
    try:
        names = ("typed", "worded", "shouted")
        if wire == "messages":
            route = Route("messages")
            model = ScriptedModel(route.calls(*((name, {}, f"c{n}") for n, name in enumerate(names))), route.text("ok"))
        else:
            calls = (function_call(name, {}, f"c{n}") for n, name in enumerate(names))
            model = ScriptedModel(response(*calls), response("ok"))
        async with gateway(model, MCPTools(server.url)) as app:
            if wire == "messages":
                assert await ask(Route("messages"), app) == "ok"
            else:
                assert (await openai_client(app).responses.create(model="m", input="hi")).output_text == "ok"
    finally:
        await server.stop()
    rerun = model.requests[1]
    assert b"pineapple" not in rerun.raw
    if wire == "messages":
        got = results(Route("messages"), rerun)
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMAGE["data"]}}
    else:
        got = {item["call_id"]: (item["output"], None) for item in rerun.body["input"] if "output" in item}
        image = {"type": "input_image", "image_url": f"data:image/png;base64,{IMAGE['data']}"}
    error = "" if wire == "messages" else "Error: "
    types = "image/png, image/jpeg, image/gif, image/webp"
    assert got["c0"][0] == f"{error}typed failed: its image's media type is not one of {types}"
    assert got["c1"][0] == f"{error}worded failed: its image's data is not base64 of a PNG, JPEG, GIF or WebP image"
    assert got["c2"][0] == [image]
    if wire == "messages":
        assert [is_error for _, is_error in got.values()] == [True, True, False]
