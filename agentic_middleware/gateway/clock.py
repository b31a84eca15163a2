"""The demo's MCP server, written with the `mcp` SDK: `local_time(city)` from fixed UTC offsets (no network, no tz
database). `--demo` starts it over stdio (`python -m agentic_middleware.gateway.clock`, as demo.yaml says);
`--port N` serves it over streamable HTTP at http://127.0.0.1:N/mcp instead.
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentic_middleware.gateway.clock", description=__doc__)
    parser.add_argument("--port", type=int, help="serve streamable HTTP on 127.0.0.1:PORT instead of stdio")
    args = parser.parse_args(argv)
    if args.port is None:
        build().run("stdio")
    else:
        build().run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
