"""What the middleware's entry asks of a request before the loop takes it: the types of the fields the hooks read,
which streams the hooks want, and its own refusals, in the route's error shape. Apart from middleware.py, whose
`__call__` and request reading are the seam every request passes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from .asgi import json_start
from .hooks import BoundHook
from .policy import ToolPolicy, policy_of
from .precall import has_pre_call
from .settings import Settings
from .surfaces import Surface

logger = logging.getLogger("agentic_middleware")


async def refuse(
    send: Send,
    surface: Surface,
    status: int,
    message: str,
    code: str,
    param: str | None = None,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """An answer of the middleware's own, in the route's error shape; the app is not called."""
    error = surface.error_body(status, message, code, param)
    await send(json_start(status, len(error), headers))
    await send({"type": "http.response.body", "body": error})


def stream_wishes(hooks: Iterable[BoundHook]) -> list[Callable[[dict[str, Any]], Any]]:
    """What each hook's `agentic_loop_streaming` says of a streaming request: true, "buffered", or false.

    A LiteLLM hook with pre-call methods asks for all, buffered, unless it says otherwise: only they can tell
    whether they turn the stream into a non-stream (as LiteLLM's web search hook does), after the mode is chosen.
    """
    wishes = []
    for hook in hooks:
        wish = getattr(hook.hook, "agentic_loop_streaming", None)
        if callable(wish):
            wishes.append(wish)
        elif wish is None and has_pre_call(hook):  # buffered: a stream its pre-call turns off must run buffered
            wishes.append(lambda request: "buffered")
        elif wish:
            wishes.append(lambda request, wish=wish: wish)
    return wishes


# The fields hooks read, on every route, with the types they must have when present.
_FIELD_TYPES: tuple[tuple[str, type | tuple[type, ...], str], ...] = (
    ("stream", bool, "a boolean"),
    ("model", str, "a string"),
    ("messages", list, "an array"),
    ("input", (str, list), "a string or an array"),  # Responses
    ("tools", list, "an array"),
)


def wrong_type(body: dict[str, Any]) -> tuple[str, str] | None:
    """The field the hooks rely on that has a wrong type, and what is wrong, if any; the app judges everything else."""
    for name, kind, described in _FIELD_TYPES:
        value = body.get(name)
        if value is not None and not isinstance(value, kind):
            return name, f"{name} must be {described}, got {type(value).__name__}"
    return None


async def socket(app: ASGIApp, scope: Scope, receive: Receive, send: Send, guarded: bool, settings: Settings) -> None:
    """A websocket on a model route: closed before it opens when a guardrail is mounted (`guarded`), or when the tool
    policy refuses its caller or judges its tools by name (a policy that fails refuses), as nothing here reads a
    socket's messages; else the app's."""
    reason = "guardrails cannot judge websockets" if guarded else None
    if reason is None and settings.tool_policy is not None:
        try:
            policy = await policy_of(scope, settings.tool_policy, settings.hook_timeout)
        except Exception as error:
            logger.warning("the tool policy refused a websocket: %s: %s", type(error).__name__, error)
            policy = ToolPolicy(allowed_tools=())
        if policy is not None and policy.judges_names:
            reason = "the tool policy cannot judge websockets"
    if reason is not None:
        await send({"type": "websocket.close", "code": 1008, "reason": reason})
    else:
        await app(scope, receive, send)
