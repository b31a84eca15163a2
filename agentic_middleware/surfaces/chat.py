"""OpenAI Chat Completions (`POST /v1/chat/completions`); its stream relayed across rounds is in `chat_relay.py`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson

from .. import sse
from ..native import NativeFormat
from ..native.chat import ChatNative
from ..payload import JSONObject
from . import Claims, StreamRelay, Surface, ToolResult, field, with_id
from .chat_relay import ChatRelay

ERROR_MARKER = "Error: "


def openai_error_type(status: int) -> str:
    return "invalid_request_error" if status < 500 else "server_error"


def openai_error_body(status: int, message: str, code: str, param: str | None = None) -> bytes:
    """OpenAI's error shape, the same on every OpenAI route; `param` names the request field at fault."""
    error = {"message": message, "type": openai_error_type(status), "param": param, "code": code}
    return orjson.dumps({"error": error})


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


def _include_usage(stream_options: Any) -> bool:
    return isinstance(stream_options, dict) and stream_options.get("include_usage") is True


def _each_choice(response: dict[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """A copy of the response with each choice changed, or the response itself when it has no list of choices."""
    choices = response.get("choices")
    if not isinstance(choices, list):
        return response
    return JSONObject(response, choices=[change(choice) for choice in choices])


def _filled_choice(choice: Any, text: str) -> Any:
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict) or message.get("content") or message.get("tool_calls"):
        return choice
    return JSONObject(choice, message=JSONObject(message, content=text))


class ChatCompletions(Surface):
    name = "chat_completions"
    provider = "openai"
    api_surface = "chat_completions"
    usage_tokens = ("prompt_tokens", "completion_tokens")
    max_description = 1024  # OpenAI answers a longer tool description 400 `string_above_max_length`
    gates = ("async_should_run_chat_completion_agentic_loop", "async_should_run_agentic_loop")
    # LiteLLM's chat path also falls back to the messages-style builder when that is all a hook has.
    plan_methods = ("async_build_chat_completion_agentic_loop_plan", "async_build_agentic_loop_plan")

    def calls(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        return [call for message in _messages(response) for call in _calls(message)]

    def call_groups(self, response: dict[str, Any]) -> list[list[dict[str, Any]]]:
        return [_calls(message) for message in _messages(response)]

    def call_input(self, call: dict[str, Any]) -> Any:
        if call.get("type") == "custom":
            return field(call.get("custom"), "input")
        arguments = field(call.get("function"), "arguments")
        try:
            return orjson.loads(arguments) if isinstance(arguments, str) else arguments
        except orjson.JSONDecodeError:
            return arguments

    def without_claimed(self, response: dict[str, Any], claims: Claims) -> dict[str, Any]:
        return _each_choice(response, lambda choice: self._end_choice(choice, claims))

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

    def tools_off(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "tool_choice": "none"} if body.get("tools") else body

    def filled(self, response: dict[str, Any], text: str) -> dict[str, Any]:
        return _each_choice(response, lambda choice: _filled_choice(choice, text))

    def past_results(self, messages: Any) -> Iterator[tuple[Any, Any, Any]]:
        calls: dict[Any, dict[str, Any]] = {}
        for turn in messages if isinstance(messages, list) else ():
            if not isinstance(turn, dict):
                continue
            calls.update((call.get("id"), call) for call in _calls(turn))
            made = calls.get(turn.get("tool_call_id")) if turn.get("role") == "tool" else None
            if made is not None:
                yield self.call_name(made), self.call_input(made), turn.get("content")

    def error_body(self, status: int, message: str, code: str, param: str | None = None) -> bytes:
        return openai_error_body(status, message, code, param)

    def stream_events(self, response: dict[str, Any], stream_options: Any) -> Iterator[bytes]:
        return sse.chat_chunks(response, _include_usage(stream_options))

    def relay(self, stream_options: Any) -> StreamRelay:
        return ChatRelay(_include_usage(stream_options))

    def streaming_request(self, body: dict[str, Any]) -> dict[str, Any]:
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") is True:
            return body
        return {**body, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}

    def native_format(self) -> NativeFormat:
        return _NATIVE

    def keepalive(self) -> bytes:
        return sse.chat_keepalive()

    def error_event(self, status: int, message: str, code: str) -> bytes:
        return sse.chat_error(message, openai_error_type(status), code)

    def tool_definition(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}

    def follow_up(
        self, response: dict[str, Any], calls: Sequence[dict[str, Any]], results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        # The choice that made these calls goes on (with `n` > 1, the others are alternatives, not history).
        messages = _messages(response)
        made = next((m for m in messages if any(c is call for c in _calls(m) for call in calls)), None)
        if made is None and messages:
            made = messages[0]
        assistant: dict[str, Any] = dict(made) if made else {"role": "assistant", "content": None}
        calls = [with_id(call, "call_") for call in calls]
        assistant["tool_calls"] = calls
        return [
            assistant,
            *(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": f"{ERROR_MARKER}{result.as_text()}" if result.is_error else result.as_text(),
                }
                for call, result in zip(calls, results, strict=True)
            ),
        ]


_NATIVE = ChatNative()
