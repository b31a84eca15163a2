"""Accounting for a looped request: round records, log lines, the `on_round` callback, usage sums, traces.

None of it runs for requests that pass through; tracing imports OpenTelemetry only when it is turned on.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import ConfigurationError

logger = logging.getLogger("agentic_middleware")

RERUNS_HEADER = b"x-agentic-loop-reruns"
ENDED_BY_HEADER = b"x-agentic-loop-ended-by"
STOP_REASON_HEADER = b"x-agentic-loop-stop-reason"
RETRIES_HEADER = b"x-agentic-loop-retries"


@dataclass(slots=True)
class RoundRecord:
    """One round of a client request's loop: one model-app call and what the hooks made of its answer.

    `outcome` is "rerun" for every round but the last; the last one says why the loop ended.
    """

    litellm_call_id: str
    route: str
    depth: int
    outcome: str = "finished"
    hook: str | None = None
    tools: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    app_seconds: float = 0.0
    hook_seconds: float = 0.0
    usage: Any = None
    retries: int = 0  # times this round's call was tried again after a transient failure (last, for old callers)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


RoundCallback = Callable[[RoundRecord], Any]

_WARNINGS = frozenset(("limit", "repeated_tool_calls", "denied", "hook_error", "app_error", "timeout", "cancelled"))


def _level(record: RoundRecord) -> int:
    """A request no hook acted on logs at DEBUG, a stop that is not a finish at WARNING, the rest at INFO."""
    if record.outcome in _WARNINGS:
        return logging.WARNING
    return logging.DEBUG if record.outcome == "finished" and record.depth == 0 else logging.INFO


_NUMBERS = (int, float)  # a tuple, not `int | float`, which makes a new union object at every check
# A dict is checked first (a parsed answer's usage is one): the ABC's check alone is a Python call each time.
MAPPINGS = (dict, Mapping)


_COUNT_TYPES = frozenset(_NUMBERS)  # the types of a parsed answer's counts: a column of them is checked in C


def _is_count(value: Any) -> bool:
    return isinstance(value, _NUMBERS) and not isinstance(value, bool)


def _are_counts(values: list[Any]) -> bool:
    """Whether every value is a count: by their types in C (`bool` is no count, nor in the set), then one by one for
    a subclass of `int` or `float` a hook's usage may hold."""
    return _COUNT_TYPES.issuperset(map(type, values)) or all(map(_is_count, values))


def sum_usage(usages: Sequence[Any]) -> Any:
    """The usage of every call added up: numbers are summed (nested counters too), anything else is the last call's."""
    dicts = [usage for usage in usages if isinstance(usage, MAPPINGS)]
    if not dicts:
        return usages[-1] if usages else None
    columns: dict[Any, list[Any]] = {}  # each key's values that are not None, in call order; keys as first seen
    for usage in dicts:
        for key, value in usage.items():
            column = columns.get(key)
            if column is None:
                column = columns[key] = []
            if value is not None:
                column.append(value)
    total: dict[str, Any] = {}
    for key, values in columns.items():
        if values and _are_counts(values):
            total[key] = sum(values)
        elif values and all(isinstance(v, MAPPINGS) for v in values):
            total[key] = sum_usage(values)
        else:
            total[key] = dicts[-1].get(key)
    return total


ITERATIONS = "iterations"


def turn_usage(
    final: Any, usages: Sequence[Any], hooks_usage: Any, summed: bool, entry: Callable[[Mapping[str, Any]], Any]
) -> Any:
    """The `usage` of a looped answer: the calls' sum (what post hooks added on top) when `summed`, else the final
    answer's own (the last call's, as the hooks left it); either way with `iterations`, every call's own usage in
    order, so that the sum (the bill) and the last call (the context) can both be read from it.

    A call whose usage has `iterations` of its own (an upstream that ran server tools or compaction) is listed by
    them, as it reported them."""
    top = sum_usage([hooks_usage, *usages]) if summed else final
    if not isinstance(top, MAPPINGS):
        return top
    listed: list[Any] = []
    for usage in usages:
        if not isinstance(usage, MAPPINGS):
            continue
        own = usage.get(ITERATIONS)
        if isinstance(own, list) and own:
            listed += own
        else:
            listed.append(entry(usage))
    return {**top, ITERATIONS: listed} if listed else dict(top)


def usage_added(before: Any, after: Any) -> dict[str, Any] | None:
    """The counters `after` has beyond `before` (new ones whole, grown ones by how much they grew), nested ones
    too: what a post hook added to a usage, so that summing the calls' usages keeps it. A counter that shrank adds
    nothing: what the model calls used is the floor of the total, whatever a hook writes."""
    if not isinstance(after, MAPPINGS):
        return None
    before = before if isinstance(before, MAPPINGS) else {}
    added: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, MAPPINGS):
            inner = usage_added(old, value)
            if inner:
                added[key] = inner
        elif _is_count(value):
            if not _is_count(old):
                added[key] = value
            elif value > old:
                added[key] = value - old
    return added or None


class Observer:
    """Where a loop reports its rounds: the log, the operator's callback, and optionally OpenTelemetry."""

    def __init__(self, on_round: RoundCallback | None, tracing: bool, log_bodies: bool) -> None:
        self.on_round = on_round
        self.log_bodies = log_bodies
        self.tracer = _tracer() if tracing else None

    def wants(self, record: RoundRecord) -> bool:
        """Whether anyone would see this round: the callback, or the log at the round's level."""
        return self.on_round is not None or logger.isEnabledFor(_level(record))

    async def round_done(self, record: RoundRecord) -> None:
        level = _level(record)
        if logger.isEnabledFor(level):
            logger.log(
                level,
                "agentic round %d: %s%s (hook %s, tools %s, app %.2f ms, hooks %.2f ms)",
                record.depth,
                record.outcome,
                f" ({record.stop_reason})" if record.stop_reason else "",
                record.hook or "-",
                ",".join(record.tools) or "-",
                record.app_seconds * 1000,
                record.hook_seconds * 1000,
                extra={"litellm_call_id": record.litellm_call_id, "agentic_round": record.as_dict()},
            )
        if self.on_round is None:
            return
        try:
            result = self.on_round(record)
            if result is not None and inspect.isawaitable(result):  # None first: the ABC's check is a Python call
                await result
        except Exception:
            logger.exception("on_round callback failed", extra={"litellm_call_id": record.litellm_call_id})

    @contextlib.contextmanager
    def span(self, name: str, **attributes: Any) -> Iterator[Any]:
        """A span when tracing is on, else nothing; yields the span (or None) for attributes set later."""
        if self.tracer is None:
            yield None
            return
        with self.tracer.start_as_current_span(
            name, attributes={k: v for k, v in attributes.items() if v is not None}
        ) as span:
            yield span


def set_attributes(span: Any, **attributes: Any) -> None:
    if span is not None:
        span.set_attributes({key: value for key, value in attributes.items() if value is not None})


def _tracer() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:
        raise ConfigurationError("tracing needs OpenTelemetry: pip install 'agentic-middleware[otel]'") from None
    return trace.get_tracer("agentic_middleware")
