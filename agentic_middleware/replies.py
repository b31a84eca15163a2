"""The reply a looped request ends with: its usage (accounting.md), the headers that say how the loop went, or
its error.

`Replies` is a base of `AgenticLoop` (`loop.py`), beside `AskingHooks`: it reads the request's state, declared in
`ends.RequestEnds`, once the rounds are over (or have failed).
"""

from __future__ import annotations

from typing import Any

from .asgi import json_start
from .disconnect import ClientWriter
from .dispatch import Answer, Reply
from .ends import RequestEnds
from .errors import HookError, LoopError, RequestRefused
from .observe import ENDED_BY_HEADER, RERUNS_HEADER, RETRIES_HEADER, STOP_REASON_HEADER, turn_usage
from .payload import JSONObject, parse_object


class Replies(RequestEnds):
    """The end of one request's loop: what the client gets."""

    __slots__ = ()  # its state is `RequestEnds`' and `AgenticLoop`'s

    usages: tuple[Any, ...]  # every model call's usage, for a looped answer's (`turn_usage`)
    retried: int  # retries of the rounds before the current one (`retries.py`)
    write: ClientWriter

    def accounted(self, answer: Answer) -> Reply:
        """The final reply: the usage of every model call, and headers that say how the loop went."""
        if self.depth == 0 and self.stop_reason == "finished":
            return answer.reply()  # no hook acted: the app's own bytes and headers
        if self.depth and answer.data is not None:
            # From the bytes unless a hook rewrote them on purpose (a gate's edits of its `response` are not sent);
            # a pydantic body (an SDK object) is read back from the bytes it was written as.
            rewritten = answer.rewritten and isinstance(answer.data, dict)
            data = answer.data if rewritten else parse_object(answer.raw)
            if data is not None:
                # Summed or the last call's (by route, or `sum_usage`), each call listed in `usage.iterations`;
                # what post hooks added (a server tool's own counters) counts on top of the calls' sum.
                summed = self.settings.sum_usage
                usage = turn_usage(
                    data.get("usage"),
                    self.usages,
                    self.hooks_usage,
                    self.surface.sums_usage if summed is None else summed,
                    self.surface.usage_entry,
                )
                if usage is not None:
                    answer = answer.replaced(JSONObject(data, usage=usage))
        return answer.reply(self.loop_headers())

    def loop_headers(self, ended_by: str | None = None) -> list[tuple[bytes, bytes]]:
        headers = [
            (RERUNS_HEADER, str(self.depth).encode()),
            (ENDED_BY_HEADER, (ended_by or self.stop_reason).encode()),
        ]
        if retries := self.retried + self.round.retries:
            headers.append((RETRIES_HEADER, str(retries).encode()))
        if self.plan_stop_reason:
            headers.append((STOP_REASON_HEADER, self.plan_stop_reason.encode("latin-1", "replace")))
        return headers

    def error_reply(self, error: LoopError) -> Reply:
        self.stop_reason = error.ended_by
        if isinstance(error, HookError):
            self.round.hook = error.hook
        refused = error if isinstance(error, RequestRefused) else None
        if refused is not None:  # the client's request, not a fault here: no traceback a client could fill logs with
            self.logging_obj.logger.warning("agentic loop refused the request (%d): %s", refused.status, refused)
        else:
            self.logging_obj.logger.error("agentic loop failed: %s", error, exc_info=error.__cause__ or error)
        message = str(error) if self.settings.error_details else f"{error.summary} (call id {self.call_id})"
        body = self.surface.error_body(error.status, message, error.code, refused.param if refused else None)
        headers = self.loop_headers()
        if refused is not None:  # a guardrail's own headers (a 429's retry-after)
            headers += refused.headers
        return Reply(json_start(error.status, len(body), headers), body)
