"""The OpenAI Agents SDK's `Runner.run_streamed` (an `OpenAIResponsesModel` on an `AsyncOpenAI` pointed at the
example gateway, whose `ServerTools` serves `lookup`) in front of a scripted Responses model (issue 23, item 6).
The Agents SDK puts no idle limit of its own on a stream: the one it meets is its openai client's read timeout,
which any bytes reset, comments included. Needs no npm: runs wherever the test dependencies are installed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool
from agents.items import ToolCallItem
from agents.result import RunResultStreaming
from harness import CLIENT_OUTPUT, FINAL_TEXT, FIRST_TEXT, SERVER_TOOL, Brain, Lookup, gateway

CLIENT_TOOL = "client_echo"
SILENCE = 3.0  # seconds the tool runs in the long-silence tests
READ_TIMEOUT = 1.5  # the openai client's timeout there
CONFIG = RunConfig(tracing_disabled=True)


@function_tool
def client_echo() -> str:
    """Prints a word (the client's own tool)."""
    return CLIENT_OUTPUT


async def streamed(
    url: str, turn: str | list[Any], *, timeout: float = 30.0, on_event: Any = None
) -> RunResultStreaming:
    """One streamed run to its end, each raw Responses event handed to `on_event` as it arrives."""
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0, timeout=timeout) as client:
        model = OpenAIResponsesModel("scripted", client)
        agent = Agent(name="helper", instructions="Help.", model=model, tools=[client_echo])
        result = Runner.run_streamed(agent, turn, run_config=CONFIG)
        async with asyncio.timeout(60):
            async for event in result.stream_events():
                if event.type == "raw_response_event" and on_event is not None:
                    on_event(event.data)
    return result


def calls(result: RunResultStreaming) -> list[str]:
    return [str(getattr(item.raw_item, "name", "")) for item in result.new_items if isinstance(item, ToolCallItem)]


async def test_the_agents_sdk_gets_text_live_and_the_answer_without_the_server_tool() -> None:
    lookup = Lookup(gated=True)
    brain = Brain()
    text: list[str] = []

    def watch(event: Any) -> None:  # the tool runs until the SDK has handed over the first round's text
        if event.type == "response.output_text.delta":
            text.append(event.delta)
            if FIRST_TEXT in "".join(text):
                lookup.release.set()

    async with gateway(brain, lookup) as (url, _):
        result = await streamed(url, "What is the value of k?", on_event=watch)
    assert lookup.released_by_client is True and lookup.runs == ["k"]
    assert result.final_output == FINAL_TEXT and calls(result) == []
    assert SERVER_TOOL not in json.dumps(result.to_input_list())


async def test_the_agents_sdk_runs_its_own_function_tool_in_a_mixed_turn() -> None:
    lookup = Lookup()
    brain = Brain(client_tool=CLIENT_TOOL, mixed=True)
    async with gateway(brain, lookup) as (url, _):
        result = await streamed(url, "Look k up and run the command.")
    assert brain.rounds == ["first", "client", "final"] and lookup.runs == ["k"]
    assert calls(result) == [CLIENT_TOOL]  # its own call only, never the server's
    assert result.final_output == f"{FINAL_TEXT} The command printed {CLIENT_OUTPUT}."


async def test_the_agents_sdk_follows_up_with_the_turn_as_it_got_it() -> None:
    lookup = Lookup()
    brain = Brain()
    async with gateway(brain, lookup) as (url, model):
        first = await streamed(url, "What is the value of k?")
        again = [*first.to_input_list(), {"role": "user", "content": "Look it up once more."}]
        second = await streamed(url, again)
    assert lookup.runs == ["k", "k"] and second.final_output == FINAL_TEXT
    history = json.dumps(model.requests[-1].body["input"][:-2])
    assert FIRST_TEXT in history and FINAL_TEXT in history and SERVER_TOOL not in history


@pytest.mark.parametrize("keepalive", [0.5, 60.0], ids=["keepalives", "none"])
async def test_a_long_tool_outlasts_the_read_timeout_on_keepalives_alone(keepalive: float) -> None:
    """With keep-alives the run ends well; the control, with none inside the silence (stream_keepalive past the
    tool's run), times out: the silence is long enough to matter. The control's tool stays silent until the client
    gives up (at most 30 s), so a read timeout that fires late on a loaded machine still fires inside the silence."""
    lookup = Lookup(sleep=SILENCE) if keepalive < SILENCE else Lookup(gated=True, patience=30.0)
    brain = Brain()
    async with gateway(brain, lookup, keepalive=keepalive) as (url, _):
        if keepalive < SILENCE:
            result = await streamed(url, "What is the value of k?", timeout=READ_TIMEOUT)
            assert result.final_output == FINAL_TEXT and lookup.runs == ["k"]
        else:
            with pytest.raises(openai.APITimeoutError):
                await streamed(url, "What is the value of k?", timeout=READ_TIMEOUT)


async def test_a_529_on_a_rerun_is_retried_and_the_agents_sdk_gets_one_ordinary_answer() -> None:
    lookup = Lookup()
    brain = Brain(overloaded=1)
    async with gateway(brain, lookup) as (url, _):
        result = await streamed(url, "What is the value of k?")
    assert brain.rounds == ["first", "overloaded", "final"] and lookup.runs == ["k"]
    assert result.final_output == FINAL_TEXT


async def test_without_rerun_retries_a_529_on_a_rerun_fails_the_agents_sdks_run() -> None:
    """The control of the test above, as main was before `rerun_retries`: the stream ends `response.failed`."""
    lookup = Lookup()
    brain = Brain(overloaded=1)
    async with gateway(brain, lookup, rerun_retries=0) as (url, _):
        with pytest.raises(Exception, match="Overloaded"):
            await streamed(url, "What is the value of k?")
    assert lookup.runs == ["k"]
