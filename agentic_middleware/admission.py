"""What the middleware's entry asks of a request before the loop takes it: the caller's tool policy, the hooks
started, the types of the fields the hooks read, whether and how a stream takes part, whether the loop may rerun,
and its own refusals, in the route's error shape. Apart from middleware.py, whose `__call__` and request reading are
the seam every request passes: each answer here is one question with its refusal, read there in the order a request
meets them, so that the reading stays one path a reviewer can follow top to bottom."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from .asgi import json_start
from .errors import RequestRefused
from .hooks import BoundHook
from .lifespan import HookLifecycle
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


async def started(lifecycle: HookLifecycle, hook_timeout: float | None, surface: Surface, send: Send) -> bool:
    """Start the hooks on first use when no lifespan event did, within `hook_timeout`; a failure answers 503
    to every request that waited for that attempt, and the next request makes a new one."""
    try:
        await lifecycle.start(hook_timeout)
    except Exception as error:
        await refuse(send, surface, 503, f"server tools are unavailable: {error}", "hooks_unavailable")
        return False
    return True


async def read_policy(
    scope: Scope, surface: Surface, send: Send, settings: Settings, served: Mapping[str, str]
) -> tuple[bool, ToolPolicy | None]:
    """Whether the request's tool policy could be read (policy.py), and the policy, read once per request, with the
    names the hooks serve a hosted tool's family by (`served`: `policy.served_families`) judged by that family too.

    A function that fails refuses the request, never lets it run unchecked: a `RequestRefused` it raised with
    its own status and headers, anything else (a wrong return type included) 503 `tool_policy_unavailable`."""
    assert settings.tool_policy is not None
    try:
        policy = await policy_of(scope, settings.tool_policy, settings.hook_timeout)
        return True, None if policy is None else policy.serving(served)
    except RequestRefused as refused:
        logger.warning("the tool policy refused the request (%d): %s", refused.status, refused)
        await refuse(send, surface, refused.status, str(refused), refused.code, refused.param, refused.headers)
    except Exception as error:
        logger.error("the tool policy failed: %s: %s", type(error).__name__, error, exc_info=error)
        message = f"the tool policy could not be read: {type(error).__name__}: {error}"
        if not settings.error_details:
            message = "the tool policy could not be read"
        await refuse(send, surface, 503, message, "tool_policy_unavailable")
    return False, None


def may_loop(scope: Scope, policy: ToolPolicy | None, max_agentic_loops: int) -> bool:
    """Whether this request's loop limit lets it rerun (`request.state.max_agentic_loops` when set, under the
    tool policy's cap)."""
    limit = scope.get("state", {}).get("max_agentic_loops", max_agentic_loops)
    if policy is not None and policy.max_agentic_loops == 0:
        return False
    return not isinstance(limit, int) or isinstance(limit, bool) or limit > 0


def stream_mode(
    setting: bool | str | None, wishes: Iterable[Callable[[dict[str, Any]], Any]], request: dict[str, Any]
) -> str | None:
    """How a streaming request takes part: "live", "buffered", or None when it passes through untouched.

    The one place that decides. `streaming` on the middleware (`setting`): False, none take part; True, all do;
    "buffered", all do, buffered. Otherwise a request takes part when a hook's `agentic_loop_streaming`
    (a value, or a function of the request: `stream_wishes`) asks for it, and any hook asking for "buffered" makes it
    buffered. Live is the default; a route whose format has no relay streams buffered (see `Surface.relay`).
    """
    if setting is False:
        return None
    buffered, live = setting == "buffered", setting is True
    for wish in wishes:  # each is asked, in order (a loop: this runs for every streaming request)
        value = wish(request)
        if isinstance(value, str) and value == "buffered":
            buffered = True
        elif value:
            live = True
    return "buffered" if buffered else "live" if live else None
