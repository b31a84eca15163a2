"""A Messages live stream whose tool input is not JSON, under uvicorn, judged by the anthropic SDK's stream helper:
a client tool's call reaches the client as the app sent it, and a claimed call's tool gives an error result the
model reads; the stream goes on either way."""

from __future__ import annotations

from typing import Any

import anthropic
from streams import anthropic_final, event_stream, sdk_dump

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool, sse
from agentic_middleware.gateway import serving
from agentic_middleware.testing import ScriptedModel, message

USER: Any = [{"role": "user", "content": "go"}]
BROKEN = '{"city": "Par'  # cut short: the SDK's partial parser reads what it can, no JSON parser reads it whole


def broken_call(name: str, text: str = "Let me see.") -> list[bytes]:
    """A round with text, then a `tool_use` block whose `input_json_delta`s join into `BROKEN`."""
    body = message(text, usage={"input_tokens": 5, "output_tokens": 3})
    events = [sse.messages_start(body), *sse.messages_block(0, {"type": "text", "text": text})]
    start = {"type": "tool_use", "id": "toolu_broken", "name": name, "input": {}}
    events.append(
        sse.named_event("content_block_start", {"type": "content_block_start", "index": 1, "content_block": start})
    )
    for piece in (BROKEN[:7], BROKEN[7:]):
        delta = {"type": "input_json_delta", "partial_json": piece}
        events.append(
            sse.named_event("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": delta})
        )
    events.append(sse.named_event("content_block_stop", {"type": "content_block_stop", "index": 1}))
    return [*events, *sse.messages_end({**body, "stop_reason": "tool_use"})]


@server_tool
async def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def final_message(app: Any) -> anthropic.types.Message:
    async with serving(app) as url:
        claude = anthropic.AsyncAnthropic(base_url=url, api_key="test-key", max_retries=0)
        async with claude.messages.stream(model="m", max_tokens=50, messages=USER) as stream:
            return await stream.get_final_message()


async def test_a_client_tools_call_with_input_that_is_not_json_reaches_the_client_as_the_app_sent_it() -> None:
    events = broken_call("client_lookup")
    model = ScriptedModel(event_stream(events))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([weather])])

    final = await final_message(app)

    alone = await anthropic_final(events)  # the same stream, without the middleware
    assert sdk_dump(final) == sdk_dump(alone)
    assert final.content[1].type == "tool_use" and final.content[1].id == "toolu_broken"
    assert final.stop_reason == "tool_use" and len(model.requests) == 1


async def test_a_claimed_call_with_input_that_is_not_json_gives_the_model_an_error_result() -> None:
    ran: list[Any] = []

    @server_tool
    async def lookup(city: str) -> str:
        """Looks a city up."""
        ran.append(city)
        return "found"

    model = ScriptedModel(
        event_stream(broken_call("lookup")),
        event_stream(
            list(sse.messages_events(message("It did not work.", usage={"input_tokens": 9, "output_tokens": 4})))
        ),
    )
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])

    final = await final_message(app)

    assert [block.type for block in final.content] == ["text", "text"]  # no tool_use: the server's call stayed
    assert [block.text for block in final.content] == ["Let me see.", "It did not work."]
    assert final.stop_reason == "end_turn" and ran == []
    assistant, results = model.requests[1].body["messages"][-2:]
    call = assistant["content"][-1]
    assert (
        call["type"] == "tool_use" and call["id"] == "toolu_broken" and call["input"] == {}
    )  # history holds an object
    result = results["content"][0]
    assert result["tool_use_id"] == "toolu_broken" and result["is_error"] is True
    assert BROKEN in str(result["content"])  # the model reads what it wrote


class QueryReader:
    """A gate written for LiteLLM: it reads `input.get(...)` on every `tool_use` block of the answer, as LiteLLM's own
    streaming loop lets it (there, input that is not JSON is `{"_raw": text}`)."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    async def async_should_run_agentic_loop(self, response: Any, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        for block in response["content"]:
            if block["type"] == "tool_use":
                block["input"].get("city")
                self.inputs.append(block["input"])
        return False, {}

    async def async_build_agentic_loop_plan(self, **arguments: Any) -> Any:
        raise AssertionError("never asked: the gate says no")


async def test_a_gate_reading_input_get_sees_input_that_is_not_json_as_litellm_gives_it() -> None:
    """Before, hooks got the text itself: `input.get` raised, the stream ended in an error, the client's call lost."""
    events = broken_call("client_lookup")
    model = ScriptedModel(event_stream(events))
    gate = QueryReader()
    app = AgenticLoopMiddleware(model, hooks=[gate, ServerTools([weather])])

    final = await final_message(app)

    assert sdk_dump(final) == sdk_dump(await anthropic_final(events))  # the client's call, as the app sent it
    assert gate.inputs == [{"_raw": BROKEN}]
