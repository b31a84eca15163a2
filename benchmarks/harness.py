"""Hand-made ASGI calls and paired timing, so that what is measured is the app's own code and nothing else.

No HTTP client, no server: each call gets a scope, a `receive` and a `send` built before the clock starts.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter_ns

from starlette.types import ASGIApp, Message, Receive, Scope, Send

Sample = Callable[[], Awaitable[float]]
"""Runs the measured work once and returns the nanoseconds it stands for."""


@dataclass
class Call:
    """One prepared request and what the app sent back."""

    scope: Scope
    receive: Receive
    send: Send
    sent: list[Message]

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"]) if self.sent else 0

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


def prepare(method: str, path: str, body: bytes = b"") -> Call:
    """A fresh scope (routers change theirs), a `receive` that gives `body` once, and a recording `send`."""
    headers = [(b"host", b"bench"), (b"content-type", b"application/json")]
    if method == "POST":
        headers.append((b"content-length", str(len(body)).encode()))
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[Message] = []

    async def receive() -> Message:
        if pending:
            return pending.pop()
        await asyncio.get_running_loop().create_future()  # a client that stays: nothing more until the end
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    return Call(scope, receive, send, sent)


def asgi_sample(app: ASGIApp, method: str, path: str, body: bytes = b"", batch: int = 1) -> Sample:
    """Time `batch` calls of `app` back to back; the mean per call. Fails loudly unless every call got a 200."""

    async def sample() -> float:
        calls = [prepare(method, path, body) for _ in range(batch)]
        start = perf_counter_ns()
        for call in calls:
            await app(call.scope, call.receive, call.send)
        elapsed = perf_counter_ns() - start
        if any(call.status != 200 for call in calls):
            raise RuntimeError(f"{path}: status {[call.status for call in calls]}, not 200")
        return elapsed / batch

    return sample


def sync_sample(work: Callable[[], object], batch: int = 1) -> Sample:
    """Time a plain function the same way, so that a floor is measured in the same interleaving."""

    async def sample() -> float:
        start = perf_counter_ns()
        for _ in range(batch):
            work()
        return (perf_counter_ns() - start) / batch

    return sample


async def paired(variants: Mapping[str, Sample], pairs: int, warmup: int = 3) -> dict[str, list[float]]:
    """Run the variants interleaved, one of each per round, so drift and neighbours hit all of them alike.

    The order flips every round (A,B,C then C,B,A), so that none of them always runs on a warm cache.
    """
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            await variants[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(pairs):
        for name in names if round_ % 2 == 0 else reversed(names):
            samples[name].append(await variants[name]())
    return samples


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def median_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """The median of the paired ratios: each pair ran side by side, so its ratio cancels the drift of the moment."""
    return median([a / b for a, b in zip(numerators, denominators, strict=True)])


def median_difference(minuends: Sequence[float], subtrahends: Sequence[float]) -> float:
    """The median of the paired differences: what one variant adds over the other, pair by pair."""
    return median([a - b for a, b in zip(minuends, subtrahends, strict=True)])


def us(nanoseconds: float) -> str:
    """A duration for the detail column, always shown next to the one it is compared with."""
    if nanoseconds >= 1_000_000:
        return f"{nanoseconds / 1e6:.2f} ms"
    return f"{nanoseconds / 1e3:.1f} µs"
