"""Guardrails that judge in LiteLLM's proxy hooks rather than in `apply_guardrail`.

LiteLLM's proxy runs a guardrail one of two ways. One that defines `apply_guardrail` (and does not set
`use_native_lifecycle_hooks`) goes through its unified path, which gives it the request's texts (precall_guardrail.py).
Any other, LiteLLM's Lakera v2, Aporia, Pangea, Lasso, Aim, Pillar and most hand-written ones among
them, is called by its own hooks: `async_pre_call_hook(user_api_key_dict, cache, data, call_type)` for
`pre_call`, `async_moderation_hook(data, user_api_key_dict, call_type)` for `during_call` (so too a guardrail
with `apply_guardrail` that sets `use_native_during_call_hook`). Left uncalled, such a guardrail mounted here would
let every request through: so they are called as the proxy calls them, on the request's `kwargs` (its `data`):

- `async_pre_call_hook`: a raise, or a returned exception, refuses the request (an HTTP one with its status); a
  returned string refuses it with a 400 and that message, as the proxy does for these call types; a returned dict
  is the request from then on, and None keeps it, with what the hook edited in place;
- `async_moderation_hook`: given a deep copy, as the proxy runs it beside the model call: a raise refuses, and
  nothing it returns or edits reaches the model.

`async_pre_call_hook` is given a `cache` as the proxy gives its own (`user_api_key_cache`, a `DualCache` every
request of the process shares): a LiteLLM `DualCache`, one per process, in memory (`proxy_cache`), so that a hook
that counts or remembers through it (`await cache.async_get_cache(...)`) runs rather than failing every request.

A hook mounted for events whose methods it leaves to LiteLLM's do-nothing defaults would never judge a request
there either, and one that asks `should_run_guardrail` with `default_on` off judges only requests that name it,
which here the client writes: both are refused when the middleware is built (`check_guardrail`), not left to pass.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError, HookError, RequestRefused, refusal_of
from .hooks import GUARDRAIL, MODERATION_HOOK, POST_CALL_HOOKS, PRE_CALL_HOOK
from .precall_kwargs import copied

if TYPE_CHECKING:
    from .hooks import AgenticLoopLogging, BoundHook
    from .precall_kwargs import HookKwargs

# The keys the server gives every round's hooks beside the request (precall.run_pre_call), which a returned dict
# that leaves them out does not take away: the caller's key hash, the call's id, provider, logging object and HTTP
# request, and whether it streams.
SERVER_KWARGS = (
    "user_api_key_hash",
    "litellm_call_id",
    "custom_llm_provider",
    "litellm_logging_obj",
    "proxy_server_request",
    "stream",
    "stream_options",
)

# LiteLLM's events on which a guardrail judges the client's request, in the order they run.
REQUEST_EVENTS = ("pre_call", "during_call")
CACHE_ITEMS = 10_000  # what the process's `DualCache` holds in memory (`proxy_cache`)


@functools.cache
def proxy_cache() -> Any:
    """The `cache` the proxy's `async_pre_call_hook` is given: one `litellm.caching.DualCache` for the process, as
    LiteLLM's proxy gives every hook its module-wide `user_api_key_cache` (a `DualCache`), shared by every request,
    caller, hook and middleware of the process; in memory only (each worker its own), holding only what hooks write
    into it (the proxy's cached keys are not in it). None where LiteLLM cannot be imported: a hook that needs it
    was written for LiteLLM, which it imports. Made when the middleware is built (`check_guardrail`), so that a
    first import of LiteLLM is paid at start-up, not by a request."""
    try:
        from litellm.caching.dual_cache import DualCache
        from litellm.caching.in_memory_cache import InMemoryCache
    except ImportError:
        return None
    # The proxy's in-memory lifetime for its `user_api_key_cache` (UserAPIKeyCacheTTLEnum): 60 s. Its 200 items
    # (LiteLLM's default) would let a flood of 200 other callers' keys evict a quota counted there, the earliest to
    # expire first: CACHE_ITEMS hold a minute of a busy gateway's callers, a few MB at most.
    memory = InMemoryCache(max_size_in_memory=CACHE_ITEMS, default_ttl=60)
    return DualCache(in_memory_cache=memory, default_in_memory_ttl=60)


def method_for(hook: BoundHook, event: str) -> str | None:
    """The method LiteLLM's proxy calls for a guardrail on this request event, if the hook has it; else None.

    `apply_guardrail` (the unified path) unless the guardrail sets `use_native_lifecycle_hooks` (or, for
    `during_call`, `use_native_during_call_hook`); otherwise its own hook for the event."""
    native = bool(getattr(hook.hook, "use_native_lifecycle_hooks", False))
    native_during = event == "during_call" and bool(getattr(hook.hook, "use_native_during_call_hook", False))
    if hook.methods[GUARDRAIL] is not None and not native and not native_during:
        return GUARDRAIL
    own = PRE_CALL_HOOK if event == "pre_call" else MODERATION_HOOK
    return own if hook.methods[own] is not None else None


def real_guardrail(hook: BoundHook) -> bool:
    """A LiteLLM `CustomGuardrail` (read by its attributes, LiteLLM not being imported: `should_run_guardrail` or
    `guardrail_name`), or a hook with `apply_guardrail`; not a plain `CustomLogger`."""
    target = hook.hook
    return (
        hook.methods[GUARDRAIL] is not None
        or callable(getattr(target, "should_run_guardrail", None))
        or hasattr(target, "guardrail_name")
    )


def copy_of(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` copied all the way down, so that nothing a guardrail changes in place reaches the request: not only
    the fields a guardrail's result is written into, since every other field's objects (`metadata`, `thinking`,
    `response_format`...) are the request's own and are written into the body the app is sent. The logging object
    is the request's, shared as every hook shares it, and so is any object that cannot be copied (a lock in a
    context an earlier guardrail keeps in the request): the request is judged, not failed."""
    memo: dict[int, Any] = {}
    return {name: value if name == "litellm_logging_obj" else copied(value, memo) for name, value in kwargs.items()}


def judging_methods(hook: BoundHook) -> list[str]:
    """The judging methods a hook overrides: `apply_guardrail`, the proxy's request hooks, the post-call ones."""
    names = (GUARDRAIL, PRE_CALL_HOOK, MODERATION_HOOK, *POST_CALL_HOOKS)
    return [name for name in names if hook.methods.get(name) is not None]


def check_guardrail(hook: BoundHook, events: list[Any] | None) -> None:
    """Refuse, when the middleware is built, a guardrail asked to judge requests that would judge none here.

    `events`: the events it runs on (precall's `_events`; None for every event)."""
    if hook.methods.get(PRE_CALL_HOOK) is not None:
        proxy_cache()  # made now, not on a request
    wanted = [event for event in REQUEST_EVENTS if events is None or event in events]
    judging = judging_methods(hook)
    if not wanted or not judging:
        return
    found = [method for event in wanted if (method := method_for(hook, event)) is not None]
    if not found:
        needed = " or ".join(
            f"{PRE_CALL_HOOK if event == 'pre_call' else MODERATION_HOOK} (for {event})" for event in wanted
        )
        raise ConfigurationError(
            f"guardrail {hook.name} runs on {', '.join(wanted)} but implements only {', '.join(judging)}: LiteLLM's "
            f"proxy would call apply_guardrail or {needed}, which it leaves to LiteLLM's defaults, so it would never "
            "judge a request; implement the method for its event, or mount it with the event it implements"
        )
    if any(method != GUARDRAIL for method in found) and _opt_in_only(hook.hook):
        raise ConfigurationError(
            f"guardrail {hook.name} judges in {', '.join(m for m in found if m != GUARDRAIL)}, which asks "
            "should_run_guardrail, and has default_on off: it would judge only requests that name it in their "
            "guardrails list, which the client writes; mount it with default_on=True"
        )


def _opt_in_only(guardrail: object) -> bool:
    """A LiteLLM `CustomGuardrail` (it has `should_run_guardrail`) whose `default_on` is not True."""
    asks = callable(getattr(guardrail, "should_run_guardrail", None))
    return asks and getattr(guardrail, "default_on", None) is not True


def caller_auth(kwargs: Mapping[str, Any], logging_obj: AgenticLoopLogging) -> Any:
    """The `user_api_key_dict` the proxy's hooks are given: the gateway's `request.state.user_api_key_auth` (as
    `model_call_details` holds it), else, when LiteLLM's proxy types are loaded, a `UserAPIKeyAuth` of the caller's
    key hash alone (no role, team or budget: the middleware knows none), else None."""
    params = logging_obj.model_call_details.get("litellm_params")
    metadata = params.get("metadata") if isinstance(params, dict) else None
    auth = metadata.get("user_api_key_auth") if isinstance(metadata, dict) else None
    if auth is not None:
        return auth
    kind = getattr(sys.modules.get("litellm.proxy._types"), "UserAPIKeyAuth", None)
    return kind(api_key=kwargs.get("user_api_key_hash")) if kind is not None else None


async def called(call: Callable[..., Awaitable[Any]], hook: BoundHook, method: str, **arguments: Any) -> Any:
    """One pre-call method; an HTTP exception it raises to say no (see `refusal_of`) refuses the request."""
    try:
        return await call(hook, method, **arguments)
    except HookError as error:
        refused = refusal_of(error.__cause__)
        if refused is None:
            raise
        status, message, headers = refused
        raise RequestRefused(message, status, headers) from error.__cause__


async def pre_call_hook(
    hook: BoundHook,
    kwargs: HookKwargs,
    call_type: str | None,
    logging_obj: AgenticLoopLogging,
    call: Callable[..., Awaitable[Any]],
) -> None:
    """The guardrail's `async_pre_call_hook` on the request; what it returns is applied to `kwargs` (in place: the
    caller reads the request there), or refuses it. `cache` is the process's `DualCache` (`proxy_cache`)."""
    result = await called(
        call,
        hook,
        PRE_CALL_HOOK,
        user_api_key_dict=caller_auth(kwargs, logging_obj),
        cache=proxy_cache(),
        data=kwargs,
        call_type=call_type,
    )
    if isinstance(result, BaseException):  # the proxy raises a returned exception
        refused = refusal_of(result)
        if refused is None:
            raise HookError(hook.name, PRE_CALL_HOOK, f"returned {type(result).__name__}: {result}")
        status, message, headers = refused
        raise RequestRefused(message, status, headers) from result
    if isinstance(result, str):  # the proxy's answer to a string: a 400 with it as the message
        raise RequestRefused(result, 400)
    if isinstance(result, dict) and result is not kwargs:
        server = {name: kwargs[name] for name in SERVER_KWARGS if name in kwargs}
        for name in [name for name in kwargs if name not in result]:
            del kwargs[name]
        for name, value in result.items():
            if name not in kwargs or kwargs[name] is not value:
                kwargs[name] = value
        # A partial dict (the request's fields alone, as many hooks build one) takes the server's keys with it: put
        # back those it left out, as the rerun path sets them anew, without counting them as the hook's.
        for name, value in server.items():
            if name not in result:
                dict.__setitem__(kwargs, name, value)


async def moderation_hook(
    hook: BoundHook,
    data: dict[str, Any],
    call_type: str | None,
    logging_obj: AgenticLoopLogging,
    call: Callable[..., Awaitable[Any]],
) -> None:
    """The guardrail's `async_moderation_hook` on a copy of the request (`data`): only a refusal counts."""
    await called(
        call,
        hook,
        MODERATION_HOOK,
        data=data,
        user_api_key_dict=caller_auth(data, logging_obj),
        call_type=call_type,
    )
