"""Forwarding to a real model server (vLLM, Ollama, a provider): the gateway's model app when AGENTIC_UPSTREAM is set.

`/v1/messages` goes to `{base_url}/messages` and `/v1/chat/completions` to `{base_url}/chat/completions`, so
`base_url` is the upstream's OpenAI-style base, e.g. `http://localhost:11434/v1`. The client's credentials and API
headers go up; the upstream's status, body and content-type come back as they are, errors included, and a stream
comes back chunk by chunk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .wire import Route, error_response

PATHS: dict[Route, str] = {"messages": "/messages", "chat_completions": "/chat/completions"}
FORWARDED_HEADERS = frozenset({"authorization", "x-api-key", "content-type", "accept"})
FORWARDED_PREFIXES = ("anthropic-", "openai-")
RETURNED_HEADERS = frozenset({"content-type", "retry-after", "request-id", "x-request-id"})


class Upstream:
    """A model app that forwards each request to `base_url` with one pooled `httpx.AsyncClient`."""

    def __init__(self, base_url: str, client: httpx.AsyncClient | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"the upstream must be an http(s) URL such as http://localhost:8000/v1, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.client = client or httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0))

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __call__(self, request: Request, route: Route) -> Response:
        headers = {
            name: value
            for name, value in request.headers.items()
            if name in FORWARDED_HEADERS or name.startswith(FORWARDED_PREFIXES)
        }
        url = self.base_url + PATHS[route]
        outgoing = self.client.build_request("POST", url, headers=headers, content=await request.body())
        try:
            answer = await self.client.send(outgoing, stream=True)
        except httpx.HTTPError as error:
            return error_response(route, 502, f"upstream {url} failed: {type(error).__name__}: {error}", "upstream")
        returned = {name: value for name, value in answer.headers.items() if name in RETURNED_HEADERS}
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            return StreamingResponse(_relay(answer), answer.status_code, headers=returned)
        try:
            body = await answer.aread()
        except httpx.HTTPError as error:
            return error_response(route, 502, f"upstream {url} failed: {type(error).__name__}: {error}", "upstream")
        finally:
            await answer.aclose()
        return Response(body, answer.status_code, headers=returned)


async def _relay(answer: httpx.Response) -> AsyncIterator[bytes]:
    """The upstream's chunks as they come; the connection goes back to the pool when the stream ends or fails."""
    try:
        async for chunk in answer.aiter_bytes():
            yield chunk
    finally:
        await answer.aclose()
