"""Case 12: many slow live streams held open at once on one uvicorn worker, through the middleware and bare.

A scripted model app streams Anthropic Messages slowly (`streams_app.py`); the load generator (`streams_loadgen.py`,
a process of its own) holds N streams open at once and counts what each client receives. Four variants, each in a
fresh worker process per measurement, interleaved round by round, the order flipped every round:

- bare: the model app alone streams the text;
- pass-through: the middleware with a `ServerTools` hook in front, the request on its looped route, the model
  answering text at once: every event goes through the live relay and the answer is judged at its end;
- tool round: the same, but the model calls the `lookup` server tool first; the middleware runs it and reruns,
  and the second round streams the text;
- floor, a reference: `streams_app.ReadingFloor`, the least any middleware that reads the stream does (each delta
  parsed and its text kept, every message forwarded through one coroutine), in front of the same app.

At one load (`RESPONSES_AT`), two more, on `/v1/responses` (Codex CLI, the Agents SDK), the app streaming OpenAI's
events (`openai_streams.py`, each text delta with its `obfuscation` padding): bare and pass-through there, the same
workers as above, so that the Responses relay's added CPU per event is measured against the same route's bare app.

Per variant: the worker's CPU (its own rusage) per SSE event the clients received, its resident memory's peak above
what it held just before the streams began (Linux's `clear_refs` resets the peak), the event loop's lag (a probe
task in the worker, outside the middleware) and the streams that did not complete, by kind.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from agentic_middleware.surfaces import surface_for

from .cases import Case, Config, Row
from .e2e import Driver
from .harness import median
from .live_stream import answer_events
from .stream_deltas import Lengths, Rounds, describe, loadavg, probe, spread, worker
from .stream_deltas import rounds as delta_rounds
from .streams_app import gc_thresholds

KB = 1024
RESPONSES = "/v1/responses"
BARE_RESPONSES, PASSED_RESPONSES = "bare (Responses)", "pass-through (Responses)"  # names of files too: no slash
APPS = {
    "bare": "bare",
    "pass-through": "wrapped",
    "tool round": "wrapped",
    "floor": "floor",
    BARE_RESPONSES: "bare",
    PASSED_RESPONSES: "wrapped",
}
ROUNDS = {"bare": 0, "pass-through": 0, "tool round": 1, "floor": 0, BARE_RESPONSES: 0, PASSED_RESPONSES: 0}
ROUTES = {BARE_RESPONSES: RESPONSES, PASSED_RESPONSES: RESPONSES}  # the others' is /v1/messages
MESSAGES_VARIANTS = ("bare", "pass-through", "tool round", "floor")


@dataclass(frozen=True)
class Load:
    """N streams of `tokens` text deltas, `delay` seconds apart."""

    streams: int
    tokens: int
    delay: float


FULL = (Load(100, 1000, 0.01), Load(1000, 100, 0.1), Load(10_000, 20, 1.0))
QUICK = (Load(20, 5, 0.01),)
RESPONSES_AT = (FULL[1], QUICK[0])  # the loads the /v1/responses variants run at too (one of a run's)
PER_DELTA = {FULL[0]: (Lengths(100, 20, 1000, 0.01), 8), QUICK[0]: (Lengths(20, 2, 10, 0.01), 1)}
"""The loads whose pass-through row is the difference of two loads (`stream_deltas.py`): its lengths, its rounds."""

Result = dict[str, Any]


def measure(driver: Driver, variant: str, load: Load, tmp: Path) -> Result:
    """One variant under one load, in a fresh worker: what the clients got, and the worker's figures."""
    route = ROUTES.get(variant, "/v1/messages")
    command = {"tokens": load.tokens, "delay": load.delay, "rounds": ROUNDS[variant], "route": route}
    with worker(APPS[variant], variant, tmp) as server:
        driver.send({**command, "url": server.url, "streams": 20, "tokens": 5, "delay": 0.001})  # warm
        before = probe(server.port, "POST")
        clients = driver.send({**command, "url": server.url, "streams": load.streams})
        after = probe(server.port)
    return {
        **clients,
        "server cpu": after["cpu"] - before["cpu"],
        "memory": (after["hwm_kb"] - before["rss_kb"]) * KB,
        "peak": after["hwm_kb"] * KB,
        "lag p50": after["lag_p50"],
        "lag p99": after["lag_p99"],
        "gc": after["gc"] - before["gc"],
        "full gc": after["full gc"] - before["full gc"],
        "full collections": after["full collections"] - before["full collections"],
    }


def rounds(driver: Driver, load: Load, count: int, tmp: Path) -> dict[str, list[Result]]:
    names = list(APPS) if load in RESPONSES_AT else list(MESSAGES_VARIANTS)
    results: dict[str, list[Result]] = {name: [] for name in names}
    for round_ in range(count):
        average = loadavg()
        for name in names if round_ % 2 == 0 else reversed(names):
            results[name].append({**measure(driver, name, load, tmp), "loadavg": average})
    return results


@cache
def answer_bytes(tokens: int) -> int:
    """The size of the answer the hooks judge at the end of a stream of `tokens` deltas, as JSON: what the issue's
    memory target leaves out (a relay must hold the answer it is reading)."""
    return len(orjson.dumps(surface_for("anthropic_messages").accumulated(b"".join(answer_events(tokens)))))


def per_event(result: Result, collector: bool = True) -> float:
    """The worker's CPU per SSE event its clients received, in µs; without `collector`, less the garbage collector's."""
    cpu = result["server cpu"] - (0 if collector else result["gc"])
    return float(1e6 * cpu / max(result["events"], 1))


def rows_of(load: Load, results: Mapping[str, list[Result]], deltas: Rounds | None = None) -> list[Row]:
    """The load's rows; with `deltas`, its pass-through CPU row is their added CPU per delta (`stream_deltas.py`),
    the per-event difference in its detail."""
    bare = results["bare"]
    name = f"{load.streams:,} live streams x {load.tokens} deltas, {load.delay:g} s apart"
    rows = []
    load_averages = ", ".join(dict.fromkeys(r["loadavg"] for r in results["bare"] if "loadavg" in r))
    for variant in ("pass-through", "tool round"):
        added = [per_event(w) - per_event(b) for w, b in zip(results[variant], bare, strict=True)]
        detail = (
            f"worker CPU per event: {variant} {spread([per_event(r) for r in results[variant]], 'µs')}, "
            f"bare {spread([per_event(r) for r in bare], 'µs')}; added {spread(added, 'µs')}"
        )
        without = [
            per_event(w, collector=False) - per_event(b, collector=False)
            for w, b in zip(results[variant], bare, strict=True)
        ]
        detail += (
            f"; the garbage collector's CPU {spread([r['gc'] for r in results[variant]], 's')} "
            f"({spread([r['full gc'] for r in results[variant]], 's')} in "
            f"{median([r['full collections'] for r in results[variant]]):.0f} full collections), bare "
            f"{spread([r['gc'] for r in bare], 's')}; added per event without the collector {spread(without, 'µs')}"
        )
        if variant == "tool round":
            per_stream = [
                1e6 * (t["server cpu"] - p["server cpu"]) / load.streams
                for t, p in zip(results[variant], results["pass-through"], strict=True)
            ]
            detail += f"; the tool round costs {spread(per_stream, 'µs')} a stream over pass-through"
        if variant == "pass-through":
            floor = [per_event(f) - per_event(b) for f, b in zip(results["floor"], bare, strict=True)]
            detail += f"; a minimal reading relay (the floor variant) adds {spread(floor, 'µs')}"
        if load_averages:
            detail += f"; load average before each round {load_averages}"
        measure = f"added worker CPU per event, {variant}"
        if variant == "pass-through" and deltas is not None:
            figure = median(deltas.added(variant))
            detail = f"{describe(deltas)}; per event, as at the other loads: {detail}"
            rows.append(Row(12, name, f"added worker CPU per delta, {variant}", figure, 2.0, detail, unit="µs"))
            continue
        rows.append(Row(12, name, measure, median(added), 2.0, detail, unit="µs"))
    if PASSED_RESPONSES in results:
        rows.append(responses_row(name, results[PASSED_RESPONSES], results[BARE_RESPONSES]))
    memory = {variant: [r["memory"] / load.streams / KB for r in results[variant]] for variant in MESSAGES_VARIANTS}
    added = [t - b for t, b in zip(memory["tool round"], memory["bare"], strict=True)]
    answer = answer_bytes(load.tokens) / KB
    detail = (
        f"added {spread(added, 'KB')}, less the {answer:.2f} KB of the answer the hooks judge (its JSON), as the "
        f"target is set; peak RSS above the worker's before, per stream: tool round "
        f"{spread(memory['tool round'], 'KB')}, "
        f"pass-through {spread(memory['pass-through'], 'KB')}, floor {spread(memory['floor'], 'KB')}, "
        f"bare {spread(memory['bare'], 'KB')}; peak RSS "
        + ", ".join(f"{v} {median([r['peak'] / KB / KB for r in results[v]]):.0f} MB" for v in results)
    )
    measure = "added memory per stream beyond the judged answer, tool round"
    rows.append(Row(12, name, measure, median(added) - answer, 16, detail, unit="KB"))
    everything = [r for variant in results.values() for r in variant]
    completed = sum(r["completed"] for r in everything) / sum(r["streams"] for r in everything)
    errors: dict[str, int] = {}
    for result in everything:
        for kind, count in result["errors"].items():
            errors[kind] = errors.get(kind, 0) + count
    lag = ", ".join(
        f"{v} {median([r['lag p50'] for r in results[v]]):.1f}/{median([r['lag p99'] for r in results[v]]):.1f}"
        for v in results
    )
    clients = median([1e6 * r["cpu"] / max(r["events"], 1) for r in everything])
    opened, done = median([r["opened"] for r in everything]), median([r["seconds"] for r in everything])
    detail = (
        f"errors: {errors or 'none'}; event-loop lag p50/p99 (ms): {lag}; all streams open after {opened:.1f} s, "
        f"done after {done:.1f} s; the load generator's CPU per event {clients:.1f} µs"
    )
    rows.append(Row(12, name, "streams completed without error", completed, 1.0, detail, at_least=True))
    return rows


def responses_row(name: str, passed: list[Result], bare: list[Result]) -> Row:
    """The Responses relay's added worker CPU per event over the bare app on the same route."""
    added = [per_event(w) - per_event(b) for w, b in zip(passed, bare, strict=True)]
    without = [per_event(w, collector=False) - per_event(b, collector=False) for w, b in zip(passed, bare, strict=True)]
    memory = [(w["memory"] - b["memory"]) / w["streams"] / KB for w, b in zip(passed, bare, strict=True)]
    detail = (
        f"OpenAI's events, each text delta with its obfuscation padding; worker CPU per event: pass-through "
        f"{spread([per_event(r) for r in passed], 'µs')}, bare {spread([per_event(r) for r in bare], 'µs')}; added "
        f"{spread(added, 'µs')}; added per event without the garbage collector {spread(without, 'µs')}; added peak "
        f"RSS per stream {spread(memory, 'KB')}"
    )
    measure = f"added worker CPU per event, pass-through, {RESPONSES}"
    return Row(12, name, measure, median(added), 2.0, detail, unit="µs")


async def many_streams(config: Config) -> list[Row]:
    gc_thresholds()  # a value the workers cannot take stops the case here, not silently in each worker
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-streams-") as name, ExitStack() as stack:
        tmp = Path(name)
        driver = stack.enter_context(Driver(sys.executable, tmp, module="benchmarks.streams_loadgen"))
        for load in QUICK if config.quick else FULL:
            results = rounds(driver, load, 1 if config.quick else 2, tmp)
            deltas = None
            if load in PER_DELTA:
                lengths, count = PER_DELTA[load]
                deltas = delta_rounds(lengths, count, tmp)
            rows += rows_of(load, results, deltas)
    return rows


CASES: dict[int, Case] = {12: many_streams}
