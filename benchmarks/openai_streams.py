"""The OpenAI routes' streamed answers for the live-stream cases (9 and 12): N text deltas, as OpenAI writes them.

The relays take a text delta without reading it only when its bytes are in one shape (`ResponsesRelay.pass_on`,
`ChatRelay.pass_on`), so a benchmark's events must be spelled as a real server's are, or its figure is of another
path than the one users get. OpenAI's own streams, as captured from the API:

- Responses (`/v1/responses`, Codex CLI, the Agents SDK): `response.created`, `response.in_progress`, the message's
  `output_item.added` and `content_part.added`, then one `response.output_text.delta` per token in the API's field
  order (`type`, `sequence_number`, `item_id`, `output_index`, `content_index`, `delta`, `logprobs`) with the
  `obfuscation` padding OpenAI adds by default (random letters and digits, of varying length: the lane allows it),
  then the `.done` events and `response.completed` with the response whole.
- Chat Completions (`/v1/chat/completions`, LangChain, pydantic-ai, the openai SDK): a role chunk, one chunk per
  token (`{"id":...,"object":"chat.completion.chunk","created":...,"model":...,"service_tier":...,
  "system_fingerprint":...,"choices":[{"index":0,"delta":{"content":...},"logprobs":null,"finish_reason":null}]}`),
  each with `"usage":null` (the middleware asks the app for usage, and OpenAI then writes it in every chunk), the
  finish chunk, the usage chunk and `[DONE]`. With the client's `stream_options.include_obfuscation` false, which
  the middleware passes on, that is all (the shape vLLM and llama.cpp write too, and the one the lane takes); by
  default OpenAI adds an `obfuscation` field, last, whose value (letters and digits) differs in every chunk, which
  the lane takes too, each chunk with its own (docs/performance.md).
"""

from __future__ import annotations

from typing import Any

import orjson

from agentic_middleware import sse
from agentic_middleware.testing import response

from .e2e_hooks import TOOL

MODEL = "gpt-4.1-2025-04-14"
CREATED = 1_764_633_600
_PADDING = "x7Qb2LmZ0rTe9KwA"


def token(n: int) -> str:
    """The text of the `n`th delta, the same on every route ("tok" and a number, as case 9's Messages deltas)."""
    return f"tok{n % 1000:03d} "


def padding(n: int) -> str:
    """An `obfuscation` value: letters and digits, 1 to 16 of them, varying from delta to delta as OpenAI's do."""
    return _PADDING[: 1 + n * 7 % len(_PADDING)]


def responses_events(tokens: int) -> list[bytes]:
    """A Responses answer of one message of `tokens` text deltas, one event each, as OpenAI streams it."""
    text = "".join(token(n) for n in range(tokens))
    item_id = "msg_bench0001"
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
    item = {"id": item_id, "type": "message", "status": "completed", "content": [part], "role": "assistant"}
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 10 + tokens,
    }
    body = {**response(item, usage=usage, model=MODEL), "id": "resp_bench0001", "created_at": CREATED}
    emit = sse.ResponsesSequence()
    events = list(sse.responses_start(emit, body))
    added = {**item, "status": "in_progress", "content": []}
    events.append(emit("response.output_item.added", output_index=0, item=added))
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    events.append(emit("response.content_part.added", **at, part={**part, "text": ""}))
    events += [
        emit("response.output_text.delta", **at, delta=token(n), logprobs=[], obfuscation=padding(n))
        for n in range(tokens)
    ]
    events.append(emit("response.output_text.done", **at, text=text, logprobs=[]))
    events.append(emit("response.content_part.done", **at, part=part))
    events.append(emit("response.output_item.done", output_index=0, item=item))
    events.append(sse.responses_end(emit, body))
    return events


def chat_events(tokens: int, obfuscated: bool = False) -> list[bytes]:
    """A Chat Completions answer of `tokens` content chunks, as OpenAI streams it to a request that asked for usage;
    with `obfuscated`, each chunk carries OpenAI's default `obfuscation` padding."""
    base = {
        "id": "chatcmpl-bench0001",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "service_tier": "default",
        "system_fingerprint": "fp_bench0001",
    }

    def chunk(n: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        payload: dict[str, Any] = {**base, "choices": [choice], "usage": None}
        if obfuscated:
            payload["obfuscation"] = padding(n)
        return sse.data_event(payload)

    events = [chunk(0, {"role": "assistant", "content": "", "refusal": None})]
    events += [chunk(n, {"content": token(n)}) for n in range(tokens)]
    events.append(chunk(tokens, {}, "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}
    events.append(sse.data_event({**base, "choices": [], "usage": usage}))
    return [*events, sse.DONE]


_FUNCTION = {"name": TOOL, "description": "Look a page up.", "parameters": {"type": "object"}}
RESPONSES_TOOLS = [{"type": "function", **_FUNCTION}]
CHAT_TOOLS = [{"type": "function", "function": _FUNCTION}]


def responses_request(words: str) -> bytes:
    """A streaming Responses request (as Codex CLI sends one: the input as messages, the client's tools)."""
    messages = [{"role": "user", "content": words}]
    return orjson.dumps({"model": "m", "input": messages, "tools": RESPONSES_TOOLS, "stream": True})


def chat_request(words: str, obfuscated: bool = False) -> bytes:
    """A streaming Chat request, as the openai SDK sends one (no usage asked); without `obfuscated`, it turns
    OpenAI's padding off (`stream_options.include_obfuscation`)."""
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": words}], "stream": True}
    body["tools"] = CHAT_TOOLS
    if not obfuscated:
        body["stream_options"] = {"include_obfuscation": False}
    return orjson.dumps(body)
