"""The loop's calls of the model app: each one logged, retried on a rerun, traced, and its answer noted.

`AppCalls` is a base of `AgenticLoop` (`loop.py`), as `AskingHooks` and `Replies` are: the loop itself decides when
to call (the first body, each rerun, the closing call) and what to do with the answer; this is what every call does
on the way, the same for all of them, so that the loop's rounds read as the rounds alone. It is over `Replies`,
because a rerun's answer that goes to the client as the app sent it carries the loop's headers (`loop_headers`).
It reads and changes the request's state, declared in `ends.RequestEnds`.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from starlette.types import Send

from .asking import Closing, Denied, Rerun
from .chains import Chains
from .dispatch import Answer
from .errors import HookError
from .observe import RoundRecord, set_attributes
from .payload import dumps, own_size
from .replies import Replies
from .retries import Retries
from .shown import ShownIds


class AppCalls(Replies):
    """One internal call of the app at a time, for `AgenticLoop`'s rounds."""

    __slots__ = ()  # its state is `RequestEnds`' and `AgenticLoop`'s

    app_answer: Any  # the app's last answer: the response it stored last (chains.py)
    chains: Chains | None  # the store of Responses turns, on a route that chains by id
    send: Send
    sent: bytes | None
    unwritten: bytes | None

    def rerun(self, step: Rerun | Closing | Denied) -> Coroutine[Any, Any, Answer | None]:
        """The next round: one call of the app with the current body, the same for every rerun and the closing call
        (the call itself is returned, so that no frame of this method's waits while the round streams)."""
        self.depth += 1
        self.retried += self.round.retries
        self.round = RoundRecord(self.call_id, self.surface.name, self.depth)
        self.app_answer = None  # the rerun's answer replaces it: the judged one is not held while the rerun streams
        try:
            # Written whole each time, from the objects as they are now: nothing of an earlier body is reused, so any
            # edit a hook made, at any depth, through any reference it kept, is sent (docs/loop.md, point 3).
            raw = self.written()
            self.unwritten = None
        except TypeError as error:
            method = step.method if isinstance(step, Rerun) else "closing call"
            raise HookError(step.hook.name, method, f"the patched request is not JSON: {error}") from None
        return self.call_app(raw)

    def written(self) -> bytes:
        """The body as a rerun sends it, written from the objects as they are now (a retry's too: `Retries.body`), in
        an allocation of its own size (`own_size`): the app may keep the bytes it read while its answer streams, and
        orjson's output keeps the 4 KB or more it was written into (3.4 KB more a stream with a tool round, where the
        rerun encoder before 67742af joined bytes of their own size)."""
        return own_size(dumps(self.on_the_wire(self.body)))

    def call_app(self, body: bytes) -> Coroutine[Any, Any, Answer | None]:
        """One internal call of the model app, timed into the round (a rerun's retries and their waits included) and
        traced when tracing is on; its answer goes to `taken`. The call itself is returned: untraced, no frame of this
        loop's waits while it lasts (a stream's whole round), only the dispatcher's (and the retries' on a rerun)."""
        if self.observer.log_bodies:
            self.logging_obj.logger.debug("agentic round %d request: %s", self.depth, body.decode(errors="replace"))
        if self.rerun_guardrails:  # what the model read, for the next round's guardrails (`judge_round`)
            self.sent = body
        call: Coroutine[Any, Any, Answer | None]
        if self.depth:  # a rerun's transient failure is retried here: the client cannot retry it
            retries = Retries(
                self.forwarded_headers, self.settings.rerun_retries, self.logging_obj.logger, self.written
            )
            call = self.dispatch(body, self.round, retries)
        else:  # the first call's errors reach the client as they are, for its own retries
            call = self.dispatch(body, self.round)
        return call if self.observer.tracer is None else self.traced(call)

    def forwarded_headers(self) -> list[tuple[bytes, bytes]]:
        """The loop's headers on a rerun's answer that goes to the client as the app sent it (its retries so far)."""
        return self.loop_headers("app_answer")

    async def traced(self, call: Coroutine[Any, Any, Answer | None]) -> Answer | None:
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
            answer = await call
            set_attributes(span, **self.surface.token_attributes(_usage(answer)))
            return answer

    def taken(self, answer: Answer | None) -> Answer | None:
        """What the loop notes of one call's answer; None when the client got its answer as the app sent it."""
        if answer is None:
            if self.dispatch.oversize:
                self.logging_obj.logger.warning(
                    "model answer over max_body_bytes=%d: passed through without hooks", self.settings.max_body_bytes
                )
            return None
        if self.observer.log_bodies:
            log = self.logging_obj.logger
            log.debug("agentic round %d answer: %s", self.depth, answer.raw.decode(errors="replace"))
        if self.chains is not None:  # what the turn's record keeps (chains.py); no one else reads it
            self.app_answer = answer.data
        if isinstance(self.send, ShownIds) and answer.data is not None:  # the client never sees a round's own id
            self.send.round(answer.data.get("id"), getattr(self.events, "relay", None))
        usage = _usage(answer)
        self.usages += (usage,)
        self.round.usage = usage
        return answer


def _usage(answer: Answer | None) -> Any:
    """A call's usage, as its answer gives it."""
    return answer.data.get("usage") if answer is not None and answer.data is not None else None
