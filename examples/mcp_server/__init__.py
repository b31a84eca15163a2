"""A small MCP server written with the `mcp` SDK: `local_time(city)`. The example gateway serves its tool.

python -m examples.mcp_server                 # over stdio (how the gateway's config.yaml starts it)
python -m examples.mcp_server --port 8001     # over streamable HTTP at http://127.0.0.1:8001/mcp
"""

from .server import build

__all__ = ["build"]
