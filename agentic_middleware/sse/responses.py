"""The Responses stream of a finished response: `response.created`, each output item's events, the terminal event;
the events are numbered (`ResponsesSequence`), and a failed stream opens like any other.

The relay of a live Responses stream (surfaces/responses_relay.py) numbers its events and writes its later rounds'
items with the same pieces, so a replayed stream and a live one end alike.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .framing import CHUNK_SIZE, named_event, pieces


def responses_item(
    emit: Callable[..., bytes], index: int, item: Mapping[str, Any], size: int = CHUNK_SIZE
) -> Iterator[bytes]:
    """One output item of a Responses stream: `output_item.added` with its empty form, the deltas that fill it,
    the `.done` events, then `output_item.done` with the item whole."""
    kind = item.get("type")
    added = dict(item)
    if "status" in item:
        added["status"] = "in_progress"
    emptied = _EMPTIED.get(kind)  # type: ignore[arg-type]
    if emptied is not None:
        added[emptied] = "" if emptied in ("arguments", "input") else []
    if kind == "reasoning" and item.get("content"):
        added["content"] = []
    yield emit("response.output_item.added", output_index=index, item=added)
    at = {"item_id": item.get("id") or "", "output_index": index}
    if kind == "message" or kind == "reasoning":
        for summary_index, part in enumerate(item.get("summary") or [] if kind == "reasoning" else []):
            where = {**at, "summary_index": summary_index}
            text = part.get("text") or ""
            yield emit("response.reasoning_summary_part.added", **where, part={**part, "text": ""})
            for piece in pieces(text, size):
                yield emit("response.reasoning_summary_text.delta", **where, delta=piece)
            yield emit("response.reasoning_summary_text.done", **where, text=text)
            yield emit("response.reasoning_summary_part.done", **where, part=part)
        for part_index, part in enumerate(item.get("content") or []):
            yield from _responses_part_events(emit, {**at, "content_index": part_index}, part, size)
    elif kind == "function_call" or kind == "custom_tool_call":
        name, prefix = ("arguments", "response.function_call_arguments")
        if kind == "custom_tool_call":
            name, prefix = ("input", "response.custom_tool_call_input")
        text = item.get(name) or ""
        for piece in pieces(text, size):
            yield emit(f"{prefix}.delta", **at, delta=piece)
        yield emit(f"{prefix}.done", **at, **{name: text})
    elif kind == "web_search_call":  # the search's stages, as the API reports them
        for stage in ("in_progress", "searching", "completed"):
            yield emit(f"response.web_search_call.{stage}", **at)
    # Anything else (mcp_call, ...) arrives whole in `output_item.added`.
    yield emit("response.output_item.done", output_index=index, item=item)


# The field an item's `output_item.added` carries empty, filled by the events that follow.
_EMPTIED = {"message": "content", "reasoning": "summary", "function_call": "arguments", "custom_tool_call": "input"}


# Content parts streamed as text deltas: the part's text field and the events that carry it.
_PART_DELTAS = {
    "output_text": ("text", "response.output_text"),
    "refusal": ("refusal", "response.refusal"),
    "reasoning_text": ("text", "response.reasoning_text"),
}


def _responses_part_events(
    emit: Callable[..., bytes], at: dict[str, Any], part: Mapping[str, Any], size: int
) -> Iterator[bytes]:
    streamed = _PART_DELTAS.get(part.get("type"))  # type: ignore[arg-type]
    if streamed is None:  # a part of another kind arrives whole
        yield emit("response.content_part.added", **at, part=part)
        yield emit("response.content_part.done", **at, part=part)
        return
    name, prefix = streamed
    text = part.get(name) or ""
    start = {**part, name: ""}
    text_part = part.get("type") == "output_text"
    if text_part:
        start["annotations"] = []
    yield emit("response.content_part.added", **at, part=start)
    extra: dict[str, Any] = {"logprobs": []} if text_part else {}
    for piece in pieces(text, size):
        yield emit(f"{prefix}.delta", **at, delta=piece, **extra)
    if text_part:
        for annotation_index, annotation in enumerate(part.get("annotations") or []):
            yield emit(
                "response.output_text.annotation.added", **at, annotation_index=annotation_index, annotation=annotation
            )
        extra = {"logprobs": part.get("logprobs") or []}
    yield emit(f"{prefix}.done", **at, **{name: text}, **extra)
    yield emit("response.content_part.done", **at, part=part)


class ResponsesSequence:
    """Numbers a Responses stream's events: `sequence_number` rises by one with each event written."""

    __slots__ = ("next",)  # read and set for every delta a relay's lane passes on

    def __init__(self) -> None:
        self.next = 0

    def renumbered(self, payload: Mapping[str, Any]) -> bytes:
        """An event read from another stream, numbered as the next one of this stream."""
        kind = payload["type"]
        return self(kind, **{key: value for key, value in payload.items() if key not in ("type", "sequence_number")})

    def __call__(self, kind: str, **data: Any) -> bytes:
        number = self.next
        event = named_event(kind, {"type": kind, "sequence_number": number, **data})
        self.next = number + 1  # once written: an event that could not be (too deep) takes no number
        return event


# The event that ends a Responses stream, by the response's status.
_TERMINAL = {"incomplete": "response.incomplete", "failed": "response.failed"}


def responses_events(response: Mapping[str, Any], *, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """The Responses stream of a complete response: `response.created`, `response.in_progress`, each output
    item's events, then `response.completed` (or `.incomplete` / `.failed`, by status) with the response whole.

    No `[DONE]`: the Responses API ends its streams with the terminal event.
    """
    emit = ResponsesSequence()
    yield from responses_start(emit, response)
    for index, item in enumerate(response.get("output") or []):
        yield from responses_item(emit, index, item, chunk_size)
    yield responses_end(emit, response)


def responses_start(emit: ResponsesSequence, response: Mapping[str, Any]) -> Iterator[bytes]:
    """`response.created` and `response.in_progress`: the response begun, with no output and no usage yet."""
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    yield emit("response.created", response=started)
    yield emit("response.in_progress", response=started)


def responses_end(emit: ResponsesSequence, response: Mapping[str, Any]) -> bytes:
    """The terminal event: `response.completed`, or `.incomplete` / `.failed` by the response's status."""
    return emit(_TERMINAL.get(response.get("status"), "response.completed"), response=response)  # type: ignore[arg-type]


def responses_failed(
    message: str, code: str, response_id: str | None = None, error_type: str = "server_error"
) -> bytes:
    """A failed Responses stream: `response.created`, then `response.failed` carrying the error, then `error`.

    The SDKs' stream helpers read nothing before a `response.created`, so a stream that fails before its
    answer still opens with one.
    """
    emit = ResponsesSequence()
    response = {
        "id": response_id or f"resp_failed_{os.urandom(12).hex()}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "output": [],
        "error": None,
    }
    failed = {**response, "status": "failed", "error": {"code": code, "message": message}}
    return (
        emit("response.created", response=response)
        + emit("response.failed", response=failed)
        + responses_error(emit, message, code, error_type)
    )


def responses_error(emit: ResponsesSequence, message: str, code: str, error_type: str) -> bytes:
    """The `error` event that follows a `response.failed`: the fields of the API's own `error` event, and an `error`
    object, which is what the openai SDK raises an `APIError` on (a `response.failed` alone ends its stream helper
    with a bare `RuntimeError`)."""
    error = {"message": message, "type": error_type, "param": None, "code": code}
    return emit("error", code=code, message=message, param=None, error=error)
