"""The HTTP client `Upstream` forwards through, behind one small interface: `aiohttp` (the `gateway` extra) or
`pyreqwest` (the `fast` extra), whichever `AGENTIC_HTTP_CLIENT` names; `auto`, the default, takes `pyreqwest` when it
is installed.

Both are chosen by measurement (benchmarks case 5, docs/performance.md): a plain POST costs `aiohttp` a third of
httpx's CPU over the `httpx-aiohttp` transport, and `pyreqwest`, a Rust client, about a fifth of `aiohttp`'s
instructions. `aiohttp` stays for where `pyreqwest` has no wheel (Alpine's musl, 32-bit systems): it needs a Rust
toolchain to build there.

What the forwarding promises (the URL and headers sent as checked, no redirect followed, the proxy and the timeouts,
the upstream's errors as a 502 in the route's shape) is `Upstream`'s; a client only sends, and turns its library's
errors into `UpstreamError`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Literal, Protocol

ClientName = Literal["auto", "aiohttp", "pyreqwest"]
CLIENT_NAMES: tuple[ClientName, ...] = ("auto", "aiohttp", "pyreqwest")
CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection to the upstream."""
READ_TIMEOUT = 600.0
"""Seconds to wait for a free connection of the pool, or between two reads: a long answer is never cut."""


class UpstreamError(Exception):
    """The upstream could not be reached, or broke off: `kind` names the library's own error (`ClientConnectorError`,
    `ConnectError`, ...), the message says what happened."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Answer(Protocol):
    """The upstream's answer once its head has come: the status and headers, then the body whole or as it comes."""

    status: int
    content_type: str
    """The media type alone, lower-cased (`text/event-stream`), or `""`."""

    def headers(self, wanted: frozenset[bytes], prefixes: tuple[bytes, ...]) -> list[tuple[bytes, bytes]]:
        """The headers whose lower-cased name is in `wanted` or starts with one of `prefixes`, names lower-cased,
        each as often as it came, in the upstream's order."""
        ...

    def header(self, name: str) -> str | None: ...

    async def read(self) -> bytes:
        """The whole body; the connection goes back to the pool. Raises `UpstreamError`."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """The body's chunks as they come. At the end the connection goes back to the pool; stopped early, it is
        closed instead, so the pool never hands it out half read."""
        ...


class HttpClient(Protocol):
    """One pooled client per `Upstream`, opened on its first request, in the server's event loop."""

    def check(self, url: str) -> None:
        """Raises `ValueError` when `url` would not go up exactly as written."""
        ...

    async def send(self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes) -> Answer:
        """Sends the request (no redirect followed; header values as UTF-8) and returns once the answer's head has
        come. Raises `UpstreamError`, or `ValueError` for a header the library cannot send as it came."""
        ...

    async def aclose(self) -> None: ...


def client_name(name: str) -> Literal["aiohttp", "pyreqwest"]:
    """The client `name` stands for (`auto`: `pyreqwest` when installed). Raises ValueError for an unknown name or
    one whose library is not installed."""
    if name not in CLIENT_NAMES:
        raise ValueError(f"the HTTP client must be one of {', '.join(CLIENT_NAMES)}, got {name!r}")
    installed = importlib.util.find_spec("pyreqwest") is not None
    if name == "auto":
        return "pyreqwest" if installed else "aiohttp"
    if name == "pyreqwest" and not installed:
        raise ValueError("the pyreqwest HTTP client needs the fast extra: pip install 'agentic-middleware[fast]'")
    return "pyreqwest" if name == "pyreqwest" else "aiohttp"


def make_client(name: str, https: bool, proxy: str | None, connections: int, fixed: Iterable[str]) -> HttpClient:
    """The client `name` stands for, sending through `proxy` (or none), at most `connections` at a time; the URLs of
    `fixed` are parsed once, here, as the loop calls them on every round."""
    if client_name(name) == "pyreqwest":
        from .http_reqwest import ReqwestClient

        return ReqwestClient(https, proxy, connections, fixed)
    from .http_aiohttp import AiohttpClient

    return AiohttpClient(https, proxy, connections, fixed)
