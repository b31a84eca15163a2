"""Claude Code (`claude -p`, stream-json) through the example gateway, whose `ServerTools` serves `lookup`, in front of
a scripted Messages model (issue 23, item 6). Each run is bounded by harness.RUN_BOUND and killed at it.

Claude Code's watchdogs, read in its 2.1.332 bundle: a byte watchdog (`CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS`, at
least 10 s; any bytes reset it, `ping` events included) and an event watchdog of at least 300 s
(`CLAUDE_STREAM_IDLE_TIMEOUT_MS` only lengthens it; pings do not reset it), too long for a test. The long-silence
tests use the byte watchdog at its shortest."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

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

CUT_OFF = "cut off mid-stream"  # Claude Code's own words when it asks the model to resume a broken stream
SILENCE = 12.0  # seconds the tool runs in the long-silence tests: past the byte watchdog's 10 s
PATIENCE = 40.0  # seconds the control's tool waits for the client to give up: far past the watchdog


async def claude(
    url: str, prompt: str, home: Path, *args: str, env: dict[str, str] | None = None, **options: Any
) -> Run:
    command = [str(cli("claude")), "-p", prompt, "--output-format", "stream-json", "--verbose"]
    command += ["--include-partial-messages", "--model", "claude-sonnet-4-5", *args]
    environment = {
        **base_env(home),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        **(env or {}),
    }
    return await run(command, environment, home, **options)


def result(outcome: Run) -> dict[str, Any]:
    """The run's `result` event (its last), which says whether the turn succeeded and its final text."""
    results = outcome.of_type("result")
    assert results, f"no result (status {outcome.status}): {outcome.stderr[-2000:]}"
    return results[-1]


def tool_uses(outcome: Run) -> list[str]:
    """The names of every tool call the client saw, in its messages and in its raw stream events."""
    names = [
        block["name"]
        for event in outcome.of_type("assistant")
        for block in event["message"]["content"]
        if block.get("type") == "tool_use"
    ]
    names += [
        event["event"]["content_block"]["name"]
        for event in outcome.of_type("stream_event")
        if event["event"].get("type") == "content_block_start"
        and event["event"]["content_block"].get("type") == "tool_use"
    ]
    return names


def succeeded(outcome: Run) -> bool:
    done = result(outcome)
    return outcome.status == 0 and done["subtype"] == "success" and not done["is_error"]


async def test_claude_code_gets_the_text_live_and_the_answer_without_the_server_tool() -> None:
    lookup = Lookup(gated=True)
    brain = Brain()
    text: list[str] = []

    def watch(event: dict[str, Any]) -> None:  # the tool runs until Claude Code has shown the first round's text
        delta = event.get("event", {}).get("delta", {}) if event.get("type") == "stream_event" else {}
        text.append(delta.get("text", ""))
        if FIRST_TEXT in "".join(text):
            lookup.release.set()

    with tempfile.TemporaryDirectory() as home:
        async with gateway(brain, lookup) as (url, model):
            outcome = await claude(url, "What is the value of k?", Path(home), on_event=watch)
    assert succeeded(outcome), outcome.stderr
    assert lookup.released_by_client is True  # the text reached Claude Code while the tool still ran
    assert lookup.runs == ["k"] and brain.rounds == ["first", "final"]
    assert FINAL_TEXT in result(outcome)["result"]
    assert SERVER_TOOL not in tool_uses(outcome) and SERVER_TOOL not in json.dumps(outcome.events)
    rerun = model.requests[-1].body["messages"][-1]["content"]
    assert [(block["type"], block["content"]) for block in rerun] == [("tool_result", SERVER_RESULT)]


async def test_claude_code_runs_its_own_bash_in_a_mixed_turn() -> None:
    lookup = Lookup()
    command = {"command": f"echo {CLIENT_OUTPUT}", "description": "Print a word"}
    brain = Brain(client_tool="Bash", client_input=command, mixed=True)
    with tempfile.TemporaryDirectory() as home:
        async with gateway(brain, lookup) as (url, model):
            outcome = await claude(url, "Look k up and run the command.", Path(home), "--allowedTools", "Bash")
    assert succeeded(outcome), outcome.stderr
    assert brain.rounds == ["first", "client", "final"] and lookup.runs == ["k"]
    # only the internal rerun carries the server's result: the client's next request has no trace of it
    assert [SERVER_RESULT in request.raw.decode() for request in model.requests] == [False, True, False]
    assert set(tool_uses(outcome)) == {"Bash"}  # its own call only, never the server's
    outputs = [
        block
        for event in outcome.of_type("user")
        for block in event["message"]["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    assert len(outputs) == 1 and CLIENT_OUTPUT in json.dumps(outputs[0])  # Claude Code ran it
    assert f"The command printed {CLIENT_OUTPUT}." in result(outcome)["result"]


async def test_claude_code_resumes_the_session_for_a_follow_up() -> None:
    lookup = Lookup()
    brain = Brain()
    with tempfile.TemporaryDirectory() as home:
        async with gateway(brain, lookup) as (url, model):
            first = await claude(url, "What is the value of k?", Path(home))
            session = result(first)["session_id"]
            second = await claude(url, "Look it up once more.", Path(home), "--resume", session)
    assert succeeded(first) and succeeded(second), second.stderr
    assert lookup.runs == ["k", "k"] and FINAL_TEXT in result(second)["result"]
    history = model.requests[-1].body["messages"]
    said = json.dumps([entry for entry in history if entry["role"] == "assistant"])
    assert FIRST_TEXT in said and FINAL_TEXT in said  # the first turn, as the client got it, came back
    assert f'"name": "{SERVER_TOOL}"' not in json.dumps(history[:-2])  # and without the server's calls


async def test_claude_code_waits_out_a_long_tool_on_the_gateways_pings() -> None:
    lookup = Lookup(sleep=SILENCE)
    brain = Brain()
    watchdog = {"CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS": "10000"}
    with tempfile.TemporaryDirectory() as home:
        async with gateway(brain, lookup, keepalive=1.0) as (url, _):
            outcome = await claude(url, "What is the value of k?", Path(home), env=watchdog)
    assert succeeded(outcome), outcome.stderr
    assert lookup.runs == ["k"] and FINAL_TEXT in result(outcome)["result"]


async def test_without_keepalives_claude_codes_watchdog_cuts_the_same_silence_and_the_tool_runs_again() -> None:
    """The control of the test above: the same tool with no keep-alive in its silence (stream_keepalive past the
    tool's run) trips the watchdog; Claude Code then asks again, so the tool runs a second time (the run is stopped
    there). The tool stays silent until that second run (at most PATIENCE), not SILENCE: on a loaded machine a
    watchdog that fires a little late must not meet the tool's end first and pass the turn as if nothing was cut."""
    lookup = Lookup(gated=True, patience=PATIENCE)
    brain = Brain()
    watchdog = {"CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS": "10000"}
    with tempfile.TemporaryDirectory() as home:
        async with gateway(brain, lookup, keepalive=60.0) as (url, model):
            await claude(url, "What is the value of k?", Path(home), env=watchdog, stop=lookup.ran_again)
    assert len(lookup.runs) > 1  # cut off mid-stream, Claude Code sent the turn again
    assert lookup.released_by_client is None  # while the first run was still silent, not after it
    assert CUT_OFF in json.dumps(model.requests[-1].body["messages"][-1])


async def test_a_529_on_a_rerun_is_retried_and_claude_code_gets_one_ordinary_answer() -> None:
    lookup = Lookup()
    brain = Brain(overloaded=1)
    with tempfile.TemporaryDirectory() as home:
        async with gateway(brain, lookup) as (url, _):
            outcome = await claude(url, "What is the value of k?", Path(home))
    assert succeeded(outcome), outcome.stderr
    assert brain.rounds == ["first", "overloaded", "final"] and lookup.runs == ["k"]
    assert FINAL_TEXT in result(outcome)["result"]


async def test_without_rerun_retries_a_529_on_a_rerun_makes_claude_code_start_the_turn_over() -> None:
    """The control of the test above, as main was before `rerun_retries`: the 529 becomes an error event in the
    middle of Claude Code's stream; Claude Code (2.1.332) does not retry the request but asks the model to resume
    after the cut, so the turn starts over and the server tool runs twice."""
    lookup = Lookup()
    brain = Brain(overloaded=1)
    with tempfile.TemporaryDirectory() as home:
        async with gateway(brain, lookup, rerun_retries=0) as (url, model):
            await claude(url, "What is the value of k?", Path(home))
    assert lookup.runs == ["k", "k"] and brain.rounds[:3] == ["first", "overloaded", "first"]
    assert CUT_OFF in json.dumps(model.requests[2].body["messages"][-1])
