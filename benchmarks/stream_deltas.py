"""Case 12's timed CPU per delta under uvicorn: the difference of two loads, so that what a stream costs cancels.

A difference of two workers' CPU per event (`many_streams.per_event`) carries each stream's fixed cost spread over
its events and the two processes' own drift: about 2 µs an event from run to run, the size of the target. Here each
variant's worker serves the same N streams of a few deltas, of many, and of a few again (a fresh worker per variant
and round); its CPU (rusage, user and system) for the long load less the short ones' mean, over the deltas the long
load adds, is its CPU per delta, whatever a stream costs once. What a stream costs once is what the short loads'
CPU leaves after their deltas' share, per stream. The variants run side by side, each with a load generator of its
own, so that the machine's other work at each moment (it is shared) weighs on all of them alike. As callgrind's
`stream-deltas` lane counts instructions, this times them, so that the two can be set side by side
(`python -m benchmarks.stream_deltas`, its load the lane's or any other: `--help`)."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .e2e import HOST, Driver, Server, free_port
from .harness import median

VARIANTS = ("bare", "pass-through", "floor")
APPS = {"bare": "bare", "pass-through": "wrapped", "floor": "floor"}
"""`streams_app`'s app for each variant."""


def probe(port: int, method: str = "GET") -> dict[str, float]:
    connection = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        connection.request(method, "/probe")
        answer = connection.getresponse()
        figures: dict[str, float] = json.loads(answer.read())
        return figures
    finally:
        connection.close()


def worker(app: str, variant: str, tmp: Path) -> Server:
    """One uvicorn worker serving `streams_app`'s `app` (the variant's), its accept queue long enough for ten
    thousand connects."""
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", f"benchmarks.streams_app:{app}", "--host", HOST]
    argv += ["--port", str(port), "--backlog", "16384", "--log-level", "warning", "--no-access-log"]
    server = Server(f"streams {variant}", argv, port, tmp)
    deadline = time.perf_counter() + 30
    while True:
        try:
            probe(port)
            return server
        except OSError:
            if server.process.poll() is not None or time.perf_counter() > deadline:
                server.__exit__()
                raise RuntimeError(f"the {variant} worker did not start: {server.log.read_text()[-500:]}") from None
            time.sleep(0.05)


@dataclass(frozen=True)
class Lengths:
    """`streams` streams of `short` and of `long` text deltas, `delay` seconds apart."""

    streams: int
    short: int
    long: int
    delay: float


def loadavg() -> str:
    """The machine's load average over 1, 5 and 15 minutes: other work on a shared machine skews timed CPU."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def mean(first: Mapping[str, float], second: Mapping[str, float]) -> dict[str, float]:
    """Two loads' figures, key by key, halved: one load between them."""
    return {key: (first[key] + second[key]) / 2 for key in first}


@dataclass(frozen=True)
class Pair:
    """One worker's CPU (seconds, all and user only) and deltas received for the short load and the long one."""

    streams: int
    short: Mapping[str, float]
    long: Mapping[str, float]

    @property
    def added_deltas(self) -> float:
        return self.long["deltas"] - self.short["deltas"]

    def per_delta(self, key: str = "cpu") -> float:
        """µs of the worker's CPU per delta the long load adds: the fixed cost of its streams cancels."""
        return 1e6 * (self.long[key] - self.short[key]) / max(self.added_deltas, 1)

    def per_stream(self, key: str = "cpu") -> float:
        """µs of the worker's CPU per stream beyond its deltas': the short load's CPU less its deltas' share."""
        return (1e6 * self.short[key] - self.per_delta(key) * self.short["deltas"]) / self.streams


def measure(drivers: Mapping[str, Driver], lengths: Lengths, tmp: Path) -> dict[str, Pair]:
    """The short load, the long one and the short one again in one fresh worker of each variant, the variants side by
    side (each its own load generator, all sent at once), so that the machine's load at each moment weighs on all of
    them alike; each load between two of each worker's probes. The two short loads' mean is the pair's short one: a
    short load after the long one costs the middleware more than one before it (by about 200 µs a stream, seen
    when the order was flipped from round to round), and a drift of the machine during the round cancels too."""
    command = {"delay": lengths.delay, "rounds": 0, "route": "/v1/messages", "streams": lengths.streams}
    found: dict[str, list[dict[str, float]]] = {name: [] for name in drivers}
    with ExitStack() as stack, ThreadPoolExecutor(len(drivers)) as pool:
        servers = {name: stack.enter_context(worker(APPS[name], name, tmp)) for name in drivers}

        def send(name: str, tokens: int, **more: Any) -> dict[str, Any]:
            return drivers[name].send({**command, "url": servers[name].url, "tokens": tokens, **more})

        list(pool.map(lambda name: send(name, 5, streams=20, delay=0.001), drivers))  # warm
        for tokens in (lengths.short, lengths.long, lengths.short):
            before = {name: probe(server.port, "POST") for name, server in servers.items()}
            answers = dict(zip(drivers, pool.map(send, drivers, [tokens] * len(drivers)), strict=True))
            after = {name: probe(server.port) for name, server in servers.items()}
            for name, clients in answers.items():
                if clients.get("errors") or clients.get("completed") != lengths.streams:
                    raise RuntimeError(f"{name}, {tokens} deltas a stream: {clients}")
                found[name].append(
                    {
                        "cpu": after[name]["cpu"] - before[name]["cpu"],
                        "user": after[name]["user"] - before[name]["user"],
                        "deltas": clients["deltas"],
                        "events": clients["events"],
                    }
                )
    return {name: Pair(lengths.streams, mean(first, last), long) for name, (first, long, last) in found.items()}


@dataclass(frozen=True)
class Rounds:
    """Each variant's pairs, round by round, and the load average before each round."""

    lengths: Lengths
    pairs: Mapping[str, list[Pair]]
    loads: list[str]

    def per_delta(self, variant: str, key: str = "cpu") -> list[float]:
        return [pair.per_delta(key) for pair in self.pairs[variant]]

    def added(self, variant: str, key: str = "cpu", per: str = "delta") -> list[float]:
        """Round by round, what the variant adds over the bare worker per delta (or per stream), in µs."""
        figure = Pair.per_delta if per == "delta" else Pair.per_stream
        return [
            figure(pair, key) - figure(bare, key)
            for pair, bare in zip(self.pairs[variant], self.pairs["bare"], strict=True)
        ]


def rounds(lengths: Lengths, count: int, tmp: Path, variants: Sequence[str] = VARIANTS) -> Rounds:
    """`count` rounds, the variants side by side in each (`measure`), the load average noted before each."""
    pairs: dict[str, list[Pair]] = {name: [] for name in variants}
    loads = []
    with ExitStack() as stack:
        module = "benchmarks.streams_loadgen"
        drivers = {name: stack.enter_context(Driver(sys.executable, tmp, module=module)) for name in variants}
        for _ in range(count):
            loads.append(loadavg())
            for name, pair in measure(drivers, lengths, tmp).items():
                pairs[name].append(pair)
    return Rounds(lengths, pairs, loads)


def spread(values: Sequence[float], unit: str) -> str:
    """The median, and the range when there are several rounds."""
    text = f"{median(values):.2f}"
    if len(values) > 1:
        text += f" ({min(values):.2f} to {max(values):.2f})"
    return f"{text} {unit}"


def describe(found: Rounds) -> str:
    """The detail of the target row: each variant's figures, the floor's, the fixed cost, the load averages."""
    lengths = found.lengths
    parts = [
        f"difference of {lengths.streams} streams of {lengths.long} and of {lengths.short} deltas in each worker "
        f"({lengths.delay:g} s apart), over the deltas added, {len(found.loads)} rounds, the variants side by side: "
        f"worker CPU per delta pass-through {spread(found.per_delta('pass-through'), 'µs')}, bare "
        f"{spread(found.per_delta('bare'), 'µs')}; added, user CPU only "
        f"{spread(found.added('pass-through', 'user'), 'µs')}"
    ]
    if "floor" in found.pairs:
        parts.append(f"the floor adds {spread(found.added('floor'), 'µs')}")
    parts.append(f"a stream's fixed cost added {spread(found.added('pass-through', per='stream'), 'µs')}")
    parts.append(f"load average before each round {', '.join(found.loads)}")
    return "; ".join(parts)


def summary(found: Rounds) -> dict[str, Any]:
    """The figures as JSON, for a run of this module alone."""
    figures: dict[str, Any] = {"lengths": found.lengths.__dict__, "load averages": found.loads}
    for variant in found.pairs:
        figures[variant] = {
            "per delta µs": found.per_delta(variant),
            "per delta user µs": found.per_delta(variant, "user"),
            "per stream µs": [pair.per_stream() for pair in found.pairs[variant]],
        }
        if variant != "bare":
            figures[variant]["added per delta µs"] = found.added(variant)
            figures[variant]["added per delta user µs"] = found.added(variant, "user")
            figures[variant]["added per stream µs"] = found.added(variant, per="stream")
    return figures


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stream_deltas", description=__doc__)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--short", type=int, default=20)
    parser.add_argument("--long", type=int, default=1020)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between deltas (callgrind's lane: 0)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--hashseed", help="PYTHONHASHSEED for the workers (callgrind's: 0)")
    options = parser.parse_args(argv)
    if options.hashseed is not None:
        os.environ["PYTHONHASHSEED"] = options.hashseed
    lengths = Lengths(options.streams, options.short, options.long, options.delay)
    with tempfile.TemporaryDirectory(prefix="bench-deltas-") as name:
        found = rounds(lengths, options.rounds, Path(name), options.variants.split(","))
    figures = summary(found)
    print(json.dumps(figures, indent=1, ensure_ascii=False))
    print(describe(found))
    return figures


if __name__ == "__main__":
    main()
