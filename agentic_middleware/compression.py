"""Compression interception: long contents in the history go to a stash, the model sees stubs.

On the first call of each client request, every text above `threshold` characters in the history (tool results,
long user documents) is replaced by a stub with a key and a preview, and a `retrieve(key)` server tool is declared;
when the model calls it, the original comes back. A key names its text (a hash of it), so a stub means one text
however many requests carry it.

The stash lives in the request's `logging_obj`, so on Messages and Chat Completions, where the client sends the
whole history each time (and the stubs are made again), it ends with the request. On Responses, the app stores the
context it was sent, stubs included, and a follow-up by `previous_response_id` may ask for a text stubbed in an
earlier turn: there each stubbed text is also kept in the caller's state (`logging_obj.state`, store.py) for `ttl`
seconds, and a follow-up of a caller that has any gets `retrieve` declared. A request that names no caller
(callers.py) keeps nothing: such requests would share the texts. That state is on Redis when the chain
store is (`RedisChainStore`), so a follow-up on another replica finds it; in this process otherwise.

When the store fails, the request goes on with its own stash (logged once per kind of failure); a later turn's
`retrieve` of a text it could not keep, or cannot read now, gets an error result the model reads.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from typing import Any

import orjson

from .errors import ConfigurationError
from .side import side_request
from .store import FailureLog
from .surfaces import surface_for
from .tools import ServerTools, server_tool

logger = logging.getLogger("agentic_middleware")

STASH = "compression_stash"
STUB_MARK = "[compressed: "
KIND = "compression"  # the state's kind: `compression:<caller>:<key>`
STASHED = "stashed"  # the state's name for "this caller has texts kept" (any key)
_KEY = re.compile(r"c[0-9a-f]{16}")
FAILURES = FailureLog("the compression stash")


def key_of(text: str) -> str:
    """The key of a stubbed text: a hash of it, the same in every request and replica."""
    return "c" + hashlib.sha256(text.encode()).hexdigest()[:16]


@server_tool(description="Get back the full text of a compressed part of the conversation, by the key in its stub.")
async def retrieve(key: str, logging_obj: Any) -> str:
    stash: dict[str, str] = logging_obj.model_call_details.get(STASH) or {}
    if key in stash:
        return stash[key]
    state = getattr(logging_obj, "state", None)  # a later turn's text (Responses), kept in the caller's state
    if state is not None and _KEY.fullmatch(key):
        try:
            text = await state.get(KIND, key) if await state.named() else None
        except Exception as error:
            FAILURES.failed("read", error, "retrieve answers an error")
            raise RuntimeError(f"the compressed text {key!r} cannot be read now (its store failed)") from None
        if isinstance(text, str):
            return text
    raise KeyError(f"no compressed text has the key {key!r}; known keys: {', '.join(stash) or 'none'}")


class CompressionHook(ServerTools):
    """Stubs long history contents and serves `retrieve`; the message the model must act on is never stubbed."""

    def __init__(self, threshold: int = 4000, preview: int = 200, timeout: float = 30.0, ttl: float = 86400.0) -> None:
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
            raise ConfigurationError(f"ttl must be a number of seconds above 0, got {ttl!r}")
        super().__init__([retrieve], timeout=timeout)
        self.threshold = threshold
        self.preview = preview
        self.ttl = float(ttl)  # how long a Responses turn's stubbed texts are kept for its follow-ups

    async def async_pre_agentic_loop_request_hook(  # None keeps the client's bytes
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any] | None:
        api_surface = kwargs["_agentic_loop_api_surface"]
        surface = surface_for(api_surface)
        policy = kwargs.get("_agentic_tool_policy")
        if policy is not None and not any(map(policy.allows, self.by_name)):
            return None  # a caller who may not retrieve a text must not lose it to a stub (policy.py)
        if not self.declare_in_side_requests and side_request(surface.name, request, kwargs.get("scope")):
            return None  # no `retrieve` is declared in a side request, so nothing is stubbed there
        field = surface.messages_field  # `input` on Responses, where a string input is all current
        messages = request.get(field)
        if not isinstance(messages, list):
            messages = []  # a string input is all current: nothing to stub, though a follow-up may need retrieve
        stash: dict[str, str] = {}
        protected = _protected(messages)
        squeezed = [
            message if index in protected else self._message(message, stash, api_surface)
            for index, message in enumerate(messages)
        ]
        stored = api_surface == "responses" and request.get("store") is not False  # the app keeps the stubs
        if not stash:
            if stored and isinstance(request.get("previous_response_id"), str) and await _has_kept(logging_obj):
                return await super().async_pre_agentic_loop_request_hook(request, logging_obj, kwargs)
            return None  # nothing long: leave the request as the client sent it, without a retrieve tool
        logging_obj.model_call_details[STASH] = stash
        if stored:
            await self._keep(logging_obj, stash)
        return await super().async_pre_agentic_loop_request_hook({**request, field: squeezed}, logging_obj, kwargs)

    async def _keep(self, logging_obj: Any, stash: dict[str, str]) -> None:
        """Keep the stubbed texts in the caller's state for the follow-ups; a failing store is logged, and this
        request goes on with its own stash."""
        state = getattr(logging_obj, "state", None)
        if state is None:
            return
        try:
            if not await state.named():
                return  # a client's texts are kept for a caller alone, never for every request that names no one
            for key, text in stash.items():
                await state.put(KIND, key, text, self.ttl)
            await state.put(KIND, STASHED, True, self.ttl)
        except Exception as error:
            FAILURES.failed("keep", error, "a follow-up's retrieve of these texts gets an error result")
            return
        FAILURES.answered()

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
        """Claim `retrieve` only where we stubbed something (or declared it for a follow-up's stored stubs), so a
        client's own `retrieve` tool stays the client's."""
        if STUB_MARK.encode() not in orjson.dumps(messages) and not _declared(tools):
            return False, {}
        return await super().async_should_run_agentic_loop(
            response, model, messages, tools, stream, custom_llm_provider, kwargs
        )

    def _stub(self, text: str, stash: dict[str, str]) -> str:
        if len(text) <= self.threshold:
            return text
        key = key_of(text)
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


async def _has_kept(logging_obj: Any) -> bool:
    """Whether this caller's state holds texts an earlier turn stubbed; a failing store is logged and taken as no."""
    state = getattr(logging_obj, "state", None)
    if state is None:
        return False
    try:
        kept = await state.named() and await state.get(KIND, STASHED)
    except Exception as error:
        FAILURES.failed("read", error, "the follow-up goes without retrieve")
        return False
    FAILURES.answered()
    return kept is True


def _declared(tools: Any) -> bool:
    """Whether the request's tools hold our `retrieve`, as the request hook declared it."""
    return isinstance(tools, list) and any(
        isinstance(tool, dict) and tool.get("description") == retrieve.description for tool in tools
    )


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
