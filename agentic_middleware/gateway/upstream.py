"""Forwarding to a real model server (vLLM, Ollama, llama.cpp's server, a provider): the gateway's model app.

Every path goes up as the client sent it (without the `root_path` of a mount: `forwarded_path`), any method: the
base URL is the model server's, with or without a trailing `/v1` (`http://localhost:11434` and
`http://localhost:11434/v1` are the same upstream), and a client's `/v1/chat/completions` goes to
`{server}/v1/chat/completions`, its `/v1/models` to `{server}/v1/models`, its `HEAD /` to `{server}/`. A path with a
`.` or `..` segment (between `/` or `\\`, percent-encoded or not) is refused (400), so no client climbs out of a
base such as `https://host/openai/v1`. The client's query string, credentials and API headers go up as they are (a
repeated header stays repeated, a missing one stays missing; the characters a URL may not hold as they are, such as
a space, `"`, `\\`, `{` or a byte above 0x7F, and a `'` in the query, go up percent-encoded, as the URL standard
writes them, so both clients send the URL the gateway checked), unless the operator gives an upstream key, which
replaces the client's (see `Upstream`); the upstream's status, body and the headers a client of the API reads
(content-type, request ids, retry and rate-limit headers) come back as they are, errors and redirects included, and
a stream comes back chunk by chunk.

The HTTP client is `pyreqwest` when the `fast` extra is installed, else `aiohttp` (`http_client.py`; both chosen by
measurement, `AGENTIC_HTTP_CLIENT` picks one). Whatever can be decided once (the proxy, the TLS context, the model
routes' URLs) is decided when the gateway starts, not on each request.
"""

from __future__ import annotations

import re
import urllib.parse
import urllib.request
from typing import Literal

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Scope

from ..routes import route_path
from .http_client import ClientName, HttpClient, UpstreamError, client_name, make_client
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
PATH_SAFE = "/:@!$&'()*+,;=-._~%"
"""What a path holds as it is: RFC 3986's unreserved and reserved characters but `[` and `]` (only a host holds
them), and `%` (an escape already made). The rest (a space, `"`, `<`, `>`, `[`, `]`, `\\`, `^`, `` ` ``, `{`,
`|`, `}`, controls, bytes above 0x7F) goes up percent-encoded, as the URL standard writes it: `pyreqwest` parses
URLs by it, and would send `\\` as `/`."""
INVALID_HEADER = "invalid_header"
QUERY_SAFE = PATH_SAFE.replace("'", "") + "?"
"""In a query the URL standard percent-encodes a `'` too (for http and https)."""


class Upstream:
    """A model app that forwards each request to the model server at `base_url` through one pooled HTTP client
    (`client`: `auto`, `aiohttp` or `pyreqwest`; see `http_client.py`).

    The pool keeps up to `connections` keep-alive connections (size it for the gateway's concurrency: a request
    beyond it waits for a free one). The client is opened on the first request, in the server's event loop, so
    that each worker process of a multi-worker server has its own. With `error_details=False` a 502 of the gateway's
    own does not name the upstream's address or the error's text, only the error's kind.

    With `api_key`, the client's own key never goes up: the key header the client sent (`x-api-key`, Azure's
    `api-key` or `authorization`) carries `api_key` instead (`authorization: Bearer <api_key>`), and a request that
    sent none gets the one its API family uses (`x-api-key` for Anthropic's, under /v1/messages or with an
    `anthropic-version` header; `authorization` otherwise).

    `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` are read once, here, as httpx read them when its client was made. An
    https upstream is verified as its client says (`http_aiohttp.py`, `http_reqwest.py`): against
    `SSL_CERT_FILE`/`SSL_CERT_DIR` when one is set, else certifi's bundle (aiohttp, when certifi is installed) or
    the system's store.
    """

    def __init__(
        self,
        base_url: str,
        connections: int = 100,
        error_details: bool = True,
        api_key: str | None = None,
        client: ClientName = "auto",
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"the upstream must be an http(s) URL such as http://localhost:8000/v1, got {base_url!r}")
        try:
            parsed = urllib.parse.urlsplit(base_url)
            parsed.port  # noqa: B018  (raises ValueError for a port that is not one)
        except ValueError:
            raise ValueError(f"the upstream must be a base URL with a host and no query, got {base_url!r}") from None
        if not parsed.hostname or "?" in base_url or "#" in base_url:
            raise ValueError(f"the upstream must be a base URL with a host and no query, got {base_url!r}")
        if "@" in parsed.netloc:
            # Not echoed: the URL holds a secret. In a URL it would be in every 502 a client reads and in the
            # logs, and aiohttp refuses to send it next to the client's own `authorization`.
            raise ValueError(
                "the upstream URL must not hold credentials (user:password@): give the key in "
                "AGENTIC_UPSTREAM_API_KEY instead"
            )
        if api_key is not None and not (api_key.isascii() and _sendable(api_key)):
            # Not echoed either. A trailing newline from a secret file is the usual one; sent, a client library
            # refuses it on every request, and its error would carry the key.
            raise ValueError(
                "the upstream API key holds a control character (a trailing newline?) or a non-ASCII one: remove it"
            )
        self.base_url = base_url.rstrip("/")
        origin = f"{parsed.scheme}://{parsed.netloc}"
        base_path = self.base_url[len(origin) :].removesuffix("/v1")
        self.root = origin + _as_sent(base_path, PATH_SAFE)  # what a client's path is appended to
        self.connections = connections
        self.error_details = error_details
        self.api_key = api_key
        self.proxy = env_proxy(parsed.scheme, parsed.hostname)
        self._model_urls = {path.encode(): self.root + path for path in MODEL_ROUTES}
        """The upstream URL of each model route's own path, sent as written without a query: the loop calls these
        paths on every round, so they are checked and parsed once (a path with a query, or written otherwise, is
        checked and built on each request)."""
        self.client_name = client_name(client)
        self.client: HttpClient = make_client(
            self.client_name, self.base_url.startswith("https://"), self.proxy, connections, self._model_urls.values()
        )

    async def aclose(self) -> None:
        await self.client.aclose()

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
            url = self.root + _as_sent(path, PATH_SAFE) + (f"?{_as_sent(query, QUERY_SAFE)}" if query else "")
            try:
                self.client.check(url)
            except ValueError:
                return error_response(route, 400, "the path or query is not a valid URL")
        method: str = scope["method"]
        if method != method.upper():  # a client may send it upper-cased: a method other than the one judged (paths.py)
            return error_response(route, 400, f"the method must be in upper case, got {method!r}", "invalid_method")
        try:
            headers = self._headers(scope["headers"], route)
        except UnsendableHeader as error:
            return error_response(route, 400, str(error), INVALID_HEADER)
        body = await request.body()
        try:
            # No redirect is followed: it would resend the client's credentials to wherever the upstream points.
            answer = await self.client.send(method, url, headers, body)
        except UpstreamError as error:
            return self._failed(route, url, error)
        except ValueError:  # what `_headers` did not foresee; the library's text may hold a value: not echoed
            return error_response(route, 400, "a header value cannot be sent as it came", INVALID_HEADER)
        returned = answer.headers(RETURNED_HEADERS, RETURNED_PREFIXES)
        if answer.content_type == "text/event-stream":
            response: Response = StreamingResponse(answer.chunks(), answer.status)
        else:
            try:
                content = await answer.read()
            except UpstreamError as error:
                return self._failed(route, url, error)
            response = Response(content, answer.status)
            if method == "HEAD" and (length := answer.header("content-length")) is not None:
                response.headers["content-length"] = length  # the length a GET would have had, as HEAD says
        response.raw_headers.extend(returned)  # a repeated header stays repeated
        return response

    def _headers(self, raw: list[tuple[bytes, bytes]], route: Route) -> list[tuple[str, str]]:
        """The client's headers that go up; with an upstream key, the client's key is replaced by it. Raises
        UnsendableHeader for a value that is not UTF-8 (both clients send values as UTF-8: it would go up as other
        bytes) or holds a control character (pyreqwest refuses one; ASGI servers refuse CR, LF and NUL before)."""
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
            if not _sendable(text):
                raise UnsendableHeader(name)
            headers.append((name.decode("latin-1"), text))
        return headers

    def _failed(self, route: Route, url: str, error: UpstreamError) -> Response:
        """The upstream could not be reached or broke off: a 502 in the route's own error shape."""
        if not self.error_details:
            return error_response(route, 502, f"the upstream failed: {error.kind}", "upstream")
        return error_response(route, 502, f"upstream {url} failed: {error.kind}: {error}", "upstream")


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


def env_proxy(scheme: str, host: str) -> str | None:
    """The proxy the environment names for `scheme` (`HTTP_PROXY`, `HTTPS_PROXY`), unless `NO_PROXY` covers `host`."""
    proxy = urllib.request.getproxies().get(scheme)
    if proxy is None or urllib.request.proxy_bypass(host):
        return None
    return proxy


class UnsendableHeader(ValueError):
    """A client's header value that cannot go up as it came; the message names the header, not its value (it may
    be a key)."""

    def __init__(self, name: bytes) -> None:
        super().__init__(f"the {name.decode('latin-1')} header's value is not UTF-8 text: it cannot go up as it came")


def _sendable(value: str) -> bool:
    """Whether a header value holds no control character but a tab (what HTTP allows in a field value)."""
    return not _CONTROL.search(value)


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _as_sent(part: bytes | str, safe: str) -> str:
    """`part` of a URL with what it may not hold as it is percent-encoded (`PATH_SAFE`); a str is taken as UTF-8."""
    return urllib.parse.quote(part, safe=safe)
