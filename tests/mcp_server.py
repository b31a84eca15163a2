"""A real MCP server for the tests, written with the `mcp` SDK: `build()` for streamable HTTP, or run it over stdio
with `python tests/mcp_server.py`."""

from __future__ import annotations

import asyncio
import base64
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


class Weather(BaseModel):
    city: str
    celsius: float


def build() -> MCPServer:
    server = MCPServer("test-tools")

    @server.tool(description="Define a word.")
    def define(word: str) -> str:
        return f"{word}: a word"

    @server.tool(description="Always fails.")
    def broken() -> str:
        raise ToolError("the index is offline")

    @server.tool(description="Takes ten seconds.")
    async def slow() -> str:
        await asyncio.sleep(10)
        return "never"

    @server.tool(description="The weather in a city.")
    def weather(city: str) -> Weather:
        return Weather(city=city, celsius=21.5)

    @server.tool(description="A picture.")
    def picture() -> Image:
        return Image(data=PIXEL, format="png")

    @server.tool(description="The authorization header this server received, and its process id.")
    def whoami(ctx: Context) -> str:
        request = ctx.request_context.request
        auth = request.headers.get("authorization", "none") if request is not None else "none"
        return f"authorization={auth} pid={os.getpid()}"

    @server.tool(description="Adds the tool `grown` and tells the clients.")
    async def grow(ctx: Context) -> str:
        server.add_tool(lambda: "grown up", name="grown", description="Added at run time.")
        await ctx.notify_tools_changed()  # to `subscriptions/listen` streams (2026 protocol)
        if ctx.session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            await ctx.session.send_tool_list_changed()  # a handshake session's notification
        return "grew"

    return server


if __name__ == "__main__":
    build().run("stdio")
