"""Requests beside a Responses route that name a response by id, for ids the chain store holds a record of.

`POST <route>/compact` and `POST <route>/input_tokens` build a model context from `previous_response_id` as a
follow-up does, so theirs is rewritten the same way (chains.py), and their answers show the client's id.

`DELETE <route>/{id}` of an id recorded for this caller follows the app: the client's DELETE goes to the app first,
and only a 2xx of it lets the middleware go on; any other answer reaches the client as the app sent it, the record
kept. Then the response the record chains to (the turn's last, which holds the whole turn) is deleted with the
client's headers; once the app confirms it (2xx, or 404: it is not stored), the record is dropped and the client
gets the app's answer to its DELETE. When that delete fails, the client gets a 502 in OpenAI's shape, code
`chained_delete_failed`, and the record stays, marked deleted: the same DELETE sent again (the SDKs retry a 502)
goes straight on to the chained response. Everything else under the route passes through untouched.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi import json_start, read_body, replay, scope_unencoded, scope_with_body_length
from .chains import Chains, ChainsUnavailable
from .shown import ShownIds
from .surfaces.chat import openai_error_body

logger = logging.getLogger("agentic_middleware")

# The endpoints under a Responses route that take `previous_response_id`.
CONTEXT_ENDPOINTS = frozenset({"compact", "input_tokens"})


async def beside(
    chains: Chains, app: ASGIApp, scope: Scope, receive: Receive, send: Send, last: str, max_body_bytes: int
) -> None:
    """One request under a Responses route; `last` is its path's last segment."""
    if scope["method"] == "DELETE":
        await _delete(chains, app, scope, receive, send, last)
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
        if type(body) is dict and (resumed := await resume_beside(chains, body, scope, send, max_body_bytes)):
            body, scope, send = resumed
            raw = orjson.dumps(body)
            scope = scope_with_body_length(scope, len(raw))
    await app(scope, replay(raw, receive, more_body=not complete), send)


async def resume_beside(
    chains: Chains, body: dict[str, Any], scope: Scope, send: Send, max_body_bytes: int
) -> tuple[dict[str, Any], Scope, Send] | None:
    """A request beside the route whose `previous_response_id` names a recorded turn, chained from the turn's last
    response (its answer read on the way out, to show the client's id again); None when there is nothing to chain."""
    if "previous_response_id" not in body:
        return None
    resumed = await chains.resume(body, scope)
    if resumed is None:
        return None
    shown = ShownIds(send, max_body_bytes)
    shown.hide(resumed["previous_response_id"], body["previous_response_id"])
    return resumed, scope_unencoded(scope), shown


class _Answer:
    """The `send` of an app's answer to a DELETE, held: the middleware decides what the client gets."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.status: int | None = None

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        self.messages.append(message)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    async def replay(self, send: Send) -> None:
        for message in self.messages:
            await send(message)


async def _delete(chains: Chains, app: ASGIApp, scope: Scope, receive: Receive, send: Send, response_id: str) -> None:
    """A client's DELETE of an id: as sent when this caller has no record of it; else as the module says."""
    try:
        key, chain = await chains.lookup(scope, response_id)
    except ChainsUnavailable as error:  # whether the id holds a hidden response is unknown: refused, to be retried
        await _error(send, 503, f"the response was not deleted: {error}; send the DELETE again", "chains_unavailable")
        return
    if chain is None:
        await app(scope, receive, send)
        return
    chained = chain["previous_response_id"]
    path = f"{scope['path'].rpartition('/')[0]}/{chained}"
    internal = {**scope, "path": path, "raw_path": path.encode(), "query_string": b""}  # before the app changes it
    answer = None
    if not chain.get("deleted"):
        answer = _Answer()
        await app(scope, receive, answer)
        if not answer.ok:
            await answer.replay(send)  # the app did not delete it (not this caller's, or it failed): record kept
            return
        await chains.mark_deleted(key, chain)
    if chained != response_id:
        status = await _delete_internal(app, internal)
        if status is None or not (200 <= status < 300 or status == 404):
            logger.warning("deleting %r, which %r chains to, was answered %s", chained, response_id, status)
            message = (
                f"{response_id} was deleted, but the stored response that holds its turn could not be (the app "
                f"answered {status or 'with an error'}): send the DELETE again to delete it"
            )
            await _error(send, 502, message, "chained_delete_failed")
            return
    await chains.drop(key)
    if answer is not None:
        await answer.replay(send)
        return
    body = orjson.dumps({"id": response_id, "object": "response.deleted", "deleted": True})
    await send(json_start(200, len(body)))
    await send({"type": "http.response.body", "body": body})


async def _delete_internal(app: ASGIApp, internal: Scope) -> int | None:
    """The app's status for the client's DELETE sent for the chained id (`internal`); None when it raised."""
    answer = _Answer()

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    try:
        await app(internal, receive, answer)
    except Exception:
        logger.warning("deleting %r failed", internal["path"], exc_info=True)
        return None
    return answer.status


async def _error(send: Send, status: int, message: str, code: str) -> None:
    body = openai_error_body(status, message, code)
    await send(json_start(status, len(body)))
    await send({"type": "http.response.body", "body": body})
