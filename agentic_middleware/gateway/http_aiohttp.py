"""`Upstream`'s client over `aiohttp` (the `gateway` extra): one pooled `ClientSession` per upstream."""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Iterable, Sequence

import aiohttp
from yarl import URL

from .http_client import CONNECT_TIMEOUT, READ_TIMEOUT, UpstreamError

TIMEOUT = aiohttp.ClientTimeout(total=None, connect=READ_TIMEOUT, sock_connect=CONNECT_TIMEOUT, sock_read=READ_TIMEOUT)
"""aiohttp's `connect` is the wait for a free connection of the pool and the connecting both; `sock_connect` the
connecting alone."""


class AiohttpClient:
    """An https upstream is verified against `SSL_CERT_FILE`/`SSL_CERT_DIR` when one is set, else certifi's CA
    bundle when certifi is installed (what httpx used), else the system's store."""

    def __init__(self, https: bool, proxy: str | None, connections: int, fixed: Iterable[str]) -> None:
        self.https = https
        self.proxy = proxy
        self.connections = connections
        self._fixed = {url: URL(url, encoded=True) for url in fixed}
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.connections, ssl=tls_context() if self.https else True)
            # No cookie jar: cookies the upstream sets belong to one client and must not go up with another's.
            # No made-up Content-Type: a request without one goes up without one.
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=TIMEOUT,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("Content-Type",),
            )
        return self._session

    def check(self, url: str) -> None:
        URL(url, encoded=True)  # raises ValueError; sent as written otherwise

    async def send(self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes) -> AiohttpAnswer:
        target = self._fixed.get(url) or URL(url, encoded=True)
        try:
            answer = await self.session.request(
                method, target, data=body or None, headers=headers, allow_redirects=False, proxy=self.proxy
            )
        except (aiohttp.ClientError, TimeoutError) as error:
            raise UpstreamError(type(error).__name__, str(error)) from error
        return AiohttpAnswer(answer)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class AiohttpAnswer:
    def __init__(self, answer: aiohttp.ClientResponse) -> None:
        self._answer = answer
        self.status = answer.status
        self.content_type = answer.content_type if "content-type" in answer.headers else ""

    def headers(self, wanted: frozenset[bytes], prefixes: tuple[bytes, ...]) -> list[tuple[bytes, bytes]]:
        return [
            (lower, value)
            for name, value in self._answer.raw_headers
            if (lower := name.lower()) in wanted or lower.startswith(prefixes)
        ]

    def header(self, name: str) -> str | None:
        return self._answer.headers.get(name)

    async def read(self) -> bytes:
        try:
            return await self._answer.read()
        except (aiohttp.ClientError, TimeoutError) as error:
            raise UpstreamError(type(error).__name__, str(error)) from error
        finally:
            self._answer.release()

    async def chunks(self) -> AsyncIterator[bytes]:
        # `release` returns a connection read to its end to the pool, and closes one stopped early.
        try:
            async for chunk in self._answer.content.iter_any():
                yield chunk
        finally:
            self._answer.release()


def tls_context() -> ssl.SSLContext:
    """The CA store an https upstream is verified against; see `AiohttpClient`."""
    if os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context()  # OpenSSL reads both variables for its default paths
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())
