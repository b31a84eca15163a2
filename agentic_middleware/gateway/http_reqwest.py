"""`Upstream`'s client over `pyreqwest` (the `fast` extra), a Rust client: one pooled `Client` per upstream.

`pyreqwest` parses URLs as the URL standard says (as browsers do), so a URL goes up only when that parse leaves it as
written (`check`; `Upstream` percent-encodes beforehand what the standard would); it refuses a header value with a
control character (`ValueError`: a 400); and it reads an upstream's header values as text, so a returned header
whose value is not (an obsolete byte above 0x7F) is left out.

An https upstream is verified against the system's CA store (read with `rustls-platform-verifier`), which
`SSL_CERT_FILE` or `SSL_CERT_DIR` replaces when set; rustls refuses a server certificate marked as a CA.

pyreqwest 0.15 does not abort a request whose caller is cancelled (a client gone before the upstream's head): its
connection stays open until the head comes, then is closed (docs/gateway.md, "Where the two differ").
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import timedelta

from pyreqwest.client import Client, ClientBuilder
from pyreqwest.exceptions import PyreqwestError
from pyreqwest.http import Url
from pyreqwest.proxy import ProxyBuilder
from pyreqwest.request import StreamRequest
from pyreqwest.response import Response

from .http_client import CONNECT_TIMEOUT, READ_TIMEOUT, UpstreamError


class ReqwestClient:
    def __init__(self, https: bool, proxy: str | None, connections: int, fixed: Iterable[str]) -> None:
        self.proxy = proxy
        self.connections = connections
        self._fixed = {url: _url(url) for url in fixed}
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            builder = (
                ClientBuilder()
                .follow_redirects(False)  # a redirect would resend the client's credentials where the upstream points
                .no_proxy()  # the environment's proxies are read once, by `Upstream`, as for aiohttp
                .max_connections(self.connections)
                .connect_timeout(timedelta(seconds=CONNECT_TIMEOUT))
                .pool_timeout(timedelta(seconds=READ_TIMEOUT))
                .read_timeout(timedelta(seconds=READ_TIMEOUT))
                .http1_lower_case_headers()  # as the client's came (ASGI servers lower-case them), as aiohttp sends
            )
            if self.proxy is not None:
                builder = builder.proxy(ProxyBuilder.all(self.proxy))
            self._client = builder.build()  # no cookie store: pyreqwest keeps none unless asked
        return self._client

    def check(self, url: str) -> None:
        _url(url)

    async def send(self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes) -> ReqwestAnswer:
        target = self._fixed.get(url) or _url(url)
        builder = self.client.request(method, target).headers(headers)  # raises ValueError for a value it cannot send
        if method == "HEAD":
            # A decoded answer loses its length (reqwest drops it with the encoding): HEAD's is the one a GET's has.
            builder = builder.header("accept-encoding", "identity")
        if body:
            builder = builder.body_bytes(body)
        # Its head first, without reading ahead into the body (pyreqwest's default waits for 64 KB of it, or its end,
        # before it gives the head: a live stream's first tokens would wait): whether the body streams is known
        # from the head.
        request = builder.streamed_read_buffer_limit(0).build_streamed()
        try:
            response = await request.__aenter__()
        except PyreqwestError as error:
            raise UpstreamError(type(error).__name__, _message(error)) from error
        return ReqwestAnswer(request, response)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()


class ReqwestAnswer:
    def __init__(self, request: StreamRequest, response: Response) -> None:
        self._request = request
        self._response = response
        self.status = response.status
        kind = self.header("content-type") or ""
        self.content_type = kind.split(";", 1)[0].strip().lower()

    def headers(self, wanted: frozenset[bytes], prefixes: tuple[bytes, ...]) -> list[tuple[bytes, bytes]]:
        returned: list[tuple[bytes, bytes]] = []
        values = self._response.headers
        for name in dict.fromkeys(values.keys()):  # lower-cased names, once each, in order
            lower = name.encode()
            if lower in wanted or lower.startswith(prefixes):
                try:
                    returned.extend((lower, value.encode()) for value in values.getall(name))
                except ValueError:  # a value that is not text: left out (module docstring)
                    continue
        return returned

    def header(self, name: str) -> str | None:
        try:
            return self._response.get_header(name)
        except ValueError:
            return None

    async def read(self) -> bytes:
        try:
            return (await self._response.bytes()).to_bytes()
        except PyreqwestError as error:
            raise UpstreamError(type(error).__name__, _message(error)) from error
        finally:
            await self._request.__aexit__(None, None, None)

    async def chunks(self) -> AsyncIterator[bytes]:
        # Leaving the request's context returns a connection read to its end to the pool, and drops one stopped early.
        try:
            reader = self._response.body_reader
            while (chunk := await reader.read_chunk()) is not None:
                yield chunk.to_bytes()
        finally:
            await self._request.__aexit__(None, None, None)


def _url(url: str) -> Url:
    """`url` parsed, when the parse leaves its path and query as written (the host may be lower-cased, a default
    port dropped: the same server); else ValueError."""
    parsed = Url(url)
    written = urllib.parse.urlsplit(url)
    query = parsed.query_string
    if parsed.path != (written.path or "/") or (query if query is not None else "") != written.query:
        raise ValueError(f"the URL would not go up as written: {url!r}")
    return parsed


def _message(error: PyreqwestError) -> str:
    """The error's innermost cause (`invalid peer certificate: UnknownIssuer`), where pyreqwest gives its causes."""
    details = getattr(error, "details", None)
    causes = details.get("causes") if isinstance(details, dict) else None
    if causes:
        return "; ".join(str(cause.get("message", "")) for cause in causes)
    return str(error)
