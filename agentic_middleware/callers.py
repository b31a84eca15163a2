"""Who is calling: the identity the chain store binds its records to (chains.py), so that one caller never reads,
uses or changes what another's turn left.

`caller(scope) -> str | None` (sync or async) is the middleware's `caller` option. A gateway whose auth knows the
caller better sets `scope["state"]["agentic_caller"]` (a non-empty string), which wins over the function. The
default function takes LiteLLM's key hash when the gateway's auth put one in `request.state` (precall.py reads the
same for hooks), else the SHA-256 of the API key the client sent (`authorization: Bearer <key>`, else
`x-api-key`): the hash LiteLLM's proxy computes for the same key, so both name one caller alike. None means the
request names no one; such requests share the records made by requests that named no one, and only those.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import Scope

from .precall import caller_hash

Caller = Callable[[Scope], "str | Awaitable[str | None] | None"]

STATE_KEY = "agentic_caller"  # set by a gateway's auth in `request.state`: wins over the `caller` function


def key_hash(scope: Scope) -> str | None:
    """The default `caller`: LiteLLM's key hash in `request.state`, else the SHA-256 (hex) of the API key sent in
    `authorization` (its `Bearer` scheme dropped) or `x-api-key`; None when there is none."""
    state = scope.get("state")
    if isinstance(state, dict) and (known := caller_hash(state)) is not None:
        return known
    key = b""
    for name, value in scope.get("headers", ()):
        name = name.lower()
        if name == b"authorization":
            scheme, _, rest = value.strip().partition(b" ")
            key = rest.strip() if scheme.lower() == b"bearer" else value.strip()
            break
        if name == b"x-api-key" and not key:
            key = value.strip()
    return hashlib.sha256(key).hexdigest() if key else None


async def identify(scope: Scope, caller: Caller) -> str | None:
    """Who sent this request: `request.state.agentic_caller` when the gateway set it, else what `caller` says.

    A `caller` that raises, or returns anything but a string or None, raises (`TypeError` for the latter): the
    callers of this function fail closed on it."""
    state = scope.get("state")
    given = state.get(STATE_KEY) if isinstance(state, dict) else None
    if isinstance(given, str) and given:
        return given
    value: Any = caller(scope)
    if inspect.isawaitable(value):
        value = await value
    if value is not None and not isinstance(value, str):
        raise TypeError(f"the caller function must return a string or None, got {type(value).__name__}")
    return value or None
