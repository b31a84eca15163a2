"""Case 12's per-delta figure (`benchmarks/stream_deltas.py`): what the difference of two loads gives, how rounds
interleave, and that the long-stream load's target row reports it. No worker runs: the loads are made up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import many_streams, stream_deltas
from benchmarks.stream_deltas import Lengths, Pair, Rounds

LENGTHS = Lengths(streams=10, short=20, long=220, delay=0.01)


def pair(per_stream_us: float, per_delta_us: float, user_share: float = 0.75) -> Pair:
    """A worker whose CPU is exactly a fixed cost a stream plus a cost a delta."""

    def load(tokens: int) -> dict[str, float]:
        deltas = LENGTHS.streams * tokens
        cpu = 1e-6 * (LENGTHS.streams * per_stream_us + deltas * per_delta_us)
        return {"cpu": cpu, "user": user_share * cpu, "deltas": deltas, "events": deltas + 6 * LENGTHS.streams}

    return Pair(LENGTHS.streams, load(LENGTHS.short), load(LENGTHS.long))


def test_the_difference_of_two_loads_gives_the_cost_of_a_delta_and_leaves_a_streams_fixed_cost_apart() -> None:
    found = pair(per_stream_us=300.0, per_delta_us=12.5)

    assert found.per_delta() == pytest.approx(12.5)
    assert found.per_stream() == pytest.approx(300.0)
    assert found.per_delta("user") == pytest.approx(0.75 * 12.5)
    # Per event, as the other loads' rows are figured, the fixed cost is spread over the events and shows.
    assert found.long["cpu"] * 1e6 / found.long["events"] > 12.5 + 0.5


def test_rounds_run_the_variants_side_by_side_with_a_load_generator_each_and_note_the_load_average(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    measured: list[Lengths] = []
    costs = {"bare": (100.0, 8.0), "pass-through": (350.0, 10.0), "floor": (120.0, 9.0)}
    generators: list[str] = []

    class Driver:
        """One load generator a variant, each its own process in the benchmark."""

        def __init__(self, *_: Any, **__: Any) -> None:
            generators.append("started")

        def __enter__(self) -> Driver:
            return self

        def __exit__(self, *_: Any) -> None:
            generators.append("stopped")

    def measure(drivers: dict[str, Any], lengths: Lengths, tmp: Path) -> dict[str, Pair]:
        assert list(drivers) == ["bare", "pass-through", "floor"] and len(set(map(id, drivers.values()))) == 3
        measured.append(lengths)
        return {name: pair(*costs[name]) for name in drivers}

    averages = iter(["0.10 0.20 0.30", "0.40 0.50 0.60", "0.70 0.80 0.90", "1.00 1.10 1.20"])
    monkeypatch.setattr(stream_deltas, "Driver", Driver)
    monkeypatch.setattr(stream_deltas, "measure", measure)
    monkeypatch.setattr(stream_deltas, "loadavg", lambda: next(averages))

    found = stream_deltas.rounds(LENGTHS, 4, tmp_path)

    assert measured == [LENGTHS] * 4
    assert generators == ["started"] * 3 + ["stopped"] * 3
    assert found.loads == ["0.10 0.20 0.30", "0.40 0.50 0.60", "0.70 0.80 0.90", "1.00 1.10 1.20"]
    assert found.added("pass-through") == pytest.approx([2.0] * 4)
    assert found.added("floor") == pytest.approx([1.0] * 4)
    assert found.added("pass-through", per="stream") == pytest.approx([250.0] * 4)
    detail = stream_deltas.describe(found)
    assert "the floor adds 1.00 (1.00 to 1.00) µs" in detail and "fixed cost added 250.00" in detail
    assert "0.10 0.20 0.30, 0.40 0.50 0.60" in detail


def result(cpu: float, events: int = 10_000) -> dict[str, Any]:
    """One measurement of `many_streams.measure`, its figures made up."""
    return {
        "events": events,
        "streams": 100,
        "completed": 100,
        "errors": {},
        "cpu": 0.3,
        "opened": 0.1,
        "seconds": 10.0,
        "server cpu": cpu,
        "memory": 2_000_000,
        "peak": 50_000_000,
        "lag p50": 0.0,
        "lag p99": 1.0,
        "gc": 0.01,
        "full gc": 0.0,
        "full collections": 0,
        "loadavg": "0.50 0.40 0.30",
    }


def test_the_long_stream_loads_target_row_is_the_added_cpu_per_delta() -> None:
    load = many_streams.FULL[0]
    results = {
        "bare": [result(0.20), result(0.21)],
        "pass-through": [result(0.25), result(0.27)],
        "tool round": [result(0.30), result(0.31)],
        "floor": [result(0.22), result(0.22)],
    }
    deltas = Rounds(
        LENGTHS,
        {
            "bare": [pair(100, 8.0), pair(100, 8.0), pair(100, 8.0)],
            "pass-through": [pair(300, 9.0), pair(300, 9.5), pair(300, 11.0)],
            "floor": [pair(120, 8.5), pair(120, 8.6), pair(120, 8.7)],
        },
        ["0.50 0.40 0.30"] * 3,
    )

    rows = {row.measure: row for row in many_streams.rows_of(load, results, deltas)}

    row = rows["added worker CPU per delta, pass-through"]
    assert row.figure == pytest.approx(1.5) and row.unit == "µs" and row.target == 2.0
    assert "the floor adds 0.60 (0.50 to 0.70) µs" in row.detail
    assert "per event, as at the other loads" in row.detail  # the old figure, kept beside it
    assert "added worker CPU per event, pass-through" not in rows
    assert rows["added worker CPU per event, tool round"].figure == pytest.approx(10.0)  # 1e6 * (0.305 - 0.205) / 1e4
    assert "load average before each round 0.50 0.40 0.30" in rows["added worker CPU per event, tool round"].detail
    # Without the per-delta rounds (the other loads), the pass-through row stays per event.
    plain = {row.measure: row for row in many_streams.rows_of(load, results)}
    assert plain["added worker CPU per event, pass-through"].figure == pytest.approx(5.5)
