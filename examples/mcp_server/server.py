"""The server's one tool: the local time in a few cities, from fixed UTC offsets (no network, no tz database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

UTC_OFFSETS = {"London": 0, "Paris": 1, "Nairobi": 3, "Mumbai": 5.5, "Tokyo": 9, "Sydney": 11, "New York": -5}


def local_time(city: str, now: datetime | None = None) -> str:
    """The local time in `city` as a sentence; an unknown city is a tool error the model reads."""
    offset = UTC_OFFSETS.get(city.strip().title())
    if offset is None:
        raise ToolError(f"unknown city {city!r}; known: {', '.join(UTC_OFFSETS)}")
    time = (now or datetime.now(UTC)) + timedelta(hours=offset)
    sign = "+" if offset >= 0 else "-"
    hours, minutes = divmod(int(abs(offset) * 60), 60)
    return f"It is {time:%H:%M} in {city.strip().title()} (UTC{sign}{hours:02d}:{minutes:02d})."


def build() -> MCPServer:
    server = MCPServer("clock", instructions="The local time in a few cities.")

    @server.tool(name="local_time", description=f"The current local time in a city: {', '.join(UTC_OFFSETS)}.")
    def tool(city: str) -> str:
        return local_time(city)

    return server
