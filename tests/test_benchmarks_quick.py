"""The benchmark harness still runs: its quick mode yields a row for each case and a chart. No timing is checked."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from starlette.types import Message

pytest.importorskip("matplotlib", reason="the chart needs the bench extra: pip install -e '.[bench]'")

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.surfaces.chat_relay import ChatRelay
from agentic_middleware.surfaces.messages_relay import MessagesRelay
from agentic_middleware.surfaces.responses_relay import ResponsesRelay
from benchmarks.e2e_hooks import Lookup
from benchmarks.live_stream import ROUTES, Client, Route, StreamingAnswers
from benchmarks.run import main


def test_quick_mode_measures_every_case_and_draws_the_chart(tmp_path: Path) -> None:
    rows = main(["--quick", "--out", str(tmp_path)])

    assert {row.case for row in rows} == {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
    # A difference of resident memory (case 12's KB rows) may be zero or below in a seconds-long run, and so may
    # case 12's CPU per delta (the difference of two loads of a few hundred deltas each, at the timer's noise).
    noisy = [row for row in rows if row.unit == "KB" or "per delta" in row.measure]
    assert [row.measure for row in noisy if row.unit != "KB"] == ["added worker CPU per delta, pass-through"]
    assert all(row.figure > 0 for row in rows if not row.skipped and row not in noisy)
    assert all(not row.skipped for row in rows if row.case != 6)  # case 6 may skip: LiteLLM is not in CI
    results = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert "| 4. memory" in results
    assert "| 5. end to end" in results
    assert "| 8. one MCP tool call" in results
    assert "| 9. live stream" in results
    assert "| 10. one 64 KB event" in results
    assert "| 11. native domain filters" in results
    assert "live streams x 5 deltas" in results and "streams completed without error | 1.000x" in results
    assert (tmp_path / "chart.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("value", ["abc", "10000,10,10,10", "-1", "2147483648"])
def test_a_gc_threshold_the_workers_cannot_take_stops_case_12_before_it_runs(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taken in each worker's lifespan, such a value made uvicorn serve on without the probe: lag figures of 0.0."""
    monkeypatch.setenv("BENCH_GC_THRESHOLD", value)
    with pytest.raises(ValueError, match="BENCH_GC_THRESHOLD"):
        main(["--quick", "--case", "12", "--out", str(tmp_path)])


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: f"{route.path} {route.measure}")
def test_case_9s_deltas_take_the_path_a_real_servers_take_and_reach_the_client_whole(
    route: Route, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each own-time row measures the path its detail names: OpenAI's Responses deltas and its Chat chunks, with
    obfuscation or without, take the relay's lane (every delta but the first few); and the client gets every
    delta's text, not an error (a shape the relay refused would be timed as a failed stream)."""
    taken = Counter[str]()
    for relay in (MessagesRelay, ResponsesRelay, ChatRelay):

        def counted(self: Any, chunk: bytes, passing: Any = relay.pass_on) -> bytes | None:
            out = passing(self, chunk)
            taken[type(self).__name__] += out is not None
            return out

        monkeypatch.setattr(relay, "pass_on", counted)
    tokens = 50
    got: list[bytes] = []

    class Recording(Client):
        async def send(self, message: Message) -> None:
            await super().send(message)
            got.append(message.get("body", b""))

    model = StreamingAnswers(route.events(tokens))
    app = AgenticLoopMiddleware(model, hooks=[Lookup()], streaming=True)
    asyncio.run(Recording(route.body, route.mark, route.path).run(app))

    body = b"".join(got)
    assert body.count(route.mark) == tokens and b"event: error" not in body and b'"error":{' not in body
    assert sum(taken.values()) >= tokens - 2
