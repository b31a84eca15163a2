"""Anthropic Messages (`POST /v1/messages`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from .. import sse
from ..payload import JSONObject
from . import Claims, Surface, ToolResult, with_id

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
    return isinstance(block, dict) and block.get("type") == "tool_use"


class Messages(Surface):
    name = "messages"
    provider = "anthropic"
    api_surface = "anthropic_messages"
    gates = ("async_should_run_agentic_loop",)
    plan_methods = ("async_build_agentic_loop_plan",)

    def calls(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        content = response.get("content")
        return [block for block in (content if isinstance(content, list) else ()) if _is_tool_use(block)]

    def call_name(self, call: dict[str, Any]) -> Any:
        return call.get("name")

    def call_input(self, call: dict[str, Any]) -> Any:
        return call.get("input")

    def token_attributes(self, usage: Any) -> dict[str, Any]:
        usage = usage if isinstance(usage, dict) else {}
        return {
            "gen_ai.usage.input_tokens": usage.get("input_tokens"),
            "gen_ai.usage.output_tokens": usage.get("output_tokens"),
        }

    def without_claimed(self, response: dict[str, Any], claims: Claims) -> dict[str, Any]:
        content = response.get("content")
        if not isinstance(content, list):
            return response
        kept = [block for block in content if not (_is_tool_use(block) and self.is_claimed(block, claims))]
        ended = JSONObject(response, content=kept)
        if response.get("stop_reason") == "tool_use" and not any(_is_tool_use(block) for block in kept):
            ended["stop_reason"] = "end_turn"
        return ended

    def error_body(self, status: int, message: str, code: str) -> bytes:
        return orjson.dumps({"type": "error", "error": {"type": _error_type(status), "message": message}})

    def stream_events(self, response: dict[str, Any], stream_options: Any) -> Iterator[bytes]:
        return sse.messages_events(response)

    def keepalive(self) -> bytes:
        return sse.messages_ping()

    def error_event(self, status: int, message: str, code: str) -> bytes:
        return sse.messages_error(_error_type(status), message)

    def tool_definition(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "description": description, "input_schema": schema}

    def declared_name(self, tool: Any) -> Any:
        return tool.get("name") if isinstance(tool, dict) else None

    def follow_up(
        self, response: dict[str, Any], calls: Sequence[dict[str, Any]], results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        # Thinking and text blocks stay where the model put them (thinking first); other calls are left out.
        answered = {id(call): with_id(call, "toolu_") for call in calls}
        content = [
            answered.get(id(block), block)
            for block in response.get("content") or ()
            if not _is_tool_use(block) or id(block) in answered
        ]
        tool_results = [
            {"type": "tool_result", "tool_use_id": answered[id(call)]["id"], "content": result.content}
            | ({"is_error": True} if result.is_error else {})
            for call, result in zip(calls, results, strict=True)
        ]
        return [{"role": "assistant", "content": content}, {"role": "user", "content": tool_results}]
