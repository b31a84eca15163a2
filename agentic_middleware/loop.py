"""The agentic loop of one client request: the same code for every route.

Each round reads the model app's whole answer (buffered, or forwarded live as it is read: `live.py`), asks
the hooks in order, and either ends with one response to the client or re-dispatches a patched request to
the app. Safety (the loop limit, repeated tool calls) is checked
after a gate says yes and before its plan is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Mapping, Sequence
from time import perf_counter
from typing import Any, NamedTuple

from starlette.types import ASGIApp, Receive, Scope, Send

from .asgi import json_start
from .closing import closing_body
from .config import Settings, loop_limit
from .disconnect import ClientWatch, ClientWriter
from .dispatch import Answer, Dispatcher, Reply
from .encode import BodyEncoder
from .errors import ConfigurationError, HookError, LoopCancelled, LoopError, LoopTimeout
from .hooks import PLAN_PARAMETERS, AgenticLoopLogging, AgenticLoopRequestPatch, BoundHook, as_plan, check_patch
from .live import LiveStream
from .observe import (
    ENDED_BY_HEADER,
    RERUNS_HEADER,
    STOP_REASON_HEADER,
    Observer,
    RoundRecord,
    set_attributes,
    sum_usage,
    usage_added,
)
from .payload import JSONObject, parse_object, wrap
from .precall import has_pre_call, model_call_details, run_pre_call
from .stream import EventStream
from .surfaces import StreamRelay, Surface, claims_of

logger = logging.getLogger("agentic_middleware")

REQUEST_HOOK = "async_pre_agentic_loop_request_hook"
POST_HOOK = "async_post_agentic_loop_response_hook"
CLEANUP_HOOK = "async_agentic_loop_cleanup_hook"

# Call ids: unique per process by a random prefix, cheap to make for every request.
_call_ids = itertools.count(1)
_CALL_ID_PREFIX = os.urandom(6).hex()


def is_internal_field(name: str) -> bool:
    """Body fields that only trusted server code may set; a client's are removed."""
    return name == "max_agentic_loops" or name.startswith("_agentic_")


def _claimed_calls(claim: Any) -> list[dict[str, Any]]:
    calls = claim.get("tool_calls") if isinstance(claim, dict | Mapping) else None
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list | tuple) else []


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


class LoopSetup:
    """What every loop of one middleware shares, prepared once when the middleware is built."""

    def __init__(self, app: ASGIApp, hooks: Sequence[BoundHook], settings: Settings, observer: Observer) -> None:
        self.app = app
        self.hooks = hooks
        self.request_hooks = [hook for hook in hooks if hook.methods[REQUEST_HOOK] is not None]
        self.pre_call_hooks = [hook for hook in hooks if has_pre_call(hook)]  # LiteLLM's pre-call lifecycle
        self.internal_headers = settings.header_templates()
        self.settings = settings
        self.observer = observer


class AgenticLoop:
    """Holds one client request's state from its first dispatch to its one response."""

    def __init__(
        self,
        setup: LoopSetup,
        surface: Surface,
        provider: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: dict[str, Any],
        stream_options: Any = None,
        streaming: bool = False,
        relay: StreamRelay | None = None,
    ) -> None:
        settings = setup.settings
        self.hooks = setup.hooks
        self.request_hooks = setup.request_hooks
        self.pre_call_hooks = setup.pre_call_hooks
        self.settings = settings
        self.observer = setup.observer
        self.surface = surface
        self.provider = provider
        self.scope = scope
        self.receive = receive
        self.send = send
        self.body = body
        self.dispatch = Dispatcher(setup.app, scope, receive, send, settings.max_body_bytes, settings.app_timeout)
        self.dispatch.on_forward = self.forwarding
        self.encoder = BodyEncoder(surface.messages_field)
        self.limit = settings.max_agentic_loops
        self.depth = 0
        self.seen: set[tuple[tuple[str, bytes], ...]] = set()
        self.closed = False  # the closing call was made: no round after it reruns
        self.patch_kwargs: dict[str, Any] = {}
        self.executed: list[Rerun] = []
        self.client = ClientWatch(receive)
        self.write = ClientWriter(send, self.client)  # what the loop itself writes stops once the client left
        self.deadline: asyncio.Timeout | None = None
        self.stop_reason = "finished"
        self.plan_stop_reason: str | None = None
        self.usages: list[Any] = []
        self.hooks_usage: Any = None  # what post hooks added to the final usage (a server tool's counters)
        self.call_id = f"{_CALL_ID_PREFIX}-{next(_call_ids)}"
        self._logging_obj: AgenticLoopLogging | None = None
        self.round = RoundRecord(self.call_id, surface.name, 0)
        if setup.internal_headers:
            self.dispatch.set_headers(
                [
                    (name, value.replace("{call_id}", self.call_id).encode("latin-1"))
                    for name, value in setup.internal_headers
                ]
            )
        self.streaming = streaming
        self.events: EventStream | LiveStream | None = None
        if relay is not None:  # live: each round streams to the client as the app makes it
            self.events = LiveStream(
                self.write, surface, relay, stream_options, settings.stream_keepalive, self.ends_overridden
            )
            self.dispatch.capture = self.events.capture
        elif streaming:  # buffered: the app is called without streaming, the stream is written from the answer
            self.dispatch.forward = False
            self.events = EventStream(self.write, surface, stream_options, settings.stream_keepalive)

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
        return self._logging_obj

    async def run(self, raw: bytes) -> None:
        """Answer the client exactly once, and run every executed plan's cleanup hook."""
        with (
            _NO_SPAN
            if self.observer.tracer is None
            else self.observer.span(
                f"agentic_loop {self.surface.name}",
                **{"agentic_loop.call_id": self.call_id, "gen_ai.request.model": self.body.get("model")},
            )
        ) as span:
            reply: Reply | None = None
            try:
                if self.events is not None:
                    await self.events.open()
                    self.watch_client()  # the stream has begun: nothing else will hear of a disconnect
                reply = await self.answer(raw)
            except Exception as error:
                if self.dispatch.forwarded:
                    raise  # the client already has the app's own answer under way: it cannot get another
                if not isinstance(error, LoopError):
                    internal = LoopError(f"internal error: {type(error).__name__}")
                    internal.__cause__ = error
                    error = internal
                reply = self.error_reply(error)
            except asyncio.CancelledError:
                await self.cancelled()
                raise
            finally:
                if self.events is not None:
                    await self.events.stop_keep_alive()
                if self.executed:
                    await self.clean_up()
                self.round.outcome = self.stop_reason
                if self.observer.wants(self.round):
                    await self.observer.round_done(self.round)
                if span is not None:
                    set_attributes(
                        span, **{"agentic_loop.reruns": self.depth, "agentic_loop.ended_by": self.stop_reason}
                    )
            try:
                await self.respond(reply)
            except asyncio.CancelledError:
                await self.cancelled()
                raise
            finally:
                self.client.stop()

    async def respond(self, reply: Reply | None) -> None:
        """Write the one reply, unless the client left; the writer stops if it leaves meanwhile."""
        if self.write.closed:
            return
        if self.events is not None:
            await self.events.close(reply)
        elif reply is not None:
            await self.write(reply.start)
            await self.write({"type": "http.response.body", "body": reply.body})

    async def cancelled(self) -> None:
        """The request's task was cancelled (a server shutting down does that): its cleanup hooks run,
        and a response not yet complete ends well-formed where it still can (an error event, or a 503)."""
        self.stop_reason = "cancelled"
        if self.executed:
            await self.clean_up()
        error = LoopCancelled("the request was cancelled before its answer was complete: the server is stopping")
        if self.events is not None:
            await self.events.abort(error.status, str(error), error.code)
        elif not self.dispatch.forwarded and not self.write.started:
            await self.respond(self.error_reply(error))

    async def answer(self, raw: bytes) -> Reply | None:
        """The loop within `loop_timeout`, then the post and cleanup hooks (which a disconnect does not cut short).

        A client that disconnects during the loop ends it at once, with no reply.
        """
        timeout = self.settings.loop_timeout
        self.client.guarded = True
        try:
            if timeout is None:
                answer = await self.rounds(raw)
            else:
                async with asyncio.timeout(timeout) as self.deadline:
                    answer = await self.rounds(raw)
        except asyncio.CancelledError:
            if self.client.absorb():
                self.stop_reason = "client_disconnect"
                return None
            raise
        except TimeoutError:
            raise LoopTimeout(f"the agentic loop took longer than loop_timeout={timeout:g} s") from None
        finally:
            self.client.guarded = False
        return None if answer is None else self.accounted(await self.unwind(answer))

    def watch_client(self) -> None:
        """Watch for the client leaving (once, from the first round a hook acts on, or from a stream's start)."""
        if self.client.watcher is None:
            self.client.start()
            self.dispatch.receive = self.client.after_body

    def forwarding(self) -> None:
        """An answer is going to the client as the app sends it: it is the client's to wait for, no longer ours."""
        if self.deadline is not None:
            self.deadline.reschedule(None)

    def accounted(self, answer: Answer) -> Reply:
        """The final reply: the usage of every model call summed, and headers that say how the loop went."""
        if self.depth == 0 and self.stop_reason == "finished":
            return answer.reply()  # no hook acted: the app's own bytes and headers
        if self.depth and self.settings.sum_usage and answer.data is not None:
            # From the bytes unless a hook rewrote them on purpose (a gate's edits of its `response` are not sent);
            # a pydantic body (an SDK object) is read back from the bytes it was written as.
            rewritten = answer.rewritten and isinstance(answer.data, dict)
            data = answer.data if rewritten else parse_object(answer.raw)
            if data is not None:
                # What post hooks added (a server tool's own counters) counts on top of every call's usage.
                answer = answer.replaced(JSONObject(data, usage=sum_usage([self.hooks_usage, *self.usages])))
        return answer.reply(self.loop_headers())

    def loop_headers(self, ended_by: str | None = None) -> list[tuple[bytes, bytes]]:
        headers = [
            (RERUNS_HEADER, str(self.depth).encode()),
            (ENDED_BY_HEADER, (ended_by or self.stop_reason).encode()),
        ]
        if self.plan_stop_reason:
            headers.append((STOP_REASON_HEADER, self.plan_stop_reason.encode("latin-1", "replace")))
        return headers

    async def rounds(self, raw: bytes) -> Answer | None:
        """The loop itself; None when an answer already went to the client as the app sent it."""
        self.limit = self.request_limit()  # set by an outer middleware, if any
        if (self.request_hooks or self.pre_call_hooks) and self.limit:
            raw = await self.prepared(raw)
        answer = await self.call_app(raw)
        if answer is None:
            return None
        looping = bool(self.limit)
        self.limit = self.request_limit()  # or by the app, during its first call
        if not looping:
            return answer  # no reruns for this request: the app's answer as it is, no hook asked
        while answer.data is not None:
            step = await self.ask_hooks(answer, answer.data)
            if isinstance(step, Answer):
                return step
            if isinstance(step, Rerun):
                self.executed.append(step)
                self.body = self.patched(step)
                self.round.outcome = "rerun"
                self.round.hook = step.hook.name
            else:  # the closing call: no plan of a hook, so no post or cleanup hook of its own
                self.body = step.body
                self.round.outcome = "closing"
            answer = await self.rerun(step)
            if answer is None:
                self.stop_reason = "app_answer"
                return None
            if isinstance(step, Closing) and answer.data is not None:  # an empty closing answer gets closing_text
                filled = self.surface.filled(answer.data, self.settings.closing_text)
                if filled is not answer.data:
                    answer = answer.replaced(filled)
        if self.depth:
            self.stop_reason = "app_answer"
        return answer

    async def rerun(self, step: Rerun | Closing) -> Answer | None:
        """The next round: one call of the app with the current body, the same for every rerun and the closing call."""
        if self.observer.wants(self.round):
            await self.observer.round_done(self.round)
        self.depth += 1
        self.round = RoundRecord(self.call_id, self.surface.name, self.depth)
        try:
            raw = self.encoder.encode(self.body)
        except TypeError as error:
            method = step.method if isinstance(step, Rerun) else "closing call"
            raise HookError(step.hook.name, method, f"the patched request is not JSON: {error}") from None
        return await self.call_app(raw)

    async def prepared(self, raw: bytes) -> bytes:
        """The first request body after LiteLLM's pre-call lifecycle and every request hook, in hook order."""
        changed_by = await self.pre_called() if self.pre_call_hooks else None
        for hook in self.request_hooks:
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

    async def pre_called(self) -> tuple[str, str] | None:
        """LiteLLM's pre-call lifecycle (see `precall`): the body it gives, and the keys and limit it sets."""
        result = await run_pre_call(
            self.pre_call_hooks,
            self.body,
            stream=self.streaming,
            stream_options=self.events.stream_options if self.events is not None else None,
            api_surface=self.surface.api_surface,
            provider=self.provider,
            call_id=self.call_id,
            logging_obj=self.logging_obj,
            call=self.call_hook,
            state=self.dispatch.scope["state"],
        )
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
        for hook in self.hooks:
            kwargs = self.hook_kwargs()
            claim = await self.ask_gate(hook, response, kwargs)
            if claim is None:
                continue
            if self.client.watcher is None:
                self.watch_client()
                # One turn of the event loop for the watcher: a client that left during the first call (a
                # disconnect already waiting in `receive`) ends the loop here, before any plan or rerun.
                await asyncio.sleep(0)
            self.round.tools = [str(self.surface.call_name(call)) for call in _claimed_calls(claim)]
            if fingerprint is None:
                fingerprint = self.surface.fingerprint(response)
            refusal = self.refusal(fingerprint)
            if refusal is not None:
                self.finish(refusal, hook)
                claims = claims_of([claim, *await self.other_claims(hook, response)])
                # A limit of 0 (set after the first call) allows no other model call: the claimed calls are removed.
                if self.settings.closing == "call" and not self.closed and self.limit:
                    self.closed = True
                    body = closing_body(self.surface, self.body, response, claims, refusal, self.limit)
                    if body is not None:
                        return Closing(body, hook)
                ended = self.surface.without_claimed(response, claims)
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
                stripped = answer.replaced(self.surface.without_claimed(response, claims_of([claim])))
                ending = Rerun(hook, method, raw_plan, AgenticLoopRequestPatch(), kwargs)
                return await self.post_processed(ending, stripped)
            if plan.run_agentic_loop:
                self.seen.add(fingerprint)
                return Rerun(hook, method, raw_plan, check_patch(plan.request_patch, hook, method), kwargs)
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

    async def other_claims(self, refused: BoundHook, response: JSONObject) -> list[Any]:
        """What the other hooks' gates claim, so that a refused round removes every server call."""
        claims = []
        for hook in self.hooks:
            if hook is not refused:
                claim = await self.ask_gate(hook, response, self.hook_kwargs())
                if claim is not None:
                    claims.append(claim)
        return claims

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

        This is the order LiteLLM's nested follow-up calls give: each post hook
        shapes what its own follow-up returned, which is the final answer.
        """
        before = answer.data.get("usage") if self.executed and isinstance(answer.data, Mapping) else None
        while self.executed:
            step = self.executed.pop()
            try:
                answer = await self.post_processed(step, answer)
            finally:
                await self.clean_up_after(step)
        if before is not None and isinstance(answer.data, Mapping):
            self.hooks_usage = usage_added(before, answer.data.get("usage"))
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

    def request_limit(self) -> int:
        """The limit for this request: `request.state.max_agentic_loops` when trusted code set it."""
        value = self.dispatch.scope["state"].get("max_agentic_loops")
        if value is None:
            return self.limit
        try:
            return loop_limit(value, "request.state.max_agentic_loops")
        except ConfigurationError as error:
            raise LoopError(str(error)) from None

    async def call_app(self, body: bytes) -> Answer | None:
        """One internal call of the model app, traced when tracing is on."""
        if self.observer.tracer is None:
            return await self.dispatched(body)
        model = self.body.get("model")
        with self.observer.span(
            f"chat {model}",
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": self.provider,
                "gen_ai.request.model": model,
                "agentic_loop.depth": self.depth,
            },
        ) as span:
            answer = await self.dispatched(body)
            set_attributes(span, **self.surface.token_attributes(self.round.usage))
            return answer

    async def dispatched(self, body: bytes) -> Answer | None:
        """One internal call of the model app, timed into the round; None when the client got its answer."""
        started = perf_counter()
        try:
            answer = await self.dispatch(body, self.loop_headers("app_answer") if self.depth else [])
        finally:
            self.round.app_seconds += perf_counter() - started
        if answer is None:
            if self.dispatch.oversize:
                self.logging_obj.logger.warning(
                    "model answer over max_body_bytes=%d: passed through without hooks", self.settings.max_body_bytes
                )
            return None
        if self.observer.log_bodies:
            log = self.logging_obj.logger
            log.debug("agentic round %d request: %s", self.depth, body.decode(errors="replace"))
            log.debug("agentic round %d answer: %s", self.depth, answer.raw.decode(errors="replace"))
        usage = answer.data.get("usage") if answer.data is not None else None
        self.usages.append(usage)
        self.round.usage = usage
        return answer

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

    def ends_overridden(self) -> bool:
        """Whether the final answer is a plan's `response_override` (a live stream sends it after what went out)."""
        return self.stop_reason == "override"

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

    def error_reply(self, error: LoopError) -> Reply:
        self.stop_reason = error.ended_by
        if isinstance(error, HookError):
            self.round.hook = error.hook
        self.logging_obj.logger.error("agentic loop failed: %s", error, exc_info=error.__cause__ or error)
        message = str(error) if self.settings.error_details else f"{error.summary} (call id {self.call_id})"
        body = self.surface.error_body(error.status, message, error.code)
        return Reply(json_start(error.status, len(body), self.loop_headers()), body)


_NO_SPAN = contextlib.nullcontext()
