"""agentic_middleware.gateway.clock: the demo's MCP server, through the mcp SDK's own client."""

from __future__ import annotations

from datetime import UTC, datetime

from mcp import Client

from agentic_middleware.gateway.clock import build, local_time


def test_local_time_reads_the_citys_offset() -> None:
    noon = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert local_time("tokyo", noon) == "It is 21:00 in Tokyo (UTC+09:00)."
    assert local_time("Mumbai", noon) == "It is 17:30 in Mumbai (UTC+05:30)."
    assert local_time("New York", noon) == "It is 07:00 in New York (UTC-05:00)."


async def test_the_server_lists_local_time_and_an_unknown_city_is_a_tool_error() -> None:
    async with Client(build()) as client:
        (tool,) = (await client.list_tools()).tools
        assert (tool.name, tool.input_schema["required"]) == ("local_time", ["city"])
        result = await client.call_tool("local_time", {"city": "Atlantis"})
    assert result.is_error
    assert "unknown city 'Atlantis'" in result.content[0].text  # type: ignore[union-attr]
