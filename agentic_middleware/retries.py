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

from starlette.types import Message

from .asgi import Headers
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


class Retries:
    """How a rerun's call (or closing call) is tried again, up to `limit` times while it fails transiently: an answer
    of a status in RETRY_STATUSES, or an app that raised or broke off, before its stream gave the client anything (a
    stream that already went out in part is not sent twice). Each retry is counted in the round's `record.retries`.

    The last failure is the result when the retries are used up, when the answer asks to wait longer than
    MAX_RETRY_AFTER, or when the wait would pass the loop's deadline (`loop_timeout`): the error comes sooner, and
    as what it is, not as a loop timeout.

    `headers` gives the loop's headers for an answer that goes to the client as the app sent it, asked when one does
    (a live stream's later rounds never do): a try after a retry carries that retry (`x-agentic-loop-retries`).
    `body` writes the request again for a retry, from the loop's body as the failed try was written from it (no hook
    runs between two tries): no try keeps its bytes once the app has read them, for as long as a live stream's round
    lasts (a gateway holds thousands of them, each with its turn's whole history: benchmarks case 12).
    The dispatcher makes the tries (`Dispatcher.__call__`), in its own frame: these are only their rules.
    """

    __slots__ = ("body", "headers", "limit", "log")

    def __init__(self, headers: Callable[[], Headers], limit: int, log: Log, body: Callable[[], bytes]) -> None:
        self.headers = headers
        self.limit = limit
        self.log = log
        self.body = body

    def delay(
        self,
        record: RoundRecord,
        failure: ModelAppError | None,
        start: Message | None,
        heard: bool,
        deadline: asyncio.Timeout | None,
    ) -> float | None:
        """Seconds to wait before the next try, or None when this try's outcome stands: its `failure`, else its answer
        (`start`, its start message; None for an answer that went to the client as the app sent it). `heard`: the
        try's stream gave the client an event; `deadline`: the loop's."""
        if heard or record.retries >= self.limit:
            return None
        if failure is not None:
            return _within_deadline(deadline, retry_delay((), record.retries)) if failure.transient else None
        if start is None or start["status"] not in RETRY_STATUSES:
            return None
        return _within_deadline(deadline, retry_delay(start.get("headers", ()), record.retries))

    async def wait(
        self, record: RoundRecord, delay: float, failure: ModelAppError | None, start: Message | None
    ) -> None:
        """Count and log the retry `delay` says will be made, and wait for it (the round's app time holds the wait)."""
        record.retries += 1
        reason = str(failure) if failure is not None or start is None else f"the model app answered {start['status']}"
        self.log.warning(
            "agentic round %d: %s; retry %d of %d in %.2f s", record.depth, reason, record.retries, self.limit, delay
        )
        waited = time.perf_counter()
        try:
            await asyncio.sleep(delay)
        finally:
            record.app_seconds += time.perf_counter() - waited


def _within_deadline(deadline: asyncio.Timeout | None, delay: float | None) -> float | None:
    """The delay, unless the loop's deadline comes before it ends (then there is no time for the retry)."""
    if delay is None or deadline is None:
        return delay
    when = deadline.when()
    if when is not None and asyncio.get_running_loop().time() + delay >= when:
        return None
    return delay
