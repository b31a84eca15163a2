"""One finished response, replayed as a server-sent event stream in its route's own format.

The loop calls the model app without streaming; a client that asked for a stream still gets one,
built here from the final body so that the official SDKs' stream accumulators rebuild exactly the
message the non-streaming path returns. Strings are cut into pieces of `chunk_size` characters, so
clients see deltas shaped like the real APIs', but never into more than `MAX_PIECES`: a long string
gets longer pieces. A client accumulates a delta by copying what it has so far (the SDKs do
`text += delta`), so its work grows with the number of pieces times the string's length: fixed-size
pieces of a 3 MB answer (11,700 events) took the anthropic SDK 6.5 s to accumulate.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson

CHUNK_SIZE = 256
"""Characters per text, thinking, tool-input or arguments delta, for strings up to `MAX_PIECES` times it."""
MAX_PIECES = 64
"""The most deltas one string is cut into: past 16 KB (at the default size), pieces grow with the string."""

# Counters the Messages API repeats in `message_delta`; the SDKs overwrite with them when present.
_DELTA_USAGE = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "server_tool_use",
    "iterations",  # each model call's usage; the SDKs and Claude Code take it from message_delta
)
# Blocks whose `input` the API streams as `input_json_delta` (and the SDKs rebuild from it).
_INPUT_BLOCKS = frozenset({"tool_use", "server_tool_use"})
# Message fields chat streams as string deltas or as indexed tool-call deltas; any other field
# (function_call, annotations, audio, reasoning_content, ...) rides whole in one delta.
_CHAT_STREAMED = frozenset({"role", "content", "refusal", "tool_calls"})


def _pieces(text: str, size: int) -> Iterator[str]:
    """`text` in pieces of `size` characters, or in `MAX_PIECES` equal pieces when that takes fewer."""
    step = max(size, 1, -(-len(text) // MAX_PIECES))
    for start in range(0, len(text), step):
        yield text[start : start + step]


def named_event(name: str, payload: Mapping[str, Any]) -> bytes:
    """A named event."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def data_event(payload: Mapping[str, Any]) -> bytes:
    """An unnamed event (chat's chunks)."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def messages_ping() -> bytes:
    """A keep-alive the Anthropic SDKs skip, for while tools run before the first event."""
    return named_event("ping", {"type": "ping"})


def chat_keepalive() -> bytes:
    """An SSE comment: every SSE parser drops it, yet it keeps proxies from timing the stream out."""
    return b": keep-alive\n\n"


def messages_error(error_type: str, message: str) -> bytes:
    """The Messages API's mid-stream error event; the SDKs raise an `APIStatusError` carrying it."""
    return named_event("error", {"type": "error", "error": {"type": error_type, "message": message}})


def chat_error(message: str, type: str = "server_error", code: str | None = None) -> bytes:
    """A chunk with an `error` key, which the openai SDK raises as `APIError(message)`.

    Nothing may follow it: no `[DONE]`, as the stream did not complete.
    """
    return data_event({"error": {"message": message, "type": type, "param": None, "code": code}})


def _block_events(index: int, block: Mapping[str, Any], size: int) -> Iterator[bytes]:
    """`content_block_start` with the block's empty initial form, then the deltas that fill it."""
    kind = block.get("type")
    deltas: list[dict[str, Any]] = []
    start = dict(block)
    if kind == "text":
        start["text"] = ""
        if citations := block.get("citations"):
            start["citations"] = []
            deltas += ({"type": "citations_delta", "citation": citation} for citation in citations)
        deltas += ({"type": "text_delta", "text": piece} for piece in _pieces(block.get("text") or "", size))
    elif kind == "thinking":
        start.update(thinking="", signature="")
        deltas += (
            {"type": "thinking_delta", "thinking": piece} for piece in _pieces(block.get("thinking") or "", size)
        )
        if signature := block.get("signature"):
            deltas.append({"type": "signature_delta", "signature": signature})
    elif kind in _INPUT_BLOCKS:
        start["input"] = {}
        partial = orjson.dumps(block.get("input") or {}).decode()
        deltas += ({"type": "input_json_delta", "partial_json": piece} for piece in _pieces(partial, size))
    # Anything else (redacted_thinking, tool results, unknown types) arrives whole in the start.
    yield named_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
    for delta in deltas:
        yield named_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
    yield named_event("content_block_stop", {"type": "content_block_stop", "index": index})


def messages_block(index: int, block: Mapping[str, Any], *, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """One content block at `index`: its start, the deltas that fill it, its stop."""
    return _block_events(index, block, chunk_size)


def messages_start(response: Mapping[str, Any]) -> bytes:
    """`message_start` for a response: every input-side counter, `output_tokens` 0, no content yet."""
    usage: dict[str, Any] = dict(response.get("usage") or {})
    usage.pop("iterations", None)  # complete only at the end: message_delta carries it
    message = {
        **response,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, **usage, "output_tokens": 0},
    }
    if "stop_details" in message:
        message["stop_details"] = None
    return named_event("message_start", {"type": "message_start", "message": message})


def messages_end(response: Mapping[str, Any]) -> Iterator[bytes]:
    """`message_delta` with the stop reason and the whole usage (input side included), then `message_stop`."""
    usage: dict[str, Any] = dict(response.get("usage") or {})
    delta = {"stop_reason": response.get("stop_reason"), "stop_sequence": response.get("stop_sequence")}
    delta.update({key: response[key] for key in ("stop_details", "container") if response.get(key) is not None})
    final_usage = {key: usage[key] for key in _DELTA_USAGE if usage.get(key) is not None}
    final_usage["output_tokens"] = usage.get("output_tokens") or 0
    if usage.get("output_tokens_details") is not None:
        final_usage["output_tokens_details"] = usage["output_tokens_details"]
    yield named_event("message_delta", {"type": "message_delta", "delta": delta, "usage": final_usage})
    yield named_event("message_stop", {"type": "message_stop"})


def messages_events(response: Mapping[str, Any], *, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """The Anthropic Messages stream of a complete response: one `message_start` ... `message_stop`.

    `message_start` carries every input-side counter (the SDKs keep them unless `message_delta`
    repeats them) with `output_tokens` 0: the full count arrives once, in `message_delta`, which
    the SDKs take as the total, so clients that add the two get it right too.
    """
    yield messages_start(response)
    for index, block in enumerate(response.get("content") or []):
        yield from _block_events(index, block, chunk_size)
    yield from messages_end(response)


def _choice_deltas(message: Mapping[str, Any], size: int) -> Iterator[dict[str, Any]]:
    """One choice's deltas; strings other than `arguments` are sent once, as the SDKs concatenate them."""
    content, refusal = message.get("content"), message.get("refusal")
    first: dict[str, Any] = {"role": "assistant", "content": "" if isinstance(content, str) else None}
    if isinstance(refusal, str):
        first["refusal"] = ""
    yield first
    if extra := {key: value for key, value in message.items() if key not in _CHAT_STREAMED and value is not None}:
        yield extra
    if isinstance(content, str):
        yield from ({"content": piece} for piece in _pieces(content, size))
    elif content is not None:  # content parts, which some servers send: whole, in one delta
        yield {"content": content}
    if isinstance(refusal, str):
        yield from ({"refusal": piece} for piece in _pieces(refusal, size))
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function")
        if call.get("type", "function") != "function" or not isinstance(function, Mapping):
            yield {"tool_calls": [{"index": index, **call}]}
            continue
        head = {"name": function.get("name"), "arguments": ""}
        yield {"tool_calls": [{"index": index, "id": call.get("id"), "type": "function", "function": head}]}
        for piece in _pieces(function.get("arguments") or "", size):
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


DONE = b"data: [DONE]\n\n"


def chat_base(response: Mapping[str, Any], include_usage: bool) -> dict[str, Any]:
    """The fields every chunk of a response's stream repeats."""
    base: dict[str, Any] = {
        "id": response.get("id"),
        "object": "chat.completion.chunk",
        "created": response.get("created"),
        "model": response.get("model"),
    }
    base.update({key: response[key] for key in ("system_fingerprint", "service_tier") if key in response})
    if include_usage:
        base["usage"] = None
    return base


def chat_choice(
    base: Mapping[str, Any],
    choice: Mapping[str, Any],
    position: int,
    *,
    opened: bool = False,
    chunk_size: int = CHUNK_SIZE,
) -> Iterator[bytes]:
    """One choice's chunks, ending on its `finish_reason`; without the role delta when the client has it."""
    index = choice.get("index", position)
    deltas = _choice_deltas(choice.get("message") or {}, chunk_size)
    if opened:
        first = next(deltas)
        first.pop("role", None)
        if any(value not in ("", None) for value in first.values()):
            yield data_event(
                {**base, "choices": [{"index": index, "delta": first, "logprobs": None, "finish_reason": None}]}
            )
    for delta in deltas:
        yield data_event(
            {**base, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}]}
        )
    last = {
        "index": index,
        "delta": {},
        "logprobs": choice.get("logprobs"),
        "finish_reason": choice.get("finish_reason"),
    }
    yield data_event({**base, "choices": [last]})


def chat_end(base: Mapping[str, Any], usage: Any, include_usage: bool) -> Iterator[bytes]:
    """The usage chunk (when the client asked for it), then `[DONE]`."""
    if include_usage:
        yield data_event({**base, "choices": [], "usage": usage})
    yield DONE


def chat_chunks(response: Mapping[str, Any], include_usage: bool, *, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """The Chat Completions stream of a complete response: chunks, the usage chunk if asked, `[DONE]`.

    Choices go one after another, each ending on a chunk with its `finish_reason`; with
    `include_usage` every chunk carries `usage: null` and a last one, with no choices, the usage.
    """
    base = chat_base(response, include_usage)
    for position, choice in enumerate(response.get("choices") or []):
        yield from chat_choice(base, choice, position, chunk_size=chunk_size)
    yield from chat_end(base, response.get("usage"), include_usage)


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
            for piece in _pieces(text, size):
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
        for piece in _pieces(text, size):
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
    for piece in _pieces(text, size):
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
        number, self.next = self.next, self.next + 1
        return named_event(kind, {"type": kind, "sequence_number": number, **data})


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
