"""Which methods are judged on a model route, and what the middleware and the gateway refuse of the others.

The guardrails, the pre-call hooks and the tool policy judge a request on a model route when its method is `POST`,
exactly. HTTP methods are case-sensitive (RFC 9110), and servers differ in what they hand on: uvicorn's h11 parser
(what plain `uvicorn` and the gateway's `[gateway]` extra run) passes `post` through as the client wrote it, and the
app behind may not care. aiohttp, the gateway's client, upper-cases it on the way up, so a `post /v1/messages` skipped
every hook and reached the model as a `POST`. Likewise a `PUT` or `PATCH` with the same body, or a `GET` with one,
reached any upstream that answers those methods on the path (a catch-all router). So, with a guardrail, a pre-call
hook or a tool policy mounted, on a model route only `POST` goes on to be judged, and of the other methods only
`GET`, `HEAD`, `OPTIONS` and `DELETE` without a body go on to the app: every other request is refused before the
app sees it (fail closed: what the hooks cannot judge does not reach the model).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Message, Receive, Scope, Send

from .asgi import json_start
from .surfaces import Surface

UNBODIED = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})
"""Methods that read or remove: without a body they ask no model anything (`GET /v1/models`,
`DELETE /v1/responses/{id}`), so they go on unjudged."""

SUB_ENDPOINTS = frozenset({"compact", "count_tokens", "input_tokens"})
"""The last segments of the paths under a model route that call or count for a model."""


def method_problem(method: str) -> str | None:
    """Why a method other than exactly `POST` cannot be judged on a model route; None for one that may go on when it
    has no body (GET, HEAD, OPTIONS, DELETE)."""
    if method == "POST" or method in UNBODIED:
        return None
    if method.upper() == "POST":
        return f"the method must be POST, in upper case (HTTP methods are case-sensitive), got {method!r}"
    return f"{method} is not judged on a model route by the guardrails, pre-call hooks or tool policy: only POST is"


def bodied_problem(method: str) -> str:
    """Why a GET, HEAD, OPTIONS or DELETE that carries a body is refused on a model route."""
    return f"a {method} with a body is not judged on a model route by the guardrails, pre-call hooks or tool policy"


async def peek_body(receive: Receive) -> tuple[bool, Receive]:
    """Whether the request carries a body, read up to its first byte, and a `receive` that gives what was read again.

    The body itself is looked at, not the headers: under HTTP/2 a request may send its body without a
    `Content-Length`."""
    read: list[Message] = []
    while True:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request":
            bodied = False  # the client left: nothing to judge, the app sees the disconnect
            break
        if message.get("body") or not message.get("more_body", False):
            bodied = bool(message.get("body"))
            break

    async def again() -> Message:
        return read.pop(0) if read else await receive()

    return bodied, again


def model_route(path: str, surface_of: Callable[[str], Surface | None]) -> Surface | None:
    """The format of the model route a path is or is under (the route, with a trailing slash, or its `compact`,
    `count_tokens` or `input_tokens`); else None."""
    trimmed = path.removesuffix("/")
    surface = surface_of(path) or surface_of(trimmed)
    if surface is None:
        base, _, last = trimmed.rpartition("/")
        surface = surface_of(base) if last in SUB_ENDPOINTS else None
    return surface


async def judged_method(
    path: str, scope: Scope, receive: Receive, send: Send, surface_of: Callable[[str], Surface | None]
) -> Receive | None:
    """For a request that is not a `POST`, with guardrails, pre-call hooks or a tool policy mounted: the `receive`
    it goes on with, or None when it was refused here with a 405 in the route's shape (`Allow: POST`).

    A path that is not a model route goes on untouched; on one, only a GET, HEAD, OPTIONS or DELETE without a body
    does."""
    surface = model_route(path, surface_of)  # the path as the app routes it (`Middleware.path_of`)
    if surface is None:
        return receive
    method = scope["method"]
    problem = method_problem(method)
    if problem is None:
        bodied, receive = await peek_body(receive)
        if not bodied:
            return receive
        problem = bodied_problem(method)
    error = surface.error_body(405, problem, "method_not_allowed")
    await send(json_start(405, len(error), [(b"allow", b"POST")]))
    await send({"type": "http.response.body", "body": error})
    return None
