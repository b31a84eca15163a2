"""The agentic loop of one client request: the same code for every route.

Each round reads the model app's whole answer (buffered, or forwarded live as it is read: `live.py`), asks
the hooks in order, and either ends with one response to the client or re-dispatches a patched request to
the app. What each round asks the hooks, and how their plans become the next request, is in `asking.py`; the
hooks of the request's two ends and `call_hook` in `ends.py`; each call of the app (logged, retried, traced, its
answer noted) in `app_calls.py`; the reply it ends with in `replies.py`; what every loop of one middleware shares in
`loop_setup.py`.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from starlette.types import Receive, Scope, Send

from .app_calls import AppCalls
from .asking import AskingHooks, Closing, Denied, Rerun
from .disconnect import ClientWatch, ClientWriter
from .dispatch import Answer, Dispatcher, Reply
from .errors import ConfigurationError, LoopCancelled, LoopError, LoopTimeout
from .live import LiveStream
from .loop_setup import LoopSetup as LoopSetup
from .observe import RoundRecord, set_attributes
from .payload import client_fault
from .policy import ToolPolicy, client_own
from .settings import loop_limit
from .stream import EventStream
from .surfaces import StreamRelay, Surface

# Call ids: unique per process by a random prefix, cheap to make for every request.
_call_ids = itertools.count(1)
_CALL_ID_PREFIX = os.urandom(6).hex()


class AgenticLoop(AskingHooks, AppCalls):
    """Holds one client request's state from its first dispatch to its one response.

    Its rounds are here; what each round asks the hooks is in `asking.py`, the hooks of the request's two ends in
    `ends.py`, what each call of the app does on the way in `app_calls.py`, the reply it ends with in `replies.py`.
    """

    # Its own attributes; those its bases read are declared in `RequestEnds`.
    __slots__ = (
        "app_answer",
        "chains",
        "checks_only",
        "receive",
        "request_bytes",
        "retried",
        "send",
        "sent",
        "unwritten",
        "usages",
        "write",
    )

    def __init__(
        self,
        setup: LoopSetup,
        surface: Surface,
        provider: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: dict[str, Any],
        raw: bytes,
        stream_options: Any = None,
        streaming: bool = False,
        relay: StreamRelay | None = None,
        checks_only: bool = False,
        policy: ToolPolicy | None = None,
        unwritten: bytes | None = None,
    ) -> None:
        settings = setup.settings
        self.policy = policy  # what this caller may use (policy.py): before the limit, which it caps
        self.client_tools = client_own(body, policy)  # the client's own, which the policy leaves declared
        self.checks_only = checks_only  # a request that does not loop: its guardrails judge it, the app answers it
        self.hooks = setup.hooks
        self.request_hooks = setup.request_hooks
        self.pre_call_hooks = setup.pre_call_hooks
        self.guardrail_hooks = setup.guardrail_hooks
        self.rerun_guardrails = setup.rerun_guardrails
        self.settings = settings
        self.observer = setup.observer
        self.surface = surface
        self.chains = setup.chains if surface.chains_by_id else None
        self.state = setup.state
        self.app_answer: Any = None  # the app's last answer: the response it stored last
        self.provider = provider
        self.scope = scope
        self.receive = receive
        self.send = send
        self.body = body
        self.request_bytes = raw  # the body as the first call sends it, unless a hook changes it first
        self.unwritten = unwritten  # the client's bytes, until a write of the body proves them not too deep
        self.sent: bytes | None = None  # the last call's body, for the rerun guardrails (`judge_round`)
        self.dispatch = Dispatcher(
            setup.app,
            scope,
            receive,
            send,
            settings.max_body_bytes,
            settings.app_timeout,
            None if checks_only else surface.stream_reader,  # a call no hook judges is never read as a stream
        )
        self.limit = settings.max_agentic_loops
        self.depth = 0
        self.seen = ()  # the rounds' fingerprints (see `RequestEnds.seen`)
        self.closed = False  # the closing call was made: no round after it reruns
        self.patch_kwargs = _NO_KWARGS  # replaced, never changed in place: most requests have none
        self.executed = ()
        self.client = ClientWatch(receive)
        self.write = ClientWriter(send, self.client)  # what the loop itself writes stops once the client left
        self.stop_reason = "finished"
        self.plan_stop_reason = None
        self.usages = ()  # each call's, in order: a tuple, as a list is larger by its spare room
        self.hooks_usage = None  # what post hooks added to the final usage (a server tool's counters)
        self.call_id = f"{_CALL_ID_PREFIX}-{next(_call_ids)}"
        self._logging_obj = None
        self.round = RoundRecord(self.call_id, surface.name, 0)
        self.retried = 0  # retries of the rounds before this one (`retries.py`)
        if setup.internal_headers:
            self.dispatch.set_headers(
                [
                    (name, value.replace("{call_id}", self.call_id).encode("latin-1"))
                    for name, value in setup.internal_headers
                ]
            )
        self.streaming = streaming
        self.events = None
        if relay is not None:  # live: each round streams to the client as the app makes it
            self.events = LiveStream(self.write, surface, relay, stream_options, settings.stream_keepalive)
            self.dispatch.live = self.events
        elif streaming:  # buffered: the app is called without streaming, the stream is written from the answer
            self.dispatch.forward = False
            self.events = EventStream(self.write, surface, stream_options, settings.stream_keepalive)

    async def run(self) -> None:
        """Answer the client exactly once, and run every executed plan's cleanup hook."""
        with _NO_SPAN if self.observer.tracer is None else self.loop_span() as span:
            reply: Reply | None = None
            try:
                if self.events is not None:
                    self.watch_client()  # the stream is under way: nothing else will hear of a disconnect
                answer = await self.rounds()
                reply = None if answer is None else await self.ended(answer)
            except Exception as error:
                if self.dispatch.forwarded:
                    raise  # the client already has the app's own answer under way: it cannot get another
                error = client_fault(error, self.unwritten)
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
                    self.note_end(span)
            try:
                await self.respond(reply)
            except asyncio.CancelledError:
                await self.cancelled()
                raise
            finally:
                self.client.stop()

    def loop_span(self) -> Any:
        """The request's span, when tracing is on (made here, not in `run`, whose frame lasts as long as the stream:
        a call written out in it makes that frame larger)."""
        return self.observer.span(
            f"agentic_loop {self.surface.name}",
            **{"agentic_loop.call_id": self.call_id, "gen_ai.request.model": self.body.get("model")},
        )

    def note_end(self, span: Any) -> None:
        """How the loop ended, on its span."""
        set_attributes(
            span,
            **{
                "agentic_loop.reruns": self.depth,
                "agentic_loop.retries": self.retried + self.round.retries,
                "agentic_loop.ended_by": self.stop_reason,
            },
        )

    async def respond(self, reply: Reply | None) -> None:
        """Write the one reply, unless the client left; the writer stops if it leaves meanwhile."""
        if self.write.closed:
            return
        if isinstance(self.events, LiveStream):  # a plan's response_override is sent after what already went out
            self.events.overridden = self.stop_reason == "override"
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

    async def rounds(self) -> Answer | None:
        """The loop itself, within `loop_timeout`; None when an answer already went to the client as the app sent it,
        or the client left: a client that disconnects during the loop ends it at once, with no reply.

        Every call of the app is awaited in this frame: no other of the loop's own waits while a stream's round
        lasts (a gateway holds thousands of them: benchmarks case 12).
        """
        timeout = self.settings.loop_timeout
        self.client.guarded = True
        try:
            async with _NO_DEADLINE if timeout is None else asyncio.timeout(timeout) as self.dispatch.deadline:
                answer = self.taken(await self.call_app(await self.first_body()))
                if answer is None or not self.loops():
                    return answer  # no reruns for this request: the app's answer as it is, no hook asked
                while answer.data is not None:
                    step = await self.ask_hooks(answer, answer.data)
                    if isinstance(step, Answer):
                        return step
                    answer = None  # the judged round's answer is not held while the next round streams
                    self.take(step)
                    if self.observer.wants(self.round):  # the judged round is reported before the next begins
                        await self.observer.round_done(self.round)
                    if self.rerun_guardrails:  # what the round changed is judged, then written with no wait between
                        await self.judge_round()
                    answer = self.taken(await self.rerun(step))
                    if answer is None:
                        self.stop_reason = "app_answer"
                        return None
                    if isinstance(step, Closing) and answer.data is not None:  # an empty closing answer: closing_text
                        filled = self.surface.filled(answer.data, self.settings.closing_text)
                        if filled is not answer.data:
                            answer = answer.replaced(filled)
                if self.depth:
                    self.stop_reason = "app_answer"
                return answer
        except asyncio.CancelledError:
            if self.client.absorb():
                self.stop_reason = "client_disconnect"
                return None
            raise
        except TimeoutError:
            deadline = self.dispatch.deadline
            if deadline is None or not deadline.expired():
                raise  # not the loop's: the app's own, after its answer began going to the client as it came
            raise LoopTimeout(f"the agentic loop took longer than loop_timeout={timeout:g} s") from None
        finally:
            self.client.guarded = False

    async def first_body(self) -> bytes:
        """The first call's body: the client's, or what the pre-call and request hooks made of it (its bytes are held
        by the call alone, so that a long history's are not held for the rest of the loop)."""
        raw, self.request_bytes = self.request_bytes, b""
        self.limit = self.request_limit()  # set by an outer middleware, if any
        if self.may_loop() and (self.request_hooks or self.pre_call_hooks):
            sent = await self.prepared(raw)  # which begins the stream, once the guardrails have judged
        elif self.guardrail_hooks:  # no loop, yet the guardrails judge the request
            sent = await self.prepared(raw, guardrails_only=True)
        else:
            await self.begin_stream()
            sent = raw
        if sent is not raw or not self.may_loop():  # written by the hooks, or never to be: nothing left to prove
            self.unwritten = None
        return self.scoped_as_sent(sent) if sent is raw else sent

    def may_loop(self) -> bool:
        return bool(self.limit) and not self.checks_only

    def loops(self) -> bool:
        """After the first answer: whether this request reruns at all."""
        looping = self.may_loop()  # a pre-call hook may have set the limit
        # A tool policy's cap of 0: no tool was declared, and a call the model makes anyway is removed, not sent on.
        looping = looping or (self.policy is not None and self.policy.max_agentic_loops == 0 and not self.checks_only)
        self.limit = self.request_limit()  # or by the app, during its first call
        return looping

    def take(self, step: Rerun | Closing | Denied) -> None:
        """The next body a round's step gives, and what the round's record says of it."""
        if isinstance(step, Rerun):
            self.executed += (step,)
            self.body = self.patched(step)
            self.round.outcome = "rerun"
            self.round.hook = step.hook.name
        elif isinstance(step, Denied):  # the loop's own round: no plan ran, so no post or cleanup hook
            self.body = step.body
            self.round.outcome = "denied"
            self.round.hook = step.hook.name
        else:  # the closing call: no plan of a hook, so no post or cleanup hook of its own
            self.body = step.body
            self.round.outcome = "closing"

    async def ended(self, answer: Answer) -> Reply:
        """The loop's answer after the post and cleanup hooks (which a disconnect does not cut short), as the reply."""
        if self.executed:  # the post and cleanup hooks of the plans that ran
            answer = await self.unwind(answer)
        if self.chains is not None and (self.depth or self.stop_reason != "finished"):
            # Before the client has its answer, so that its follow-up finds the record; an answer no hook acted on
            # is the app's own, its id complete.
            await self.chains.record(
                self.scope, self.body, self.app_answer, answer.data, self.events, self.stop_reason, self.limit
            )
        return self.accounted(answer)

    def request_limit(self) -> int:
        """The limit for this request: `request.state.max_agentic_loops` when trusted code set it."""
        value = self.dispatch.scope["state"].get("max_agentic_loops")
        if value is None:
            return self.limit
        try:
            return loop_limit(value, "request.state.max_agentic_loops")
        except ConfigurationError as error:
            raise LoopError(str(error)) from None


class _Nothing:
    """A context manager that does nothing, its `as` target None, for `with` and `async with` alike: `run`'s span
    when tracing is off, `rounds`' deadline when `loop_timeout` is unset (as `asyncio.timeout(None)`). Its methods are
    static: entering a `nullcontext` holds its bound `__exit__` until the block ends, one more object the collector
    tracks for each stream's life (benchmarks case 12); a static method's function is the one object for all."""

    @staticmethod
    def __enter__() -> None:
        return None

    @staticmethod
    def __exit__(*exc_info: object) -> None:
        return None

    @staticmethod
    async def __aenter__() -> None:
        return None

    @staticmethod
    async def __aexit__(*exc_info: object) -> None:
        return None


_NO_SPAN = _NO_DEADLINE = _Nothing()
_NO_KWARGS: Mapping[str, Any] = MappingProxyType({})
