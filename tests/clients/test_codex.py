"""Codex CLI (`codex exec --json`, Responses wire API) through the example gateway, whose `ServerTools` serves
`lookup`, in front of a scripted Responses model (issue 23, item 6). Each run is bounded by harness.RUN_BOUND and
killed at it. The model provider is set in a config.toml of the run's own CODEX_HOME: its `stream_idle_timeout_ms`
is the idle limit Codex puts on a stream, reset by events only (SSE comments do not count)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import (
    CLIENT_OUTPUT,
    FINAL_TEXT,
    FIRST_TEXT,
    SERVER_RESULT,
    SERVER_TOOL,
    Brain,
    Lookup,
    Run,
    base_env,
    cli,
    gateway,
    run,
)

from agentic_middleware.surfaces.responses_relay import ResponsesRelay

IDLE_MS = 2000  # Codex's stream idle timeout in the long-silence tests
SILENCE = 5.0  # seconds the tool runs there


class Codex:
    """A CODEX_HOME (config.toml naming the gateway as the model provider) and a work folder, for one or more runs."""

    def __init__(self, root: Path, url: str, idle_ms: int = 20_000) -> None:
        self.home = root / "codex-home"
        self.work = root / "work"
        self.home.mkdir()
        self.work.mkdir()
        (self.home / "config.toml").write_text(
            f"""model = "scripted"
model_provider = "gateway"

[model_providers.gateway]
name = "gateway"
base_url = "{url}/v1"
env_key = "GATEWAY_API_KEY"
wire_api = "responses"
request_max_retries = 1
stream_max_retries = 1
stream_idle_timeout_ms = {idle_ms}
"""
        )

    async def exec(self, prompt: str, *args: str, **options: Any) -> Run:
        command = [str(cli("codex")), "exec", "--skip-git-repo-check", "--json", "--sandbox", "danger-full-access"]
        command += [*args, prompt]
        env = {**base_env(self.home), "CODEX_HOME": str(self.home), "GATEWAY_API_KEY": "sk-test"}
        return await run(command, env, self.work, **options)


def messages(outcome: Run) -> list[str]:
    return [
        event["item"]["text"]
        for event in outcome.of_type("item.completed")
        if event["item"].get("type") == "agent_message"
    ]


def succeeded(outcome: Run) -> bool:
    return outcome.status == 0 and bool(outcome.of_type("turn.completed")) and not outcome.of_type("turn.failed")


@pytest.fixture
def root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


async def test_codex_gets_the_text_live_and_the_answer_without_the_server_tool(root: Path) -> None:
    lookup = Lookup(gated=True)
    brain = Brain()

    def watch(event: dict[str, Any]) -> None:  # the tool runs until Codex has shown the first round's message
        if event.get("type") == "item.completed" and event["item"].get("text") == FIRST_TEXT:
            lookup.release.set()

    async with gateway(brain, lookup) as (url, model):
        outcome = await Codex(root, url).exec("What is the value of k?", on_event=watch)
    assert succeeded(outcome), outcome.stderr
    assert lookup.released_by_client is True  # the text reached Codex while the tool still ran
    assert lookup.runs == ["k"] and brain.rounds == ["first", "final"]
    assert messages(outcome) == [FIRST_TEXT, FINAL_TEXT]
    assert SERVER_TOOL not in json.dumps(outcome.events)
    rerun = model.requests[-1].body["input"]
    assert [item["type"] for item in rerun[-2:]] == ["function_call", "function_call_output"]
    assert rerun[-1]["output"] == SERVER_RESULT


async def test_codex_runs_its_own_shell_in_a_mixed_turn(root: Path) -> None:
    lookup = Lookup()
    brain = Brain(client_tool="exec_command", client_input={"cmd": f"echo {CLIENT_OUTPUT}"}, mixed=True)
    async with gateway(brain, lookup) as (url, model):
        outcome = await Codex(root, url).exec("Look k up and run the command.")
    assert succeeded(outcome), outcome.stderr
    assert brain.rounds == ["first", "client", "final"] and lookup.runs == ["k"]
    # only the internal rerun carries the server's result: the client's next request has no trace of it
    assert [SERVER_RESULT in request.raw.decode() for request in model.requests] == [False, True, False]
    commands = [
        event["item"] for event in outcome.of_type("item.completed") if event["item"].get("type") == "command_execution"
    ]
    assert len(commands) == 1 and CLIENT_OUTPUT in commands[0]["aggregated_output"]  # Codex ran it
    assert messages(outcome)[-1] == f"{FINAL_TEXT} The command printed {CLIENT_OUTPUT}."
    assert SERVER_TOOL not in json.dumps(outcome.events)


async def test_codex_resumes_the_session_for_a_follow_up(root: Path) -> None:
    lookup = Lookup()
    brain = Brain()
    async with gateway(brain, lookup) as (url, model):
        codex = Codex(root, url)
        first = await codex.exec("What is the value of k?")
        second = await codex.exec("Look it up once more.", "resume", "--last")
    assert succeeded(first) and succeeded(second), second.stderr
    assert lookup.runs == ["k", "k"] and messages(second) == [FIRST_TEXT, FINAL_TEXT]
    history = model.requests[-1].body["input"]
    said = json.dumps([item for item in history if item.get("role") == "assistant"])
    assert FIRST_TEXT in said and FINAL_TEXT in said  # the first turn, as the client got it, came back
    assert SERVER_TOOL not in json.dumps(history[:-2])  # and without the server's calls


async def test_codex_waits_out_a_long_tool_on_the_gateways_keepalive_events(root: Path) -> None:
    lookup = Lookup(sleep=SILENCE)
    brain = Brain()
    async with gateway(brain, lookup, keepalive=0.5) as (url, _):
        outcome = await Codex(root, url, idle_ms=IDLE_MS).exec("What is the value of k?")
    assert succeeded(outcome), outcome.stderr
    assert lookup.runs == ["k"] and messages(outcome)[-1] == FINAL_TEXT


async def test_with_keepalives_as_comments_only_codex_gives_up_on_the_same_silence(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control of the test above, as main was before keep-alive events: the same silence filled with
    `: keep-alive` comments trips Codex's idle timeout; it reconnects (stream_max_retries) and the turn runs again.
    The tool stays silent until that second run (at most 30 s), so an idle timer that fires late on a loaded machine
    still fires inside the silence."""
    monkeypatch.setattr(ResponsesRelay, "keepalive", lambda self: None)  # the surface's comment instead
    lookup = Lookup(gated=True, patience=30.0)
    brain = Brain()
    async with gateway(brain, lookup, keepalive=0.5) as (url, _):
        outcome = await Codex(root, url, idle_ms=IDLE_MS).exec("What is the value of k?", stop=lookup.ran_again)
    assert not succeeded(outcome) and len(lookup.runs) > 1
    assert lookup.released_by_client is None  # cut while the first run was still silent


async def test_a_529_on_a_rerun_is_retried_and_codex_gets_one_ordinary_answer(root: Path) -> None:
    lookup = Lookup()
    brain = Brain(overloaded=1)
    async with gateway(brain, lookup) as (url, _):
        outcome = await Codex(root, url).exec("What is the value of k?")
    assert succeeded(outcome), outcome.stderr
    assert brain.rounds == ["first", "overloaded", "final"] and lookup.runs == ["k"]
    assert messages(outcome) == [FIRST_TEXT, FINAL_TEXT]


async def test_without_rerun_retries_a_529_on_a_rerun_makes_codex_run_the_turn_again(root: Path) -> None:
    """The control of the test above, as main was before `rerun_retries`: the 529 ends Codex's stream with
    `response.failed`; Codex reconnects and sends the turn again, so the server tool runs twice."""
    lookup = Lookup()
    brain = Brain(overloaded=1)
    async with gateway(brain, lookup, rerun_retries=0) as (url, _):
        await Codex(root, url).exec("What is the value of k?")
    assert lookup.runs == ["k", "k"] and brain.rounds[:3] == ["first", "overloaded", "first"]


async def test_codexs_own_openai_provider_pointed_at_the_gateway_uses_http_at_once(root: Path) -> None:
    """Codex's built-in `openai` provider (`openai_base_url`, no `[model_providers]` entry) tries the Responses
    websocket first; the gateway answers its handshake 426, on which Codex falls back to HTTP without a retry or an
    error shown (forwarded, the upstream's 404 or 405 cost some seconds of reconnects and four errors)."""
    lookup = Lookup()
    brain = Brain()
    async with gateway(brain, lookup) as (url, model):
        home, work = root / "codex-home", root / "work"
        home.mkdir()
        work.mkdir()
        (home / "config.toml").write_text(f'model = "gpt-5"\nopenai_base_url = "{url}/v1"\n')
        command = [str(cli("codex")), "exec", "--skip-git-repo-check", "--json", "--sandbox", "danger-full-access"]
        env = {**base_env(home), "CODEX_HOME": str(home), "OPENAI_API_KEY": "sk-test"}
        outcome = await run([*command, "What is the value of k?"], env, work)
    assert succeeded(outcome), outcome.stderr
    assert outcome.of_type("error") == [] and messages(outcome) == [FIRST_TEXT, FINAL_TEXT]
    assert lookup.runs == ["k"] and [request.path for request in model.requests] == ["/v1/responses"] * 2
