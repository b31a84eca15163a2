"""OpenAI Responses (`POST /v1/responses`).

A tool call is a `function_call` item of `output` (`custom_tool_call` for a client's custom tool); a rerun's `input`
is the input so far, the round's output items, then one `function_call_output` per answered call. Reasoning items
travel whole (`encrypted_content` included): a reasoning model needs them back with the calls they led to.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import orjson

from .. import sse
from ..native import NativeFormat
from ..native.responses import ResponsesNative
from ..payload import JSONObject
from ..reasoning import kept_positions
from . import PATCH_FIELDS, Claims, StreamRelay, Surface, ToolResult, field, part, tool_name, with_id
from .chat import ERROR_MARKER, openai_error_body, openai_error_type

CALL_TYPES = frozenset({"function_call", "custom_tool_call"})
# Output items a client may replay as input; with `store: false` their ids name nothing the app kept.
_OUTPUT_TYPES = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "custom_tool_call",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
    }
)


def _output(response: dict[str, Any]) -> list[Any]:
    output = response.get("output")
    return output if isinstance(output, list) else []


def input_items(body: Mapping[str, Any]) -> Any:
    """A request's input items; a string input is one user message, as LiteLLM gives it."""
    value = body.get("input")
    return [{"role": "user", "content": value}] if isinstance(value, str) else value


def is_call(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") in CALL_TYPES


def _says(item: Any) -> bool:
    """Whether an output item is a message with words (text or a refusal)."""
    if not isinstance(item, dict) or item.get("type") != "message":
        return False
    content = item.get("content")
    if not isinstance(content, list):
        return bool(content)
    return any(not isinstance(part, dict) or part.get("text") or part.get("refusal") for part in content)


def _without(items: list[Any], dropped: set[int]) -> list[Any]:
    """`items` without the positions in `dropped`, nor a reasoning item all of whose items were dropped."""
    return [items[index] for index in kept_positions(items, dropped)] if dropped else list(items)


def _tool_output(result: ToolResult) -> str | list[dict[str, Any]]:
    """A call's output: the text alone, or text and images (`input_image` with a data URL)."""
    text = f"{ERROR_MARKER}{result.content}" if result.is_error else result.content
    if not result.images:
        return text
    images = [{"type": "input_image", "image_url": f"data:{i.media_type};base64,{i.data}"} for i in result.images]
    return [{"type": "input_text", "text": text}, *images] if text else images


class Responses(Surface):
    name = "responses"
    provider = "openai"
    api_surface = "responses"
    # LiteLLM's Responses-specific methods come first, its shared ones serve hooks that have only those.
    gates = ("async_should_run_responses_agentic_loop", "async_should_run_agentic_loop")
    plan_methods = ("async_build_responses_agentic_loop_plan", "async_build_agentic_loop_plan")
    messages_field = "input"
    chains_by_id = True
    patch_fields: Mapping[str, str] = MappingProxyType(
        {**PATCH_FIELDS, "messages": "input", "max_tokens": "max_output_tokens"}
    )

    def messages(self, body: dict[str, Any]) -> Any:
        return input_items(body)

    def unsupported(self, body: dict[str, Any]) -> tuple[str, str] | None:
        """`conversation`: the app appends each call's input and output to it, so every rerun (which sends the whole
        turn again) would add the turn's items to it once more, and a refused turn would leave a server call there
        without its output. `background`: the app answers at once and runs the model later, so the loop never sees
        the calls, and the client would get the server's. Refused rather than corrupted."""
        if body.get("conversation") is not None:
            return "conversation", (
                "conversation is not supported on this gateway, whose server-side tools rerun the model within one "
                "request: chain with previous_response_id, or send the history in input"
            )
        if body.get("background") not in (None, False):
            return "background", (
                "background is not supported on this gateway, whose server-side tools rerun the model within one "
                "request: send the request without background (a stream keeps a long turn alive)"
            )
        return None

    def rerun_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """With `store: false` the app kept no item: replayed output items go without their ids."""
        items = body.get("input")
        if body.get("store") is not False or not isinstance(items, list):
            return body
        if any(isinstance(item, dict) and "id" in item and item.get("type") in _OUTPUT_TYPES for item in items):
            body["input"] = [
                {key: value for key, value in item.items() if key != "id"}
                if isinstance(item, dict) and item.get("type") in _OUTPUT_TYPES
                else item
                for item in items
            ]
        return body

    def calls(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        return [item for item in _output(response) if is_call(item)]

    def call_input(self, call: dict[str, Any]) -> Any:
        if field(call, "type") == "custom_tool_call":
            return field(call, "input")
        arguments = field(call, "arguments")
        try:
            return orjson.loads(arguments) if isinstance(arguments, str) else arguments
        except orjson.JSONDecodeError:
            return arguments

    def is_claimed(self, call: dict[str, Any], claims: Claims) -> bool:
        # LiteLLM's gates name a call by its `call_id`; a claim may also give the item's own `id`.
        return call.get("call_id") in claims.ids or call.get("id") in claims.ids or self.call_name(call) in claims.names

    def without_claimed(self, response: dict[str, Any], claims: Claims) -> dict[str, Any]:
        output = response.get("output")
        if not isinstance(output, list):
            return response
        claimed = {index for index, item in enumerate(output) if is_call(item) and self.is_claimed(item, claims)}
        return JSONObject(response, output=_without(output, claimed))

    def tools_off(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "tool_choice": "none"} if body.get("tools") else body

    def filled(self, response: dict[str, Any], text: str) -> dict[str, Any]:
        output = _output(response)
        # A message with words, or a call of the client's own tool (which the client answers), is an answer already.
        # An empty message stays where it is (a live stream may have sent it): the closing text comes after it.
        if any(is_call(item) or _says(item) for item in output):
            return response
        message = {
            "type": "message",
            "id": f"msg_{os.urandom(12).hex()}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        return JSONObject(response, output=[*output, message])

    def past_results(self, messages: Any) -> Iterator[tuple[Any, Any, Any]]:
        calls: dict[Any, dict[str, Any]] = {}
        for item in messages if isinstance(messages, list) else ():
            if is_call(item):
                calls[item.get("call_id")] = item
            elif isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
                call = calls.get(item.get("call_id"))
                if call is not None:
                    yield self.call_name(call), self.call_input(call), item.get("output")

    def error_body(self, status: int, message: str, code: str, param: str | None = None) -> bytes:
        return openai_error_body(status, message, code, param)

    def stream_events(self, response: dict[str, Any], stream_options: Any) -> Iterator[bytes]:
        return sse.responses_events(response)

    def relay(self, stream_options: Any) -> StreamRelay | None:
        from .responses_relay import ResponsesRelay  # here: the relay's module reads this one's helpers

        return ResponsesRelay()

    def native_format(self) -> NativeFormat:
        return _NATIVE

    def keepalive(self) -> bytes:
        return sse.chat_keepalive()

    def error_event(self, status: int, message: str, code: str) -> bytes:
        return sse.responses_failed(message, code or openai_error_type(status), error_type=openai_error_type(status))

    def tool_definition(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        # `strict` off: the API's strict mode wants every property required and no others allowed.
        return {"type": "function", "name": name, "description": description, "parameters": schema, "strict": False}

    def declared_name(self, tool: Any) -> str | None:
        return tool_name(tool) if part(tool, "type") in (None, "function", "custom") else None

    def follow_up(
        self, response: dict[str, Any], calls: Sequence[dict[str, Any]], results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        # The round's items as the model sent them (reasoning and messages too), without the calls left unanswered;
        # a call the app sent without a `call_id` gets one, in the item and in its output.
        answered = {id(call): with_id(call, "call_", "call_id") for call in calls}
        output = _output(response)
        unanswered = {index for index, item in enumerate(output) if is_call(item) and id(item) not in answered}
        outputs = [
            {
                "type": "custom_tool_call_output" if call.get("type") == "custom_tool_call" else "function_call_output",
                "call_id": answered[id(call)]["call_id"],
                "output": _tool_output(result),
            }
            for call, result in zip(calls, results, strict=True)
        ]
        return [*(answered.get(id(item), item) for item in _without(output, unanswered)), *outputs]


_NATIVE = ResponsesNative()
