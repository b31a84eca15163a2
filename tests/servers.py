"""Real ASGI servers for tests, each on 127.0.0.1 on a port of its own (bound to 0, never a fixed one)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

SERVERS = ["uvicorn", "hypercorn"]


@dataclass
class Serving:
    port: int
    stop: Callable[[], Awaitable[None]]
    """Begin a graceful shut-down, as on SIGTERM, and wait for the server to end."""


def _socket(send_buffer: int | None) -> socket.socket:
    sock = socket.socket()
    if send_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)  # inherited by accepted sockets
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.asynccontextmanager
async def serving(
    server: str,
    app: ASGIApp,
    *,
    graceful_timeout: float = 5.0,
    send_buffer: int | None = None,
    root_path: str = "",
) -> AsyncIterator[Serving]:
    """Serves `app` with `server` ("uvicorn" or "hypercorn") in this event loop until the block ends; `root_path`:
    uvicorn's `--root-path` (a proxy in front strips that prefix)."""
    sock = _socket(send_buffer)
    port = sock.getsockname()[1]
    if server == "uvicorn":
        config = uvicorn.Config(
            app, log_level="critical", lifespan="off", timeout_graceful_shutdown=graceful_timeout, root_path=root_path
        )
        instance = uvicorn.Server(config)
        task = asyncio.create_task(instance.serve(sockets=[sock]))

        async def stop() -> None:
            instance.should_exit = True
            await asyncio.wait_for(asyncio.shield(task), graceful_timeout + 10)

        while not instance.started:
            await asyncio.sleep(0.01)
    else:
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        sock.listen()
        hyper = Config()
        hyper.bind = [f"fd://{sock.dup().detach()}"]  # a copy of its own: hypercorn closes what it binds
        hyper.graceful_timeout = graceful_timeout
        hyper.loglevel = "CRITICAL"
        shutdown = asyncio.Event()
        task = asyncio.create_task(serve(app, hyper, shutdown_trigger=shutdown.wait))  # type: ignore[arg-type]

        async def stop() -> None:
            shutdown.set()
            await asyncio.wait_for(asyncio.shield(task), graceful_timeout + 10)

        await _accepting(port)
    try:
        yield Serving(port, stop)
    finally:
        if not task.done():
            await stop()
        sock.close()


async def _accepting(port: int) -> None:
    for _ in range(500):
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"nothing accepts connections on port {port}")
