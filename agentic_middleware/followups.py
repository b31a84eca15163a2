"""Requests beside a Responses route that name a response by id, for ids the chain store holds a record of.

`POST <route>/compact` and `POST <route>/input_tokens` build a model context from `previous_response_id` as a
follow-up does, so theirs is rewritten the same way (chains.py). `DELETE <route>/{id}` of a recorded id also deletes
the response the record chains to (the turn's last, which holds the whole turn) and drops the record; the client's
DELETE then goes to the app as sent. Everything else under the route passes through untouched.
"""

from __future__ import annotations

import logging

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi import read_body, replay, scope_with_body_length
from .chains import Chains

logger = logging.getLogger("agentic_middleware")

# The endpoints under a Responses route that take `previous_response_id`.
CONTEXT_ENDPOINTS = frozenset({"compact", "input_tokens"})


async def beside(
    chains: Chains, app: ASGIApp, scope: Scope, receive: Receive, send: Send, last: str, max_body_bytes: int
) -> None:
    """One request under a Responses route; `last` is its path's last segment."""
    if scope["method"] == "DELETE":
        await _delete_chained(chains, app, scope, last)
        await app(scope, receive, send)
        return
    request = await read_body(receive, max_body_bytes)
    if request is None:
        return  # the client left before its request was complete
    raw, complete = request
    if complete and raw and len(raw) <= max_body_bytes:  # over the limit: passed on as sent, as follow-ups are
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if type(body) is dict and "previous_response_id" in body:
            resumed = await chains.resume(body)
            if resumed is not None:
                raw = orjson.dumps(resumed)
                scope = scope_with_body_length(scope, len(raw))
    await app(scope, replay(raw, receive, more_body=not complete), send)


async def _delete_chained(chains: Chains, app: ASGIApp, scope: Scope, response_id: str) -> None:
    """Delete the response a recorded id chains to, with the client's headers, and drop the record."""
    chained = await chains.forget(response_id)
    if chained is None:
        return
    path = f"{scope['path'].rpartition('/')[0]}/{chained}"
    internal = {**scope, "path": path, "raw_path": path.encode(), "query_string": b""}
    answer: list[int] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer.append(message["status"])

    try:
        await app(internal, receive, send)
    except Exception:
        logger.warning("deleting %r, which %r chains to, failed", chained, response_id, exc_info=True)
        return
    if not answer or answer[0] >= 400:
        logger.warning("deleting %r, which %r chains to, was answered %s", chained, response_id, answer or None)
