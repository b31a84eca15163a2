"""Anthropic Messages (`POST /v1/messages`)."""

from __future__ import annotations

from typing import Any

import orjson

from ..payload import JSONObject
from . import Claims, Surface, ToolCall, canonical

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


def _is_tool_use(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use"


class Messages(Surface):
    name = "messages"
    provider = "anthropic"
    api_surface = "anthropic_messages"
    gates = ("async_should_run_agentic_loop",)
    plan_methods = ("async_build_agentic_loop_plan",)

    def tool_calls(self, response: dict[str, Any]) -> list[ToolCall]:
        content = response.get("content")
        return [
            ToolCall(block.get("id"), block.get("name"), canonical(block.get("input")))
            for block in (content if isinstance(content, list) else ())
            if _is_tool_use(block)
        ]

    def without_claimed(self, response: dict[str, Any], claims: Claims) -> dict[str, Any]:
        content = response.get("content")
        if not isinstance(content, list):
            return response
        kept = [b for b in content if not (_is_tool_use(b) and claims.cover(b.get("id"), b.get("name")))]
        ended = JSONObject(response, content=kept)
        if response.get("stop_reason") == "tool_use" and not any(_is_tool_use(b) for b in kept):
            ended["stop_reason"] = "end_turn"
        return ended

    def error_body(self, status: int, message: str, code: str) -> bytes:
        kind = _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})
