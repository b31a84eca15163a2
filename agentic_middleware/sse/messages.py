"""The Anthropic Messages stream of a finished response: `message_start`, each block's start, deltas and stop,
`message_delta` with the usage, `message_stop`; and its keep-alive and error events.

The relay of a live Messages stream (surfaces/messages_relay.py) writes the blocks and ends of its later rounds
with the same functions, so a replayed stream and a live one end alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from .framing import CHUNK_SIZE, named_event, pieces

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


def messages_ping() -> bytes:
    """A keep-alive the Anthropic SDKs skip, for while tools run before the first event."""
    return named_event("ping", {"type": "ping"})


def messages_error(error_type: str, message: str) -> bytes:
    """The Messages API's mid-stream error event; the SDKs raise an `APIStatusError` carrying it."""
    return named_event("error", {"type": "error", "error": {"type": error_type, "message": message}})


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
        deltas += ({"type": "text_delta", "text": piece} for piece in pieces(block.get("text") or "", size))
    elif kind == "thinking":
        start.update(thinking="", signature="")
        deltas += ({"type": "thinking_delta", "thinking": piece} for piece in pieces(block.get("thinking") or "", size))
        if signature := block.get("signature"):
            deltas.append({"type": "signature_delta", "signature": signature})
    elif kind in _INPUT_BLOCKS:
        start["input"] = {}
        partial = orjson.dumps(block.get("input") or {}).decode()
        deltas += ({"type": "input_json_delta", "partial_json": piece} for piece in pieces(partial, size))
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
