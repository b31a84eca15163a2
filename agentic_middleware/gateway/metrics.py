"""`/metrics`: the loop's rounds in Prometheus' text format, counted from the middleware's `on_round` callback.

Every series is named `agentic_*`:

| series | kind | labels | what |
|---|---|---|---|
| `agentic_rounds_total` | counter | route, outcome | rounds: one model call and what the hooks made of its answer |
| `agentic_requests_total` | counter | route, ended_by | client requests the loop saw, by how their loop ended |
| `agentic_looped_requests_total` | counter | route | those whose loop reran the model at least once |
| `agentic_reruns_total` | counter | route | internal model calls after the first (reruns and closing calls) |
| `agentic_rerun_retries_total` | counter | route | reruns tried again after a transient error (`rerun_retries`) |
| `agentic_tool_calls_total` | counter | route, tool, outcome | tool calls hooks claimed, by the round's outcome |
| `agentic_loop_seconds` | histogram | route | a request's time in the model app and in hooks, over its rounds |
| `agentic_live_streams` | gauge | | event streams being sent to clients right now |

A round's `outcome` is `rerun` (a tool ran and the model is asked again), `closing` (the claim was refused and a
closing call follows), or why the loop ended (`finished`, `limit`, `repeated_tool_calls`, `hook_error`, ... as in
the `x-agentic-loop-ended-by` header, docs/accounting.md). A request no hook acted on counts as one round and one
request ended `finished`; requests on other paths (`/v1/models`, ...) are not counted.

With several uvicorn workers (`--workers N`), each counts its own requests: the gateway sets prometheus-client's
multiprocess mode up (`PROMETHEUS_MULTIPROC_DIR`, a fresh folder unless the operator names one) before the workers
start, and `/metrics` adds them up, whichever worker answers.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..observe import RoundRecord

MULTIPROCESS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
LOOP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
NOT_FINAL = frozenset(("rerun", "closing"))
OPEN_LOOPS = 10_000
"""The most requests whose rounds are summed at once; an older one is dropped (its duration uncounted) rather than
the table growing without end, should a loop never report its last round."""


class GatewayMetrics:
    """The gateway's series in a registry of its own (one per app, so two apps in one process never share counts)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.multiprocess = bool(os.environ.get(MULTIPROCESS_VARIABLE))
        registry = self.registry
        self.rounds = Counter("agentic_rounds", "Rounds of the agentic loop", ["route", "outcome"], registry=registry)
        self.requests = Counter(
            "agentic_requests",
            "Client requests the loop saw, by how it ended",
            ["route", "ended_by"],
            registry=registry,
        )
        self.looped = Counter(
            "agentic_looped_requests", "Client requests whose loop reran the model", ["route"], registry=registry
        )
        self.reruns = Counter("agentic_reruns", "Internal model calls after the first", ["route"], registry=registry)
        self.rerun_retries = Counter(
            "agentic_rerun_retries",
            "Reruns tried again after a transient error of the model app",
            ["route"],
            registry=registry,
        )
        self.tool_calls = Counter(
            "agentic_tool_calls", "Server tool calls claimed by hooks", ["route", "tool", "outcome"], registry=registry
        )
        self.loop_seconds = Histogram(
            "agentic_loop_seconds",
            "A request's time in the model app and in hooks, over all its rounds",
            ["route"],
            buckets=LOOP_BUCKETS,
            registry=registry,
        )
        self.live_streams = Gauge(
            "agentic_live_streams",
            "Event streams being sent to clients",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self._open: OrderedDict[str, float] = OrderedDict()
        self._children: dict[tuple[Any, ...], Any] = {}
        self._pending = _Pending(self._child)

    def _child(self, series: Any, *labels: str) -> Any:
        """`series.labels(*labels)`, looked up once: prometheus-client checks and joins the label values and takes a
        lock on every `labels` call, then hands back the same child each time (the gateway never removes one). The
        table holds no more than the series themselves do: one entry per child they keep."""
        key = (series, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = series.labels(*labels)
        return child

    def flush(self) -> None:
        """Passes the counts `on_round` took on to prometheus-client's series, one `inc` per child however many
        rounds it counted: its `inc` (a check and a lock each) was most of a round's counting, about 100k
        instructions of a 3-rerun request's 3.3M in the gateway (callgrind, docs/performance.md). `text` flushes
        first, so `/metrics` tells every round counted; with several workers each round is flushed at once, as
        every worker's `/metrics` reads the others' counts from prometheus-client's files."""
        pending, self._pending = self._pending, _Pending(self._child)
        for (series, *labels), amount in pending.items():
            self._child(series, *labels).inc(amount)

    def on_round(self, record: RoundRecord) -> None:
        """The `on_round` callback: counts one round, and the request when it is the loop's last."""
        route, outcome, pending = record.route, record.outcome, self._pending
        pending[self.rounds, route, outcome] += 1
        for tool in record.tools:
            pending[self.tool_calls, route, tool, outcome] += 1
        if record.retries:
            pending[self.rerun_retries, route] += record.retries
        spent = self._open.pop(record.litellm_call_id, 0.0) + record.app_seconds + record.hook_seconds
        if record.outcome in NOT_FINAL:
            self._open[record.litellm_call_id] = spent
            if len(self._open) > OPEN_LOOPS:
                self._open.popitem(last=False)
        else:
            pending[self.requests, route, outcome] += 1
            self._child(self.loop_seconds, route).observe(spent)
            if record.depth > 0:
                pending[self.looped, route] += 1
                pending[self.reruns, route] += record.depth
        if self.multiprocess:
            self.flush()

    def text(self) -> bytes:
        self.flush()
        if not self.multiprocess:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)

    async def endpoint(self, request: Request) -> Response:
        return Response(self.text(), media_type=CONTENT_TYPE_LATEST)


class _Pending(dict[tuple[Any, ...], float]):
    """The counts `on_round` took that `flush` has not passed on yet, each key a series and then its labels.

    A key counted for the first time since the last flush has its child made at once (`GatewayMetrics._child`,
    looked up once it exists), so that a series' `_created` sample is the time of its first round, as when every round
    was passed on as it was counted."""

    __slots__ = ("child",)

    def __init__(self, child: Callable[..., Any]) -> None:
        super().__init__()
        self.child = child

    def __missing__(self, key: tuple[Any, ...]) -> float:
        self.child(*key)
        return 0.0


class CountStreams:
    """Around the gateway: `agentic_live_streams` counts its `text/event-stream` responses while they are sent."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.gauge = metrics.live_streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        streaming = False

        async def watch(message: Message) -> None:
            nonlocal streaming
            if message["type"] == "http.response.start" and _is_stream(message):
                streaming = True
                self.gauge.inc()
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if streaming:
                self.gauge.dec()


def chained(first: Callable[[RoundRecord], None], then: Callable[..., Any] | None) -> Callable[..., Any]:
    """One `on_round` callback calling `first`, then the operator's own (sync or async), whose result is returned."""
    if then is None:
        return first

    def both(record: RoundRecord) -> Awaitable[Any] | Any:
        first(record)
        return then(record)

    return both


def _is_stream(message: Message) -> bool:
    return any(
        name == b"content-type" and value.split(b";")[0].strip().lower() == b"text/event-stream"
        for name, value in message.get("headers", ())
    )
