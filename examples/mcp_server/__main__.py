"""`python -m examples.mcp_server [--port N]`: over stdio, or over streamable HTTP on 127.0.0.1:N."""

from __future__ import annotations

import argparse

from .server import build


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.mcp_server", description=__doc__)
    parser.add_argument("--port", type=int, help="serve streamable HTTP on 127.0.0.1:PORT instead of stdio")
    args = parser.parse_args()
    if args.port is None:
        build().run("stdio")
    else:
        build().run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
