"""LiteLLM's pre-call lifecycle: what LiteLLM does to a request before its first model call, for hooks written for it.

LiteLLM's own agentic hooks (web search, compression, code interpreter, the Headroom and Compresr guardrails)
do half their work before the model is called: they convert native tools, compress the history, turn a stream
into a non-stream, and write keys into the call's `kwargs` that their gates and plan builders read later. Here
the same methods run once per client request, before the first call of the model app, in LiteLLM's order:

1. guardrails' `apply_guardrail(inputs, request_data, input_type="request", logging_obj)` (the proxy's pre-call
   guardrails run first), for hooks whose `event_hook` includes `pre_call` (one call: precall_guardrail.py; the
   proxy's own hooks for guardrails without it: precall_proxy.py);
2. `async_pre_call_deployment_hook(kwargs, call_type)`;
3. on `/v1/messages`, `async_pre_request_hook(model, messages, kwargs)`.

What they change of `messages` (on Responses, `input` and `instructions`), `tools`, `tool_choice` and `stream` is
applied to the request; every key they add to `kwargs` reaches every round's hooks (the loop's own keys win).
LiteLLM is not imported: its call types are plain strings, which compare equal to its `CallTypes` members.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .errors import HookError
from .hooks import DEPLOYMENT_HOOK, GUARDRAIL, HOOK_METHODS, MODERATION_HOOK, PRE_CALL_HOOK, PRE_REQUEST_HOOK
from .precall_guardrail import call_guardrail
from .precall_kwargs import BODY_FIELDS, HookKwargs, carried, client_fields, returned
from .precall_proxy import (
    REQUEST_EVENTS,
    called,
    check_guardrail,
    copy_of,
    judging_methods,
    method_for,
    moderation_hook,
    pre_call_hook,
    real_guardrail,
)
from .precall_request import recalled, remember, with_server_fields

if TYPE_CHECKING:
    from .hooks import AgenticLoopLogging, BoundHook


# LiteLLM's `call_type` for each wire format's SDK call.
CALL_TYPES = {"anthropic_messages": "anthropic_messages", "chat_completions": "acompletion", "responses": "aresponses"}


def has_pre_call(hook: BoundHook) -> bool:
    """Whether a hook takes part in the pre-call lifecycle: a guardrail wanting `pre_call`, or a pre-call hook."""
    if hook.methods[DEPLOYMENT_HOOK] is not None or hook.methods[PRE_REQUEST_HOOK] is not None:
        return True
    return is_guardrail(hook)


def is_guardrail(hook: BoundHook) -> bool:
    """A guardrail that judges requests before the first model call: one with a method LiteLLM's proxy calls for
    one of its request events (`apply_guardrail`, or its own `async_pre_call_hook` / `async_moderation_hook`:
    precall_proxy.py)."""
    return bool(request_methods(hook))


def request_methods(hook: BoundHook) -> dict[str, str]:
    """Each request event the hook runs on (LiteLLM's `event_hook`: None for every event, one, a list, or a
    tag-based `Mode`: `_events`) that it has a method for, with that method.

    `during_call` is judged too: LiteLLM runs such a guardrail on the request while the model is called, and its
    refusal replaces the answer; here it judges the same request before the call, so its verdict holds (the model
    is not even called). Left out it would never run, and the request it should block would pass."""
    events = _events(getattr(hook.hook, "event_hook", None))
    return {
        event: method
        for event in REQUEST_EVENTS
        if (events is None or event in events) and (method := method_for(hook, event)) is not None
    }


def _events(event_hook: Any) -> list[Any] | None:
    """The events a guardrail runs on here, by their names; None for every event (no `event_hook`).

    A tag-based `Mode` (LiteLLM's `tags` and `default`, read by their attributes) is read as LiteLLM reads it for a
    request that matches none of its tags, since no tag is read here: its `default`; without one, every event any
    tag names (LiteLLM then runs it on each of them). One that is none of these (an unknown object) counts as every
    event: a guardrail mounted is asked to judge, not left out."""
    if event_hook is None:
        return None
    if isinstance(event_hook, list | tuple):
        return [_event_name(event) for event in event_hook]
    if hasattr(event_hook, "tags") and hasattr(event_hook, "default"):
        default = event_hook.default
        if default:
            return [_event_name(event) for event in (default if isinstance(default, list | tuple) else [default])]
        tags = event_hook.tags if isinstance(event_hook.tags, dict) else {}
        return [
            _event_name(event)
            for value in tags.values()
            for event in (value if isinstance(value, list | tuple) else [value])
        ]
    name = _event_name(event_hook)
    return [name] if isinstance(name, str) else None


def judges_reruns(hook: BoundHook) -> bool:
    """A guardrail that judges each rerun's added messages too (rerun_guard.py): a real guardrail (`real_guardrail`)
    that judges requests and takes no part in the loop. A plain logger that overrides `async_pre_call_hook` or
    `async_moderation_hook` (a rate limiter, a quota, a meter, one that adds a system message) is not: LiteLLM's
    proxy calls it once per client request, so it runs once here, on the first request; run on each rerun it would
    count or bill the request again and add its edits once more. A guardrail that is also an agentic hook
    (LiteLLM's Headroom and Compresr compress the request and answer their own retrieve calls) shapes the reruns
    itself: run again on them, it would compress what its own tool just restored."""
    return (
        is_guardrail(hook) and real_guardrail(hook) and not any(hook.methods[name] is not None for name in HOOK_METHODS)
    )


def idle_guardrail(hook: BoundHook) -> Any:
    """The `event_hook` of a guardrail that never judges a request here (`post_call`, `logging_only`...), else None;
    one asked to judge requests with no method for them is refused first (`check_guardrail`)."""
    check_guardrail(hook, _events(getattr(hook.hook, "event_hook", None)))
    if not judging_methods(hook) or is_guardrail(hook):
        return None
    if hook.methods[GUARDRAIL] is None and any(hook.methods[name] is not None for name in _OTHER_METHODS):
        return None  # a hook that acts otherwise, and also has a post-call method (as a logger may)
    return getattr(hook.hook, "event_hook", None)


# The methods by which a hook acts here besides judging.
_OTHER_METHODS = (*HOOK_METHODS, DEPLOYMENT_HOOK, PRE_REQUEST_HOOK)


def _event_name(event: Any) -> Any:
    return getattr(event, "value", event)


def caller_hash(state: Mapping[str, Any]) -> str | None:
    """The caller's key hash: `request.state.user_api_key_hash`, else the `api_key` of its `user_api_key_auth`."""
    value = state.get("user_api_key_hash")
    if value is None:
        auth = state.get("user_api_key_auth")
        value = auth.get("api_key") if isinstance(auth, dict) else getattr(auth, "api_key", None)
    return value if isinstance(value, str) and value else None


class PreCall:
    """The result of the lifecycle: the request body, whether gates see a stream, and the keys hooks added."""

    def __init__(self, body: dict[str, Any], stream: bool, carried: dict[str, Any]) -> None:
        self.body = body
        self.stream = stream
        self.carried = carried


async def run_pre_call(
    hooks: Sequence[BoundHook],
    body: dict[str, Any],
    *,
    stream: bool,
    stream_options: Any,
    api_surface: str,
    provider: str,
    call_id: str,
    logging_obj: AgenticLoopLogging,
    call: Callable[..., Awaitable[Any]],
    state: Mapping[str, Any],
    guardrails_only: bool = False,
    scope: Mapping[str, Any] | None = None,
) -> PreCall:
    """Run every hook's pre-call methods over one request, in LiteLLM's order; `call` calls one hook method.

    `guardrails_only`: a request that does not loop (a stream passing through, a loop limit of 0) is still judged
    by the guardrails, but not prepared for a loop that will not run (the deployment and pre-request hooks, which
    convert tools for it and may turn its stream off). `scope`: the request's ASGI scope, which what LiteLLM's proxy
    writes from the HTTP request is built from (precall_request.py)."""
    # Identity is the gateway's to say, never the client's: fields LiteLLM's proxy sets from the caller's key are
    # dropped from what the client sent, and `user_api_key_hash` comes from `request.state` alone (hooks key
    # per-caller state by it, e.g. session-scoped code sandboxes). It, and every key a hook sets, reaches every
    # round whatever the client's body holds under the same name (`precall_kwargs`).
    client = client_fields(body)
    if scope is not None:
        with_server_fields(client, body, scope)
        remember(logging_obj, client)
    kwargs = HookKwargs(client)
    if (caller := caller_hash(state)) is not None:
        kwargs["user_api_key_hash"] = caller
    kwargs.update(stream=stream, litellm_call_id=call_id, custom_llm_provider=provider, litellm_logging_obj=logging_obj)
    if stream and stream_options is not None:
        kwargs["stream_options"] = stream_options
    kwargs.written.clear()  # what the hooks write from here on (the server's own keys are none of the client's)
    call_type = CALL_TYPES.get(api_surface)
    await judge(hooks, kwargs, api_surface, logging_obj, call)
    if guardrails_only:
        return _applied(body, kwargs, stream, client)
    for hook in hooks:
        if hook.methods[DEPLOYMENT_HOOK] is not None:
            result = await called(call, hook, DEPLOYMENT_HOOK, kwargs=kwargs, call_type=call_type)
            kwargs = _kwargs_of(hook, DEPLOYMENT_HOOK, result, kwargs)
    if api_surface == "anthropic_messages":
        model, messages = kwargs.pop("model", None), kwargs.pop("messages", None)
        kwargs.setdefault("litellm_params", {"custom_llm_provider": provider})
        for hook in hooks:
            if hook.methods[PRE_REQUEST_HOOK] is not None:
                result = await called(call, hook, PRE_REQUEST_HOOK, model=model, messages=messages, kwargs=kwargs)
                kwargs = _kwargs_of(hook, PRE_REQUEST_HOOK, result, kwargs)
        kwargs.setdefault("messages", messages)
        if model is not None:
            kwargs.setdefault("model", model)
    return _applied(body, kwargs, stream, client)


async def judge(
    hooks: Sequence[BoundHook],
    kwargs: HookKwargs,
    api_surface: str,
    logging_obj: AgenticLoopLogging,
    call: Callable[..., Awaitable[Any]],
) -> None:
    """Every guardrail that judges requests on `kwargs` (the request), by the method LiteLLM's proxy calls for each
    of its events, in two passes as LiteLLM's proxy makes them: every `pre_call` step first, in hook order (what
    each changes is written there, for the next to judge), then every `during_call` step, in hook order, each on a
    copy of the request the `pre_call` steps left (its verdict holds and its edits do not, as in LiteLLM: it judges
    a copy beside the model call). So a `during_call` moderator never sees what a later `pre_call` masker masks.
    One whose `apply_guardrail` serves both events is called once, in the first pass."""
    call_type = CALL_TYPES.get(api_surface)
    if "proxy_server_request" not in kwargs:  # a rerun's: the HTTP request's headers, as the first request's
        recalled(kwargs, logging_obj)
    steps = [(hook, request_methods(hook)) for hook in hooks]
    for hook, methods in steps:
        pre = methods.get("pre_call")
        if pre == GUARDRAIL:
            await call_guardrail(hook, kwargs, api_surface, logging_obj, call)
        elif pre == PRE_CALL_HOOK:
            await pre_call_hook(hook, kwargs, call_type, logging_obj, call)
    for hook, methods in steps:
        pre, during = methods.get("pre_call"), methods.get("during_call")
        if during == GUARDRAIL and pre != GUARDRAIL:
            await call_guardrail(hook, copy_of(kwargs), api_surface, logging_obj, call)
        elif during == MODERATION_HOOK:
            await moderation_hook(hook, copy_of(kwargs), call_type, logging_obj, call)


def _kwargs_of(hook: BoundHook, method: str, result: Any, kwargs: HookKwargs) -> HookKwargs:
    """LiteLLM keeps the kwargs a hook edited in place when it returns None, and takes a returned dict."""
    if result is None:
        return kwargs
    if not isinstance(result, dict):
        raise HookError(hook.name, method, f"returned {type(result).__name__}, not a kwargs dict")
    return returned(result, kwargs)


# Request fields a guardrail's mask may be written into besides BODY_FIELDS (structured output schemas, a stored
# prompt's variables: guardrail_extras.py); a field a hook replaced is taken, one it dropped is kept.
_MASKED_FIELDS = ("response_format", "text", "prompt", "output_format", "output_config")


def _applied(body: dict[str, Any], kwargs: HookKwargs, stream: bool, client: dict[str, Any]) -> PreCall:
    new_body = dict(body)
    for name in _MASKED_FIELDS:
        if name in body and isinstance(kwargs.get(name), dict) and kwargs[name] is not body[name]:
            new_body[name] = kwargs[name]
    for name in BODY_FIELDS:
        if name in kwargs and kwargs[name] is not None:
            new_body[name] = kwargs[name]
        elif name in body:
            del new_body[name]
    # A hook may turn a stream off (LiteLLM then answers with a stream made from the whole answer), never on.
    return PreCall(new_body, stream and kwargs.get("stream") is not False, carried(kwargs, client))
