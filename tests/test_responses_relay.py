"""The Responses relay: one lifecycle across rounds, that the openai SDK's stream helper accumulates."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import orjson
import pytest
from conftest import openai_client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streams import sse_app
from test_relays import relay_round, same_json

from agentic_middleware import sse
from agentic_middleware.observe import sum_usage
from agentic_middleware.sse_reader import ServerSentEvent, SSEReader
from agentic_middleware.surfaces import AppStreamError, StreamMismatch, surfaces
from agentic_middleware.testing import function_call, response

RESPONSES = surfaces()["responses"]
SERVER_TOOL = "lookup"

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
arguments = st.dictionaries(
    st.sampled_from(["q", "n", "é"]), st.one_of(st.integers(-(2**53), 2**53), texts), max_size=3
)
_ids = iter(range(10**9))


def message_item(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_r{next(_ids)}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def reasoning_item(summary: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{next(_ids)}",
        "summary": [{"type": "summary_text", "text": summary}],
        "encrypted_content": "ENC",
    }


items = st.one_of(texts.map(message_item), texts.map(reasoning_item))


@st.composite
def responses_round(draw: st.DrawFn, final: bool) -> dict[str, Any]:
    leading = draw(st.lists(items, max_size=3))
    calls = [function_call("client_tool", value) for value in draw(st.lists(arguments, max_size=2))]
    if not final:
        calls += [function_call(SERVER_TOOL, value) for value in draw(st.lists(arguments, min_size=1, max_size=2))]
        calls = draw(st.permutations(calls))
    # A reasoning item may come before each call, as reasoning models send them.
    output = [*leading]
    for call in calls:
        if draw(st.booleans()):
            output.append(reasoning_item("before a call"))
        output.append(call)
    tokens = draw(st.integers(0, 500)), draw(st.integers(0, 500))
    usage = {
        "input_tokens": tokens[0],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": tokens[1],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": sum(tokens),
    }
    return response(*output, usage=usage)


def sent_before_calls(output: list[Any]) -> list[Any]:
    """What a live stream sends of a round whose calls are claimed: the items before the first call, but not
    the reasoning items that lead to it."""
    first = next((i for i, item in enumerate(output) if item["type"] == "function_call"), len(output))
    kept = output[:first]
    while kept and kept[-1]["type"] == "reasoning":
        kept.pop()
    return kept


async def sdk_final(stream: list[bytes]) -> Any:
    async with openai_client(sse_app(stream)).responses.stream(model="m", input="hi") as events:
        return await events.get_final_response()


def parsed(stream: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(event.data) for event in SSEReader().feed(stream)]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), count=st.integers(1, 3), chunk_size=st.integers(1, 12))
def test_rounds_accumulate_exactly_and_the_client_stream_is_one_lifecycle(
    data: st.DataObject, count: int, chunk_size: int
) -> None:
    bodies = [data.draw(responses_round(final=number == count - 1)) for number in range(count)]
    relay = RESPONSES.relay(None)
    assert relay is not None
    client: list[bytes] = []
    expected: list[Any] = []
    for body in bodies:
        stream = b"".join(sse.responses_events(body, chunk_size=chunk_size))
        client += relay_round(relay, stream, data.draw(st.lists(st.integers(0, 10**6), max_size=20)))
        assert same_json(relay.body()) == same_json(body)  # what the hooks judge: the JSON body itself
        expected += body["output"] if body is bodies[-1] else sent_before_calls(body["output"])
    final = {**bodies[-1], "usage": sum_usage([body["usage"] for body in bodies])}
    client += relay.finish(same_json(final))

    stream = b"".join(client)
    assert b'"name":"lookup"' not in stream  # a server call, its events and its item never reach the client
    events = parsed(stream)
    kinds = [event["type"] for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds.count("response.created") == kinds.count("response.completed") == 1
    assert kinds[-1] == "response.completed" and b"[DONE]" not in stream
    numbers = [event["sequence_number"] for event in events]
    assert numbers == sorted(set(numbers))  # strictly increasing
    added = [event["output_index"] for event in events if event["type"] == "response.output_item.added"]
    assert added == list(range(len(expected)))
    completed = events[-1]["response"]
    assert completed["id"] == bodies[0]["id"]
    assert completed["output"] == same_json(expected)
    assert completed["usage"] == final["usage"]

    got = asyncio.run(sdk_final(client))
    assert got.id == bodies[0]["id"]
    assert [item.model_dump(exclude_none=True) for item in got.output] == [
        {key: value for key, value in item.items() if value is not None} for item in same_json(expected)
    ]


def test_a_round_with_a_claimed_call_sends_its_text_at_once_and_holds_the_call() -> None:
    relay = RESPONSES.relay(None)
    assert relay is not None
    first = response("Let me look.", reasoning_item("search"), function_call(SERVER_TOOL, {"q": 1}))
    now = relay_round(relay, b"".join(sse.responses_events(first)), [3, 40])
    kinds = [event["type"] for event in parsed(b"".join(now))]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.output_item.done"
    assert b"reasoning" not in b"".join(now) and b"lookup" not in b"".join(now)


def test_held_events_go_out_when_no_hook_acts() -> None:
    body = response(reasoning_item("r"), "Checking.", function_call("client_tool", {"x": "y" * 50}))
    stream = b"".join(sse.responses_events(body, chunk_size=7))
    relay = RESPONSES.relay(None)
    assert relay is not None
    client = relay_round(relay, stream, []) + relay.finish(same_json(body))
    assert parsed(b"".join(client)) == parsed(stream)  # the app's own stream, event for event


def test_an_override_follows_what_was_streamed_and_a_rewrite_is_refused() -> None:
    relay = RESPONSES.relay(None)
    assert relay is not None
    client = relay_round(relay, b"".join(sse.responses_events(response("Let me look."))), [])
    with pytest.raises(StreamMismatch):
        relay.finish(same_json(response("Something else.")))
    client += relay.finish(same_json(response("The override.")), fresh=True)
    got = asyncio.run(sdk_final(client))
    assert [item.content[0].text for item in got.output] == ["Let me look.", "The override."]  # type: ignore[union-attr]


def test_a_final_answer_that_extends_the_last_streamed_text_streams_the_rest() -> None:
    """A post hook appending to the final text: the rest follows as a message item of its own."""
    relay = RESPONSES.relay(None)
    assert relay is not None
    first = response("Let me look.", function_call(SERVER_TOOL, {"q": 1}))
    client = relay_round(relay, b"".join(sse.responses_events(first)), [])
    relay.begin_round()
    last = response("The answer")
    client += relay_round(relay, b"".join(sse.responses_events(last)), [7])
    cited = same_json(last)
    cited["output"][-1]["content"][-1]["text"] += " (source: x)"
    client += relay.finish(cited)
    got = asyncio.run(sdk_final(client))
    texts = [item.content[0].text for item in got.output]  # type: ignore[union-attr]
    assert texts == ["Let me look.", "The answer", " (source: x)"]
    assert got.output_text == "Let me look.The answer (source: x)"
    assert len({item.id for item in got.output}) == 3
    relay = RESPONSES.relay(None)
    relay_round(relay, b"".join(sse.responses_events(last)), [])
    with pytest.raises(StreamMismatch):  # text that went out, changed, is still a rewrite
        relay.finish(same_json(response("The answex (source: x)")))


def test_nothing_streamed_writes_the_whole_answer() -> None:
    body = response("All at once.")
    relay = RESPONSES.relay(None)
    assert relay is not None
    assert parsed(b"".join(relay.finish(same_json(body)))) == parsed(b"".join(sse.responses_events(body)))


def test_the_apps_error_event_is_raised_in_openai_error_shape() -> None:
    relay = RESPONSES.relay(None)
    assert relay is not None
    relay.begin_round()
    event = ServerSentEvent("error", b'{"type":"error","code":"rate_limit_exceeded","message":"busy","param":null}')
    with pytest.raises(AppStreamError) as raised:
        relay.feed(event)
    assert orjson.loads(raised.value.body)["error"] == {
        "message": "busy",
        "param": None,
        "code": "rate_limit_exceeded",
        "type": "invalid_request_error",  # OpenAI's type of a 429, the status its code stands for
    }
    assert raised.value.status == 429  # retried as a 429 (error_types.py)


def test_a_failure_after_the_start_ends_the_same_lifecycle() -> None:
    relay = RESPONSES.relay(None)
    assert relay is not None
    assert relay.error_event(500, "early", "x") is None  # nothing began: the surface's own error stream
    first = response("Partial.", function_call(SERVER_TOOL, {}))
    client = relay_round(relay, b"".join(sse.responses_events(first)), [])
    failure = relay.error_event(502, "the model app failed", "model_app_error")
    assert failure is not None
    events = parsed(b"".join([*client, failure]))
    failed, error = events[-2:]
    assert failed["type"] == "response.failed"
    assert failed["response"]["id"] == first["id"]
    assert failed["response"]["error"] == {"code": "model_app_error", "message": "the model app failed"}
    assert failed["sequence_number"] == events[-3]["sequence_number"] + 1
    assert error["type"] == "error" and error["sequence_number"] == failed["sequence_number"] + 1
    assert error["error"] == {
        "message": "the model app failed",
        "type": "server_error",
        "param": None,
        "code": "model_app_error",
    }


def test_a_round_whose_stream_ends_early_has_no_body() -> None:
    stream = b"".join(sse.responses_events(response("cut short")))
    relay = RESPONSES.relay(None)
    assert relay is not None
    relay_round(relay, stream[: len(stream) // 2], [])
    assert relay.body() is None


@pytest.mark.parametrize("created", ["oops", [1], None, 5])
async def test_a_response_created_whose_response_is_not_an_object_fails_the_round_as_an_api_error(created: Any) -> None:
    """The app's `response.created` must carry the response object: one that does not (a string, a list, null) is a
    stream the middleware cannot read, so the client gets the route's own failed stream, which the openai SDK raises
    as an `APIError`; not a `response.failed` with no `response.created` before it (the SDK's RuntimeError), nor the
    app's `"response": null` passed on (the SDK's AttributeError)."""
    from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool

    @server_tool
    def lookup(key: str) -> str:
        return key

    events = list(sse.responses_events(response("Hi.")))
    start = orjson.loads(events[0].split(b"data: ", 1)[1])
    start["response"] = created
    events[0] = b"event: response.created\ndata: " + orjson.dumps(start) + b"\n\n"
    app = AgenticLoopMiddleware(sse_app(events), hooks=[ServerTools([lookup])])
    with pytest.raises(openai.APIError) as raised:
        async with openai_client(app).responses.stream(model="m", input="hi") as stream:
            async for _ in stream:
                pass
    assert "response.created" in str(raised.value)
