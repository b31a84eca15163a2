"""Wire formats: what the loop needs to know of each route's bodies, one module per format."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, NamedTuple

import orjson


class ToolCall(NamedTuple):
    """A tool call of a response: its id, its name, and its input as canonical JSON bytes."""

    id: str | None
    name: str | None
    input: bytes


class Claims(NamedTuple):
    """The tool calls hooks claimed, by id, and by name for those claimed without an id."""

    ids: frozenset[str]
    names: frozenset[str]

    def cover(self, call_id: object, name: object) -> bool:
        return call_id in self.ids or name in self.names


def field(value: Any, name: str) -> Any:
    """`value[name]` for mappings, `value.name` for objects (LiteLLM's pydantic types), else None."""
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def canonical(value: Any) -> bytes:
    """A tool input as JSON with sorted keys, so the same call always gives the same bytes."""
    if isinstance(value, str | bytes):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value.encode() if isinstance(value, str) else value
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return repr(value).encode()


def claims_of(gate_answers: Iterable[dict[str, Any]]) -> Claims:
    """Read the `tool_calls` the gates returned: each call's id, else its name."""
    ids: set[str] = set()
    names: set[str] = set()
    for answer in gate_answers:
        calls = field(answer, "tool_calls")
        for call in calls if isinstance(calls, list | tuple) else ():
            call_id = field(call, "id")
            if isinstance(call_id, str):
                ids.add(call_id)
                continue
            name = field(call, "name") or field(field(call, "function"), "name")
            if isinstance(name, str):
                names.add(name)
    return Claims(frozenset(ids), frozenset(names))


class Surface(ABC):
    """One wire format: its hook methods, its tool calls, its error shape."""

    name: str
    provider: str  # the default `custom_llm_provider`
    api_surface: str  # LiteLLM's `_agentic_loop_api_surface`
    gates: tuple[str, ...]
    plan_methods: tuple[str, ...]  # in order of preference

    @abstractmethod
    def tool_calls(self, response: dict[str, Any]) -> list[ToolCall]:
        """Every tool call of a response, the client's own included."""

    @abstractmethod
    def without_claimed(self, response: dict[str, Any], claims: Claims) -> dict[str, Any]:
        """A copy of the response without the claimed calls, ending the turn if none of the client's remain."""

    @abstractmethod
    def error_body(self, status: int, message: str, code: str) -> bytes:
        """An error body in the route's own shape."""


def surfaces() -> dict[str, Surface]:
    from .chat import ChatCompletions
    from .messages import Messages

    return {surface.name: surface for surface in (Messages(), ChatCompletions())}
