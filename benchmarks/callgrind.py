"""`python -m benchmarks.callgrind [LANE ...] [--ref REF] [--keep DIR] [--quick]`: instructions counted with callgrind.

Timed CPU below a few µs varies with the machine's load; instructions do not, so the cuts of the relay and the
gateway are judged by these counts (docs/performance.md). Each measurement runs in a process of its own under
`valgrind --tool=callgrind --collect-atstart=no` with `PYTHONHASHSEED=0`, and counts only between the client
requests of `callgrind.c` (compiled here with gcc against the system's valgrind headers) around the measured
requests (`callgrind_target.py`):

- per delta, in process (case 9's streams): `messages`, `responses`, `responses-later` (the round after a server
  tool's), `chat`, `chat-padded` (OpenAI's default obfuscated chunks), and `tool-input` per `input_json_delta` (a
  client tool's call, held to the round's end). A request of 200 and one of 1,200 deltas,
  through the middleware and bare, after three of each as warm-up: the difference of the two, divided by 1,000;
- per stream, one uvicorn worker (case 12's app, its load generator in a process of its own, not counted):
  `streams`, 200 streams of 20 text deltas after 200 as warm-up, bare, pass-through and with one tool round (whose
  bare figure is the bare pass-through's); `streams-responses`, the same on `/v1/responses` (OpenAI's events),
  bare and pass-through;
- per delta, one uvicorn worker: `stream-deltas`, 50 pass-through streams of 20 and then of 1,020 text deltas
  counted apart in one worker after 50 of 1,020 as warm-up, bare, through the middleware and through case 12's floor
  (`streams_app.ReadingFloor`): the difference of the two loads divided by the 50,000 deltas it adds (what a stream
  costs whatever its length cancels); `python -m benchmarks.stream_deltas` times the same loads;
- per request, the gateway under uvicorn (`agentic-gateway`'s app in front of case 6's upstream and hook):
  `gateway`, 3-rerun Messages requests one after another on one connection, 200 after 60 as warm-up.

`--ref REF` measures a git ref's package too, checked out into a temporary worktree, side by side: the same
benchmark code (this tree's `benchmarks`) drives both, so only `agentic_middleware` differs.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .callgrind_target import LANES
from .e2e import HOST, Driver, free_port, stop, tail, upstream

HERE = Path(__file__).parent
ROOT = HERE.parent
START_LIMIT = 300.0
"""Seconds a server under valgrind may take to answer: Python's start-up alone is about 10 s of them."""


@dataclass(frozen=True)
class Size:
    """How much each lane runs (module docstring); `QUICK` only proves the harness works."""

    deltas: tuple[int, int] = (200, 1200)
    streams: int = 200
    stream_deltas: int = 20
    long_streams: tuple[int, int, int] = (50, 20, 1020)
    warmup: int = 60
    requests: int = 200


FULL, QUICK = Size(), Size((20, 60), 10, 5, (5, 5, 25), 5, 10)


@dataclass(frozen=True)
class Checkout:
    """What a measured process imports: `path` goes on `PYTHONPATH` and is its working directory."""

    name: str
    path: Path


@dataclass(frozen=True)
class Figure:
    lane: str
    per: str
    bare: float | None
    ours: float


class Unavailable(Exception):
    """What this machine lacks for the harness to run."""


def build_helper(directory: Path) -> Path:
    """`callgrind.c` compiled into `directory`; `Unavailable` says what is missing."""
    if shutil.which("valgrind") is None:
        raise Unavailable("valgrind is not installed (Debian and Ubuntu: apt-get install valgrind)")
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise Unavailable("no C compiler (gcc or cc) to build the bracket, benchmarks/callgrind.c")
    library = directory / "libbracket.so"
    built = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(HERE / "callgrind.c")],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        if "callgrind.h" in built.stderr:
            raise Unavailable("valgrind's header valgrind/callgrind.h is not found (see `ls /usr/include/valgrind/`)")
        raise RuntimeError(f"{compiler} could not build benchmarks/callgrind.c: {built.stderr.strip()}")
    return library


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


@contextmanager
def checkouts(refs: Sequence[str], work: Path) -> Iterator[list[Checkout]]:
    """This tree, then each ref in a temporary worktree beside this tree's `benchmarks` (symbolic links)."""
    try:
        dirty = "+" if git("status", "--porcelain", "--untracked-files=no") else ""
        found = [Checkout(f"{git('rev-parse', '--short', 'HEAD')}{dirty} (this tree)", ROOT)]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: only --ref needs one
        found = [Checkout("this tree", ROOT)]
    trees: list[Path] = []
    try:
        for number, ref in enumerate(refs):
            tree, path = work / f"ref{number}", work / f"ref{number}-path"
            git("worktree", "add", "--detach", "--quiet", str(tree), ref)
            trees.append(tree)
            path.mkdir()
            (path / "agentic_middleware").symlink_to(tree / "agentic_middleware")
            (path / "benchmarks").symlink_to(HERE)
            short = git("rev-parse", "--short", ref)
            found.append(Checkout(short if ref.startswith(short) else f"{ref} ({short})", path))
        yield found
    finally:
        for tree in trees:
            git("worktree", "remove", "--force", str(tree))


def counts(directory: Path) -> dict[str, int]:
    """The instructions of each dump the bracket wrote in `directory`, by the name it was given."""
    found = {}
    for dump in directory.glob("cg.*"):
        text = dump.read_text(errors="replace")
        name = re.search(r"^desc: Trigger: Client Request: (.+)$", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if name and total:
            found[name.group(1).strip()] = int(total.group(1))
    return found


class Callgrind:
    """One process under callgrind, its dumps and its log in a directory of its own."""

    def __init__(self, argv: list[str], checkout: Checkout, out: Path, helper: Path, **env: str) -> None:
        self.out = out
        out.mkdir(parents=True)
        self.log = out / "valgrind.log"
        valgrind = ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}/cg.%p"]
        environ = {"PYTHONPATH": str(checkout.path), "PYTHONHASHSEED": "0", "BENCH_CALLGRIND_HELPER": str(helper)}
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [*valgrind, sys.executable, *argv],
                cwd=checkout.path,  # `python -m` puts the working directory first on the path
                env={**os.environ, **environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def finish(self) -> dict[str, int]:
        if self.process.wait() != 0:
            raise RuntimeError(f"valgrind exited with {self.process.returncode}: {tail(self.log)}")
        return counts(self.out)


class Worker(Callgrind):
    """A uvicorn worker under callgrind serving `callgrind_target:APP` on a port of its own."""

    def __init__(self, app: str, checkout: Checkout, out: Path, helper: Path, *options: str, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        argv = ["-m", "uvicorn", f"benchmarks.callgrind_target:{app}", "--host", HOST, "--port", str(self.port)]
        super().__init__([*argv, "--log-level", "warning", "--no-access-log", *options], checkout, out, helper, **env)
        started = time.perf_counter()
        while self.control("GET", "ready") != 204:
            if self.process.poll() is not None or time.perf_counter() - started > START_LIMIT:
                stop(self.process)
                raise RuntimeError(f"{app} did not start under valgrind: {tail(self.log)}")
            time.sleep(0.5)

    def control(self, method: str, command: str) -> int:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=START_LIMIT)
        try:
            connection.request(method, f"/callgrind/{command}")
            return connection.getresponse().status
        except OSError:
            return 0
        finally:
            connection.close()

    def measure(self, driver: Driver, warmup: dict[str, Any], command: dict[str, Any], name: str) -> int:
        """The instructions of `command`'s load, after `warmup`'s (not counted); the worker ends."""
        return self.measure_each(driver, warmup, {name: command})[name]

    def measure_each(
        self, driver: Driver, warmup: dict[str, Any], commands: dict[str, dict[str, Any]]
    ) -> dict[str, int]:
        """The instructions of each command's load, by its name, one after another after `warmup`'s (not counted);
        the worker ends."""
        try:
            driver.send(warmup)
            for name, command in commands.items():
                if self.control("POST", "start") != 204:
                    raise RuntimeError(f"the worker did not start counting: {tail(self.log)}")
                answer = driver.send(command)
                if answer.get("errors") or answer.get("completed") != answer.get("streams"):
                    raise RuntimeError(f"{name}: {answer}")
                if self.control("POST", f"stop?{name}") != 204:
                    raise RuntimeError(f"the worker did not dump its counts: {tail(self.log)}")
        finally:
            stop(self.process)
        found = counts(self.out)
        return {name: found[name] for name in commands}


def deltas(lane: str, checkout: Checkout, out: Path, helper: Path, size: Size) -> list[Figure]:
    small, large = size.deltas
    found = Callgrind(["-m", "benchmarks.callgrind_target", lane, str(small), str(large)], checkout, out, helper)
    count = found.finish()

    def per_delta(side: str) -> float:
        return (count[f"{side}-{large}"] - count[f"{side}-{small}"]) / (large - small)

    return [Figure(lane, "delta", per_delta("bare"), per_delta("middleware"))]


def streams(checkout: Checkout, out: Path, helper: Path, size: Size, route: str = "/v1/messages") -> list[Figure]:
    """Three workers in turn: bare, pass-through, one tool round (Messages only); a fresh one each, as case 12 runs
    them."""
    per: dict[tuple[str, int], float] = {}
    runs = (("streams_bare", 0), ("streams_wrapped", 0), ("streams_wrapped", 1))
    with Driver(sys.executable, out.parent, module="benchmarks.streams_loadgen") as driver:
        for app, rounds in runs if route == "/v1/messages" else runs[:2]:
            worker = Worker(app, checkout, out / f"{app}-{rounds}", helper)
            command = {"url": worker.url, "streams": size.streams, "tokens": size.stream_deltas, "delay": 0}
            command |= {"rounds": rounds, "opening": 16, "route": route}
            per[app, rounds] = worker.measure(driver, command, command, f"{app}-{rounds}") / size.streams
    bare = per["streams_bare", 0]
    if route != "/v1/messages":
        return [Figure(f"streams, pass-through, {route}", "stream", bare, per["streams_wrapped", 0])]
    return [
        Figure("streams, pass-through", "stream", bare, per["streams_wrapped", 0]),
        Figure("streams, one tool round", "stream", bare, per["streams_wrapped", 1]),
    ]


def stream_deltas(checkout: Checkout, out: Path, helper: Path, size: Size) -> list[Figure]:
    """Per delta under uvicorn: pass-through streams of two lengths through one worker each, bare, wrapped and the
    floor; the
    difference of the two loads, divided by the deltas it adds, leaves out what a stream costs whatever its length."""
    number, short, long = size.long_streams
    per: dict[str, float] = {}
    with Driver(sys.executable, out.parent, module="benchmarks.streams_loadgen") as driver:
        for app in ("streams_bare", "streams_wrapped", "streams_floor"):
            worker = Worker(app, checkout, out / app, helper)
            load = {"url": worker.url, "streams": number, "delay": 0, "rounds": 0, "opening": 16}
            commands = {f"{app}-{tokens}": {**load, "tokens": tokens} for tokens in (short, long)}
            found = worker.measure_each(driver, {**load, "tokens": long}, commands)
            per[app] = (found[f"{app}-{long}"] - found[f"{app}-{short}"]) / (number * (long - short))
    bare = per["streams_bare"]
    return [
        Figure("stream-deltas, pass-through", "delta", bare, per["streams_wrapped"]),
        Figure("stream-deltas, floor", "delta", bare, per["streams_floor"]),
    ]


def gateway(checkout: Checkout, out: Path, helper: Path, size: Size) -> list[Figure]:
    with ExitStack() as stack:
        model = stack.enter_context(upstream(sys.executable, out.parent))
        model.ready(START_LIMIT)
        config = {"AGENTIC_UPSTREAM": f"{model.url}/v1", "AGENTIC_CONFIG": str(HERE / "e2e_gateway.yaml")}
        worker = Worker("gateway", checkout, out, helper, "--factory", "--ws", "none", **config)
        driver = stack.enter_context(Driver(sys.executable, out.parent))
        command = {"mode": "gateway", "url": worker.url, "pages": 3, "concurrency": 1, "requests": size.requests}
        count = worker.measure(driver, {**command, "requests": size.warmup}, command, "gateway")
    return [Figure("gateway, 3-rerun request", "request", None, count / size.requests)]


def measure(lane: str, checkout: Checkout, out: Path, helper: Path, size: Size) -> list[Figure]:
    if lane == "streams":
        return streams(checkout, out, helper, size)
    if lane == "streams-responses":
        return streams(checkout, out, helper, size, "/v1/responses")
    if lane == "stream-deltas":
        return stream_deltas(checkout, out, helper, size)
    if lane == "gateway":
        return gateway(checkout, out, helper, size)
    return deltas(lane, checkout, out, helper, size)


def k(count: float | None) -> str:
    return "-" if count is None else f"{count / 1000:,.2f}k"


def added(figure: Figure) -> float:
    """What the middleware adds over the bare app; the gateway's figure is its whole."""
    return figure.ours if figure.bare is None else figure.ours - figure.bare


def table(results: dict[str, list[Figure]]) -> str:
    """One row a figure and checkout; on this tree's, the change of what is added against each other checkout."""
    names = list(results)
    lines = ["| lane | instructions per | checkout | bare app | middleware | added | change |", "|---" * 7 + "|"]
    for figures in zip(*results.values(), strict=True):
        first, *others = (added(figure) for figure in figures)
        changes = zip(names[1:], others, strict=True)
        change = ", ".join(f"{(first - other) / other:+.1%} vs {name}" for name, other in changes if other)
        for index, (name, figure) in enumerate(zip(names, figures, strict=True)):
            bare = None if figure.bare is None else added(figure)
            cells = [figure.lane, figure.per, name, k(figure.bare), k(figure.ours), k(bare), "" if index else change]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


LANE_NAMES = (*LANES, "streams", "streams-responses", "stream-deltas", "gateway")


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; no lane named is every lane (argparse's `choices` refuses an empty `*`: checked here)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.callgrind", description=__doc__.split("\n\n")[0])
    parser.add_argument("lanes", nargs="*", metavar="LANE", help=f"default all: {', '.join(LANE_NAMES)}")
    parser.add_argument("--ref", action="append", default=[], help="also measure this git ref's package (repeatable)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the dumps here, for callgrind_annotate")
    parser.add_argument("--quick", action="store_true", help="small counts: proves the harness works, no figures")
    args = parser.parse_args(argv)
    if unknown := [lane for lane in args.lanes if lane not in LANE_NAMES]:
        parser.error(f"no lane {', '.join(unknown)}: choose from {', '.join(LANE_NAMES)}")
    args.lanes = args.lanes or list(LANE_NAMES)
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, list[Figure]]:
    args = arguments(argv)
    size = QUICK if args.quick else FULL
    with ExitStack() as stack:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix="callgrind-", dir=args.keep))
            print(f"dumps in {work}", file=sys.stderr)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="callgrind-")))
        try:
            helper = build_helper(work)
        except Unavailable as missing:
            raise SystemExit(f"benchmarks.callgrind: skipped, {missing}") from None
        trees = stack.enter_context(checkouts(args.ref, work))
        results: dict[str, list[Figure]] = {tree.name: [] for tree in trees}
        for step, lane in enumerate(args.lanes):  # a lane named twice runs twice: its spread
            for number, tree in enumerate(trees):
                out = work / f"{step}-{lane}-{number}"
                results[tree.name] += measure(lane, tree, out, helper, size)
                print(f"{lane}, {tree.name}: done", file=sys.stderr, flush=True)
    print(table(results))
    return results


if __name__ == "__main__":
    main()
