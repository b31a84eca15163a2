"""OpenAI Chat Completions (`POST /v1/chat/completions`)."""

from __future__ import annotations

from typing import Any

import orjson

from ..payload import JSONObject
from . import Claims, Surface, ToolCall, canonical, field


def _name_and_input(call: dict[str, Any]) -> tuple[Any, Any]:
    """Function calls carry `function.arguments`; custom tool calls carry `custom.input`."""
    if call.get("type") == "custom":
        return field(call.get("custom"), "name"), field(call.get("custom"), "input")
    return field(call.get("function"), "name"), field(call.get("function"), "arguments")


def _messages(response: dict[str, Any]) -> list[dict[str, Any]]:
    choices = response.get("choices")
    return [
        choice["message"]
        for choice in (choices if isinstance(choices, list) else ())
        if isinstance(choice, dict) and isinstance(choice.get("message"), dict)
    ]


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    return [call for call in (calls if isinstance(calls, list) else ()) if isinstance(call, dict)]


class ChatCompletions(Surface):
    name = "chat_completions"
    provider = "openai"
    api_surface = "chat_completions"
    gates = ("async_should_run_chat_completion_agentic_loop", "async_should_run_agentic_loop")
    # LiteLLM's chat path also falls back to the messages-style builder when that is all a hook has.
    plan_methods = ("async_build_chat_completion_agentic_loop_plan", "async_build_agentic_loop_plan")

    def tool_calls(self, response: dict[str, Any]) -> list[ToolCall]:
        return [
            ToolCall(call.get("id"), name, canonical(arguments))
            for message in _messages(response)
            for call in _calls(message)
            for name, arguments in [_name_and_input(call)]
        ]

    def without_claimed(self, response: dict[str, Any], claims: Claims) -> dict[str, Any]:
        choices = response.get("choices")
        if not isinstance(choices, list):
            return response
        return JSONObject(response, choices=[self._end_choice(choice, claims) for choice in choices])

    def _end_choice(self, choice: Any, claims: Claims) -> Any:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or not message.get("tool_calls"):
            return choice
        kept = [c for c in _calls(message) if not claims.cover(c.get("id"), _name_and_input(c)[0])]
        message = JSONObject(message, tool_calls=kept)
        choice = JSONObject(choice, message=message)
        if not kept:
            del message["tool_calls"]
            if message.get("content") is None:
                message["content"] = ""
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
        return choice

    def error_body(self, status: int, message: str, code: str) -> bytes:
        kind = "invalid_request_error" if status < 500 else "server_error"
        return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})
