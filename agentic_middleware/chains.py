"""Follow-ups by `previous_response_id` after a Responses turn whose id names an incomplete stored response.

The app stores each response with its context, and a store like OpenAI's refuses a follow-up whose context holds a
`function_call` without its output. Some turns end with an id that names such a response: a live stream's id is the
first round's (the SDKs' stream helpers need one id from `response.created` to the end), and a turn refused without
a closing call (`closing="text"`, or a server call next to a client's call) ends on a response whose server calls
never ran. For those, and only those, a small record is kept under the id the client got: the response to chain
from (the turn's last) and the items the follow-up must carry first (an output for each server call left
unanswered). A request whose `previous_response_id` names a record is rewritten before any call of the app.

This is the one state the middleware keeps between requests. The default store is in the process (bounded, with a
time to live); replicas share one by passing a `ChainStore` of their own (Redis or the like) to the middleware.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import orjson
from starlette.types import Message, Send

from .asgi import media_type, with_length
from .errors import ConfigurationError
from .surfaces import field
from .surfaces.responses import CALL_TYPES, input_items
from .surfaces.responses_relay import ResponsesRelay

logger = logging.getLogger("agentic_middleware")

# What each unanswered server call's output says, by why the turn ended (as the closing call's outputs, in the past).
NOT_RUN = {
    "limit": "Not run: that request's budget of server tool calls was spent (max_agentic_loops={limit}).",
    "repeated_tool_calls": "Not run: the same call had already run in that request.",
}
NOT_RUN_OTHERWISE = "Not run: the server ended that request before running this call."


@runtime_checkable
class ChainStore(Protocol):
    """Where the records live: a mapping from the id a client got to a JSON object (`previous_response_id`, the id to
    chain from, and `input`, the items to put first). Values are plain JSON, so a shared store can keep them as
    `orjson.dumps(chain)`. `get` returns None for an id it does not hold (or no longer holds). A store may also have
    `async delete(id)`: a client's `DELETE` of a recorded id then drops its record (followups.py)."""

    async def get(self, response_id: str) -> dict[str, Any] | None: ...

    async def put(self, response_id: str, chain: dict[str, Any]) -> None: ...


class MemoryChainStore:
    """The default store: in this process, the `max_entries` most recently recorded or used ids, each for `ttl`
    seconds after it was recorded."""

    def __init__(self, max_entries: int = 4096, ttl: float = 86400.0) -> None:
        if max_entries < 1 or ttl <= 0:
            raise ConfigurationError("MemoryChainStore needs max_entries >= 1 and ttl > 0")
        self.max_entries = max_entries
        self.ttl = ttl
        self.entries: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.entries)

    async def get(self, response_id: str) -> dict[str, Any] | None:
        entry = self.entries.get(response_id)
        if entry is None:
            return None
        if entry[0] <= time.monotonic():
            del self.entries[response_id]
            return None
        self.entries.move_to_end(response_id)
        return entry[1]

    async def put(self, response_id: str, chain: dict[str, Any]) -> None:
        self.entries[response_id] = (time.monotonic() + self.ttl, chain)
        self.entries.move_to_end(response_id)
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)

    async def delete(self, response_id: str) -> None:
        self.entries.pop(response_id, None)


class Chains:
    """Records what an incomplete turn's follow-up needs, and rewrites that follow-up."""

    def __init__(self, store: ChainStore) -> None:
        self.store = store

    async def resume(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The request rewritten to chain from the recorded response, its items first; None: nothing recorded.

        A store that fails leaves the request as it is (it may then fail at the app, as without a record)."""
        previous = body.get("previous_response_id")
        items = body.get("input")
        if not isinstance(previous, str) or not isinstance(items, str | list | None):
            return None
        chain = await self.read(previous)
        if chain is None:
            return None
        given = input_items(body) or []
        return {**body, "previous_response_id": chain["previous_response_id"], "input": [*chain["input"], *given]}

    async def read(self, response_id: str) -> dict[str, Any] | None:
        """The record of an id, if the store holds a well-formed one; a store that fails, or a record of another
        shape, is logged as a warning and taken as none."""
        try:
            chain = await self.store.get(response_id)
        except Exception:
            logger.warning("the chain store failed to read %r: the request goes as sent", response_id, exc_info=True)
            return None
        if chain is None:
            return None
        if not (
            isinstance(chain, Mapping)
            and isinstance(chain.get("previous_response_id"), str)
            and isinstance(chain.get("input"), list)
        ):
            logger.warning(
                "the chain store's record of %r is not {previous_response_id: str, input: list}: the request goes as "
                "sent (got %.200r)",
                response_id,
                chain,
            )
            return None
        return dict(chain)

    async def forget(self, response_id: str) -> str | None:
        """Drop the record of an id (when the store has `delete`); the id it chained to, if it had one."""
        chain = await self.read(response_id)
        if chain is None:
            return None
        delete = getattr(self.store, "delete", None)
        if delete is not None:
            try:
                await delete(response_id)
            except Exception:
                logger.warning("the chain store failed to delete %r", response_id, exc_info=True)
        return str(chain["previous_response_id"])

    async def record(
        self, body: Mapping[str, Any], last: Any, final: Any, events: Any, reason: str, limit: int
    ) -> None:
        """After a turn: a record under the id the client got when it does not name a complete stored response.

        `body` is the last call's request, `last` the app's last answer (the stored response), `final` the client's
        answer, `events` the client's stream if any (a live stream's id is its first round's), `reason` why the loop
        ended (with `limit`, for the outputs' text)."""
        if body.get("store") is False or not isinstance(last, Mapping) or final is None:
            return
        relay = getattr(events, "relay", None)
        client_id = relay.response_id if isinstance(relay, ResponsesRelay) and relay.started else field(final, "id")
        last_id = last.get("id")
        if not isinstance(client_id, str) or not isinstance(last_id, str):
            return
        given = {field(item, "call_id") for item in field(final, "output") or () if field(item, "type") in CALL_TYPES}
        text = NOT_RUN.get(reason, NOT_RUN_OTHERWISE).format(limit=limit)
        outputs = [
            {"type": f"{item['type']}_output", "call_id": item["call_id"], "output": text}
            for item in last.get("output") or ()
            if isinstance(item, Mapping)
            and item.get("type") in CALL_TYPES
            and isinstance(item.get("call_id"), str)
            and item["call_id"] not in given
        ]
        if client_id == last_id and not outputs:
            return  # the client's id names the turn's last response, which answers every call it holds
        try:
            await self.store.put(client_id, {"previous_response_id": last_id, "input": outputs})
        except Exception:
            logger.warning("the chain store failed to record %r: its follow-up may fail", client_id, exc_info=True)


def chains_of(option: ChainStore | bool | None) -> Chains | None:
    """The middleware's `chain_store` option: None or True, a `MemoryChainStore`; False, none; else the store given."""
    if option is False:
        return None
    if option is None or option is True:
        return Chains(MemoryChainStore())
    if (
        isinstance(option, type)
        or not isinstance(option, ChainStore)
        or not all(inspect.iscoroutinefunction(getattr(option, name)) for name in ("get", "put"))
    ):
        raise ConfigurationError(
            f"chain_store must be a store (an instance) with async get(id) and put(id, chain), or a bool: {option!r}"
        )
    return Chains(option)


class ShownId:
    """The `send` of a rewritten follow-up: its answer shows the `previous_response_id` the client sent, not the
    recorded one the app got (the turn's internal last response). JSON answers are read whole and given their new
    length; an event stream is rewritten message by message (the app's events arrive whole in practice)."""

    def __init__(self, send: Send, recorded: str, given: str) -> None:
        self.send = send
        self.recorded = orjson.dumps(recorded)
        self.given = orjson.dumps(given)
        self.start: Message | None = None  # a JSON answer's start, held until its body is whole
        self.chunks: list[bytes] = []
        self.plain = True  # not content-encoded

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            kind, encoded = media_type(message.get("headers", ()))
            self.plain = not encoded
            if self.plain and kind == b"application/json":
                self.start = message
                return
        elif message["type"] == "http.response.body" and self.plain:
            body = message.get("body", b"")
            if self.start is not None:
                self.chunks.append(body)
                if message.get("more_body", False):
                    return
                body = b"".join(self.chunks).replace(self.recorded, self.given)
                start, self.start = self.start, None
                await self.send({**start, "headers": with_length(start.get("headers", ()), len(body))})
                message = {**message, "body": body}
            elif self.recorded in body:
                message = {**message, "body": body.replace(self.recorded, self.given)}
        await self.send(message)
