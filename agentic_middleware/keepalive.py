"""One timer for every stream's keep-alives, instead of a sleeping task per stream.

A gateway holds thousands of live streams, each of which must send a keep-alive after `interval` seconds of
silence. A task per stream that sleeps until then costs each stream a task, its coroutine and a timer, and wakes
every stream once per interval however busy it is (measured in benchmarks case 12: see docs/performance.md). Here
each event loop has one heap of due times and one timer handle for the earliest: when an entry comes due, its
stream is asked whether it has been quiet for its interval (its writes only note the time); if so, it writes its
keep-alive, else the entry goes back at the time the stream will next be due.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import weakref
from typing import Protocol

logger = logging.getLogger(__name__)


class Quiet(Protocol):
    """A stream that keeps its client alive: when it last wrote, and how to write a keep-alive now."""

    interval: float

    def quiet_since(self) -> float | None:
        """The loop time of its last write; None while a write is under way (it will count as one)."""

    def ping(self) -> None:
        """Start writing a keep-alive (it notes the time when it is written)."""


class Entry:
    """A stream's place in the heap; `stream` is None once it stopped, and the entry is dropped when it comes due."""

    __slots__ = ("stream",)

    def __init__(self, stream: Quiet) -> None:
        self.stream: Quiet | None = stream

    def stop(self) -> None:
        self.stream = None


class KeepAlives:
    """The keep-alive timer of one event loop."""

    def __init__(self) -> None:
        # It holds no reference to its loop (it runs on it: `asyncio.get_running_loop()`), or the loop, a weak key
        # of `_TIMERS`, could never be freed (a program that runs one loop after another, as `asyncio.run` per call
        # or tests do). Its timer handle holds the loop, so it is held weakly: the loop holds it while it is due, and
        # a loop that closed with its timer pending drops it (test_a_closed_event_loop_is_freed_with_its_timer_due).
        self.due: list[tuple[float, int, Entry]] = []
        self.order = itertools.count()  # ties in time are taken in the order they came
        self.timer: weakref.ref[asyncio.Handle] | None = None
        self.timer_at = 0.0  # when `timer` fires (uvloop gives a plain `Handle`, without `when()`, for a time past)

    def add(self, stream: Quiet) -> Entry:
        """Watch `stream` from now on, until its entry is stopped."""
        entry = Entry(stream)
        self.push(asyncio.get_running_loop().time() + stream.interval, entry)
        return entry

    def push(self, when: float, entry: Entry) -> None:
        heapq.heappush(self.due, (when, next(self.order), entry))
        handle = self.timer() if self.timer is not None else None  # None too once the loop let go of it
        if handle is None or when < self.timer_at:
            if handle is not None:
                handle.cancel()
            self.schedule(when)

    def schedule(self, when: float) -> None:
        self.timer, self.timer_at = weakref.ref(asyncio.get_running_loop().call_at(when, self.tick)), when

    def tick(self) -> None:
        self.timer = None
        now = asyncio.get_running_loop().time()
        while self.due and self.due[0][0] <= now:
            _, _, entry = heapq.heappop(self.due)
            stream = entry.stream
            if stream is None:
                continue
            last = stream.quiet_since()
            # `last + interval <= now` is the heap's own test: `now - last >= interval` can round the other way
            # (uvloop's clock counts whole milliseconds), and the entry would come due again at once, for ever.
            if last is not None and last + stream.interval > now:
                heapq.heappush(self.due, (last + stream.interval, next(self.order), entry))
                continue
            if last is not None:  # quiet for its interval (else writing now: due one interval from now at the latest)
                try:
                    stream.ping()
                except Exception:  # one stream's failure must not stop every other stream's keep-alives
                    logger.exception("a stream's keep-alive failed")
            heapq.heappush(self.due, (now + stream.interval, next(self.order), entry))
        if self.due:
            self.schedule(self.due[0][0])


_TIMERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, KeepAlives] = weakref.WeakKeyDictionary()
# The last loop asked for (weakly: a loop that ended is freed) and its timer: a server runs one loop, and a weak dict's
# lookup is a Python call and a new weak reference for every stream that starts.
_latest: tuple[weakref.ref[asyncio.AbstractEventLoop], KeepAlives] | None = None


def keep_alive(stream: Quiet) -> Entry:
    """Keep `stream`'s client alive on the running loop's timer; stop the entry when the stream ends."""
    global _latest
    loop = asyncio.get_running_loop()
    latest = _latest  # read once: a loop in another thread may replace it meanwhile
    if latest is not None and latest[0]() is loop:
        return latest[1].add(stream)
    timer = _TIMERS.get(loop)
    if timer is None:
        timer = _TIMERS[loop] = KeepAlives()
    _latest = weakref.ref(loop), timer
    return timer.add(stream)
