"""Cases 5 and 6 of issue 8: the gateway example end to end under uvicorn, and side by side with LiteLLM.

Every server runs in a process of its own on 127.0.0.1, the load comes from one more (`loadgen.py`), and the
variants of a figure run round by round, interleaved, so that drift hits them alike. Each command is bounded in
requests and time, and every process is ended on the way out, whatever happened.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import secrets
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack, suppress
from functools import partial
from pathlib import Path
from typing import IO, Any

from .cases import Case, Config, Row
from .e2e_hooks import request
from .harness import median, median_ratio

HERE = Path(__file__).parent
ROOT = HERE.parent
HOST = "127.0.0.1"
MODEL = "scripted-model"
LITELLM_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
PROXY_START_LIMIT = 90.0
"""LiteLLM's proxy takes 9 to 10 s to start on this machine alone; once, in a full run, it had not answered after 30."""
COMMAND_LIMIT = 180.0

Result = dict[str, float]


def free_port() -> int:
    """A port nobody listens on now; the server that gets it binds it a moment later."""
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 5) -> str:
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:]) if path.exists() else ""


def process_tree(pid: int) -> list[int]:
    pids = [pid]
    for parent in pids:
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with suppress(OSError):
                pids += [int(child) for child in (task / "children").read_text().split()]
    return pids


def peak_rss_mb(pid: int) -> float:
    """The peak resident memory (VmHWM) of a process and its children, in MB."""
    total = 0
    for member in process_tree(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return total / 1024


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) a process and its children have used so far, in seconds."""
    ticks = 0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Server:
    """A server process on 127.0.0.1; `ready()` waits for its first answer and says how long it took to start."""

    def __init__(self, name: str, argv: list[str], port: int, tmp: Path, env: Mapping[str, str] | None = None) -> None:
        self.name, self.port, self.url = name, port, f"http://{HOST}:{port}"
        self.log = tmp / f"{name.replace(' ', '-')}.log"
        self.started = time.perf_counter()
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def ready(self, limit: float, headers: Mapping[str, str] | None = None) -> float:
        """Seconds from the spawn to the first 200 to a `POST /v1/messages` (no rerun)."""
        body = json.dumps(request(MODEL, 0))
        last = "no answer"
        while time.perf_counter() - self.started < limit:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {tail(self.log)}")
            connection = http.client.HTTPConnection(HOST, self.port, timeout=limit)
            try:
                connection.request(
                    "POST", "/v1/messages", body, {"content-type": "application/json", **(headers or {})}
                )
                answer = connection.getresponse()
                if answer.status == 200:
                    return time.perf_counter() - self.started
                last = f"{answer.status} {answer.read()[:200]!r}"
            except OSError as error:
                last = str(error)
            finally:
                connection.close()
            time.sleep(0.01)
        raise TimeoutError(f"{self.name} gave no 200 within {limit:g} s (last: {last}; log: {tail(self.log)})")

    def peak_rss_mb(self) -> float:
        return peak_rss_mb(self.process.pid)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        stop(self.process)


class Driver:
    """The load generator process: one JSON command in, one result out, each within `COMMAND_LIMIT`."""

    def __init__(
        self, python: str, tmp: Path, env: Mapping[str, str] | None = None, module: str = "benchmarks.loadgen"
    ) -> None:
        self.log = tmp / f"loadgen-{len(list(tmp.glob('loadgen-*')))}.log"
        with self.log.open("wb") as err:
            self.process = subprocess.Popen(
                [python, "-m", module],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )

    def run(self, watched: Mapping[str, Server] | None = None, **command: Any) -> Result:
        """One command's result; with `watched`, also each watched server's CPU per request, in µs."""
        before = {name: cpu_seconds(server.process.pid) for name, server in (watched or {}).items()}
        answer = self.send(command)
        done = command["requests"] + command.get("warmup", 0)
        for name, server in (watched or {}).items():
            answer[f"cpu {name}"] = 1e6 * (cpu_seconds(server.process.pid) - before[name]) / done
        return answer

    def send(self, command: Mapping[str, Any]) -> Result:
        stdin: IO[str] | None = self.process.stdin
        stdout: IO[str] | None = self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()
        if not select.select([stdout], [], [], COMMAND_LIMIT)[0]:
            raise TimeoutError(f"the load generator gave no result within {COMMAND_LIMIT:g} s for {command}")
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the load generator died: {tail(self.log)}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{command.get('mode', 'streams')} on {command['url']}: {answer['error']}")
        return answer

    def peak_rss_mb(self) -> float:
        return peak_rss_mb(self.process.pid)

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        stop(self.process)


def upstream(python: str, tmp: Path) -> Server:
    port = free_port()
    argv = [python, "-m", "uvicorn", "benchmarks.e2e_upstream:app", "--host", HOST, "--port", str(port)]
    return Server("upstream", [*argv, "--log-level", "warning", "--no-access-log"], port, tmp)


def gateway_command() -> list[str]:
    """The `agentic-gateway` console script as a user runs it (`pip install 'agentic-middleware[gateway]'`), from
    this interpreter's environment; `python -m agentic_middleware.gateway`, the same `main`, where it is not installed
    (an editable install made before the script existed)."""
    script = Path(sys.executable).with_name("agentic-gateway")
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentic_middleware.gateway"]


def gateway(upstream: Server, tmp: Path, workers: int = 1) -> Server:
    """The gateway as shipped, `agentic-gateway --upstream`, with the benchmark's hook."""
    port = free_port()
    argv = [*gateway_command(), "--upstream", f"{upstream.url}/v1", "--port", str(port)]
    argv += ["--config", str(HERE / "e2e_gateway.yaml"), "--workers", str(workers)]
    argv += ["--no-access-log"]  # no log, as the upstream runs and a loaded gateway would
    return Server(f"our gateway {workers}", argv, port, tmp, {})


def litellm_proxy(python: str, upstream: Server, tmp: Path, key: str) -> Server:
    """`litellm --config`, the same hook registered by dotted path to an instance, the same upstream behind it."""
    config = {
        "model_list": [
            {"model_name": MODEL, "litellm_params": {"model": f"anthropic/{MODEL}", "api_base": upstream.url}}
        ],
        "litellm_settings": {"callbacks": ["benchmarks.litellm_hook.lookup_hook"]},
        "general_settings": {"master_key": key},
    }
    path = tmp / "litellm-config.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    argv = [str(Path(python).parent / "litellm"), "--config", str(path), "--host", HOST, "--port", str(port)]
    # Unbuffered, so that a proxy that does not start leaves in its log how far it got.
    env = {**LITELLM_ENV, "ANTHROPIC_API_KEY": "bench", "PYTHONUNBUFFERED": "1"}
    return Server("LiteLLM proxy", argv, port, tmp, env)


def rounds(variants: Mapping[str, Callable[[], Result]], count: int) -> dict[str, list[Result]]:
    """Each variant once per round, the order flipped every other round, as `harness.paired` does."""
    names = list(variants)
    results: dict[str, list[Result]] = {name: [] for name in names}
    for round_ in range(count):
        for name in names if round_ % 2 == 0 else reversed(names):
            results[name].append(variants[name]())
    return results


def field(results: list[Result], key: str) -> list[float]:
    return [result[key] for result in results]


def served(results: list[Result]) -> str:
    return (
        f"{median(field(results, 'rps')):.0f} req/s, p50 {median(field(results, 'p50')):.2f} ms, "
        f"p99 {median(field(results, 'p99')):.2f} ms"
    )


def cpu(results: list[Result], watched: Mapping[str, str]) -> str:
    """Each process's median CPU per request: the load generator's own, then the watched servers'."""
    shares = {"load generator": median(field(results, "cpu"))}
    shares |= {label: median(field(results, f"cpu {name}")) for name, label in watched.items()}
    return ", ".join(f"{label} {value:.0f}" for label, value in shares.items())


CLIENTS = {
    "lean": "the lean client",
    "pyreqwest": "pyreqwest",
    "aiohttp": "aiohttp",
    "httpx-aiohttp": "httpx + httpx-aiohttp",
    "httpx": "httpx",
}
CHOSEN = "aiohttp"
"""The upstream client of `agentic_middleware/gateway/upstream.py`; the row below says if it is still the cheapest
of those that run in the event loop's own thread. pyreqwest's figure is shown beside them, not judged: its POSTs
cost less alone, on a thread of its own, but a gateway's requests no less (docs/performance.md, "The gateway end
to end", item 8)."""
APART = ("lean", "pyreqwest")


async def end_to_end(config: Config) -> list[Row]:
    """Case 5: 3-rerun requests through the gateway example against a client looping by itself on the upstream,
    and the CPU an upstream call costs a gateway with each HTTP client library it could forward with."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as name, ExitStack() as stack:
        tmp = Path(name)
        model = stack.enter_context(upstream(sys.executable, tmp))
        ours = stack.enter_context(gateway(model, tmp))
        driver = stack.enter_context(Driver(sys.executable, tmp))
        model.ready(10)
        ours.ready(20)
        posts = rounds(
            {
                client: partial(
                    driver.run,
                    mode="post",
                    client=client,
                    url=model.url,
                    pages=0,
                    concurrency=16,
                    requests=160 if config.quick else 2000,
                    warmup=16 if config.quick else 200,
                )
                for client in CLIENTS
            },
            1 if config.quick else 5,
        )
        spent = {client: field(results, "cpu") for client, results in posts.items()}
        cheapest = min((c for c in CLIENTS if c not in (*APART, CHOSEN)), key=lambda c: median(spent[c]))
        detail = ", ".join(f"{label} {median(spent[client]):.0f} µs" for client, label in CLIENTS.items())
        rows.append(
            Row(
                5,
                "upstream HTTP client, plain POSTs at concurrency 16",
                f"client CPU per POST, {CHOSEN} / {CLIENTS[cheapest]}",
                median_ratio(spent[CHOSEN], spent[cheapest]),
                1,
                f"client process CPU per POST: {detail}",
            )
        )
        for concurrency in (1, 16, 64):
            load: dict[str, Any] = {
                "pages": 3,
                "concurrency": concurrency,
                "requests": concurrency if config.quick else {1: 150, 16: 480, 64: 960}[concurrency],
                "warmup": 0 if config.quick else 2 * concurrency,
            }
            results = rounds(
                {
                    "gateway": partial(driver.run, mode="gateway", url=ours.url, **load),
                    "client loop": partial(driver.run, mode="loop", url=model.url, **load),
                },
                1 if config.quick else 5,
            )
            figure = median_ratio(field(results["gateway"], "rps"), field(results["client loop"], "rps"))
            detail = (
                f"gateway: {served(results['gateway'])}; client looping by itself: {served(results['client loop'])}"
            )
            name = f"end to end, 3-rerun requests, concurrency {concurrency}"
            rows.append(Row(5, name, "req/s gateway / client loop", figure, 0.5, detail, at_least=True))
    return rows


def litellm_python(config: Config) -> str | None:
    """The interpreter for the LiteLLM side: the one given, else the one running the benchmark if it has LiteLLM.

    The one given comes first: the test extra installs LiteLLM's SDK without its proxy's dependencies, so the
    benchmark's own interpreter may import `litellm` yet be unable to start `litellm --config`."""
    if config.litellm_python:
        return config.litellm_python
    return sys.executable if importlib.util.find_spec("litellm") is not None else None


def skipped(measure: str, detail: str = "") -> Row:
    return Row(6, "LiteLLM side by side", measure, 0.0, 0.0, detail, skipped=True)


async def litellm_side_by_side(config: Config) -> list[Row]:
    """Case 6: the same hook in our gateway, in LiteLLM's SDK and in LiteLLM's proxy, over the same upstream."""
    python = litellm_python(config)
    if python is None:
        return [skipped("skipped: litellm not installed", "pass --litellm-python or set LITELLM_PYTHON")]
    key = f"sk-bench-{secrets.token_hex(16)}"
    auth = {"authorization": f"Bearer {key}"}
    with tempfile.TemporaryDirectory(prefix="bench-litellm-") as name, ExitStack() as stack:
        tmp = Path(name)
        model = stack.enter_context(upstream(sys.executable, tmp))
        model.ready(10)
        ours = stack.enter_context(gateway(model, tmp))
        our_start = ours.ready(20)
        our_start_cpu = cpu_seconds(ours.process.pid)
        ours_2 = stack.enter_context(gateway(model, tmp, workers=2))
        ours_2.ready(20)
        targets: dict[str, dict[str, Any]] = {
            "client loop": {"mode": "loop", "url": model.url, "watched": {"upstream": model}},
            "ours": {"mode": "gateway", "url": ours.url, "watched": {"gateway": ours, "upstream": model}},
            "LiteLLM SDK": {
                "mode": "litellm",
                "url": model.url,
                "model": f"anthropic/{MODEL}",
                "watched": {"upstream": model},
            },
        }
        two_workers = {"mode": "gateway", "url": ours_2.url, "watched": {"gateway": ours_2, "upstream": model}}
        proxy_start, why = 0.0, "skipped in quick mode (it takes seconds to start)"
        proxy: Server | None = None
        if not config.quick:
            proxy = stack.enter_context(litellm_proxy(python, model, tmp, key))
            try:
                proxy_start = proxy.ready(PROXY_START_LIMIT, auth)
                watched = {"proxy": proxy, "upstream": model}
                targets["LiteLLM proxy"] = {"mode": "gateway", "url": proxy.url, "headers": auth, "watched": watched}
            except (RuntimeError, TimeoutError) as error:
                why = f"did not start offline within {PROXY_START_LIMIT:g} s: {error}"
                stop(proxy.process)
        driver = stack.enter_context(Driver(python, tmp, LITELLM_ENV))

        latency = rounds(
            {
                f"{target} {pages}": partial(
                    driver.run, **spec, pages=pages, concurrency=1, requests=3 if config.quick else 40, warmup=3
                )
                for target, spec in targets.items()
                for pages in (0, 3)
            },
            1 if config.quick else 5,
        )
        requests = 16 if config.quick else 384
        throughput = rounds(
            {
                target: partial(driver.run, **spec, pages=3, concurrency=16, requests=requests, warmup=16)
                for target, spec in {**targets, "ours, 2 workers": two_workers}.items()
            },
            1 if config.quick else 3,
        )
        rss = {"ours": ours.peak_rss_mb(), "LiteLLM SDK": driver.peak_rss_mb()}
        if "LiteLLM proxy" in targets and proxy is not None:
            rss["LiteLLM proxy"] = proxy.peak_rss_mb()

    def p50(target: str, pages: int) -> list[float]:
        return field(latency[f"{target} {pages}"], "p50")

    def per_rerun(target: str) -> list[float]:
        """What each rerun adds over a rerun of the client looping by itself, round by round, in ms."""
        slope = [(b - a) / 3 for a, b in zip(p50(target, 0), p50(target, 3), strict=True)]
        floor = [(b - a) / 3 for a, b in zip(p50("client loop", 0), p50("client loop", 3), strict=True)]
        return [s - f for s, f in zip(slope, floor, strict=True)]

    def latencies(target: str) -> str:
        return f"{target} {median(p50(target, 0)):.2f}/{median(p50(target, 3)):.2f} ms"

    ours_added = median(per_rerun("ours"))
    shown = [latencies(target) for target in targets]
    detail = f"p50 at 0/3 reruns: {', '.join(shown)}; added per rerun: ours {ours_added * 1000:.0f} µs"
    rows = []
    for theirs in ("LiteLLM SDK", "LiteLLM proxy"):
        measure = f"added latency per rerun, {theirs} / ours"
        if theirs not in targets:
            rows.append(skipped(f"{measure}: proxy {why}"))
            continue
        added = median(per_rerun(theirs))
        figure = added / ours_added if ours_added > 0 else float("inf")
        rows.append(Row(6, "LiteLLM side by side", measure, figure, 10, f"{detail}, {theirs} {added:.2f} ms", True))

    rps = {target: field(results, "rps") for target, results in throughput.items()}
    rates = ", ".join(f"{target} {median(values):.0f}" for target, values in rps.items())
    spent = "; ".join(
        f"{target}: {cpu(results, {name: name for name in spec.get('watched', {})})}"
        for target, spec in {**targets, "ours, 2 workers": two_workers}.items()
        for results in [throughput[target]]
    )
    rates = f"req/s: {rates}"
    name = "3-rerun req/s at concurrency 16"
    if "LiteLLM proxy" in rps:
        figure = median_ratio(rps["ours"], rps["LiteLLM proxy"])
        rows.append(Row(6, name, "ours / LiteLLM proxy", figure, 3, rates, at_least=True))
    else:
        rows.append(skipped(f"{name}, ours / LiteLLM proxy: proxy {why}"))
    figure = median_ratio(rps["ours"], rps["client loop"])
    rows.append(Row(6, name, "ours / no gateway (client loop)", figure, 0.5, rates, at_least=True))
    figure = median_ratio(rps["ours, 2 workers"], rps["client loop"])
    detail = f"{rates}; CPU per request (µs) of each process, the same lean client driving all: {spent}"
    rows.append(Row(6, name, "ours with 2 workers / no gateway (client loop)", figure, 0.5, detail, at_least=True))

    others = ", ".join(f"{target} {value:.0f} MB" for target, value in rss.items() if target != "ours")
    note = f"{others} (the SDK's is the load generator's process, LiteLLM imported)"
    rows.append(Row(6, "peak RSS of our gateway process", "VmHWM", rss["ours"], 100, note, unit="MB"))
    theirs_start = f"LiteLLM proxy {proxy_start:.1f} s" if proxy_start else f"LiteLLM proxy {why}"
    started = Path(gateway_command()[-1]).name
    detail = f"`{started}` spawn to first 200, {our_start_cpu:.2f} s of it on a CPU; {theirs_start}"
    rows.append(Row(6, "start-up of our gateway", "seconds", our_start, 1, detail, unit="s"))
    return rows


CASES: dict[int, Case] = {5: end_to_end, 6: litellm_side_by_side}
