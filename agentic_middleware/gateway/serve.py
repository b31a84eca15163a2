"""Run an ASGI app under uvicorn inside the current event loop, for the demo and the tests."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from starlette.types import ASGIApp


@asynccontextmanager
async def serving(
    app: ASGIApp, host: str = "127.0.0.1", startup_timeout: float = 10.0, **options: Any
) -> AsyncIterator[str]:
    """Serve `app` on a free port and yield its base URL; stop the server on exit. `options` go to `uvicorn.Config`
    (with `ssl_certfile` and `ssl_keyfile` the URL is https).

    The socket is bound here (port 0) and handed to uvicorn, so no other process can take the port in between.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1, **options))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(startup_timeout):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("uvicorn stopped before it started")
                await asyncio.sleep(0.01)
        scheme = "https" if options.get("ssl_certfile") else "http"
        yield f"{scheme}://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()
