"""A Responses stream relayed live across rounds (see live.py): one response lifecycle for the client however many
times the app was called, with the server's tool calls held back and never sent.

Its own module because it is a state machine over the API's stream events, apart from the request and answer
shapes in responses.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import orjson

from .. import sse
from ..error_types import error_status
from ..native import NativeRun
from ..payload import MAX_DEPTH
from ..sse_reader import ServerSentEvent
from . import AppStreamError, Spelled, StreamMismatch, StreamRelay
from .chat import openai_error_type
from .responses import CALL_TYPES
from .responses_checks import TextChecks
from .responses_lane import TextLane
from .responses_search import SearchRecords

_LIFECYCLE_START = frozenset({"response.created", "response.in_progress", "response.queued"})
_LIFECYCLE_END = frozenset({"response.completed", "response.incomplete", "response.failed"})
# What a keep-alive's `response.in_progress` keeps of the response (the fields the openai SDK's `Response` requires).
_KEEPALIVE_FIELDS = ("created_at", "model", "parallel_tool_calls", "tool_choice")
_NOTHING: tuple[bytes, ...] = ()


class RoundNames(Protocol):
    """What is told each round's response id as the round starts: the id-hiding `send` (shown.py `ShownIds`)."""

    def round(self, response_id: object, relay: object) -> None: ...


# First: the mixins' `announce`, `record`, `pass_on` over the defaults.
class ResponsesRelay(SearchRecords, TextChecks, TextLane, StreamRelay):
    """A Responses stream across rounds: one lifecycle (the first round's `response.created` and
    `response.in_progress`, one terminal event at the very end), every event renumbered so that
    `sequence_number` rises across rounds, and each round's items placed after the items already sent.

    Within a round, everything from the first tool call item on is held, and so is a reasoning item until
    the item after it shows it does not lead to a call: a claimed call goes with the reasoning before it.
    The round's answer is the terminal event's response (its items from `output_item.done` if it has none).
    Native records (`web_search_call` items) go out between rounds, and the `output_text` after them gets
    `url_citation` annotations of their results before its `output_text.done`.
    """

    __slots__ = (  # thousands of streams each hold one
        *("emit", "started", "response_id", "created", "names", "earlier", "base", "opened", "released"),
        *("items", "shown", "recorded", "rounds", "announced", "annotated", "reasoned", "waiting", "waiting_items"),
        *("holding", "held", "terminal", "done", "parts", "texts"),  # and `TextLane`'s own
    )

    def __init__(self) -> None:
        self.emit = sse.ResponsesSequence()
        self.started = False  # the client has a `response.created`
        self.response_id: Any = None  # the id the client's lifecycle carries
        self.created: dict[str, Any] = {}  # what a keep-alive repeats of the client's `response.created`
        self.names: RoundNames | None = None  # told every round's response id, as its lifecycle events name it
        self.earlier: list[Any] = []  # the items earlier rounds sent, whole
        self.base = 0  # the client's output_index of this round's first item
        self.opened: set[str] = set()  # the lifecycle events the client has
        self.released: set[int] = set()
        self.items: dict[int, Any] = {}
        self.shown: dict[int, Any] = {}
        self.recorded: list[dict[str, Any]] = []
        self.rounds: dict[int, list[NativeRun]] = {}  # the native calls recorded so far, by round
        self.announced: dict[int, int] = {}  # where in `recorded` the calls announced and not recorded yet are, by call
        self.begin_round()

    def begin_round(self) -> None:
        self.earlier += [*self.sent_items(), *self.recorded]
        self.base += len(self.released) + len(self.recorded)
        self.released = set()  # this round's items that went out (always the first ones)
        self.items = {}  # by the app's output_index: as added, then as done
        self.shown = {}  # items as the client got them, where they differ (annotated)
        self.annotated: dict[tuple[Any, Any], list[dict[str, Any]]] = {}  # our annotations, by item and part
        self.recorded = []  # native record items that went out after this round's items
        self.reasoned: set[int] = set()  # this round's reasoning items that went out with them
        self.waiting: list[dict[str, Any]] = []  # a reasoning item's events, until the next item says where they go
        self.waiting_items: set[int] = set()
        self.holding = False
        self.held: list[dict[str, Any]] = []
        self.terminal: dict[str, Any] | None = None
        self.done: set[int] = set()  # the app's output_index of each item whose `output_item.done` came
        self.parts: dict[int, list[Any]] = {}  # each message's parts' types, in the order they were added
        self.texts: dict[tuple[int, int], Spelled] = {}  # each part's text deltas, until its item is done
        self.close_lane()
        self.app_next = -1  # the `sequence_number` the app's next event has, when its last one had one

    def feed(self, event: ServerSentEvent) -> Sequence[bytes]:
        if event.data == b"[DONE]":  # not the Responses API's, but some servers end their streams with it
            return _NOTHING
        payload = orjson.loads(event.data)
        kind = payload.get("type")
        raw = event.raw if kind == event.event else b""  # its bytes say what it is as `feed` reads it
        kind = payload["type"] = kind or event.event
        return self.took(kind, payload, raw)

    def took(self, kind: str, payload: dict[str, Any], raw: bytes = b"") -> Sequence[bytes]:
        """What `feed` does with an event of type `kind`, read into `payload`: the one implementation of both `feed`
        and `pass_on`'s whole events (`TextLane.whole`). `raw`: the event's bytes as the app sent it, named as its
        `type`, which go out as they came where what would be written anew says the same (`written`)."""
        index: Any = payload.get("output_index")
        number = payload.get("sequence_number")
        self.app_next = number + 1 if type(number) is int else -1
        if kind != "response.output_text.delta":
            self.close_lane()  # the lane is for the deltas that follow their part's start, and nothing else
        if kind == "response.output_item.added":
            item = self.items[index] = payload["item"]
            if self.holding:
                self.held.append(payload)
                return _NOTHING
            if item.get("type") in CALL_TYPES:
                self.holding = True
                self.held, self.waiting, self.waiting_items = [*self.waiting, payload], [], set()
                return _NOTHING
            if item.get("type") == "reasoning":
                self.waiting.append(payload)
                self.waiting_items.add(index)
                return _NOTHING
            out, self.waiting, self.waiting_items = self.release([*self.waiting, payload]), [], set()
            return out
        if kind == "response.output_item.done":
            self.check_texts(index, payload["item"])
            self.items[index] = payload["item"]
            self.done.add(index)
        elif kind in _LIFECYCLE_START:
            self.name_round(payload)
            if kind in self.opened or kind == "response.queued" or self.base or self.released:
                return _NOTHING  # the client's lifecycle began once, in the first round
            self.opened.add(kind)
            if kind == "response.created":
                created = payload.get("response")
                if not isinstance(created, dict):
                    # Checked before the lifecycle counts as begun: the client gets the route's own failed stream,
                    # not a `response.failed` with no `response.created` before it (the openai SDK's RuntimeError).
                    raise TypeError(f"a response.created's response is {type(created).__name__}, not an object")
                self.started = True
                self.response_id = created.get("id")
                # Only what a keep-alive repeats: the whole object echoes the request (a coding agent's prompt and
                # tools, tens of KB), which a stream held for minutes would keep for nothing.
                self.created = {key: created[key] for key in _KEEPALIVE_FIELDS if key in created}
            return (self.written(payload, raw),)
        elif kind == "response.failed" or kind == "error":
            raise AppStreamError(_error_body(kind, payload))
        elif kind in _LIFECYCLE_END:
            self.name_round(payload)
            self.terminal = payload.get("response") or {}
            output = self.terminal.get("output")
            self.check_told_alike(output)
            told = output if isinstance(output, list) and output else ()
            for index in {index for index, _ in self.texts}:  # messages never done: told by the answer alone
                self.check_texts(index, told[index] if index < len(told) else self.items[index])
            return _NOTHING
        elif isinstance(index, int) and index not in self.items:
            # An item's event before its `output_item.added`: the client's SDK has no item there (an IndexError in
            # the openai SDK's accumulator), and the relay would count as sent an item it never had.
            raise ValueError(f"{kind} for output item {index}, which was never added")
        if kind == "response.content_part.added" and isinstance(index, int):
            part = payload.get("part")
            self.parts.setdefault(index, []).append(part.get("type") if isinstance(part, dict) else None)
            if isinstance(part, dict) and type(part.get("text")) is str and part["text"]:
                # the SDK's part begins with it, and its deltas are added to it
                self.texts.setdefault((index, len(self.parts[index]) - 1), Spelled()).add(part["text"])
        elif kind == "response.output_text.delta":
            self.check_part(index, payload.get("content_index"), payload.get("delta"))
        elif kind == "response.output_text.done":
            self.check_done(index, payload.get("content_index"), payload.get("text"))
        payloads = self.cite(kind, payload) if self.rounds else [payload]
        if self.holding:
            self.held += payloads
            return _NOTHING
        if index in self.waiting_items:
            self.waiting += payloads
            return _NOTHING
        out = self.release(payloads, raw if payloads[0] is payload else b"")
        if kind == "response.content_part.added":
            self.open_lane(payload)
        return out

    def name_round(self, payload: dict[str, Any]) -> None:
        """Tell `names` the round's response id from a lifecycle event, before any of its items go out: the id-hiding
        `send` hides it from then on, told once a round rather than looking again at each event it sends."""
        response = payload.get("response")
        if self.names is not None and isinstance(response, dict):
            self.names.round(response.get("id"), self)

    def sent_items(self) -> list[Any]:
        """This round's items that went out, as the client has them."""
        return [self.shown.get(index, self.items[index]) for index in sorted(self.released)]

    def release(self, payloads: list[dict[str, Any]], raw: bytes = b"") -> list[bytes]:
        """Events going out now: placed after the items already sent, numbered in this stream. `raw`: the first's
        bytes as the app sent it (`took`)."""
        out = []
        for payload in payloads:
            index = payload.get("output_index")
            if isinstance(index, int):
                self.released.add(index)
                if self.base:
                    payload, raw = {**payload, "output_index": index + self.base}, b""
            out.append(self.written(payload, raw))
            raw = b""
        return out

    def written(self, payload: dict[str, Any], raw: bytes) -> bytes:
        """An event for the client, numbered as the next of this stream: its bytes as the app sent them (`raw`) when
        they already carry that number, as a first round's mostly do (what writing it anew costs, saved); else
        written anew. The relay changes nothing else of an event it writes: its `output_index` is moved before this
        (`release`), and one it annotates is a payload of its own (`cite`), never the one `raw` spells. Bytes with a
        `\\u00..` escape are written anew too: such an escape can spell an id's ASCII (`resp\\u005f...`), which the
        id-hiding `send` (shown.py) looks for in bytes, as orjson writes it (it writes no such escape but for a
        control character); and so are bytes of more brackets than orjson writes levels (`MAX_DEPTH`, so that an
        event nested deeper fails as writing it anew fails, the route's failed stream, not the client's parser)."""
        number = payload.get("sequence_number")
        emit = self.emit
        if (
            raw
            and type(number) is int
            and number == emit.next
            and raw.find(b"\\u00") < 0
            and raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH
        ):
            emit.next = number + 1
            return raw
        return emit.renumbered(payload)

    def body(self) -> dict[str, Any] | None:
        if self.terminal is None:
            return None
        output = self.terminal.get("output") or [self.items[index] for index in sorted(self.items)]
        return {**self.terminal, "output": output}

    def finish(
        self, final: Mapping[str, Any], fresh: bool = False, built: Mapping[str, Any] | None = None
    ) -> list[bytes]:
        events: list[bytes] = []
        if not self.started:
            events += sse.responses_start(self.emit, final)
            self.started = True
            self.response_id = final.get("id")
        output = final.get("output")
        output = output if isinstance(output, list) else []
        sent = [self.items[index] for index in sorted(self.released)]
        answer = None if fresh else self.body() if built is None else built
        if answer is not None and output == answer["output"]:
            events += self.release([*self.waiting, *self.held])
            whole = [self.shown.get(position, item) for position, item in enumerate(output)]
        else:
            kept = [] if fresh else sent
            more: list[Any] = []
            if output[: len(kept)] != kept:
                extra = _message_rest(kept[-1], output[len(kept) - 1]) if output[: len(kept) - 1] == kept[:-1] else None
                if extra is None:
                    raise StreamMismatch("the answer's output differs from the items already streamed")
                more = [extra]  # the last message's text, extended: the rest is a message item of its own
            first = self.base + len(sent)
            for position, item in enumerate([*more, *output[len(kept) :]]):
                events += sse.responses_item(self.emit, first + position, item)
            whole = [*self.sent_items(), *more, *output[len(kept) :]]
        events.append(
            sse.responses_end(self.emit, {**final, "id": self.response_id, "output": [*self.earlier, *whole]})
        )
        return events

    def keepalive(self) -> bytes | None:
        """Once the lifecycle began, a repeated `response.in_progress` with the next `sequence_number` and a trimmed
        response: what `response.created` announced of it, but only the fields the openai SDK's `Response` type
        requires, `tools` empty and no `instructions` (the API's object echoes the request: with a coding agent's
        prompt and tools, tens of KB every few seconds). Status `in_progress`, no output: the output so far is in the
        item events, and the SDKs' accumulators take a lifecycle event's output as replacements of items they
        completed. Codex ignores `response.in_progress` but resets its idle timer on any event; the openai SDK's
        accumulator reads the event's `id` and `output` alone, and the Agents SDK passes it on
        (tests/test_keepalive_events.py). Before `response.created`, None: a comment."""
        if not self.started:
            return None
        snapshot = {key: self.created[key] for key in _KEEPALIVE_FIELDS if key in self.created}
        snapshot.update(id=self.response_id, object="response", status="in_progress", output=[], tools=[])
        return self.emit("response.in_progress", response=snapshot)

    def error_event(self, status: int, message: str, code: str) -> bytes | None:
        """After the lifecycle began, a failure is its terminal `response.failed` (a second `response.created`
        would break the SDKs' accumulators), then the `error` event the openai SDK raises on."""
        if not self.started:
            return None
        code = code or openai_error_type(status)
        failed = {
            "id": self.response_id,
            "object": "response",
            "status": "failed",
            "output": [*self.earlier, *self.sent_items(), *self.recorded],
            "error": {"code": code, "message": message},
        }
        try:
            ended = self.emit("response.failed", response=failed)
        except (TypeError, RecursionError):  # an item nests deeper than orjson writes: the failure without them
            ended = self.emit("response.failed", response={**failed, "output": []})
        return ended + sse.responses_error(self.emit, message, code, openai_error_type(status))


def _error_body(kind: str, payload: Mapping[str, Any]) -> bytes:
    """The app's `response.failed` (its response's `error`) or `error` event as OpenAI's JSON error body: its code,
    message and param as sent, and its type when it names one, else the one its code's status stands for."""
    response = payload.get("response")
    error = response.get("error") if kind == "response.failed" and isinstance(response, dict) else payload
    error = error if isinstance(error, dict) else {}
    nested: Mapping[str, Any] = error["error"] if isinstance(error.get("error"), dict) else {}
    code = error.get("code") or nested.get("code")
    message = error.get("message") or nested.get("message") or "the model app's response failed"
    kind_of = error.get("type") if kind == "response.failed" else nested.get("type")
    if not isinstance(kind_of, str) or not kind_of:
        kind_of = openai_error_type(error_status({"code": code}))
    return orjson.dumps({"error": {"message": message, "type": kind_of, "param": error.get("param"), "code": code}})


def _message_rest(sent: Any, final: Any) -> dict[str, Any] | None:
    """A message item holding what `final` adds to the message `sent`, when `final` is `sent` with more text at
    the end of its last `output_text` part; else None."""
    if not (isinstance(sent, dict) and isinstance(final, dict) and sent.get("type") == final.get("type") == "message"):
        return None
    parts, new_parts = sent.get("content"), final.get("content")
    if not (isinstance(parts, list) and isinstance(new_parts, list) and parts and len(parts) == len(new_parts)):
        return None
    part, new_part = parts[-1], new_parts[-1]
    if not (isinstance(part, dict) and isinstance(new_part, dict) and part.get("type") == "output_text"):
        return None
    old, new = part.get("text"), new_part.get("text")
    if not (isinstance(old, str) and isinstance(new, str) and new.startswith(old)):
        return None
    if {**final, "content": [*new_parts[:-1], {**new_part, "text": old}]} != sent:
        return None
    rest = {"type": "output_text", "text": new[len(old) :], "annotations": []}
    return {**sent, "id": f"{sent.get('id') or 'msg'}_more", "content": [rest]}
