"""Compression interception: long contents in the history go to a per-request stash, the model sees stubs.

On the first call of each client request, every text above `threshold` characters in the history (tool results,
long user documents) is replaced by a stub with a key and a preview, and a `retrieve(key)` server tool is declared;
when the model calls it, the original comes back. The stash lives in the request's `logging_obj`, so it ends with
the request: nothing is shared between requests and nothing grows.
"""

from __future__ import annotations

from typing import Any

import orjson

from .surfaces import surface_for
from .tools import ServerTools, server_tool

STASH = "compression_stash"
STUB_MARK = "[compressed: "


@server_tool(description="Get back the full text of a compressed part of the conversation, by the key in its stub.")
def retrieve(key: str, logging_obj: Any) -> str:
    stash: dict[str, str] = logging_obj.model_call_details.get(STASH) or {}
    if key not in stash:
        raise KeyError(f"no compressed text has the key {key!r}; known keys: {', '.join(stash) or 'none'}")
    return stash[key]


class CompressionHook(ServerTools):
    """Stubs long history contents and serves `retrieve`; the message the model must act on is never stubbed."""

    def __init__(self, threshold: int = 4000, preview: int = 200, timeout: float = 30.0) -> None:
        super().__init__([retrieve], timeout=timeout)
        self.threshold = threshold
        self.preview = preview

    async def async_pre_agentic_loop_request_hook(  # None keeps the client's bytes
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any] | None:
        api_surface = kwargs["_agentic_loop_api_surface"]
        field = surface_for(api_surface).messages_field  # `input` on Responses, where a string input is all current
        messages = request.get(field)
        if not isinstance(messages, list):
            return None
        stash: dict[str, str] = {}
        protected = _protected(messages)
        squeezed = [
            message if index in protected else self._message(message, stash, api_surface)
            for index, message in enumerate(messages)
        ]
        if not stash:
            return None  # nothing long: leave the request as the client sent it, without a retrieve tool
        logging_obj.model_call_details[STASH] = stash
        return await super().async_pre_agentic_loop_request_hook({**request, field: squeezed}, logging_obj, kwargs)

    async def async_should_run_agentic_loop(
        self,
        response: Any,
        model: str,
        messages: list[Any],
        tools: list[Any] | None,
        stream: bool,
        custom_llm_provider: str,
        kwargs: dict[str, Any],
    ) -> tuple[bool, dict[str, Any]]:
        """Claim `retrieve` only where we stubbed something, so a client's own `retrieve` tool stays the client's."""
        if STUB_MARK.encode() not in orjson.dumps(messages):
            return False, {}
        return await super().async_should_run_agentic_loop(
            response, model, messages, tools, stream, custom_llm_provider, kwargs
        )

    def _stub(self, text: str, stash: dict[str, str]) -> str:
        if len(text) <= self.threshold:
            return text
        key = f"c{len(stash) + 1}"
        stash[key] = text
        return (
            f'{STUB_MARK}{len(text):,} chars, key {key}; call retrieve(key="{key}") for the full text]\n'
            f"{text[: self.preview]}..."
        )

    def _message(self, message: Any, stash: dict[str, str], api_surface: str) -> Any:
        """A message with its long texts stubbed: chat user/tool strings; messages strings, text and tool results;
        Responses user messages (strings, `input_text` parts) and tool outputs (`function_call_output` and the like)."""
        chat = api_surface == "chat_completions"
        if not isinstance(message, dict):
            return message
        if api_surface == "responses" and _role(message) == "tool":
            return self._field(message, "output", stash)
        if message.get("role") not in (("user", "tool") if chat else ("user",)):
            return message
        return self._field(message, "content", stash, blocks=not chat)

    def _field(self, value: dict[str, Any], key: str, stash: dict[str, str], blocks: bool = True) -> Any:
        """`value` with `value[key]` stubbed: a string, or (with `blocks`) each block of a list."""
        content = value.get(key)
        if isinstance(content, str):
            return {**value, key: self._stub(content, stash)}
        if isinstance(content, list) and blocks:
            return {**value, key: [self._block(block, stash) for block in content]}
        return value

    def _block(self, block: Any, stash: dict[str, str]) -> Any:
        if not isinstance(block, dict):
            return block
        if block.get("type") in ("text", "input_text") and isinstance(block.get("text"), str):
            return {**block, "text": self._stub(block["text"], stash)}
        if block.get("type") == "tool_result":
            return self._field(block, "content", stash)
        return block


def _protected(messages: list[Any]) -> set[int]:
    """The current turn, which the model acts on: the last user message and everything after the last assistant."""
    roles = [_role(message) for message in messages]
    last_user = max((index for index, role in enumerate(roles) if role == "user"), default=-1)
    last_assistant = max((index for index, role in enumerate(roles) if role == "assistant"), default=-1)
    return {last_user, *range(last_assistant + 1, len(messages))}


def _role(message: Any) -> Any:
    """Who a history entry is from; a Responses item without a role is a tool's output or the model's own item."""
    if not isinstance(message, dict):
        return None
    if "role" in message:
        return message["role"]
    kind = message.get("type")
    if not isinstance(kind, str):
        return None
    return "tool" if kind.endswith("_call_output") else "assistant"


compression_hook = CompressionHook()
