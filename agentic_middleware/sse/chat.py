"""The Chat Completions stream of a finished response: each choice's chunks, the usage chunk if asked, `[DONE]`;
and its keep-alive and error chunks.

The relay of a live Chat stream (surfaces/chat_relay.py) writes the choices and end of its later rounds with the
same functions, so a replayed stream and a live one end alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .framing import CHUNK_SIZE, data_event, pieces

# Message fields chat streams as string deltas or as indexed tool-call deltas; any other field
# (function_call, annotations, audio, reasoning_content, ...) rides whole in one delta.
_CHAT_STREAMED = frozenset({"role", "content", "refusal", "tool_calls"})

DONE = b"data: [DONE]\n\n"


def chat_keepalive() -> bytes:
    """An SSE comment: every SSE parser drops it, yet it keeps proxies from timing the stream out."""
    return b": keep-alive\n\n"


def chat_error(message: str, type: str = "server_error", code: str | None = None) -> bytes:
    """A chunk with an `error` key, which the openai SDK raises as `APIError(message)`.

    Nothing may follow it: no `[DONE]`, as the stream did not complete.
    """
    return data_event({"error": {"message": message, "type": type, "param": None, "code": code}})


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
        yield from ({"content": piece} for piece in pieces(content, size))
    elif content is not None:  # content parts, which some servers send: whole, in one delta
        yield {"content": content}
    if isinstance(refusal, str):
        yield from ({"refusal": piece} for piece in pieces(refusal, size))
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function")
        if call.get("type", "function") != "function" or not isinstance(function, Mapping):
            yield {"tool_calls": [{"index": index, **call}]}
            continue
        head = {"name": function.get("name"), "arguments": ""}
        yield {"tool_calls": [{"index": index, "id": call.get("id"), "type": "function", "function": head}]}
        for piece in pieces(function.get("arguments") or "", size):
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


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
