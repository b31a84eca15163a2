"""Cases 1 to 4 of issue 8, each returning its rows: the figure, its target, and the paired medians behind it.

Cases 5 and 6, which run servers in processes of their own, are in `e2e.py`."""

from __future__ import annotations

import gc
import subprocess
import sys
import tracemalloc
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import orjson

from agentic_middleware import AgenticLoopMiddleware

from .e2e_hooks import TOOLS, Lookup
from .fixtures import (
    HandWritten,
    NoOp,
    ScriptedAnswers,
    health_app,
    loop_answers,
    one_kb_answer,
    request_body,
    text,
)
from .harness import Sample, asgi_sample, median, median_difference, median_ratio, paired, prepare, sync_sample, us

KB = 1024
MB = 1024 * KB


@dataclass(frozen=True)
class Config:
    """How long to measure: the full run publishes figures, the quick one only proves the harness works."""

    quick: bool = False
    litellm_python: str | None = None
    """An interpreter that has LiteLLM, for case 6 when the one running the benchmark has not."""

    def pairs(self, full: int) -> int:
        return 5 if self.quick else full

    @property
    def batch(self) -> int:
        """Calls per sample for the fast cases, so that the clock's own cost and resolution do not show."""
        return 2 if self.quick else 10

    @property
    def history_sizes(self) -> tuple[int, ...]:
        return (100 * KB, 512 * KB) if self.quick else (100 * KB, 5 * MB)

    @property
    def memory_size(self) -> int:
        return 512 * KB if self.quick else 5 * MB


@dataclass(frozen=True)
class Row:
    """One figure. `at_least` is for targets that are minimums (the throughput figures of cases 5 and 6);
    `unit` is "x" for ratios, else the unit of an absolute figure (MB, s); a `skipped` row says why in `measure`."""

    case: int
    name: str
    measure: str
    figure: float
    target: float
    detail: str
    at_least: bool = False
    unit: str = "x"
    skipped: bool = False

    @property
    def passed(self) -> bool:
        return self.figure >= self.target if self.at_least else self.figure <= self.target


Case = Callable[[Config], Coroutine[Any, Any, list[Row]]]


def size_name(size: int) -> str:
    return f"{size // MB} MB" if size >= MB else f"{size // KB} KB"


async def other_routes(config: Config) -> list[Row]:
    """Case 1: a GET the middleware must only let through costs the same as on the bare Starlette app."""
    bare = health_app()
    samples = await paired(
        {
            "bare": asgi_sample(bare, "GET", "/health", batch=config.batch),
            "wrapped": asgi_sample(AgenticLoopMiddleware(bare, hooks=[Lookup()]), "GET", "/health", batch=config.batch),
            "no-op": asgi_sample(NoOp(bare), "GET", "/health", batch=config.batch),
        },
        config.pairs(3000),
    )
    figure = median_ratio(samples["wrapped"], samples["bare"])
    detail = (
        f"wrapped {us(median(samples['wrapped']))}, bare {us(median(samples['bare']))}; "
        f"a no-op ASGI middleware class: {median_ratio(samples['no-op'], samples['bare']):.3f}x"
    )
    return [Row(1, "other routes (GET /health, Starlette)", "wrapped / bare", figure, 1.03, detail)]


async def pass_through(config: Config) -> list[Row]:
    """Case 2: a 1 KB answer no hook acts on, against the JSON floor and against a hand-written BaseHTTPMiddleware."""
    request = orjson.dumps(
        {
            "model": "scripted-model",
            "max_tokens": 1024,
            "tools": TOOLS,
            "messages": [{"role": "user", "content": text(600, 1)}],
        }
    )
    answer = orjson.dumps(one_kb_answer())
    bare = ScriptedAnswers(answer)
    wrapped = AgenticLoopMiddleware(bare, hooks=[Lookup()])
    call = prepare("POST", "/v1/messages", request)
    await wrapped(call.scope, call.receive, call.send)
    if call.body != answer:
        raise RuntimeError("the middleware changed an answer no hook acts on")
    samples = await paired(
        {
            "bare": asgi_sample(bare, "POST", "/v1/messages", request, config.batch),
            "wrapped": asgi_sample(wrapped, "POST", "/v1/messages", request, config.batch),
            "hand-written": asgi_sample(HandWritten(bare, Lookup()), "POST", "/v1/messages", request, config.batch),
            "floor": sync_sample(lambda: (orjson.loads(request), orjson.loads(answer)), config.batch),
        },
        config.pairs(2000),
    )
    own = median_difference(samples["wrapped"], samples["bare"])
    floor = median(samples["floor"])
    theirs = median_difference(samples["hand-written"], samples["bare"])
    name = f"1 KB answer no hook acts on ({len(request)} B request)"
    return [
        Row(2, name, "own time / JSON floor", own / floor, 5.0, f"own {us(own)}, floor {us(floor)}"),
        Row(2, name, "own time / BaseHTTPMiddleware's", own / theirs, 0.2, f"own {us(own)}, theirs {us(theirs)}"),
    ]


def loop_floor(body: dict[str, Any], answers: list[bytes]) -> tuple[bytes, Callable[[], object]]:
    """The client's bytes, and the floor of its loop: one loads of them, per round one loads of the answer and
    one full dumps of the next body (built here as the hook builds it, so that the floor dumps the same bytes)."""
    raw = orjson.dumps(body)
    bodies: list[dict[str, Any]] = []
    messages = body["messages"]
    for answer in answers[:-1]:
        calls = [b for b in orjson.loads(answer)["content"] if b["type"] == "tool_use"]
        results = [{"type": "tool_result", "tool_use_id": c["id"], "content": "42 results"} for c in calls]
        messages = [*messages, {"role": "assistant", "content": calls}, {"role": "user", "content": results}]
        bodies.append({**body, "messages": messages})

    def floor() -> None:
        orjson.loads(raw)
        for answer in answers:
            orjson.loads(answer)
        for next_body in bodies:
            orjson.dumps(next_body)

    return raw, floor


def loop_sample(app: AgenticLoopMiddleware, model: ScriptedAnswers, raw: bytes, calls: int) -> Sample:
    """One looped client request; the middleware's own time is the total minus the model app's own time."""

    async def sample() -> float:
        model.rewind()
        call = prepare("POST", "/v1/messages", raw)
        start = perf_counter_ns()
        await app(call.scope, call.receive, call.send)
        total = perf_counter_ns() - start
        if call.status != 200 or model.calls != calls:
            raise RuntimeError(f"the loop made {model.calls} model calls, not {calls} (status {call.status})")
        return total - model.own_ns

    return sample


def looped(reruns: int = 3) -> tuple[AgenticLoopMiddleware, ScriptedAnswers, list[bytes]]:
    answers = [orjson.dumps(answer) for answer in loop_answers(reruns)]
    model = ScriptedAnswers(*answers)
    return AgenticLoopMiddleware(model, hooks=[Lookup()], max_agentic_loops=reruns), model, answers


async def loop_cost(config: Config) -> list[Row]:
    """Case 3: a 3-rerun loop over a large history, against the floor of parsing and serializing it."""
    rows = []
    for size in config.history_sizes:
        app, model, answers = looped()
        raw, floor = loop_floor(request_body(size), answers)
        samples = await paired(
            {"loop": loop_sample(app, model, raw, len(answers)), "floor": sync_sample(floor)},
            config.pairs(300 if size < MB else 40),
        )
        own, floor_ns = median(samples["loop"]), median(samples["floor"])
        name = f"3-rerun loop, {size_name(size)} history"
        rows.append(Row(3, name, "own time / floor", own / floor_ns, 1.25, f"own {us(own)}, floor {us(floor_ns)}"))
    return rows


async def traced_peak(work: Callable[[], Awaitable[object]]) -> int:
    """The tracemalloc peak of `work` above what was allocated before it."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        await work()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


# Run in a fresh interpreter; Linux resets the high-water mark of resident memory (VmHWM) on demand,
# so that what is measured is this request's peak above what the process held just before it.
_RSS_PROBE = """
import asyncio, gc, sys, orjson
from benchmarks.cases import loop_sample, looped
from benchmarks.fixtures import request_body
def status(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field))
app, model, answers = looped()
asyncio.run(loop_sample(app, model, orjson.dumps(request_body(64 * 1024)), len(answers))())
raw = orjson.dumps(request_body(int(sys.argv[1])))
gc.collect()
open("/proc/self/clear_refs", "w").write("5")
before = status("VmRSS:")
asyncio.run(loop_sample(app, model, raw, len(answers))())
print(status("VmHWM:") - before, len(raw))
"""


def rss_growth(size: int) -> tuple[float, int]:
    """How far one looped request raises the process's resident memory at its peak (bytes), and its body's size."""
    probe = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, str(size)], capture_output=True, text=True, check=True, timeout=120
    )
    kilobytes, body = probe.stdout.split()
    return int(kilobytes) * 1024, int(body)


async def memory(config: Config) -> list[Row]:
    """Case 4: the peak memory of one looped request, as a multiple of its body (which is not counted)."""
    app, model, answers = looped()
    raw, _ = loop_floor(request_body(config.memory_size), answers)
    run = loop_sample(app, model, raw, len(answers))
    await run()  # first-call allocations (imports, caches) are not the request's

    async def parse() -> object:
        return orjson.loads(raw)

    peaks = [await traced_peak(run) for _ in range(1 if config.quick else 3)]
    figure = median(peaks) / len(raw)
    parsed = await traced_peak(parse) / len(raw)
    detail = f"peak {median(peaks) / MB:.1f} MB for a {len(raw) / MB:.1f} MB body; its parse alone {parsed:.1f}x"
    name = f"memory, one 3-rerun loop, {size_name(config.memory_size)} history"
    rows = [Row(4, name, "tracemalloc peak / body", figure, 4.0, detail)]
    try:
        growth, body = rss_growth(config.memory_size)
    except (OSError, subprocess.SubprocessError) as error:  # /proc/self/clear_refs is Linux's
        return [*rows, Row(4, name, f"skipped: no peak RSS here ({error})", 0.0, 4.0, "", skipped=True)]
    rss_detail = f"resident memory rose {growth / MB:.1f} MB for a {body / MB:.1f} MB body, in a fresh process"
    return [*rows, Row(4, name, "peak RSS growth / body", growth / body, 4.0, rss_detail)]


CASES: dict[int, Case] = {1: other_routes, 2: pass_through, 3: loop_cost, 4: memory}
"""The in-process cases; `run.py` adds 5 (end to end under uvicorn) and 6 (LiteLLM side by side) from `e2e.py`."""
