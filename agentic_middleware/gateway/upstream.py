"""Forwarding to a real model server (vLLM, Ollama, llama.cpp's server, a provider): the gateway's model app.

Every path goes up as the client sent it (without the `root_path` of a mount: `forwarded_path`), any method: the
base URL is the model server's, with or without a trailing `/v1` (`http://localhost:11434` and
`http://localhost:11434/v1` are the same upstream), and a client's
`/v1/chat/completions` goes to `{server}/v1/chat/completions`, its `/v1/models` to `{server}/v1/models`, its `HEAD /`
to `{server}/`. A path with a `.` or `..` segment (between `/` or `\\`, percent-encoded or not) is refused (400),
so no client climbs out of a base such as `https://host/openai/v1`. The client's query string, credentials and API
headers go up as they are (a repeated header stays repeated, a missing one stays missing), unless the operator gives
an upstream key, which replaces the client's (see `Upstream`); the upstream's status, body and the headers a client
of the API reads (content-type, request ids, retry and rate-limit headers) come back as they are, errors and
redirects included, and a stream comes back chunk by chunk. A status that is no final HTTP status (not 200 to 599:
a 101, a 999), which uvicorn cannot answer (the client got an empty reply), is a 502 in the route's shape instead.

The client is `aiohttp`: measured side by side against the same upstream (`python -m benchmarks --case 5`), a POST
costs it about a third of the CPU of httpx over the `httpx-aiohttp` transport and a tenth of plain httpx's, and a
gateway spends most of its time in these POSTs. Whatever can be decided once (the proxy, the TLS context, the URLs)
is decided when the gateway starts, not on each request.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import ssl
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from typing import Literal

import aiohttp
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Scope
from yarl import URL

from ..routes import route_path
from .wire import MODEL_ROUTES, Route, error_response, route_of

FORWARDED_HEADERS = frozenset({b"authorization", b"x-api-key", b"api-key", b"content-type", b"accept"})
FORWARDED_PREFIXES = (b"anthropic-", b"openai-")
KEY_HEADERS = frozenset({b"authorization", b"x-api-key", b"api-key"})  # `api-key`: Azure OpenAI's
RETURNED_HEADERS = frozenset(
    {
        b"content-type",
        b"retry-after",
        b"retry-after-ms",
        b"x-should-retry",
        b"request-id",
        b"x-request-id",
        b"cache-control",
    }
)
RETURNED_PREFIXES = (b"anthropic-", b"openai-", b"x-ratelimit-")
"""The SDKs read `retry-after(-ms)` and `x-should-retry` to decide on a retry; rate-limit headers tell a client its
budget. Not returned: hop-by-hop and body-encoding headers (the body comes back decoded), `set-cookie` (a cookie is
one client's), `location` (a redirect's status and body come back, but the gateway does not point a client with its
credentials at a host the upstream names)."""
TIMEOUT = aiohttp.ClientTimeout(total=None, connect=600.0, sock_connect=10.0, sock_read=600.0)
"""10 s to open a connection, 600 s to wait for a free one or between two reads: a long answer is never cut."""


class Upstream:
    """A model app that forwards each request to the model server at `base_url` through one pooled
    `aiohttp.ClientSession`.

    The pool keeps up to `connections` keep-alive connections (size it for the gateway's concurrency: a request
    beyond it waits for a free one). The session is opened on the first request, in the server's event loop, so
    that each worker process of a multi-worker server has its own. With `error_details=False` a 502 of the gateway's
    own does not name the upstream's address or the error's text, only the error's kind.

    With `api_key`, the client's own key never goes up: the key header the client sent (`x-api-key`, Azure's
    `api-key` or `authorization`) carries `api_key` instead (`authorization: Bearer <api_key>`), and a request that
    sent none
    gets the one its API family uses (`x-api-key` for Anthropic's, under /v1/messages or with an
    `anthropic-version` header; `authorization` otherwise).

    `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` are read once, here, as httpx read them when its client was
    made; an https upstream is verified against `SSL_CERT_FILE`/`SSL_CERT_DIR` when one is set, else certifi's CA
    bundle when certifi is installed (what httpx used), else the system's store.
    """

    def __init__(
        self, base_url: str, connections: int = 100, error_details: bool = True, api_key: str | None = None
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"the upstream must be an http(s) URL such as http://localhost:8000/v1, got {base_url!r}")
        parsed = URL(base_url)
        if not parsed.host or parsed.query_string or parsed.fragment:
            raise ValueError(f"the upstream must be a base URL with a host and no query, got {base_url!r}")
        if parsed.raw_user is not None or parsed.raw_password is not None:
            # Not echoed: the URL holds a secret. In a URL it would be in every 502 a client reads and in the
            # logs, and aiohttp refuses to send it next to the client's own `authorization`.
            raise ValueError(
                "the upstream URL must not hold credentials (user:password@): give the key in "
                "AGENTIC_UPSTREAM_API_KEY instead"
            )
        if api_key is not None and (not api_key.isascii() or _CONTROL.search(api_key)):
            # Not echoed either. A trailing newline from a secret file is the usual one; sent, it would split the
            # header, and a library's error for it would carry the key.
            raise ValueError(
                "the upstream API key holds a control character (a trailing newline?) or a non-ASCII one: remove it"
            )
        if re.search(r"[\x00-\x20\x7f]", base_url):  # a parser drops a tab: `127.0.\t0.1:1893` is port 18933 to it
            raise ValueError(f"the upstream URL holds a control character or a space (write it %20): {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.root = self.base_url.removesuffix("/v1")  # what a client's path is appended to
        self.connections = connections
        self.error_details = error_details
        self.api_key = api_key
        self.proxy = env_proxy(URL(self.root + "/"))
        self._model_urls = {path.encode(): URL(self.root + path, encoded=True) for path in MODEL_ROUTES}
        """The upstream URL of each model route's own path, sent as written without a query: built once, as the
        loop calls these paths on every round (a path with a query, or written otherwise, is checked and built
        on each request)."""
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            tls = tls_context() if self.base_url.startswith("https://") else True
            connector = aiohttp.TCPConnector(limit=self.connections, ssl=tls)
            # No cookie jar: cookies the upstream sets belong to one client and must not go up with another's.
            # No made-up Content-Type: a request without one goes up without one.
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=TIMEOUT,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("Content-Type",),
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __call__(self, request: Request, route: Route) -> Response:
        return await self._forward(request, route)

    async def forward(self, request: Request) -> Response:
        return await self._forward(request, route_of(request.url.path))

    async def _forward(self, request: Request, route: Route) -> Response:
        scope = request.scope
        path = forwarded_path(scope)
        query = scope["query_string"]
        url = None if query else self._model_urls.get(path)
        if url is None:  # not one of the model routes as written, or with a query: checked and built here
            if not path.startswith(b"/") or _climbs(path):
                return error_response(route, 400, "the path must be absolute, without '.' or '..' segments")
            target = self.root + path.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
            try:
                url = URL(target, encoded=True)
            except ValueError:
                return error_response(route, 400, "the path or query is not a valid URL")
        method: str = scope["method"]
        if method != method.upper():  # aiohttp sends it upper-cased: a method other than the one judged (paths.py)
            return error_response(route, 400, f"the method must be in upper case, got {method!r}", "invalid_method")
        try:
            headers = self._headers(scope["headers"], route)
        except UnsendableHeader as error:
            return error_response(route, 400, str(error), "invalid_header")
        if method == "HEAD":  # the answer's length unencoded, as a GET's body comes back (decoded)
            headers.append(("accept-encoding", "identity"))
        body = await request.body()
        try:
            # No redirect is followed: it would resend the client's credentials to wherever the upstream points.
            answer = await self.session.request(
                method, url, data=body or None, headers=headers, allow_redirects=False, proxy=self.proxy
            )
        except (aiohttp.ClientError, TimeoutError) as error:
            return self._failed(route, url, error)
        if not 200 <= answer.status <= 599:  # what uvicorn can answer: relayed, a 999 or a 101 ends in no reply
            answer.close()  # not back to the pool: after a 101 the connection speaks another protocol
            message = f"the upstream answered with status {answer.status}, which is no final HTTP status"
            return error_response(route, 502, message, "upstream")
        returned = [
            (lower, value)
            for name, value in answer.raw_headers
            if (lower := name.lower()) in RETURNED_HEADERS or lower.startswith(RETURNED_PREFIXES)
        ]
        if answer.content_type == "text/event-stream":
            response: Response = StreamingResponse(_relay(answer), answer.status)
        else:
            try:
                content = await answer.read()
            except (aiohttp.ClientError, TimeoutError) as error:
                return self._failed(route, url, error)
            finally:
                answer.release()
            response = Response(content, answer.status)
            if method == "HEAD" and (length := answer.headers.get("content-length")) is not None:
                response.headers["content-length"] = length  # the length a GET would have had, as HEAD says
        response.raw_headers.extend(returned)  # a repeated header stays repeated
        return response

    def _headers(self, raw: list[tuple[bytes, bytes]], route: Route) -> list[tuple[str, str]]:
        """The client's headers that go up; with an upstream key, the client's key is replaced by it. aiohttp sends
        a value as UTF-8, so each is read as UTF-8 and goes up as its bytes; one that is not UTF-8 (it would go up
        as other bytes), or that holds a control character (uvicorn refuses those itself; another server may hand
        them on), raises UnsendableHeader."""
        forwarded = [(n, v) for n, v in raw if n in FORWARDED_HEADERS or n.startswith(FORWARDED_PREFIXES)]
        if self.api_key is not None:
            sent = {name for name, _ in forwarded if name in KEY_HEADERS}
            if not sent:
                anthropic = route == "messages" or any(name == b"anthropic-version" for name, _ in forwarded)
                sent = {b"x-api-key" if anthropic else b"authorization"}
            forwarded = [(n, v) for n, v in forwarded if n not in KEY_HEADERS]
            if b"x-api-key" in sent:
                forwarded.append((b"x-api-key", self.api_key.encode("latin-1")))
            if b"api-key" in sent:
                forwarded.append((b"api-key", self.api_key.encode("latin-1")))
            if b"authorization" in sent:
                forwarded.append((b"authorization", f"Bearer {self.api_key}".encode("latin-1")))
        headers: list[tuple[str, str]] = []
        for name, value in forwarded:
            try:
                text = value.decode()
            except UnicodeDecodeError:
                raise UnsendableHeader(name) from None
            if _CONTROL.search(text):
                raise UnsendableHeader(name)
            headers.append((name.decode("latin-1"), text))
        return headers

    def _failed(self, route: Route, url: URL, error: BaseException) -> Response:
        """The upstream could not be reached or broke off: a 502 in the route's own error shape. The error's text
        loses any `user:password@` of a URL in it: aiohttp names the proxy's URL, credentials and all, when the
        proxy refuses or breaks off."""
        if not self.error_details:
            return error_response(route, 502, f"the upstream failed: {type(error).__name__}", "upstream")
        text = _USERINFO.sub(r"\1", f"{error}")
        return error_response(route, 502, f"upstream {url} failed: {type(error).__name__}: {text}", "upstream")


Family = Literal["anthropic", "openai"]


class Upstreams:
    """Two model servers, one per API family: Anthropic's (`/v1/messages` and its sub-paths, and any request with
    an `anthropic-version` header, as the Anthropic SDK sends on every call, `/v1/models` included) and OpenAI's
    (everything else)."""

    def __init__(self, anthropic: Upstream, openai: Upstream) -> None:
        self.anthropic = anthropic
        self.openai = openai

    def pick(self, request: Request) -> Upstream:
        if route_of(request.url.path) == "messages" or "anthropic-version" in request.headers:
            return self.anthropic
        return self.openai

    async def __call__(self, request: Request, route: Route) -> Response:
        return await self.pick(request)(request, route)

    async def forward(self, request: Request) -> Response:
        return await self.pick(request).forward(request)

    async def aclose(self) -> None:
        await self.anthropic.aclose()
        await self.openai.aclose()


def forwarded_path(scope: Scope) -> bytes:
    """The path a request goes up by: the one the gateway judged, without the `root_path` of a mount (a Starlette
    `Mount("/gw")`, uvicorn's `--root-path`), since the model server serves `/v1/...`, not `/gw/v1/...`.

    As the client wrote it (`raw_path`, percent-encoding kept) where that can be read: a `raw_path` that already is
    the routed path (from an ASGI server that leaves the prefix out of it) goes up as it is; one that holds the
    prefix (a `Mount`; uvicorn's `--root-path`, which puts it in `path` and `raw_path` both) goes up without it.
    One whose prefix is written otherwise than `root_path` (`/g%77/...`) goes up as the routed path, quoted."""
    path: str = scope["path"]
    raw: bytes | None = scope.get("raw_path")
    routed = route_path(scope)
    if routed == path:  # nothing mounted: the hot path
        return raw or urllib.parse.quote(path).encode()
    if raw:
        written = urllib.parse.unquote(raw.decode("latin-1"))
        if written == routed:
            return raw
        root = scope["root_path"].encode("latin-1", "replace")
        if written == path and raw.startswith(root):
            return raw[len(root) :]
    return urllib.parse.quote(routed).encode()


def _climbs(path: bytes) -> bool:
    """Whether a path has a `.` or `..` segment, percent-encoded or not, with `\\` (or `%5C`) taken as a segment
    separator too: a browser reads `\\` in an http URL as `/` (the WHATWG URL standard), and so do servers that
    decode `%5C` before they resolve a path (Windows and IIS, some frameworks), so `/v1/%5C..%5Cadmin` climbs out of
    the base there. Refused rather than normalised: no client of a model API sends one, and a path rewritten here
    could mean one thing to the gateway and another to the upstream. A segment's `;` parameters are cut off first
    (`/v1/..;/admin`: Tomcat and servers like it drop them and then resolve `..`), and tabs and newlines removed
    (`/v1/..%09`: the WHATWG URL standard and Python's `urllib.parse` remove them)."""
    decoded = re.sub(r"[\t\n\r]", "", urllib.parse.unquote(path.decode("latin-1")))
    segments = re.split(r"[/\\]", decoded)
    return any(segment.split(";")[0] in (".", "..") for segment in segments)


class UnsendableHeader(ValueError):
    """A client's header value that cannot go up as it came; the message names the header, not its value (it may
    be a key)."""

    def __init__(self, name: bytes) -> None:
        super().__init__(f"the {name.decode('latin-1')} header's value is not UTF-8 text: it cannot go up as it came")


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""A control character but a tab: what an HTTP field value may not hold."""
_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s'\"]*@")
"""A URL's `user:password@` in an error's text (`_failed` keeps the scheme and drops the rest)."""


def env_proxy(url: URL) -> str | None:
    """The proxy the environment names for `url`'s scheme (`HTTP_PROXY`, `HTTPS_PROXY`), unless `NO_PROXY` covers it:
    a host, a domain and its subdomains, `*`, as the standard library reads it, or an IP network (`10.0.0.0/8`,
    `fd00::/8`), as curl and Go read one and Kubernetes clusters write it, which the standard library does not."""
    proxy = urllib.request.getproxies().get(url.scheme)
    host = url.host or ""
    if proxy is None or urllib.request.proxy_bypass(host) or _in_no_proxy_network(host):
        return None
    return proxy


def _in_no_proxy_network(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False  # a name: never resolved to match a network (curl's rule too)
    listed = os.environ.get("no_proxy") or os.environ.get("NO_PROXY") or ""
    for entry in listed.split(","):
        entry = entry.strip()
        if "/" in entry:
            with contextlib.suppress(ValueError):
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
    return False


def tls_context() -> ssl.SSLContext:
    """The CA store an https upstream is verified against; see `Upstream`."""
    if os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context()  # OpenSSL reads both variables for its default paths
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


async def _relay(answer: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The upstream's chunks as they come. At the end the connection goes back to the pool; when the stream stops
    early (the client left, the upstream broke off), `release` closes it instead, so the pool never hands it out."""
    try:
        async for chunk in answer.content.iter_any():
            yield chunk
    finally:
        answer.release()
