"""`python -m benchmarks.callgrind` still measures what it names: its targets run their requests and get whole answers
without valgrind (the bracket does nothing then), its dumps are read by name, and where valgrind and its headers are
here, a quick lane counts. No count is checked against a figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from agentic_middleware.gateway.serve import serving
from benchmarks import callgrind, callgrind_target, e2e_upstream, loadgen, streams_loadgen
from benchmarks.callgrind_target import LANES, Bracket, StreamingAnswers, deltas, once


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def stop(self, name: str) -> None:
        self.calls.append(f"stop {name}")


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(callgrind_target, "HELPER", recorder)
    return recorder


@pytest.mark.parametrize("lane", sorted(LANES))
async def test_each_delta_lane_brackets_one_request_of_each_size_and_side_after_checked_warm_ups(
    lane: str, recorder: Recorder
) -> None:
    await deltas(LANES[lane], (3, 9))  # raises unless every warm-up's client got all its text deltas

    sides = [f"{side}-{size}" for size in (3, 9) for side in ("middleware", "bare")]
    assert recorder.calls == [call for name in sides for call in ("start", f"stop {name}")]


async def test_a_stream_missing_a_delta_fails_the_lane_rather_than_being_counted() -> None:
    route = LANES["responses"].route
    events = route.events(5)
    first = next(number for number, event in enumerate(events) if route.mark in event)
    short = StreamingAnswers(events[:first] + events[first + 1 :])  # the app leaves a text delta out
    with pytest.raises(RuntimeError, match="4 text deltas reached the client, not 5"):
        await once(short, short, route, 5)


async def test_the_bracket_answers_its_own_paths_and_leaves_the_rest_to_the_app(recorder: Recorder) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"the app"})

    transport = httpx.ASGITransport(app=Bracket(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.get("/callgrind/ready")).status_code == 204
        assert (await client.post("/callgrind/start")).status_code == 204
        assert (await client.post("/v1/messages")).text == "the app"
        assert (await client.post("/callgrind/stop?streams_wrapped-1")).status_code == 204

    assert recorder.calls == ["start", "stop streams_wrapped-1"]


@pytest.mark.parametrize("rounds", [0, 1], ids=["pass-through", "one tool round"])
async def test_the_streams_worker_serves_whole_streams_under_uvicorn(rounds: int) -> None:
    async with serving(callgrind_target.streams_wrapped) as url:
        command = {"url": url, "streams": 3, "tokens": 4, "delay": 0, "rounds": rounds, "opening": 16}
        answer = await streams_loadgen.run(command)

    assert answer["completed"] == 3 and not answer["errors"]
    assert answer["deltas"] == 3 * (4 + rounds)  # the tool round's text is a delta too


async def test_the_gateway_target_loops_its_3_rerun_requests_to_the_final_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serving(e2e_upstream.app) as upstream:
        monkeypatch.setenv("AGENTIC_UPSTREAM", f"{upstream}/v1")
        monkeypatch.setenv("AGENTIC_CONFIG", str(Path(callgrind.HERE) / "e2e_gateway.yaml"))
        async with serving(callgrind_target.gateway()) as url:
            # loadgen raises unless each request ends in the upstream's final text
            answer = await loadgen.run({"mode": "gateway", "url": url, "pages": 3, "concurrency": 1, "requests": 3})

    assert answer["rps"] > 0


def test_no_lane_named_is_every_lane_and_an_unknown_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert callgrind.arguments([]).lanes == [*LANES, "streams", "streams-responses", "stream-deltas", "gateway"]
    assert callgrind.arguments(["chat", "chat"]).lanes == ["chat", "chat"]
    with pytest.raises(SystemExit):
        callgrind.arguments(["gatway"])
    assert "no lane gatway" in capsys.readouterr().err


def test_stream_deltas_counts_two_lengths_in_one_worker_and_divides_their_difference_by_the_added_deltas(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each worker serves a warm-up of long streams, then the short and the long load counted apart: what a stream
    costs whatever its length cancels in the difference."""
    asked: list[tuple[str, dict[str, Any], dict[str, dict[str, Any]]]] = []
    per_stream = {"streams_bare": 1000.0, "streams_wrapped": 5000.0, "streams_floor": 1200.0}
    per_delta = {"streams_bare": 10.0, "streams_wrapped": 25.0, "streams_floor": 18.0}

    class Worker:
        def __init__(self, app: str, *_: Any) -> None:
            self.app, self.url = app, f"http://{app}"

        def measure_each(
            self, driver: Any, warmup: dict[str, Any], commands: dict[str, dict[str, Any]]
        ) -> dict[str, int]:
            asked.append((self.app, warmup, commands))
            app = self.app
            return {
                name: int(load["streams"] * (per_stream[app] + load["tokens"] * per_delta[app]))
                for name, load in commands.items()
            }

    class Driver:
        def __init__(self, *_: Any, **__: Any) -> None: ...

        def __enter__(self) -> Driver:
            return self

        def __exit__(self, *_: Any) -> None: ...

    monkeypatch.setattr(callgrind, "Worker", Worker)
    monkeypatch.setattr(callgrind, "Driver", Driver)
    size = callgrind.Size(long_streams=(4, 2, 12))

    figure, floor = callgrind.stream_deltas(callgrind.Checkout("here", tmp_path), tmp_path, tmp_path, size)

    assert (figure.bare, figure.ours) == (10.0, 25.0)
    assert (floor.lane, floor.bare, floor.ours) == ("stream-deltas, floor", 10.0, 18.0)
    assert [app for app, _, _ in asked] == ["streams_bare", "streams_wrapped", "streams_floor"]
    for app, warmup, commands in asked:
        assert warmup["tokens"] == 12 and warmup["streams"] == 4 and warmup["rounds"] == 0
        assert [(name, command["tokens"]) for name, command in commands.items()] == [(f"{app}-2", 2), (f"{app}-12", 12)]


def test_counts_reads_each_dump_by_the_name_its_bracket_gave(tmp_path: Path) -> None:
    head = "# callgrind format\nversion: 1\ndesc: Trigger: {}\n\npositions: line\nevents: Ir\n"
    (tmp_path / "cg.7.1").write_text(head.format("Client Request: bare-200") + "fl=(1) x.c\n0 5\n\ntotals: 1234\n")
    (tmp_path / "cg.7.2").write_text(head.format("Client Request: middleware-200") + "summary: 99\n")
    (tmp_path / "cg.7").write_text(head.format("Program termination") + "summary: 0\n")

    assert callgrind.counts(tmp_path) == {"bare-200": 1234, "middleware-200": 99}


def test_a_quick_lane_under_callgrind_counts_more_through_the_middleware_than_bare(tmp_path: Path) -> None:
    try:
        callgrind.build_helper(tmp_path)
    except callgrind.Unavailable as missing:
        pytest.skip(str(missing))

    results = callgrind.main(["--quick", "messages", "--keep", str(tmp_path / "dumps")])

    [(_, [figure])] = results.items()
    assert figure.bare is not None and 0 < figure.bare < figure.ours
