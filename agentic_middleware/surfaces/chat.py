"""OpenAI Chat Completions (`POST /v1/chat/completions`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from .. import sse
from ..payload import JSONObject
from . import Claims, Surface, ToolResult, field, with_id

ERROR_MARKER = "Error: "


def openai_error_type(status: int) -> str:
    return "invalid_request_error" if status < 500 else "server_error"


def openai_error_body(status: int, message: str, code: str) -> bytes:
    """OpenAI's error shape, the same on every OpenAI route."""
    return orjson.dumps({"error": {"message": message, "type": openai_error_type(status), "param": None, "code": code}})


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

    def calls(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        return [call for message in _messages(response) for call in _calls(message)]

    def call_groups(self, response: dict[str, Any]) -> list[list[dict[str, Any]]]:
        return [_calls(message) for message in _messages(response)]

    def call_name(self, call: dict[str, Any]) -> Any:
        # Function calls carry `function`; custom tool calls carry `custom`.
        return field(call.get("custom") if call.get("type") == "custom" else call.get("function"), "name")

    def call_input(self, call: dict[str, Any]) -> Any:
        if call.get("type") == "custom":
            return field(call.get("custom"), "input")
        arguments = field(call.get("function"), "arguments")
        try:
            return orjson.loads(arguments) if isinstance(arguments, str) else arguments
        except orjson.JSONDecodeError:
            return arguments

    def token_attributes(self, usage: Any) -> dict[str, Any]:
        usage = usage if isinstance(usage, dict) else {}
        return {
            "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
            "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
        }

    def without_claimed(self, response: dict[str, Any], claims: Claims) -> dict[str, Any]:
        choices = response.get("choices")
        if not isinstance(choices, list):
            return response
        return JSONObject(response, choices=[self._end_choice(choice, claims) for choice in choices])

    def _end_choice(self, choice: Any, claims: Claims) -> Any:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or not message.get("tool_calls"):
            return choice
        kept = [call for call in _calls(message) if not self.is_claimed(call, claims)]
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
        return openai_error_body(status, message, code)

    def stream_events(self, response: dict[str, Any], stream_options: Any) -> Iterator[bytes]:
        include_usage = isinstance(stream_options, dict) and stream_options.get("include_usage") is True
        return sse.chat_chunks(response, include_usage)

    def keepalive(self) -> bytes:
        return sse.chat_keepalive()

    def error_event(self, status: int, message: str, code: str) -> bytes:
        return sse.chat_error(message, openai_error_type(status), code)

    def tool_definition(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}

    def declared_name(self, tool: Any) -> Any:
        if not isinstance(tool, dict):
            return None
        return field(tool.get("function") or tool.get("custom"), "name") or tool.get("name")

    def follow_up(
        self, response: dict[str, Any], calls: Sequence[dict[str, Any]], results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        # The choice that made these calls goes on (with `n` > 1, the others are alternatives, not history).
        messages = _messages(response)
        made = next((m for m in messages if any(c is call for c in _calls(m) for call in calls)), None)
        made = made or (messages[0] if messages else None)
        assistant: dict[str, Any] = dict(made) if made else {"role": "assistant", "content": None}
        calls = [with_id(call, "call_") for call in calls]
        assistant["tool_calls"] = calls
        return [
            assistant,
            *(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": f"{ERROR_MARKER}{result.content}" if result.is_error else result.content,
                }
                for call, result in zip(calls, results, strict=True)
            ),
        ]
