"""Forwarding to a real model server (vLLM, Ollama, a provider): the gateway's model app when AGENTIC_UPSTREAM is set.

`/v1/messages` goes to `{base_url}/messages`, `/v1/chat/completions` to `{base_url}/chat/completions` and
`/v1/responses` to `{base_url}/responses`, so `base_url` is the upstream's OpenAI-style base, e.g.
`http://localhost:11434/v1`. The client's credentials and API headers go up; the upstream's status, body and
content-type come back as they are, errors included, and a stream comes back chunk by chunk.

The client is `aiohttp`: measured side by side against the same upstream (`python -m benchmarks --case 5`), a POST
costs it about a third of the CPU of httpx over the `httpx-aiohttp` transport and a tenth of plain httpx's, and a
gateway spends most of its time in these POSTs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .wire import Route, error_response

PATHS: dict[Route, str] = {"messages": "/messages", "chat_completions": "/chat/completions", "responses": "/responses"}
FORWARDED_HEADERS = frozenset({"authorization", "x-api-key", "content-type", "accept"})
FORWARDED_PREFIXES = ("anthropic-", "openai-")
RETURNED_HEADERS = frozenset({"content-type", "retry-after", "request-id", "x-request-id"})
TIMEOUT = aiohttp.ClientTimeout(total=None, connect=600.0, sock_connect=10.0, sock_read=600.0)
"""10 s to open a connection, 600 s to wait for a free one or between two reads: a long answer is never cut."""


class Upstream:
    """A model app that forwards each request to `base_url` through one pooled `aiohttp.ClientSession`.

    The pool keeps up to `connections` keep-alive connections (size it for the gateway's concurrency: a request
    beyond it waits for a free one). The session is opened on the first request, in the server's event loop, so
    that each worker process of a multi-worker server has its own.
    """

    def __init__(self, base_url: str, connections: int = 100) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"the upstream must be an http(s) URL such as http://localhost:8000/v1, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.connections)
            # No cookie jar: cookies the upstream sets belong to one client and must not go up with another's.
            jar = aiohttp.DummyCookieJar()
            self._session = aiohttp.ClientSession(connector=connector, timeout=TIMEOUT, cookie_jar=jar)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __call__(self, request: Request, route: Route) -> Response:
        headers = {
            name: value
            for name, value in request.headers.items()
            if name in FORWARDED_HEADERS or name.startswith(FORWARDED_PREFIXES)
        }
        url = self.base_url + PATHS[route]
        body = await request.body()
        try:
            answer = await self.session.post(url, data=body, headers=headers)
        except (aiohttp.ClientError, TimeoutError) as error:
            return _failed(route, url, error)
        returned = {name: value for name, value in answer.headers.items() if name.lower() in RETURNED_HEADERS}
        if answer.content_type == "text/event-stream":
            return StreamingResponse(_relay(answer), answer.status, headers=returned)
        try:
            content = await answer.read()
        except (aiohttp.ClientError, TimeoutError) as error:
            return _failed(route, url, error)
        finally:
            answer.release()
        return Response(content, answer.status, headers=returned)


def _failed(route: Route, url: str, error: BaseException) -> Response:
    """The upstream could not be reached or broke off: a 502 in the route's own error shape."""
    return error_response(route, 502, f"upstream {url} failed: {type(error).__name__}: {error}", "upstream")


async def _relay(answer: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The upstream's chunks as they come. At the end the connection goes back to the pool; when the stream stops
    early (the client left, the upstream broke off), `release` closes it instead, so the pool never hands it out."""
    try:
        async for chunk in answer.content.iter_any():
            yield chunk
    finally:
        answer.release()
