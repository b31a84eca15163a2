"""What the client tests share: a scripted model that speaks Messages and Responses as the providers stream them,
the example gateway in front of it with a server tool, and the coding-agent CLIs run as subprocesses, each run
bounded in time and killed at its bound.

The CLIs come from npm into `tests/clients/node_modules` (`npm ci --prefix tests/clients`, which `.ci/run` does
where npm exists); without them their tests are skipped with the reason. Each run gets a HOME (and CODEX_HOME) of
its own in a temporary folder, a dummy key, and no traffic but to the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from starlette.responses import JSONResponse, Response
from streams import event_stream

from agentic_middleware import ServerTools, server_tool, sse
from agentic_middleware.config import Settings
from agentic_middleware.gateway import Upstream, create_app, serving
from agentic_middleware.testing import RecordedRequest, ScriptedModel, function_call, message, response, tool_use

HERE = Path(__file__).parent
BIN = HERE / "node_modules" / ".bin"
RUN_BOUND = 60.0  # seconds one client run may take before it is killed
SERVER_TOOL = "lookup"
SERVER_RESULT = "the value of k is 42"
CLIENT_OUTPUT = "client-side-7"  # what the client's own tool (its shell) prints
FIRST_TEXT = "Let me look that up."
FINAL_TEXT = "The value is 42."


def cli(name: str) -> Path:
    """The CLI installed from tests/clients/package.json, or a skip saying why it is not there."""
    path = BIN / name
    if not path.exists():
        reason = "npm is not installed" if shutil.which("npm") is None else "run `npm ci --prefix tests/clients`"
        pytest.skip(f"{name} is not installed in tests/clients/node_modules: {reason}")
    return path


@dataclass
class Lookup:
    """The server tool: records each run, then waits `sleep` seconds, or until the test `release`s it (at most
    `patience` seconds), so a test can hold a round open until the client shows what it got."""

    sleep: float = 0.0
    gated: bool = False
    patience: float = 20.0
    runs: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    released_by_client: bool | None = None  # for a gated tool: released by the test (True) or by its patience
    ran_again: asyncio.Event = field(default_factory=asyncio.Event)  # set at a second run: a client's retry

    def hook(self) -> ServerTools:
        @server_tool
        async def lookup(key: str) -> str:
            """Looks a key up in the server's table."""
            self.runs.append(key)
            if len(self.runs) > 1:
                self.ran_again.set()
            if self.gated:
                try:
                    await asyncio.wait_for(self.release.wait(), self.patience)
                    self.released_by_client = True
                except TimeoutError:
                    self.released_by_client = False
            await asyncio.sleep(self.sleep)
            return SERVER_RESULT

        return ServerTools([lookup], timeout=120)


@dataclass
class Brain:
    """Decides each answer from the conversation, as a model would, for Messages and Responses alike.

    A turn begins at the last user message that is no tool result. Its first round says FIRST_TEXT and calls the
    server tool (and, when `mixed`, the client's own tool `client_tool` with `client_input` in the same answer);
    with the server's result in the turn, it calls the client's tool if `mixed`, else says FINAL_TEXT; with the
    client's result, it says FINAL_TEXT and whether the client's tool printed CLIENT_OUTPUT. `overloaded` answers
    that many of the requests carrying the server's result 529 first. A request that does not declare the server
    tool (a side request: titles, quotas) gets a short text."""

    client_tool: str = ""
    client_input: dict[str, Any] = field(default_factory=dict)
    mixed: bool = False
    overloaded: int = 0
    rounds: list[str] = field(default_factory=list)

    def __call__(self, request: RecordedRequest) -> Response | dict[str, Any]:
        body = request.body
        messages = request.path.endswith("/messages")
        if request.path.endswith("/count_tokens"):
            return {"input_tokens": 10}
        declared = {tool.get("name") for tool in body.get("tools") or []}
        turn = _turn_results(body, messages)
        if SERVER_TOOL not in declared:
            step, answer = "side", ["ok"]
        elif self.client_tool in turn:
            printed = turn[self.client_tool]  # its output, in the client's framing (headers, reminders)
            step, answer = (
                "final",
                [f"{FINAL_TEXT} The command printed {CLIENT_OUTPUT if CLIENT_OUTPUT in printed else '?'}."],
            )
        elif SERVER_TOOL in turn:
            if self.overloaded:
                self.overloaded -= 1
                self.rounds.append("overloaded")
                return overloaded(messages)
            if self.mixed:
                step, answer = "client", [(self.client_tool, self.client_input)]
            else:
                step, answer = "final", [FINAL_TEXT]
        else:
            calls: list[Any] = [(SERVER_TOOL, {"key": "k"})]
            if self.mixed:
                calls.append((self.client_tool, self.client_input))
            step, answer = "first", [FIRST_TEXT, *calls]
        self.rounds.append(step)
        return _answer(answer, messages, bool(body.get("stream")))


def overloaded(messages: bool) -> Response:
    """Anthropic's 529, or the same overload in OpenAI's error shape, retryable after 1 ms."""
    error = {"type": "overloaded_error", "message": "Overloaded"}
    payload = {"type": "error", "error": error} if messages else {"error": {**error, "code": "overloaded"}}
    return JSONResponse(payload, 529, headers={"retry-after-ms": "1"})


def _answer(parts: list[Any], messages: bool, stream: bool) -> Response | dict[str, Any]:
    if messages:
        body = message(*(part if isinstance(part, str) else tool_use(*part) for part in parts))
        return event_stream(list(sse.messages_events(body))) if stream else body
    reply = response(*(part if isinstance(part, str) else function_call(*part) for part in parts))
    return event_stream(list(sse.responses_events(reply))) if stream else reply


def _turn_results(body: dict[str, Any], messages: bool) -> dict[str, str]:
    """The tool results of the current turn, by tool name."""
    if messages:
        history = body.get("messages") or []
        names: dict[str, str] = {}
        results: dict[str, str] = {}
        for entry in history:
            content = entry.get("content")
            blocks = content if isinstance(content, list) else []
            if entry.get("role") == "user" and not any(block.get("type") == "tool_result" for block in blocks):
                results = {}
            for block in blocks:
                if block.get("type") == "tool_use":
                    names[block["id"]] = block["name"]
                elif block.get("type") == "tool_result":
                    results[names.get(block["tool_use_id"], "?")] = _text(block.get("content"))
        return results
    items = body.get("input")
    names, results = {}, {}
    for item in items if isinstance(items, list) else []:
        if item.get("type", "message") == "message" and item.get("role") == "user":
            results = {}
        elif item.get("type") == "function_call":
            names[item["call_id"]] = item["name"]
        elif item.get("type") == "function_call_output":
            results[names.get(item["call_id"], "?")] = _text(item.get("output"))
    return results


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


@contextlib.asynccontextmanager
async def gateway(
    brain: Brain, lookup: Lookup, *, keepalive: float = 1.0, rerun_retries: int = 2
) -> AsyncIterator[tuple[str, ScriptedModel]]:
    """The example gateway under uvicorn with `lookup` served, in front of `brain` under uvicorn; yields the
    gateway's base URL (no `/v1`) and the scripted model (its `requests`)."""
    model = ScriptedModel(default=brain)
    settings = Settings(hooks=(lookup.hook(),), stream_keepalive=keepalive, rerun_retries=rerun_retries)
    async with serving(model) as upstream, serving(create_app(settings, Upstream(upstream))) as url:
        yield url, model


@dataclass
class Run:
    """One client run: its exit status (None: killed at RUN_BOUND), its JSON lines and its stderr."""

    status: int | None
    events: list[dict[str, Any]]
    stderr: str

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event.get("type") == kind]


async def run(
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    on_event: Callable[[dict[str, Any]], None] = lambda event: None,
    stop: asyncio.Event | None = None,
) -> Run:
    """Run a client until it exits, RUN_BOUND passes or `stop` is set (then it is killed, and its status is None),
    handing each JSON line of its stdout to `on_event` as it comes."""
    process = await asyncio.create_subprocess_exec(
        *command,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None
    events: list[dict[str, Any]] = []
    errors = asyncio.create_task(process.stderr.read())

    async def read() -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    events.append(event)
                    on_event(event)
        await process.wait()

    reading = asyncio.create_task(read())
    stopping = asyncio.create_task((stop or asyncio.Event()).wait())
    try:
        await asyncio.wait([reading, stopping], timeout=RUN_BOUND, return_when=asyncio.FIRST_COMPLETED)
        status = process.returncode if reading.done() else None
    finally:
        for task in (reading, stopping):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            await process.wait()
    return Run(status, events, (await errors).decode(errors="replace"))


def base_env(home: Path) -> dict[str, str]:
    """An environment with nothing of the user's: PATH, a HOME of the run's own, no proxy."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", "NO_COLOR": "1"}
