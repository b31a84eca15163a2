"""When a rerun is tried again: the transient failures of the model app, and how long to wait before each retry.

A client retries its own request when the app answers it 429 or 529, but it cannot retry a rerun the loop makes
for it: its answer is already under way (a stream), or the retry would run the turn's tools again. So the loop
retries a rerun (or closing call) itself, with the request it already built: the tools' results are reused.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import time
from collections.abc import Callable, Iterable

from .asgi import Headers
from .dispatch import Answer, Dispatcher
from .errors import ModelAppError
from .observe import RoundRecord

Log = logging.Logger | logging.LoggerAdapter[logging.Logger]

RETRY_STATUSES = frozenset((429, 500, 502, 503, 504, 529))
"""Rate limits, overload and the gateway-ish 5xx: what the anthropic and openai SDKs retry too (and 529, Anthropic's
overload); a 4xx other than 429 would fail the same way again."""

MAX_RETRY_AFTER = 60.0
"""A `retry-after` longer than this is not waited for (as the openai SDK does): the error goes to the client."""

_BASE_DELAY = 0.5
_MAX_DELAY = 8.0


def retry_after(headers: Iterable[tuple[bytes, bytes]]) -> float | None:
    """The wait an answer asks for, in seconds: `retry-after-ms`, else `retry-after` (seconds or an HTTP date);
    None when it asks for none, or in a form that cannot be read."""
    found = {name.lower(): value for name, value in headers if name.lower() in (b"retry-after-ms", b"retry-after")}
    raw_ms = found.get(b"retry-after-ms")
    if raw_ms is not None:
        seconds = _number(raw_ms)
        if seconds is not None:
            return seconds / 1000
    raw = found.get(b"retry-after")
    if raw is None:
        return None
    seconds = _number(raw)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(raw.decode("latin-1"))
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _number(raw: bytes) -> float | None:
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0 <= value < math.inf else None


def retry_delay(headers: Iterable[tuple[bytes, bytes]], attempt: int) -> float | None:
    """Seconds to wait before retry `attempt` (0 for the first): the answer's `retry-after(-ms)` when it gives one,
    else exponential backoff with jitter (0.5 s, 1 s, 2 s... up to 8 s, each cut by up to a quarter, so that many
    loops that failed together do not retry together); None when the answer asks for more than MAX_RETRY_AFTER."""
    asked = retry_after(headers)
    if asked is not None:
        return asked if asked <= MAX_RETRY_AFTER else None
    return min(_BASE_DELAY * 2.0**attempt, _MAX_DELAY) * (1 - 0.25 * random.random())


async def dispatched(
    dispatch: Dispatcher, body: bytes, headers: Callable[[], Headers], retries: int, record: RoundRecord, log: Log
) -> Answer | None:
    """One rerun's call of the app, tried again up to `retries` times while it fails transiently: an answer of a
    status in RETRY_STATUSES, or an app that raised or broke off, before its stream gave the client anything (a
    stream that already went out in part is not sent twice). Each retry is counted in `record.retries`.

    The last failure is the result when the retries are used up, when the answer asks to wait longer than
    MAX_RETRY_AFTER, or when the wait would pass the loop's deadline (`loop_timeout`): the error comes sooner, and
    as what it is, not as a loop timeout.

    `headers` gives the loop's headers for an answer that goes to the client as the app sent it, asked at each try:
    a try after a retry carries that retry (`x-agentic-loop-retries`).
    """
    dispatch.kept = RETRY_STATUSES  # such an answer is kept, not forwarded, so that it can be retried
    while True:
        try:
            answer = await dispatch(body, headers(), record)
        except ModelAppError as error:
            if not error.transient or dispatch.heard or record.retries >= retries:
                raise
            delay = _within_deadline(dispatch, retry_delay((), record.retries))
            if delay is None:
                raise
            reason = str(error)
        else:
            if (
                answer is None
                or answer.start["status"] not in RETRY_STATUSES
                or dispatch.heard
                or record.retries >= retries
            ):
                return answer
            delay = _within_deadline(dispatch, retry_delay(answer.start.get("headers", ()), record.retries))
            if delay is None:
                return answer
            reason = f"the model app answered {answer.start['status']}"
        record.retries += 1
        log.warning(
            "agentic round %d: %s; retry %d of %d in %.2f s", record.depth, reason, record.retries, retries, delay
        )
        waited = time.perf_counter()
        try:
            await asyncio.sleep(delay)
        finally:  # the round's app time holds its retries' waits too
            record.app_seconds += time.perf_counter() - waited


def _within_deadline(dispatch: Dispatcher, delay: float | None) -> float | None:
    """The delay, unless the loop's deadline comes before it ends (then there is no time for the retry)."""
    if delay is None or dispatch.deadline is None:
        return delay
    when = dispatch.deadline.when()
    if when is not None and asyncio.get_running_loop().time() + delay >= when:
        return None
    return delay
