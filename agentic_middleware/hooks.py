"""The hook API: LiteLLM's agentic loop callback, its plan and its request patch.

A hook written for LiteLLM runs here after changing only its imports. Any
object with at least one of the hook methods is a hook (duck typing), and a
plan or patch may be ours, LiteLLM's pydantic model, or a plain dict.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from .concurrency import awaitable
from .errors import ConfigurationError, HookError, RequestRefused


@dataclass
class AgenticLoopRequestPatch:
    """How the next request differs from the current one; unset fields are kept."""

    model: str | None = None
    messages: list[Any] | None = None
    tools: list[Any] | None = None
    max_tokens: int | None = None
    optional_params: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class AgenticLoopPlan:
    """A hook's answer for one round: rerun, override, terminate, or pass to the next hook."""

    run_agentic_loop: bool = False
    request_patch: AgenticLoopRequestPatch | None = None
    response_override: Any | None = None
    terminate: bool = False
    stop_reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class AgenticHook:
    """Base class for hooks; every method does nothing until overridden.

    Methods may be overridden selectively: the shared gate is asked on every route,
    and the plan builder of the request's route is called when it says yes.
    """

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Ours, not LiteLLM's: once per client request that takes part, before the first call of the model app.

        Return a changed request body (e.g. with server tools declared), or None to keep it.
        """
        return None

    async def async_should_run_agentic_loop(
        self,
        response: Any,
        model: str,
        messages: list[Any],
        tools: list[Any] | None,
        stream: bool,
        custom_llm_provider: str,
        kwargs: dict[str, Any],
    ) -> tuple[bool, dict[str, Any]]:
        return False, {}

    async def async_should_run_chat_completion_agentic_loop(
        self,
        response: Any,
        model: str,
        messages: list[Any],
        tools: list[Any] | None,
        stream: bool,
        custom_llm_provider: str,
        kwargs: dict[str, Any],
    ) -> tuple[bool, dict[str, Any]]:
        """LiteLLM's chat-only gate; asked before the shared gate on /v1/chat/completions."""
        return False, {}

    async def async_should_run_responses_agentic_loop(
        self,
        response: Any,
        model: str,
        messages: list[Any],
        tools: list[Any] | None,
        stream: bool,
        custom_llm_provider: str,
        kwargs: dict[str, Any],
    ) -> tuple[bool, dict[str, Any]]:
        """LiteLLM's Responses-only gate; asked before the shared gate on /v1/responses."""
        return False, {}

    async def async_build_agentic_loop_plan(
        self,
        tools: dict[str, Any],
        model: str,
        messages: list[Any],
        response: Any,
        anthropic_messages_provider_config: Any,
        anthropic_messages_optional_request_params: dict[str, Any],
        logging_obj: Any,
        stream: bool,
        kwargs: dict[str, Any],
    ) -> AgenticLoopPlan:
        return AgenticLoopPlan()

    async def async_build_chat_completion_agentic_loop_plan(
        self,
        tools: dict[str, Any],
        model: str,
        messages: list[Any],
        response: Any,
        optional_params: dict[str, Any],
        logging_obj: Any,
        stream: bool,
        kwargs: dict[str, Any],
    ) -> AgenticLoopPlan:
        return AgenticLoopPlan()

    async def async_build_responses_agentic_loop_plan(
        self,
        tools: dict[str, Any],
        model: str,
        messages: list[Any],
        response: Any,
        optional_params: dict[str, Any],
        logging_obj: Any,
        stream: bool,
        kwargs: dict[str, Any],
    ) -> AgenticLoopPlan:
        return AgenticLoopPlan()

    async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: dict[str, Any]) -> Any:
        return response

    async def async_agentic_loop_cleanup_hook(self, plan: Any, kwargs: dict[str, Any]) -> None:
        return None

    async def async_startup(self) -> None:
        """Ours, not LiteLLM's: once when the gateway starts (its ASGI lifespan), or before the first request
        that takes part when the server sends no lifespan events. Raising fails the start."""
        return None

    async def async_shutdown(self) -> None:
        """Ours, not LiteLLM's: once when the gateway shuts down."""
        return None


CustomLogger = AgenticHook
"""LiteLLM's name for the same class, so ported hooks change only their imports."""

# LiteLLM's pre-call lifecycle (precall.py): a guardrail's method and the two pre-call hooks.
GUARDRAIL = "apply_guardrail"
DEPLOYMENT_HOOK = "async_pre_call_deployment_hook"
PRE_REQUEST_HOOK = "async_pre_request_hook"
PRE_CALL_METHODS = (GUARDRAIL, DEPLOYMENT_HOOK, PRE_REQUEST_HOOK)
# LiteLLM's proxy hooks a guardrail judges in when it has no `apply_guardrail` (precall_proxy.py), and the post-call
# ones, looked up so that a guardrail judging only there is named at start rather than taken for no hook at all.
PRE_CALL_HOOK = "async_pre_call_hook"
MODERATION_HOOK = "async_moderation_hook"
POST_CALL_HOOKS = (
    "async_post_call_success_hook",
    "async_post_call_streaming_hook",
    "async_post_call_streaming_iterator_hook",
)
PROXY_METHODS = (PRE_CALL_HOOK, MODERATION_HOOK, *POST_CALL_HOOKS)

HOOK_METHODS = (
    "async_pre_agentic_loop_request_hook",
    "async_should_run_agentic_loop",
    "async_should_run_chat_completion_agentic_loop",
    "async_should_run_responses_agentic_loop",
    "async_build_agentic_loop_plan",
    "async_build_chat_completion_agentic_loop_plan",
    "async_build_responses_agentic_loop_plan",
    "async_post_agentic_loop_response_hook",
    "async_agentic_loop_cleanup_hook",
)

# How each plan builder receives the request body without `model` and `messages`.
PLAN_PARAMETERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "async_build_agentic_loop_plan": lambda params: {
        "anthropic_messages_provider_config": None,
        "anthropic_messages_optional_request_params": params,
    },
    "async_build_chat_completion_agentic_loop_plan": lambda params: {"optional_params": params},
    "async_build_responses_agentic_loop_plan": lambda params: {"optional_params": params},
}

# LiteLLM's older methods make the follow-up call themselves; here the middleware makes it.
_LEGACY_METHODS = {
    "async_run_agentic_loop": ("async_build_agentic_loop_plan",),
    "async_run_chat_completion_agentic_loop": (
        "async_build_chat_completion_agentic_loop_plan",
        "async_build_agentic_loop_plan",
    ),
}

# Base classes whose methods only return the default answer: ours, and LiteLLM's `CustomLogger` and
# `CustomGuardrail` (whose deployment hook only runs guardrails a LiteLLM request names in `guardrails`).
_DEFAULT_OWNERS = frozenset(
    (
        (__name__, "AgenticHook"),
        ("litellm.integrations.custom_logger", "CustomLogger"),
        ("litellm.integrations.custom_guardrail", "CustomGuardrail"),
    )
)


def overridden(hook: object, name: str) -> Callable[..., Any] | None:
    """The hook's method `name`, or None when it is absent or a base class's do-nothing default."""
    method = getattr(hook, name, None)
    if not callable(method):
        return None
    function = getattr(method, "__func__", method)
    owner = getattr(function, "__qualname__", "").rpartition(".")[0]
    if (getattr(function, "__module__", None), owner) in _DEFAULT_OWNERS:
        return None
    return method  # type: ignore[no-any-return]


class BoundHook:
    """One hook with its methods looked up once; a method it leaves to a base class is None and skipped."""

    def __init__(self, hook: object) -> None:
        if isinstance(hook, type):
            raise ConfigurationError(
                f"{hook.__module__}.{hook.__qualname__} is a class, not a hook: pass an instance, "
                f"such as {hook.__qualname__}()"
            )
        if not any(hasattr(hook, name) for name in HOOK_METHODS):
            raise ConfigurationError(f"{hook!r} is not a hook: it has none of the methods {', '.join(HOOK_METHODS)}")
        self.hook = hook
        self.name = type(hook).__qualname__
        found = {name: overridden(hook, name) for name in (*HOOK_METHODS, *PRE_CALL_METHODS, *PROXY_METHODS)}
        # Decided once here: `async def` methods are awaited as they are, plain `def` ones run in a worker thread.
        self.methods = {name: None if method is None else awaitable(method) for name, method in found.items()}
        self._implements: dict[tuple[str, ...], bool] = {}  # `implements_any`'s answers
        if not any(self.methods.values()):
            logging.getLogger("agentic_middleware").warning(
                "hook %s overrides none of the agentic loop methods: it will never act", self.name
            )
        for legacy, builders in _LEGACY_METHODS.items():
            if overridden(hook, legacy) and not any(self.methods[builder] for builder in builders):
                raise ConfigurationError(
                    f"hook {self.name} implements {legacy}, which makes its own follow-up call; "
                    f"here the middleware makes it: implement {builders[0]} and return an AgenticLoopPlan"
                )

    def implements_any(self, names: tuple[str, ...]) -> bool:
        """Whether the hook implements any of these methods (a route's gates, asked every round), found once."""
        found = self._implements.get(names)
        if found is None:
            found = self._implements[names] = any(self.methods[name] is not None for name in names)
        return found

    def plan_method(self, candidates: tuple[str, ...]) -> str | None:
        """The first of the route's plan builders this hook implements."""
        return next((name for name in candidates if self.methods[name]), None)

    async def call(self, method: str, arguments: dict[str, Any]) -> Any:
        """Call one implemented hook method with these keyword arguments; its failures become a `HookError` naming
        the hook and the method. The arguments come in a dict, not as `**arguments`: each such hop copies them
        again (callgrind, benchmarks streams_app: some 5.8k instructions a hook call, of 2.1M a tool-round stream)."""
        function = self.methods[method]
        assert function is not None, method
        try:
            result = await function(**arguments)
        except RequestRefused:
            raise  # the client's request is wrong, not the hook: a 400, as the hook meant
        except Exception as error:
            raise HookError(self.name, method, f"{type(error).__name__}: {error}") from error
        except asyncio.CancelledError as error:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # a real cancellation of the request: let it through
            raise HookError(self.name, method, "CancelledError raised inside the hook") from error
        return result


def as_plan(value: object, hook: BoundHook, method: str) -> AgenticLoopPlan:
    """Read a plan returned by a hook: ours, LiteLLM's pydantic model, or a dict."""
    plan = _as_dataclass(AgenticLoopPlan, value, hook, method, "a plan")
    if plan.request_patch is not None:
        plan.request_patch = _as_dataclass(AgenticLoopRequestPatch, plan.request_patch, hook, method, "a request patch")
    return plan


_Fields = TypeVar("_Fields", AgenticLoopPlan, AgenticLoopRequestPatch)
_FIELD_NAMES = {kind: tuple(f.name for f in fields(kind)) for kind in (AgenticLoopPlan, AgenticLoopRequestPatch)}
# The fields of each that a None stands for empty in (LiteLLM's pydantic models default them so).
_EMPTIED = {
    kind: tuple(name for name in ("optional_params", "kwargs", "metadata") if name in names)
    for kind, names in _FIELD_NAMES.items()
}


def _as_dataclass(kind: type[_Fields], value: object, hook: BoundHook, method: str, what: str) -> _Fields:
    names = _FIELD_NAMES[kind]
    if isinstance(value, kind):
        for name in _EMPTIED[kind]:
            if getattr(value, name) is None:
                setattr(value, name, {})
        return value
    if isinstance(value, dict | Mapping):
        unknown = sorted(set(value) - set(names))
        if unknown:
            raise HookError(hook.name, method, f"returned {what} with unknown fields {unknown}")
        values = dict(value)
    elif all(hasattr(value, name) for name in names):
        values = {name: getattr(value, name) for name in names}
    else:
        raise HookError(hook.name, method, f"returned {type(value).__name__}, not {what}")
    for name in ("optional_params", "kwargs", "metadata"):
        if name in values and values[name] is None:
            values[name] = {}
    return kind(**values)


# The wire type of each field of a request patch, checked when it is set.
_PATCH_TYPES: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "messages": list,
    "tools": list,
    "max_tokens": int,
    "optional_params": (dict, Mapping),  # a dict is checked first: ABC checks are slow
    "kwargs": (dict, Mapping),
}


def check_patch(patch: AgenticLoopRequestPatch | None, hook: BoundHook, method: str) -> AgenticLoopRequestPatch:
    """A rerun needs a patch with messages; every set field must have its wire type."""
    if patch is None or patch.messages is None:
        raise HookError(hook.name, method, "asked for a rerun without request_patch.messages")
    for name, kind in _PATCH_TYPES.items():
        value = getattr(patch, name)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise HookError(hook.name, method, f"request_patch.{name} must be {_type_name(kind)}, got {value!r}")
    return patch


def _type_name(kind: type | tuple[type, ...]) -> str:
    return kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)


@dataclass
class AgenticLoopLogging:
    """The `logging_obj` hooks receive: one per client request, shared by all its rounds.

    `model_call_details` is a free dict a hook may fill for its own tracing;
    `logger` prefixes every record with the request's call id; `state` keeps what a later request of the same
    caller needs (`CallerState`, store.py: `await state.put(kind, name, value, ttl)`, `get`, `delete`).
    `litellm_trace_id`, `call_type`, `model` and `stream` are the attributes of LiteLLM's own `Logging` that its
    guardrails read (the generic guardrail API and DeepKeep send the trace id, Gray Swan, Akto and Singulr branch on
    the call type, HiddenLayer names the model): without them each such guardrail fails every request.
    """

    litellm_call_id: str
    route: str
    logger: logging.LoggerAdapter[logging.Logger]
    model_call_details: dict[str, Any] = field(default_factory=dict)
    # The caller's state between requests (store.py's `CallerState`): on Redis when the chain store is, else in
    # this process. A hook run by LiteLLM has no such attribute: `getattr(logging_obj, "state", None)`.
    state: Any = None
    # A new id for each request (LiteLLM's default when the caller names no trace), never the client's to choose.
    litellm_trace_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    call_type: str | None = None  # LiteLLM's name for the route's SDK call (precall.CALL_TYPES)
    model: str | None = None  # the client's request's model
    stream: bool = False  # whether the client asked for a stream
    # What was written from the HTTP request (`proxy_server_request`, the request's `metadata` keys), the
    # middleware's own copy for each rerun's guardrails (precall_request.remember); not a LiteLLM attribute.
    request_fields: dict[str, Any] | None = field(default=None, repr=False, compare=False)
