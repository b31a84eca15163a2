"""The official SDKs as clients: one ordinary call, tools fulfilled on the server, one final answer."""

from __future__ import annotations

import json

from conftest import anthropic_client, openai_client
from seed_hook import MyToolCallback
from support import ToolHook

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel, chat_completion, message, tool_call, tool_use


async def test_seed_hook_runs_unchanged_under_the_anthropic_sdk() -> None:
    model = ScriptedModel(
        message("Let me check.", tool_use("my_tool", {"city": "Paris"}, id="toolu_1")),
        message("It is sunny in Paris."),
    )
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[MyToolCallback()]))

    reply = await client.messages.create(
        model="claude-test", max_tokens=256, messages=[{"role": "user", "content": "Weather in Paris?"}]
    )

    assert [block.type for block in reply.content] == ["text"]
    assert reply.content[0].text == "It is sunny in Paris."  # type: ignore[union-attr]
    assert reply.stop_reason == "end_turn"
    first, rerun = (request.body for request in model.requests)
    assert first == {
        "model": "claude-test",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
    }
    assert rerun["messages"][1:] == [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "my_tool", "input": {"city": "Paris"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "result for {'city': 'Paris'}"}],
        },
    ]
    assert rerun["max_tokens"] == 256


async def test_chat_hook_runs_under_the_openai_sdk() -> None:
    model = ScriptedModel(
        chat_completion(tool_calls=[tool_call("lookup", {"key": "answer"}, id="call_1")]),
        chat_completion(content="The answer is 42."),
    )
    client = openai_client(AgenticLoopMiddleware(model, hooks=[ToolHook("lookup")]))

    completion = await client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "What is the answer?"}]
    )

    choice = completion.choices[0]
    assert choice.message.content == "The answer is 42."
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    rerun = model.requests[1].body
    assert rerun["messages"][1]["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"key":"answer"}'}
    assert rerun["messages"][2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": 'lookup result for {"key": "answer"}',
    }


async def test_client_declared_tools_reach_the_client_under_both_sdks() -> None:
    """A call to a tool no hook claims is the client's own: it comes back untouched."""
    model = ScriptedModel(
        message(tool_use("client_tool", {"x": 1}, id="toolu_9")),
        chat_completion(tool_calls=[tool_call("client_tool", {"x": 1}, id="call_9")]),
    )
    app = AgenticLoopMiddleware(model, hooks=[ToolHook("lookup")])

    reply = await anthropic_client(app).messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}]
    )
    completion = await openai_client(app).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "go"}]
    )

    assert reply.stop_reason == "tool_use" and reply.content[0].name == "client_tool"  # type: ignore[union-attr]
    assert completion.choices[0].finish_reason == "tool_calls"
    call = completion.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert json.loads(call.function.arguments) == {"x": 1}  # type: ignore[union-attr]
    assert len(model.requests) == 2
