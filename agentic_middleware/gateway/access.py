"""The gateway's own client keys (`AGENTIC_GATEWAY_API_KEYS`): with an upstream key in the gateway, whoever reaches
it spends that key, so a gateway that listens beyond this machine with one must check who calls it.

A request must carry one of the keys as `x-api-key`, `authorization: Bearer` or `api-key`, as the Anthropic, OpenAI
and Azure OpenAI SDKs send their `api_key`; else it gets a 401 in its route's error shape and nothing goes up.
`/health` stays open (a load balancer's probe carries no key). Keys are compared in constant time.

The key a request was admitted with is who is calling: its SHA-256 goes in `request.state.user_api_key_hash`, as
LiteLLM's proxy puts the hash of the key it checked there, and the middleware's default `caller` (the chain store's
records, a `tool_policy` keyed by `key_hash`) reads it first. Without it, the caller would be read from whichever key
header comes first in LiteLLM's order, which a client holding one valid key fills with anything it likes.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ..routes import route_path
from .wire import error_response, route_of

OPEN_PATHS = frozenset({"/health"})


def gateway_keys(value: str | None) -> tuple[bytes, ...]:
    """The comma-separated keys of `AGENTIC_GATEWAY_API_KEYS`, blanks dropped. A value that is set but holds no key
    (`" , "`) is a ValueError, not "no keys": the operator meant to require keys, so the gateway must not open."""
    keys = tuple(key.strip().encode() for key in (value or "").split(",") if key.strip())
    if value and not keys:
        raise ValueError(f"AGENTIC_GATEWAY_API_KEYS is set but holds no key: {value!r}")
    return keys


class RequireKey:
    """Refuses a request without one of `keys` (401); see the module."""

    def __init__(self, app: ASGIApp, keys: tuple[bytes, ...]) -> None:
        if not keys:
            raise ValueError("RequireKey needs at least one key")
        self.app = app
        self.keys = keys

    def admitted(self, headers: Headers) -> bytes | None:
        """The first of the request's keys that is a gateway key, None when none is."""
        offered = [value.encode("latin-1") for name in ("x-api-key", "api-key") for value in headers.getlist(name)]
        for value in headers.getlist("authorization"):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer":
                offered.append(token.strip().encode("latin-1"))
        found = None
        for candidate in offered:
            for key in self.keys:
                if hmac.compare_digest(candidate, key) and found is None:
                    found = key
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or route_path(scope) in OPEN_PATHS:  # as the app's router reads it
            await self.app(scope, receive, send)
            return
        key = self.admitted(Headers(scope=scope))
        if key is not None:
            scope.setdefault("state", {})["user_api_key_hash"] = hashlib.sha256(key).hexdigest()
            await self.app(scope, receive, send)
            return
        response = error_response(route_of(route_path(scope)), 401, "a valid gateway API key is required")
        await response(scope, receive, send)
