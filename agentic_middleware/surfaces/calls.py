"""Reading tool calls and tool declarations of any route: their fields, their one name, their input's bytes, and
what the gates claimed. Every check and every runner reads a name here, so that none can judge a call under one
name that another runs under a different one."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import orjson

from ..payload import JSONObject, own_size


class Claims(NamedTuple):
    """The tool calls hooks claimed, by id, and by name for those claimed without an id."""

    ids: frozenset[str]
    names: frozenset[str]


def field(value: Any, name: str) -> Any:
    """`value[name]` for mappings, `value.name` for objects (LiteLLM's pydantic types), else None."""
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def part(value: Any, name: str) -> Any:
    """As `field`, for any mapping too (a `MappingProxyType`, a hook's own `Mapping`), which `field` reads as an
    object: a tool whose name a check cannot see must not pass it for having none. A `dict`'s read in C."""
    if isinstance(value, dict):
        return dict.get(value, name)
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


_NAME_HOLDERS = ("function", "custom")  # Chat's function and custom tools (and calls) hold their name there


def tool_name(value: Any) -> str | None:
    """The one name of a tool or tool call on any route, None when it has none or more than one.

    A name may stand at the top (`name`: Messages, Responses, and the legacy form of a Chat call) or under
    `function` or `custom` (Chat); a reader that prefers one place runs a call another judged by the other. So every
    place a name may stand is read, and names that disagree (or one that is not a non-empty string) give None: such a
    call or tool is no one's, which a policy that judges names refuses (fail closed). `None` in a place is no name."""
    # The common case, read in C: a name at the top alone, no holder of `_NAME_HOLDERS` beside it.
    if type(value) is dict or type(value) is JSONObject:
        name = dict.get(value, "name")
        if dict.get(value, "function") is None and dict.get(value, "custom") is None:
            return name if isinstance(name, str) and name else None
    name = part(value, "name")
    for holder in _NAME_HOLDERS:
        inner = part(value, holder)
        other = None if inner is None else part(inner, "name")
        if other is not None:
            if name is not None and other != name:
                return None
            name = other
    return name if isinstance(name, str) and name else None


def canonical(value: Any) -> bytes:
    """A tool input as JSON with sorted keys, so the same call always gives the same bytes."""
    try:
        return own_size(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))  # kept by the repeat check
    except TypeError:
        pass
    try:
        return repr(value).encode()
    except RecursionError:  # nested too deep even for `repr` (only a hook's objects: a client's body is checked)
        return b"<unwritable %d>" % id(value)  # equal to no other value's: never taken for the client's own tool


def with_id(call: dict[str, Any], prefix: str, key: str = "id") -> dict[str, Any]:
    """The call itself when it has an id (in `key`), else a copy with a new one: some servers send calls without,
    and a tool result must name the call it answers."""
    value = dict.get(call, key) if isinstance(call, dict) else call.get(key)  # in C: a parsed call's `get` is Python's
    if isinstance(value, str) and value:
        return call
    return {**call, key: f"{prefix}{os.urandom(12).hex()}"}


def claims_of(gate_answers: Iterable[dict[str, Any]]) -> Claims:
    """Read the `tool_calls` the gates returned: each call's id, else its one name (`tool_name`; a call without
    one claims nothing by name)."""
    ids: set[str] = set()
    names: set[str] = set()
    for answer in gate_answers:
        calls = field(answer, "tool_calls")
        for call in calls if isinstance(calls, list | tuple) else ():
            call_id = field(call, "id")
            if isinstance(call_id, str):
                ids.add(call_id)
                continue
            name = tool_name(call)
            if name is not None:
                names.add(name)
    return Claims(frozenset(ids), frozenset(names))
