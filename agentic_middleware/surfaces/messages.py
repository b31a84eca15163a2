"""Anthropic Messages (`POST /v1/messages`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson

from .. import sse
from ..error_types import ANTHROPIC_TYPES
from ..native import NativeFormat
from ..native.messages import MessagesNative
from ..observe import MAPPINGS
from ..payload import JSONObject, unread_input
from . import Claims, StreamRelay, Surface, ToolResult, canonical, tool_name, with_id
from .messages_relay import MessagesRelay

# The counters of a `message` entry of `usage.iterations` (the anthropic SDK's BetaMessageIterationUsage).
_ITERATION_TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def _error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def _is_tool_use(block: Any) -> bool:
    # `dict.get`: a block's `type` is a string, and a parsed block's own `get` is a Python method (JSONObject).
    return isinstance(block, dict) and dict.get(block, "type") == "tool_use"


def _result_content(result: ToolResult) -> str | list[dict[str, Any]]:
    """A tool_result's content: the text alone, or text and image blocks."""
    if not result.images:
        return result.content
    images = [
        {"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": image.data}}
        for image in result.images
    ]
    return [{"type": "text", "text": result.content}, *images] if result.content else images


class Messages(Surface):
    name = "messages"
    provider = "anthropic"
    api_surface = "anthropic_messages"
    gates = ("async_should_run_agentic_loop",)
    plan_methods = ("async_build_agentic_loop_plan",)
    sums_usage = True  # as the API does over the iterations of its own server tools
    fingerprint_reads_only = True  # its blocks read with `dict.get`

    def usage_entry(self, usage: Mapping[str, Any]) -> dict[str, Any]:
        """A call's usage as the API writes a `message` iteration: the four token counts always there (Claude Code
        sizes its context from the last such entry only when all four are numbers), the cache breakdown if any."""
        entry: dict[str, Any] = {"type": "message"}
        if isinstance(usage, dict):  # its values read in C: a parsed usage's `get` is a Python method (JSONObject)
            usage = dict(usage)
        for key in _ITERATION_TOKENS:
            value = usage.get(key)
            entry[key] = value if isinstance(value, int) and not isinstance(value, bool) else 0
        cache = usage.get("cache_creation")
        if isinstance(cache, MAPPINGS):
            entry["cache_creation"] = cache
        return entry

    def calls(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        content = response.get("content")
        return [block for block in (content if isinstance(content, list) else ()) if _is_tool_use(block)]

    def fingerprint(self, response: dict[str, Any]) -> tuple[tuple[str, bytes], ...]:
        """As `Surface.fingerprint`, its blocks read with `dict.get`: the answer is a fresh parse, read once a round
        that reruns, and wrapping its content for attribute access (`JSONObject`) is for hooks."""
        content = dict.get(response, "content") if isinstance(response, dict) else response.get("content")
        calls = [block for block in content if _is_tool_use(block)] if isinstance(content, list) else ()
        return tuple(sorted((str(tool_name(call)), canonical(dict.get(call, "input"))) for call in calls))

    def call_input(self, call: dict[str, Any]) -> Any:
        return call.get("input")

    def without_claimed(self, response: dict[str, Any], claims: Claims) -> dict[str, Any]:
        content = response.get("content")
        if not isinstance(content, list):
            return response
        kept = [block for block in content if not (_is_tool_use(block) and self.is_claimed(block, claims))]
        ended = JSONObject(response, content=kept)
        if response.get("stop_reason") == "tool_use" and not any(_is_tool_use(block) for block in kept):
            ended["stop_reason"] = "end_turn"
        return ended

    def tools_off(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "tool_choice": {"type": "none"}} if body.get("tools") else body

    def filled(self, response: dict[str, Any], text: str) -> dict[str, Any]:
        content = response.get("content")
        blocks = content if isinstance(content, list) else []
        if (content and not isinstance(content, list)) or any(_answers(block) for block in blocks):
            return response
        kept = [block for block in blocks if block.get("type") != "text"]  # an empty text block is refused as history
        return JSONObject(response, content=[*kept, {"type": "text", "text": text}])

    def past_results(self, messages: Any) -> Iterator[tuple[Any, Any, Any]]:
        calls: dict[Any, dict[str, Any]] = {}
        for turn in messages if isinstance(messages, list) else ():
            content = turn.get("content") if isinstance(turn, dict) else None
            for block in content if isinstance(content, list) else ():
                if _is_tool_use(block):
                    calls[block.get("id")] = block
                elif isinstance(block, dict) and block.get("type") == "tool_result":
                    call = calls.get(block.get("tool_use_id"))
                    if call is not None:
                        yield self.call_name(call), call.get("input"), block.get("content")

    def error_body(self, status: int, message: str, code: str, param: str | None = None) -> bytes:
        return orjson.dumps({"type": "error", "error": {"type": _error_type(status), "message": message}})

    def stream_events(self, response: dict[str, Any], stream_options: Any) -> Iterator[bytes]:
        return sse.messages_events(response)

    def relay(self, stream_options: Any) -> StreamRelay:
        return MessagesRelay()

    def native_format(self) -> NativeFormat:
        return _NATIVE

    def keepalive(self) -> bytes:
        return sse.messages_ping()

    def error_event(self, status: int, message: str, code: str) -> bytes:
        # The app's own error type when it gave one (a rerun's `billing_error` stays that), else the status's.
        return sse.messages_error(code if code in ANTHROPIC_TYPES else _error_type(status), message)

    def tool_definition(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "description": description, "input_schema": schema}

    def follow_up(
        self, response: dict[str, Any], calls: Sequence[dict[str, Any]], results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        # Thinking and text blocks stay where the model put them (thinking first); other calls are left out.
        answered = {id(call): _as_history(with_id(call, "toolu_")) for call in calls}
        content = [
            answered.get(id(block), block)
            for block in response.get("content") or ()
            if not _is_tool_use(block) or id(block) in answered
        ]
        tool_results = []
        for call, result in zip(calls, results, strict=True):
            block = {"type": "tool_result", "tool_use_id": answered[id(call)]["id"], "content": _result_content(result)}
            if result.is_error:
                block["is_error"] = True
            tool_results.append(block)
        return [{"role": "assistant", "content": content}, {"role": "user", "content": tool_results}]


_NATIVE = MessagesNative()


def _as_history(call: dict[str, Any]) -> dict[str, Any]:
    """A claimed call as the app's history holds it: a `tool_use` input must be an object, so input that was not
    one, or not JSON at all, is sent as `{}` (its tool result, an error, quotes what the model wrote)."""
    value = dict.get(call, "input")  # in C, as `_is_tool_use`
    return call if isinstance(value, dict) and unread_input(value) is None else {**call, "input": {}}


def _answers(block: Any) -> bool:
    """Whether a content block is part of an answer (thinking alone, or empty text, is not one)."""
    if not isinstance(block, dict):
        return True
    kind = block.get("type")
    return kind not in ("thinking", "redacted_thinking") and (kind != "text" or bool(block.get("text")))
