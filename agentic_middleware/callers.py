"""Who is calling: the identity the chain store binds its records to (chains.py), so that one caller never reads,
uses or changes what another's turn left.

`caller(scope) -> str | None` (sync or async) is the middleware's `caller` option. A gateway whose auth knows the
caller better sets `scope["state"]["agentic_caller"]` (a non-empty string), which wins over the function. The
default function takes LiteLLM's key hash when the gateway's auth put one in `request.state` (precall.py reads the
same for hooks), else the SHA-256 of the API key the client sent, read from the headers LiteLLM's proxy reads, in
its order: the hash LiteLLM's proxy computes for the same key, so both name one caller alike. None means the
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


# The headers LiteLLM's proxy takes a key from, in its order (litellm.proxy.auth.user_api_key_auth.get_api_key):
# its own, OpenAI's, Azure's, Anthropic's, Google AI Studio's, Azure API Management's.
_KEY_HEADERS = (
    b"x-litellm-api-key",
    b"authorization",
    b"api-key",
    b"x-api-key",
    b"x-goog-api-key",
    b"ocp-apim-subscription-key",
)
_SCHEMED = frozenset((b"x-litellm-api-key", b"authorization"))  # where LiteLLM drops a `Bearer` or `Basic` scheme
_SCHEMES = frozenset((b"bearer", b"basic"))


def key_hash(scope: Scope) -> str | None:
    """The default `caller`: LiteLLM's key hash in `request.state`, else the SHA-256 (hex) of the API key sent in
    the first of the headers LiteLLM's proxy reads a key from that holds one (`x-litellm-api-key`, `authorization`
    with its `Bearer` or `Basic` scheme dropped, `api-key`, `x-api-key`, `x-goog-api-key`,
    `ocp-apim-subscription-key`; of a repeated header, the first, as Starlette reads it); None when there is none,
    so that a client's SDK (Azure's sends only `api-key`) never makes its callers one."""
    state = scope.get("state")
    if isinstance(state, dict) and (known := caller_hash(state)) is not None:
        return known
    sent: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", ()):
        sent.setdefault(name.lower(), value)
    for name in _KEY_HEADERS:
        key = sent.get(name, b"").strip()
        if name in _SCHEMED:
            scheme, _, rest = key.partition(b" ")
            if scheme.lower() in _SCHEMES:  # `Bearer` alone names no key: the next header may
                key = rest.strip()
        if key:
            return hashlib.sha256(key).hexdigest()
    return None


async def identify(scope: Scope, caller: Caller) -> str | None:
    """Who sent this request: `request.state.agentic_caller` when the gateway set it, else what `caller` says.

    A `caller` that raises, or returns anything but a string or None, raises (`TypeError` for the latter), and so
    does an `agentic_caller` that is set but is not a non-empty string (a user id object, an empty string): taken
    as absent, it would leave callers the gateway told apart under one key. The callers of this function fail
    closed on it."""
    state = scope.get("state")
    given = state.get(STATE_KEY) if isinstance(state, dict) else None
    if given is not None:
        if isinstance(given, str) and given:
            return given
        raise TypeError(f"request.state.{STATE_KEY} must be a non-empty string, got {given!r:.60}")
    value: Any = caller(scope)
    if inspect.isawaitable(value):
        value = await value
    if value is not None and not isinstance(value, str):
        raise TypeError(f"the caller function must return a string or None, got {type(value).__name__}")
    return value or None
