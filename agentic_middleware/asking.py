"""How one request's loop asks its hooks, and what it does with their answers.

`loop.py` runs the rounds: it calls the model app, and hands each answer to the methods here, which ask the gates
in hook order, refuse a round the safety rules forbid (the loop limit, tool calls seen before), call the plan
builder, and turn its plan into the next request body, an override or an end. Here too are the hooks of the
request's two ends (the request hooks and LiteLLM's pre-call lifecycle before the first call; the post and cleanup
hooks after the last) and `call_hook`, through which every hook method is called within `hook_timeout`.

They are methods of `AgenticLoop` (by inheritance) rather than of an object of their own, because both halves read
and change the same state of one request: its body, depth, limit, round record and why it ended.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping, Sequence
from time import perf_counter
from typing import Any, NamedTuple

from .closing import closing_body
from .config import Settings, loop_limit
from .disconnect import ClientWatch
from .dispatch import Answer, Dispatcher
from .encode import BodyEncoder
from .errors import ConfigurationError, HookError, LoopError
from .hooks import PLAN_PARAMETERS, AgenticLoopLogging, AgenticLoopRequestPatch, BoundHook, as_plan, check_patch
from .live import LiveStream
from .native.live import LiveRecords
from .observe import Observer, RoundRecord, usage_added
from .payload import JSONObject, wrap
from .precall import model_call_details, run_pre_call
from .stream import EventStream
from .surfaces import Surface, claims_of

logger = logging.getLogger("agentic_middleware")

REQUEST_HOOK = "async_pre_agentic_loop_request_hook"
POST_HOOK = "async_post_agentic_loop_response_hook"
CLEANUP_HOOK = "async_agentic_loop_cleanup_hook"


def is_internal_field(name: str) -> bool:
    """Body fields that only trusted server code may set; a client's are removed."""
    return name == "max_agentic_loops" or name.startswith("_agentic_")


def _claimed_calls(claim: Any) -> list[dict[str, Any]]:
    calls = claim.get("tool_calls") if isinstance(claim, (dict, Mapping)) else None
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, (list, tuple)) else []


class Rerun(NamedTuple):
    """A plan being executed: who made it, with which method, and the kwargs it was given."""

    hook: BoundHook
    method: str
    plan: Any
    patch: AgenticLoopRequestPatch
    kwargs: dict[str, Any]


class Closing(NamedTuple):
    """The closing call a refused round makes (see closing.py): its body, and the hook whose claim was refused."""

    body: dict[str, Any]
    hook: BoundHook


class AskingHooks:
    """The hook side of `AgenticLoop`: every attribute below is set by `AgenticLoop.__init__`."""

    # What the middleware prepared once (`LoopSetup`).
    hooks: Sequence[BoundHook]
    request_hooks: Sequence[BoundHook]
    pre_call_hooks: Sequence[BoundHook]
    guardrail_hooks: Sequence[BoundHook]
    settings: Settings
    observer: Observer
    # The request.
    surface: Surface
    provider: str
    scope: Any
    call_id: str
    body: dict[str, Any]
    streaming: bool
    events: EventStream | LiveStream | None
    dispatch: Dispatcher
    client: ClientWatch
    # Its loop so far.
    depth: int
    limit: int
    round: RoundRecord
    stop_reason: str
    plan_stop_reason: str | None
    hooks_usage: Any
    # What the hooks did to it.
    seen: set[tuple[tuple[str, bytes], ...]]
    closed: bool
    patch_kwargs: dict[str, Any]
    executed: list[Rerun]
    _logging_obj: AgenticLoopLogging | None

    @functools.cached_property
    def encoder(self) -> BodyEncoder:
        """Writes the bodies the loop sends itself; made for the first, as most requests send only the client's."""
        return BodyEncoder(self.surface.messages_field)

    def watch_client(self) -> None:
        """Watch for the client leaving (once, from the first round a hook acts on, or from a stream's start)."""
        if self.client.watcher is None:
            self.client.start()
            self.dispatch.receive = self.client.after_body

    @property
    def logging_obj(self) -> AgenticLoopLogging:
        """The request's `logging_obj`, made when a hook first needs it."""
        if self._logging_obj is None:
            self._logging_obj = AgenticLoopLogging(
                litellm_call_id=self.call_id,
                route=self.surface.name,
                logger=logging.LoggerAdapter(logger, {"litellm_call_id": self.call_id}),
                model_call_details=model_call_details(self.body, self.provider, self.dispatch.scope["state"]),
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
            self.body = {name: value for name, value in body.items() if not is_internal_field(name)}
            changed_by = (hook.name, REQUEST_HOOK)
        if changed_by is None:
            return raw
        try:
            return self.encoder.encode(self.body)
        except TypeError as error:
            raise HookError(*changed_by, f"the request is not JSON: {error}") from None

    async def begin_stream(self) -> None:
        """A buffered stream's 200 and keep-alives start once the guardrails have judged the request, so that a
        guardrail's refusal keeps its status; a live stream starts with the app's first answer."""
        if self.events is not None and not self.events.opened:
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
            api_surface=self.surface.api_surface,
            provider=self.provider,
            call_id=self.call_id,
            logging_obj=self.logging_obj,
            call=self.call_hook,
            state=self.dispatch.scope["state"],
            guardrails_only=guardrails_only,
        )
        if guardrails_only:
            self.body = result.body
            return ", ".join(hook.name for hook in hooks), "apply_guardrail"
        if self.streaming and not result.stream:  # turned into a non-stream: the app answers whole (buffered)
            result.body = {
                name: value for name, value in result.body.items() if name not in ("stream", "stream_options")
            }
        self.streaming = result.stream  # what gates see; a client's stream is still answered as one
        self.patch_kwargs.update(result.carried)
        if "max_agentic_loops" in result.carried:
            try:
                self.limit = loop_limit(result.carried["max_agentic_loops"], "the pre-call kwargs")
            except ConfigurationError as error:
                raise LoopError(str(error)) from None
        # Always sent anew: a hook may have edited the request's lists or objects in place.
        self.body = result.body
        return ", ".join(hook.name for hook in self.pre_call_hooks), "pre-call lifecycle"

    async def ask_hooks(self, answer: Answer, response: JSONObject) -> Answer | Rerun | Closing:
        """One round: the first hook whose gate says yes and whose plan acts decides it."""
        fingerprint = None
        shown = _Shown(answer, response)
        for hook in self.hooks:
            kwargs = self.hook_kwargs()
            response = shown.next(self.has_gate(hook))
            claim = await self.ask_gate(hook, response, kwargs)
            if claim is None:
                continue
            if self.client.watcher is None:
                self.watch_client()
                # One turn of the event loop for the watcher: a client that left during the first call (a
                # disconnect already waiting in `receive`) ends the loop here, before any plan or rerun.
                await asyncio.sleep(0)
            self.round.tools = [str(self.surface.call_name(call)) for call in _claimed_calls(claim)]
            if fingerprint is None:  # the calls the model made, not what a gate left of them in `response`
                fingerprint = self.surface.fingerprint(shown.as_sent())
            refusal = self.refusal(fingerprint)
            if refusal is not None:
                self.finish(refusal, hook)
                claims = claims_of([claim, *await self.other_claims(hook, shown)])
                sent = shown.as_sent()  # what a gate changed in `response` is not sent, nor closed on
                # A limit of 0 (set after the first call) allows no other model call: the claimed calls are removed.
                if self.settings.closing == "call" and not self.closed and self.limit:
                    self.closed = True
                    body = closing_body(self.surface, self.body, sent, claims, refusal, self.limit)
                    if body is not None:
                        return Closing(body, hook)
                ended = self.surface.without_claimed(sent, claims)
                return answer.replaced(self.surface.filled(ended, self.settings.closing_text))
            method = hook.plan_method(self.surface.plan_methods)
            if method is None:
                continue
            raw_plan = await self.call_hook(
                hook,
                method,
                tools=claim,
                model=self.body.get("model"),
                messages=self.surface.messages(self.body),
                response=response,
                **PLAN_PARAMETERS[method](self.surface.request_params(self.body)),
                logging_obj=self.logging_obj,
                stream=self.streaming,
                kwargs=kwargs,
            )
            plan = as_plan(raw_plan, hook, method)
            if plan.response_override is not None:
                self.finish("override", hook, plan.stop_reason)
                return self.overridden(answer, plan.response_override, hook, method)
            if plan.terminate:  # as LiteLLM: the post hook gets the answer without the calls this hook claimed
                self.finish("terminate", hook, plan.stop_reason)
                stripped = answer.replaced(self.surface.without_claimed(answer.as_sent(), claims_of([claim])))
                ending = Rerun(hook, method, raw_plan, AgenticLoopRequestPatch(), kwargs)
                return await self.post_processed(ending, stripped)
            if plan.run_agentic_loop:
                self.seen.add(fingerprint)
                return Rerun(hook, method, raw_plan, check_patch(plan.request_patch, hook, method), kwargs)
        if shown.shown and self.executed:  # the post hooks get the final answer as the app sent it, too
            return Answer(answer.start, answer.raw, shown.next(False), answer.rewritten)
        return answer

    async def ask_gate(self, hook: BoundHook, response: JSONObject, kwargs: dict[str, Any]) -> Any:
        """The gate's claim when it says yes, else None; chat asks LiteLLM's chat-only gate first."""
        for gate in self.surface.gates:
            if hook.methods[gate] is None:
                continue
            result = await self.call_hook(
                hook,
                gate,
                response=response,
                model=self.body.get("model"),
                messages=self.surface.messages(self.body),
                tools=self.body.get("tools"),
                stream=self.streaming and self.settings.gates_see_stream,
                custom_llm_provider=self.provider,
                kwargs=kwargs,
            )
            if not isinstance(result, tuple | list) or len(result) != 2:
                raise HookError(hook.name, gate, f"returned {result!r}, not a (bool, dict) pair")
            should_run, claim = result
            if should_run:
                return {} if claim is None else claim
        return None

    def has_gate(self, hook: BoundHook) -> bool:
        return any(hook.methods[gate] is not None for gate in self.surface.gates)

    async def other_claims(self, refused: BoundHook, shown: _Shown) -> list[Any]:
        """What the other hooks' gates claim, so that a refused round removes every server call."""
        asked = [
            await self.ask_gate(hook, shown.next(self.has_gate(hook)), self.hook_kwargs())
            for hook in self.hooks
            if hook is not refused
        ]
        return [claim for claim in asked if claim is not None]

    def refusal(self, fingerprint: tuple[tuple[str, bytes], ...]) -> str | None:
        """Why this round may not rerun, if it may not: the limit, or tool calls seen before (after a closing call,
        why it was made)."""
        if self.closed:
            return self.stop_reason
        if self.depth >= self.limit:
            return "limit"
        if fingerprint and fingerprint in self.seen:
            return "repeated_tool_calls"
        return None

    def overridden(self, answer: Answer, value: Any, hook: BoundHook, method: str) -> Answer:
        if isinstance(value, Mapping) and type(value) is not JSONObject:
            value = wrap(dict(value))
        elif not isinstance(value, Mapping) and not hasattr(value, "model_dump"):
            raise HookError(hook.name, method, f"response_override is {type(value).__name__}, not a JSON object")
        try:
            return answer.replaced(value)
        except TypeError as error:
            raise HookError(hook.name, method, f"response_override is not JSON: {error}") from None

    async def unwind(self, answer: Answer) -> Answer:
        """Give each executed plan's post hook the final answer, innermost first, then its cleanup.

        This is the order LiteLLM's nested follow-up calls give: each post hook shapes what its own follow-up
        returned, which is the final answer.
        """
        before = answer.usage()
        while self.executed:
            step = self.executed.pop()
            try:
                answer = await self.post_processed(step, answer)
            finally:
                await self.clean_up_after(step)
        if before is not None:
            self.hooks_usage = usage_added(before, answer.usage())
        return answer

    async def post_processed(self, step: Rerun, answer: Answer) -> Answer:
        if step.hook.methods[POST_HOOK] is None or answer.data is None:
            return answer
        result = await self.call_hook(step.hook, POST_HOOK, response=answer.data, plan=step.plan, kwargs=step.kwargs)
        if result is None:
            return answer
        if type(result) is dict:
            result = wrap(result)
        elif not isinstance(result, Mapping) and not hasattr(result, "model_dump"):
            raise HookError(step.hook.name, POST_HOOK, f"returned {type(result).__name__}, not a response")
        try:
            return answer.replaced(result)
        except TypeError as error:
            raise HookError(step.hook.name, POST_HOOK, f"returned a response that is not JSON: {error}") from None

    def patched(self, step: Rerun) -> dict[str, Any]:
        """The next request body: the patch over the current one, without a forced tool choice."""
        patch = step.patch
        body = {**self.body, **patch.optional_params}
        if "tool_choice" not in patch.optional_params:
            body.pop("tool_choice", None)
        for name, body_field in self.surface.patch_fields.items():
            value = getattr(patch, name)
            if value is not None:
                body[body_field] = value
        if patch.model is not None:
            # LiteLLM's hooks name the model as LiteLLM is called (`openai/gpt-x`); the app is called as the client did.
            if patch.model == f"{step.kwargs.get('custom_llm_provider')}/{self.body.get('model')}":
                body["model"] = self.body.get("model")
            params = self._logging_obj.model_call_details.get("agentic_loop_params") if self._logging_obj else None
            if isinstance(params, dict):
                params["model"] = body["model"]
        for name in [name for name in body if is_internal_field(name)]:
            del body[name]
        if patch.kwargs:
            self.patch_kwargs.update(patch.kwargs)
            if "max_agentic_loops" in patch.kwargs:
                try:
                    self.limit = loop_limit(
                        patch.kwargs["max_agentic_loops"], 'request_patch.kwargs["max_agentic_loops"]'
                    )
                except ConfigurationError as error:
                    raise HookError(step.hook.name, step.method, str(error)) from None
        return self.surface.rerun_body(body)

    def hook_kwargs(self) -> dict[str, Any]:
        return {
            **self.patch_kwargs,
            "_agentic_loop_depth": self.depth,
            "max_agentic_loops": self.limit,
            "litellm_call_id": self.call_id,
            "custom_llm_provider": self.provider,
            "_agentic_loop_api_surface": self.surface.api_surface,
            "scope": self.scope,
        }

    async def clean_up(self) -> None:
        """The cleanup hooks of plans not unwound yet (after a failure), innermost first."""
        while self.executed:
            await self.clean_up_after(self.executed.pop())

    async def clean_up_after(self, step: Rerun) -> None:
        """One plan's cleanup hook; its failure is logged and does not change the response."""
        if step.hook.methods[CLEANUP_HOOK] is None:
            return
        try:
            await self.call_hook(step.hook, CLEANUP_HOOK, plan=step.plan, kwargs=step.kwargs)
        except HookError as error:
            self.logging_obj.logger.error("%s", error, exc_info=error.__cause__)

    def finish(self, reason: str, hook: BoundHook, plan_stop_reason: str | None = None) -> None:
        """Record why the loop ends; the observer reports it with the last round."""
        self.stop_reason = reason
        self.plan_stop_reason = plan_stop_reason
        self.round.hook = hook.name
        self.round.stop_reason = plan_stop_reason

    async def call_hook(self, hook: BoundHook, method: str, **arguments: Any) -> Any:
        """Call a hook method within `hook_timeout`, timed into the round and traced when tracing is on."""
        started = perf_counter()
        timeout = self.settings.hook_timeout
        try:
            if self.observer.tracer is not None:
                attributes = {"agentic_loop.hook": hook.name, "agentic_loop.depth": self.depth}
                with self.observer.span(f"agentic_hook {method}", **attributes):
                    async with asyncio.timeout(timeout):
                        return await hook.call(method, **arguments)
            if timeout is None:
                return await hook.call(method, **arguments)
            async with asyncio.timeout(timeout):
                return await hook.call(method, **arguments)
        except TimeoutError:
            raise HookError(hook.name, method, f"timed out after hook_timeout={timeout:g} s") from None
        finally:
            self.round.hook_seconds += perf_counter() - started


class _Shown:
    """The answer as each gate of a round is shown it: the app's answer as it sent it, whatever an earlier gate
    changed in its own `response` (in place, as LiteLLM's hooks may). A gate that emptied or edited the answer it
    was shown, then declined, would otherwise hide the model's calls from the hooks after it, and the client would
    get a server tool's call. The first gate gets the round's parse; a later one a fresh parse of the bytes, made
    only once a gate has been shown the answer."""

    __slots__ = ("_answer", "_next", "_sent", "shown")

    def __init__(self, answer: Answer, response: JSONObject) -> None:
        self._answer = answer
        self._next: JSONObject | None = response
        self._sent: Any = None
        self.shown = False  # whether a gate was shown the answer

    def next(self, asked: bool) -> JSONObject:
        """The response for the next hook; `asked`: whether that hook has a gate that will be shown it."""
        if self._next is None:
            self._next = _parsed(self._answer)
        response = self._next
        if asked:
            self._next = None  # shown: the next gate gets its own
            self.shown = True
        return response

    def as_sent(self) -> Any:
        """The answer as the app sent it (parsed once per round, for the fingerprint and the refused round)."""
        if self._sent is None:
            self._sent = self._answer.as_sent()
        return self._sent


def _parsed(answer: Answer) -> JSONObject:
    sent = answer.as_sent()
    return sent if type(sent) is JSONObject else wrap(dict(sent))
