"""The hooks of a request's two ends, and `call_hook`, through which every hook method is called.

Before the first call: LiteLLM's pre-call lifecycle (`precall.py`) and the request hooks, which give the first body.
After the last: each executed plan's post hook shapes the final answer, innermost first, then its cleanup hook.
Every hook method, these and the rounds' gates and plans (`asking.py`), is called by `call_hook` within
`hook_timeout`. `RequestEnds` is the base of `AskingHooks` and so of `AgenticLoop`: all read and change the one
request's state, which is declared here.
"""

from __future__ import annotations

import asyncio
import logging
import operator
from collections.abc import Mapping, Sequence
from time import perf_counter
from typing import Any, NamedTuple

import orjson

from .disconnect import ClientWatch
from .dispatch import Answer, Dispatcher
from .errors import ConfigurationError, HookError, LoopError
from .hooks import AgenticLoopLogging, AgenticLoopRequestPatch, BoundHook
from .live import LiveStream
from .native.live import LiveRecords
from .observe import MAPPINGS, Observer, RoundRecord, usage_added
from .payload import dumps, own_size, wrap
from .policy import ToolPolicy, scoped
from .precall import CALL_TYPES, run_pre_call
from .precall_request import model_call_details
from .rerun_guard import judged_rerun
from .settings import Settings, loop_limit
from .store import CallerState, KeyValueStore
from .stream import EventStream
from .surfaces import Surface

logger = logging.getLogger("agentic_middleware")

REQUEST_HOOK = "async_pre_agentic_loop_request_hook"
POST_HOOK = "async_post_agentic_loop_response_hook"
CLEANUP_HOOK = "async_agentic_loop_cleanup_hook"


def is_internal_field(name: Any) -> bool:
    """Body fields that only trusted server code may set; a client's are removed. A name that is not a string (a
    hook's body may have one) is none of them: writing the body as JSON refuses it, naming the hook."""
    return name == "max_agentic_loops" or (isinstance(name, str) and name.startswith("_agentic_"))


_INTERNAL_PREFIXED = operator.methodcaller("startswith", "_agentic_")


def has_internal_fields(body: dict[Any, Any]) -> bool:
    """Whether any of `body`'s fields is one `is_internal_field` names: asked of every request, and of every body a
    request hook returns, so each name is looked at in C (`methodcaller`), not through a Python call; a body with a
    name that is not a string (only a hook's) is looked at name by name."""
    try:
        return "max_agentic_loops" in body or any(map(_INTERNAL_PREFIXED, body))
    except (AttributeError, TypeError):  # a name without `startswith`, or whose own takes no str
        return any(map(is_internal_field, body))


def without_internal_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A copy of `body` without the fields only trusted server code may set (a plain dict with none, the most
    common, copied whole)."""
    if type(body) is dict and not has_internal_fields(body):
        return dict(body)
    return {name: value for name, value in body.items() if not is_internal_field(name)}


def unchanged(body: dict[str, Any], raw: bytes) -> bool:
    """Whether a body a hook was given is still the request `raw` holds, compared as JSON writes them: Python's `==`
    holds `1`, `1.0` and `True` equal and ignores the order of keys, but the model app reads each as sent. (A key the
    client sent twice is read as the hooks read it, the last one: see docs/hooks.md.)

    Written as the SDKs write a request (compact, UTF-8 unescaped: httpx's `json=`, `JSON.stringify`), the client's
    bytes are what orjson writes of them, so an untouched body is told by one write and no parse."""
    try:
        written = orjson.dumps(body)
        return written == raw or written == orjson.dumps(orjson.loads(raw))
    except TypeError:  # the hook put something that is not JSON in it: changed, and refused where it is written
        return False


class Rerun(NamedTuple):
    """A plan being executed: who made it, with which method, and the kwargs it was given."""

    hook: BoundHook
    method: str
    plan: Any
    patch: AgenticLoopRequestPatch
    kwargs: dict[str, Any]


class RequestEnds:
    """The hooks of a request's two ends, and `call_hook`: the base of `AskingHooks`, so of `AgenticLoop`; every
    attribute below is set by `AgenticLoop.__init__`.

    Slots, not a `__dict__`: a gateway holds thousands of loops at once, and a dict of this many attributes costs
    each about 1.6 KB more (benchmarks case 12, docs/performance.md)."""

    # What the middleware prepared once (`LoopSetup`).
    hooks: Sequence[BoundHook]
    request_hooks: Sequence[BoundHook]
    pre_call_hooks: Sequence[BoundHook]
    guardrail_hooks: Sequence[BoundHook]
    rerun_guardrails: Sequence[BoundHook]  # those that judge what each round adds (`precall.judges_reruns`)
    settings: Settings
    observer: Observer
    state: KeyValueStore  # the hooks' state between requests, seen through `logging_obj.state` (store.py)
    # The request.
    surface: Surface
    provider: str
    scope: Any
    call_id: str
    body: dict[str, Any]
    sent: bytes | None  # the last call's body, while rerun guardrails are mounted
    streaming: bool
    events: EventStream | LiveStream | None
    dispatch: Dispatcher
    client: ClientWatch
    policy: ToolPolicy | None  # what the caller may use, and the cap of its loop limit (policy.py)
    client_tools: frozenset[bytes]  # the client's own tool declarations as they arrived (`policy.client_own`)
    # Its loop so far.
    depth: int
    _limit: int
    round: RoundRecord
    stop_reason: str
    plan_stop_reason: str | None
    hooks_usage: Any
    # What the hooks did to it.
    # The tool calls of each round that reran, for the repeated-call check: a tuple, not a set, as they are at most
    # a few (one per rerun, within the loop limit) and an empty set alone is 216 bytes a stream.
    seen: tuple[tuple[tuple[str, bytes], ...], ...]
    closed: bool
    patch_kwargs: Mapping[str, Any]  # what the plans' patches and the pre-call lifecycle carry to later hooks
    executed: tuple[Rerun, ...]  # a tuple: an empty list is an object the collector tracks, for the stream's life
    _logging_obj: AgenticLoopLogging | None
    __slots__ = tuple(__annotations__)  # each attribute annotated above, and no `__dict__`

    @property
    def limit(self) -> int:
        """The request's loop limit: whatever sets it (the settings, `request.state`, a pre-call hook, a plan's
        patch), never above the tool policy's cap."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        self._limit = value if self.policy is None else self.policy.capped(value)

    def on_the_wire(self, body: dict[str, Any]) -> dict[str, Any]:
        """A body as it goes to the model app, the first call's a hook changed and every rerun's: without the fields
        only trusted code may set (a hook that adds one in place, to a body it returned or to one it was given, is
        not heard by the app either), and without the hooks' tools the caller may not use (policy.py)."""
        if has_internal_fields(body):  # looked for in C: almost no body has one
            body = without_internal_fields(body)
        return body if self.policy is None else scoped(self.surface, body, self.client_tools, self.policy)

    def scoped_as_sent(self, raw: bytes) -> bytes:
        """The client's bytes, as the first call sends them when no hook changed the request: as they are, unless
        the tool policy takes out a tool the client declared that the app would run (a hosted web search, an MCP
        server: `policy_forms`), which no rerun alone can take back once the first call has run it."""
        if self.policy is None or not self.policy.judges_names:
            return raw
        body = scoped(self.surface, self.body, self.client_tools, self.policy)
        return raw if body is self.body else own_size(dumps(body))

    def watch_client(self) -> None:
        """Watch for the client leaving (once, from the first round a hook acts on, or from a stream's start)."""
        if self.client.watcher is None:
            self.client.start()
            self.dispatch.receive = self.client  # its `after_body`

    @property
    def logging_obj(self) -> AgenticLoopLogging:
        """The request's `logging_obj`, made when a hook first needs it."""
        if self._logging_obj is None:
            self._logging_obj = AgenticLoopLogging(
                litellm_call_id=self.call_id,
                route=self.surface.name,
                logger=logging.LoggerAdapter(logger, {"litellm_call_id": self.call_id}),
                model_call_details=model_call_details(self.body, self.provider, self.dispatch.scope["state"]),
                state=CallerState(self.state, self.scope, self.settings.caller),
                call_type=CALL_TYPES.get(self.surface.api_surface),
                model=model if isinstance(model := self.body.get("model"), str) else None,
                # The client's stream flag: a buffered or live stream's body no longer says `stream` (the app is
                # called without one, or a pre-call hook turned it off), its events do; one passing by still says it.
                stream=self.events is not None or self.body.get("stream") is True,
            )
            if isinstance(self.events, LiveStream):  # native records go out as each search completes
                LiveRecords(self.events).keep(self._logging_obj.model_call_details)
        return self._logging_obj

    async def prepared(self, raw: bytes, guardrails_only: bool = False) -> bytes:
        """The first request body after LiteLLM's pre-call lifecycle and every request hook, in hook order.

        `guardrails_only`: a request that does not loop, judged by the guardrails alone (see `run_pre_call`)."""
        changed_by = await self.pre_called(guardrails_only) if self.pre_call_hooks else None
        await self.begin_stream()  # the guardrails have judged: a buffered stream may start (see `begin_stream`)
        for hook in () if guardrails_only else self.request_hooks:
            body = await self.call_hook(
                hook, REQUEST_HOOK, request=self.body, logging_obj=self.logging_obj, kwargs=self.hook_kwargs()
            )
            if body is None:
                continue
            if not isinstance(body, dict):
                raise HookError(hook.name, REQUEST_HOOK, f"returned {type(body).__name__}, not a request body")
            self.body = without_internal_fields(body)
            changed_by = (hook.name, REQUEST_HOOK)
        if changed_by is None:
            if guardrails_only or not self.request_hooks or unchanged(self.body, raw):
                return raw  # as the client sent it, byte for byte
            # A hook edited the request in place and returned None: the first call is sent what the gates are given
            # and the reruns send, not the client's bytes (one more parse, only for requests a request hook saw).
            changed_by = (self.request_hooks[-1].name, REQUEST_HOOK)
        try:
            return own_size(dumps(self.on_the_wire(self.body)))
        except TypeError as error:
            raise HookError(*changed_by, f"the request is not JSON: {error}") from None

    async def begin_stream(self) -> None:
        """A buffered stream's 200 and keep-alives start once the guardrails have judged the request, so that a
        guardrail's refusal keeps its status; a live stream starts with the app's first answer (nothing to do here)."""
        if isinstance(self.events, EventStream) and not self.events.opened:
            await self.events.open()

    async def pre_called(self, guardrails_only: bool = False) -> tuple[str, str]:
        """LiteLLM's pre-call lifecycle (see `precall`): the body it gives, and the keys and limit it sets; with
        `guardrails_only`, the body the guardrails leave (a stream that passes by stays one: the app streams it)."""
        if guardrails_only:
            hooks, stream = self.guardrail_hooks, self.body.get("stream") is True
            options = self.body.get("stream_options")
        else:
            hooks, stream = self.pre_call_hooks, self.streaming
            options = self.events.stream_options if self.events is not None else None
        result = await run_pre_call(
            hooks,
            self.body,
            stream=stream,
            stream_options=options,
            guardrails_only=guardrails_only,
            scope=self.dispatch.scope,
            **self.hook_context(),
        )
        if guardrails_only:
            self.body = result.body
            return ", ".join(hook.name for hook in hooks), "apply_guardrail"
        if self.streaming and not result.stream:  # turned into a non-stream: the app answers whole (buffered)
            result.body = {
                name: value for name, value in result.body.items() if name not in ("stream", "stream_options")
            }
        self.streaming = result.stream  # what gates see; a client's stream is still answered as one
        if result.carried:
            self.patch_kwargs = {**self.patch_kwargs, **result.carried}
        if "max_agentic_loops" in result.carried:
            try:
                self.limit = loop_limit(result.carried["max_agentic_loops"], "the pre-call kwargs")
            except ConfigurationError as error:
                raise LoopError(str(error)) from None
        # Always sent anew: a hook may have edited the request's lists or objects in place.
        self.body = result.body
        return ", ".join(hook.name for hook in self.pre_call_hooks), "pre-call lifecycle"

    async def judge_round(self) -> None:
        """The guardrails on what the round just taken changed in the body, against the last body the app was sent
        (its bytes, read again: what the model read, whatever a hook edited in place since), before the rerun is
        sent (rerun_guard.py): a refusal ends the turn, a mask is written into the body."""
        sent, self.sent = self.sent, None
        self.body = await judged_rerun(
            self.rerun_guardrails,
            self.body,
            self.on_the_wire(self.body),
            orjson.loads(sent) if sent is not None else {},  # none: everything is judged as new
            field=self.surface.messages_field,
            stream=self.streaming,
            **self.hook_context(),
        )

    def hook_context(self) -> dict[str, Any]:
        """What every run of the pre-call hooks is told of the request, the first one's and each rerun's alike."""
        return {
            "api_surface": self.surface.api_surface,
            "provider": self.provider,
            "call_id": self.call_id,
            "logging_obj": self.logging_obj,
            "call": self.call_hook,
            "state": self.dispatch.scope["state"],
        }

    async def unwind(self, answer: Answer) -> Answer:
        """Give each executed plan's post hook the final answer, innermost first, then its cleanup.

        This is the order LiteLLM's nested follow-up calls give: each post hook shapes what its own follow-up
        returned, which is the final answer.
        """
        before = answer.usage()
        while self.executed:
            step = self.last_executed()
            try:
                answer = await self.post_processed(step, answer)
            finally:
                await self.clean_up_after(step)
        if before is not None:
            after = answer.usage()
            # The very object (a post hook that returned the answer it was given, as `ServerTools` does): nothing
            # added, even if changed in place, since `before` is changed with it.
            self.hooks_usage = None if after is before else usage_added(before, after)
        return answer

    async def post_processed(self, step: Rerun, answer: Answer) -> Answer:
        if step.hook.methods[POST_HOOK] is None or answer.data is None:
            return answer
        result = await self.call_hook(step.hook, POST_HOOK, response=answer.data, plan=step.plan, kwargs=step.kwargs)
        if result is None:
            return answer
        if type(result) is dict:
            result = wrap(result)
        elif not isinstance(result, MAPPINGS) and not hasattr(result, "model_dump"):
            raise HookError(step.hook.name, POST_HOOK, f"returned {type(result).__name__}, not a response")
        try:
            return answer.replaced(result)
        except TypeError as error:
            raise HookError(step.hook.name, POST_HOOK, f"returned a response that is not JSON: {error}") from None

    def hook_kwargs(self) -> dict[str, Any]:
        return {
            **self.patch_kwargs,
            "_agentic_loop_depth": self.depth,
            "max_agentic_loops": self._limit,  # `limit`'s value, without its property's call
            "litellm_call_id": self.call_id,
            "custom_llm_provider": self.provider,
            "_agentic_loop_api_surface": self.surface.api_surface,
            "_agentic_tool_policy": self.policy,  # what the caller may use (policy.py): a hook may act on it
            "scope": self.scope,
        }

    async def clean_up(self) -> None:
        """The cleanup hooks of plans not unwound yet (after a failure), innermost first."""
        while self.executed:
            await self.clean_up_after(self.last_executed())

    def last_executed(self) -> Rerun:
        """The innermost plan not unwound yet, taken off `executed`."""
        step, self.executed = self.executed[-1], self.executed[:-1]
        return step

    async def clean_up_after(self, step: Rerun) -> None:
        """One plan's cleanup hook; its failure is logged and does not change the response."""
        if step.hook.methods[CLEANUP_HOOK] is None:
            return
        try:
            await self.call_hook(step.hook, CLEANUP_HOOK, plan=step.plan, kwargs=step.kwargs)
        except HookError as error:
            self.logging_obj.logger.error("%s", error, exc_info=error.__cause__)

    async def call_hook(self, hook: BoundHook, method: str, **arguments: Any) -> Any:
        """Call a hook method within `hook_timeout`, timed into the round and traced when tracing is on."""
        started = perf_counter()
        timeout = self.settings.hook_timeout
        try:
            if self.observer.tracer is not None:
                attributes = {"agentic_loop.hook": hook.name, "agentic_loop.depth": self.depth}
                with self.observer.span(f"agentic_hook {method}", **attributes):
                    async with asyncio.timeout(timeout):
                        return await hook.call(method, arguments)
            if timeout is None:
                return await hook.call(method, arguments)
            async with asyncio.timeout(timeout):
                return await hook.call(method, arguments)
        except TimeoutError:
            raise HookError(hook.name, method, f"timed out after hook_timeout={timeout:g} s") from None
        finally:
            self.round.hook_seconds += perf_counter() - started
