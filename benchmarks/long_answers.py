"""Case 7: a looped stream whose final answer is 3 MB of text, read by the anthropic SDK's stream helper.

A client accumulates each text delta by copying what it has so far, so its work is the number of deltas times
the text's length. The re-stream used to cut every string into 256-character pieces (11,700 events for 3 MB);
now a string is at most `sse.MAX_PIECES` pieces. Both are measured side by side: the SDK's accumulation, and a
raw read of the same stream (the bytes alone), through the middleware in-process. The SDK's own cost per
request (some 20 ms) dominates small answers, so only the full run's 3 MB figure says something.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from time import perf_counter_ns
from typing import Any

import orjson

from agentic_middleware import AgenticLoopMiddleware, sse

from .cases import MB, Config, Row, size_name
from .e2e_hooks import TOOL, TOOLS, Lookup
from .fixtures import ScriptedAnswers, text
from .harness import Sample, median, median_ratio, paired, us

NAME = "long answer re-streamed"


@contextlib.contextmanager
def fixed_pieces() -> Iterator[None]:
    """The re-stream as it was before the bound: every string in 256-character pieces, however long."""
    bound = sse.MAX_PIECES
    sse.MAX_PIECES = sys.maxsize
    try:
        yield
    finally:
        sse.MAX_PIECES = bound


def answers(size: int) -> list[bytes]:
    """One `lookup` call, then a final answer of `size` characters of prose."""
    from agentic_middleware.testing import message, tool_use

    prose = " ".join(text(2000, seed) for seed in range(size // 2000 + 1))[:size]
    return [
        orjson.dumps(message("Let me look.", tool_use(TOOL, {"page": 1}, id="toolu_long"))),
        orjson.dumps(message(prose)),
    ]


async def long_answer(config: Config) -> list[Row]:
    size = MB // 4 if config.quick else 3 * MB
    name = f"{NAME}, {size_name(size)}"
    if importlib.util.find_spec("anthropic") is None or importlib.util.find_spec("httpx2") is None:
        return [Row(7, name, "skipped: needs the anthropic SDK and httpx2 (the demo extra)", 0, 1, "", skipped=True)]
    import anthropic
    import httpx2

    model = ScriptedAnswers(*answers(size))
    app = AgenticLoopMiddleware(model, hooks=[Lookup()], streaming=True)
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://bench")
    client = anthropic.AsyncAnthropic(api_key="bench", base_url="http://bench", http_client=http, max_retries=0)
    request: dict[str, Any] = {
        "model": "scripted-model",
        "max_tokens": 256,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "pages=1"}],
    }
    events: dict[str, int] = {}

    def raw(label: str) -> Sample:
        async def sample() -> float:
            model.rewind()
            start = perf_counter_ns()
            response = await http.post("/v1/messages", json={**request, "stream": True})
            body = await response.aread()
            elapsed = perf_counter_ns() - start
            events[label] = body.count(b"\n\n")
            return elapsed

        return sample

    def sdk(bounded: bool) -> Sample:
        async def sample() -> float:
            model.rewind()
            with contextlib.nullcontext() if bounded else fixed_pieces():
                start = perf_counter_ns()
                async with client.messages.stream(**request) as stream:
                    final = await stream.get_final_message()
                elapsed = perf_counter_ns() - start
            if len(final.content[0].text) != size:  # type: ignore[union-attr]
                raise RuntimeError("the SDK did not rebuild the whole answer")
            return elapsed

        return sample

    async def raw_fixed() -> float:
        with fixed_pieces():
            return await raw("fixed")()

    samples = await paired(
        {"raw": raw("bounded"), "sdk": sdk(True), "sdk fixed": sdk(False), "raw fixed": raw_fixed},
        config.pairs(5),
        warmup=1,
    )
    sdk_ns, before_ns, raw_ns = median(samples["sdk"]), median(samples["sdk fixed"]), median(samples["raw"])
    return [
        Row(
            7,
            name,
            "SDK accumulation / raw read",
            median_ratio(samples["sdk"], samples["raw"]),
            3.0,
            f"SDK {us(sdk_ns)}, raw {us(raw_ns)}; {events['bounded']} events",
        ),
        Row(
            7,
            name,
            "SDK time, bounded / fixed 256-char pieces",
            median_ratio(samples["sdk"], samples["sdk fixed"]),
            0.2,
            f"bounded {us(sdk_ns)}, fixed {us(before_ns)} ({events['fixed']} events, "
            f"raw read {us(median(samples['raw fixed']))})",
        ),
    ]


CASES = {7: long_answer}
