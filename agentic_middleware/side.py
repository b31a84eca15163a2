"""Side requests: the requests in which the server's tools are of no use, so `ServerTools` declares none of its own.

Coding agents send requests beside their turns that no tool call can serve: Claude Code's session title (a JSON
schema in `output_config.format`, `tools: []`), its token counting fallback (`max_tokens: 1`), Codex's compaction
(`tools: []`, labelled `request_kind: "compaction"`). A tool declared there costs input tokens at best and, at worst,
a tool call where the client waits for a title or a summary. The signs are read the same way on every route, each in
its own spelling (docs/server-tools.md#side-requests):

- `tool_choice` none: Messages `{"type": "none"}`, Chat Completions and Responses `"none"`;
- a structured output: Messages `output_config.format` (or the beta's `output_format`), Chat Completions
  `response_format` of type `json_schema` or `json_object`, Responses `text.format` of those types;
- at most `PROBE_TOKENS` tokens (`max_tokens`, `max_completion_tokens`, `max_output_tokens`): no tool call fits;
- Codex's own label: its `x-codex-turn-metadata` (a header, and `client_metadata` in the body) with a
  `request_kind` of `"compaction"`.

An explicit `tools: []` alone is not a sign: the OpenAI Agents SDK sends it on every turn of an agent without tools
of its own, which is the client the server's tools are for.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.types import Scope

# The most tokens a request may ask for and still be a probe: Claude Code's counting fallback asks for 1.
PROBE_TOKENS = 1
CODEX_METADATA = "x-codex-turn-metadata"
CODEX_SIDE_KINDS = frozenset({"compaction"})
_CODEX_HEADER = CODEX_METADATA.encode()
_CODEX_LENGTH = len(_CODEX_HEADER)
_NAME = operator.itemgetter(0)
_TEXTS = (bytes, str)  # a tuple, not `bytes | str`, which makes a new union object at every request

_NONE_CHOICES: Mapping[str, Any] = {"messages": {"type": "none"}, "chat_completions": "none", "responses": "none"}
_TOKEN_FIELDS: Mapping[str, tuple[str, ...]] = {
    "messages": ("max_tokens",),
    "chat_completions": ("max_tokens", "max_completion_tokens"),
    "responses": ("max_output_tokens",),
}
_JSON_FORMATS = frozenset({"json_schema", "json_object"})


def side_request(route: str, body: Mapping[str, Any], scope: Scope | None = None) -> str | None:
    """Why a request of the route's format (a surface's `name`) is a side request, or None when it is a turn."""
    choice = body.get("tool_choice")
    if choice is not None and choice == _NONE_CHOICES.get(route):
        return "tool_choice is none"
    if _structured(route, body):
        return "it asks for a structured output"
    for name in _TOKEN_FIELDS.get(route, ()):
        limit = body.get(name)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit <= PROBE_TOKENS:
            return f"{name} is {limit}"
    kind = _codex_kind(body, scope)
    if kind in CODEX_SIDE_KINDS:
        return f"Codex labels it a {kind} request"
    return None


def _structured(route: str, body: Mapping[str, Any]) -> bool:
    if route == "messages":
        config = body.get("output_config")
        return (isinstance(config, dict) and config.get("format") is not None) or body.get("output_format") is not None
    holder = body.get("response_format") if route == "chat_completions" else _get(body.get("text"), "format")
    return isinstance(holder, dict) and holder.get("type") in _JSON_FORMATS


def _get(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else None


def _codex_kind(body: Mapping[str, Any], scope: Scope | None) -> Any:
    """The `request_kind` of Codex's turn metadata: the header's, else the body's `client_metadata`'s."""
    raw = None
    headers = (scope or {}).get("headers", ())
    # Every request's headers are looked at: their lengths first, in C (a client sends fifteen or more), and only a
    # name of the header's length is lowered.
    if _CODEX_LENGTH in map(len, map(_NAME, headers)):
        for name, value in headers:
            if len(name) == _CODEX_LENGTH and name.lower() == _CODEX_HEADER:
                raw = value
                break
    if raw is None:
        raw = _get(body.get("client_metadata"), CODEX_METADATA)
    if not isinstance(raw, _TEXTS):
        return None
    try:
        return _get(orjson.loads(raw), "request_kind")
    except orjson.JSONDecodeError:
        return None
