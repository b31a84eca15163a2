"""Native records a client sends back (docs/native-tools.md, the round trips): a malformed one is refused with a 400
in the route's shape, never a 500; one without its results tells the model they are not in the history, never that
the search found nothing."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from conftest import anthropic_client, openai_client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.native import Source, format_sources, search_result
from agentic_middleware.testing import ScriptedModel, function_call, message, response

NOT_HERE = "not in this conversation's history"


def hook(text: str | None = None) -> ServerTools:
    """A native web_search served by a tool that finds one page (or answers plain `text`)."""

    @server_tool(name="web_search", description="Search the web.")
    async def web_search(query: str) -> Any:
        return text if text is not None else search_result(query, [Source("https://a.test/", "A", "About A.")])

    return ServerTools([web_search], native={"web_search": "web_search"})


NATIVE = {"type": "web_search_20250305", "name": "web_search"}
CALL = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "capital"}}
RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": [{"type": "web_search_result", "url": "https://a.test/", "title": "A", "encrypted_content": "x"}],
}


def history(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "What is the capital?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Searching."}, *blocks]},
        {"role": "user", "content": "And then?"},
    ]


def told(model: ScriptedModel) -> list[dict[str, Any]]:
    """The tool results the app got in its first request."""
    return [
        block
        for turn in model.requests[0].body["messages"]
        for block in (turn["content"] if isinstance(turn["content"], list) else ())
        if block["type"] == "tool_result"
    ]


@pytest.mark.parametrize(
    ("blocks", "said"),
    [
        ([{**CALL, "name": ["web_search"]}, RESULT], "messages[1].content[1].name must be a string, got a list"),
        ([{**CALL, "id": {"x": 1}}, RESULT], "messages[1].content[1].id must be a string, got an object"),
        ([CALL, {**RESULT, "tool_use_id": ["srvtoolu_1"]}], "messages[1].content[2].tool_use_id must be a string"),
        ([{**CALL, "input": "capital"}, RESULT], "messages[1].content[1].input must be an object, got a string"),
        ([CALL, {**RESULT, "content": "found it"}], "messages[1].content[2].content must be a list or an object"),
        ([CALL, {**RESULT, "content": [3]}], "messages[1].content[2].content[0] must be an object"),
        ([CALL, {**RESULT, "content": [{"url": 3}]}], "messages[1].content[2].content[0].url must be a string"),
        ([CALL, {**RESULT, "content": {"type": "x"}}], "messages[1].content[2].content.error_code must be a string"),
        ([CALL, {**RESULT, "tool_use_id": "srvtoolu_2"}], "is not the id of a server_tool_use before it"),
        ([CALL, RESULT, RESULT], "has a result already"),
        (
            [
                CALL,
                {**CALL, "id": "srvtoolu_2"},
                RESULT,
                {"type": "text", "text": "So."},
                {**RESULT, "tool_use_id": "srvtoolu_2"},
            ],
            "other blocks stand between them",
        ),
        ([CALL, RESULT, CALL, RESULT], "is the id of an earlier server_tool_use"),
        ([{"type": ["server_tool_use"]}, CALL], None),  # a block of no type we know: the app judges it (200)
    ],
)
async def test_malformed_messages_records_are_refused_with_400(blocks: list[dict[str, Any]], said: str | None) -> None:
    model = ScriptedModel(message("Done."))
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[hook()]))
    request: dict[str, Any] = {"model": "m", "max_tokens": 100, "messages": history(*blocks), "tools": [NATIVE]}
    if said is None:
        assert (await client.messages.create(**request)).content[0].text == "Done."  # type: ignore[union-attr]
        return
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(**request)
    assert isinstance(refused.value.body, dict) and refused.value.body["error"]["type"] == "invalid_request_error"
    assert said in refused.value.body["error"]["message"]
    assert model.requests == []


async def test_a_live_stream_with_a_malformed_record_gets_the_400_itself() -> None:
    model = ScriptedModel(message("Done."))
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[hook()]))
    messages = history({**CALL, "id": [1]}, RESULT)
    with pytest.raises(
        anthropic.BadRequestError, match=r"messages\[1\]\.content\[1\]\.id must be a string, got a list"
    ):
        async with client.messages.stream(model="m", max_tokens=10, messages=messages, tools=[NATIVE]) as stream:  # type: ignore[arg-type, list-item]
            await stream.get_final_message()
    assert model.requests == []


SEARCH_CALL = {
    "type": "web_search_call",
    "id": "ws_1",
    "status": "completed",
    "action": {"type": "search", "query": "capital"},
}


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ({**SEARCH_CALL, "id": {"a": 1}}, "input[1].id must be a string, got an object"),
        ({**SEARCH_CALL, "action": ["search"]}, "input[1].action must be an object, got a list"),
        ({**SEARCH_CALL, "action": {"query": 3}}, "input[1].action.query must be a string, got a number"),
        ({**SEARCH_CALL, "status": ["completed"]}, "input[1].status must be a string"),
        ({**SEARCH_CALL, "results": "many"}, "input[1].results must be a list, got a string"),
        ({**SEARCH_CALL, "results": [{"title": "A"}]}, "input[1].results[0].url must be a string, got nothing"),
        ({**SEARCH_CALL, "action": {"sources": [{"url": ["x"]}]}}, "input[1].action.sources[0].url must be a string"),
    ],
)
async def test_malformed_web_search_call_items_are_refused_with_400(item: dict[str, Any], said: str) -> None:
    model = ScriptedModel(response("Done."))
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_client(AgenticLoopMiddleware(model, hooks=[hook()])).responses.create(
            model="m",
            input=[{"role": "user", "content": "What is the capital?"}, item],  # type: ignore[list-item]
            tools=[{"type": "web_search"}],
        )
    assert refused.value.status_code == 400 and refused.value.code == "invalid_request"
    assert said in refused.value.message
    assert refused.value.param == said.split(" ")[0]  # the field at fault, as OpenAI's API names it
    assert model.requests == []


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        (
            [{"role": "user", "content": [CALL, RESULT]}],
            "messages[0].content[0]: a server_tool_use block belongs in an assistant turn",
        ),
        (
            [
                {"role": "user", "content": "What is the capital?"},
                {"role": "assistant", "content": [CALL]},
                {"role": "user", "content": [RESULT, {"type": "text", "text": "And then?"}]},
            ],
            "messages[2].content[0]: a web_search_tool_result block belongs in an assistant turn",
        ),
    ],
)
async def test_records_outside_an_assistant_turn_are_refused_with_400(messages: list[Any], said: str) -> None:
    # They were passed to the app as they were: blocks of a vocabulary it does not know
    model = ScriptedModel(message("Done."))
    with pytest.raises(anthropic.BadRequestError) as refused:
        await anthropic_client(AgenticLoopMiddleware(model, hooks=[hook()])).messages.create(
            model="m",
            max_tokens=100,
            messages=messages,  # type: ignore[arg-type]
            tools=[NATIVE],  # type: ignore[list-item]
        )
    assert isinstance(refused.value.body, dict) and said in refused.value.body["error"]["message"]
    assert model.requests == []


PIECES = {
    "call": CALL,
    "call2": {**CALL, "id": "srvtoolu_2"},
    "result": RESULT,
    "result2": {**RESULT, "tool_use_id": "srvtoolu_2"},
    "text": {"type": "text", "text": "So."},
}


@given(
    st.lists(
        st.tuples(st.sampled_from(["user", "assistant"]), st.lists(st.sampled_from(sorted(PIECES)), max_size=5)),
        min_size=1,
        max_size=4,
    )
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_records_in_any_order_and_turn_give_a_400_or_the_app_s_own_vocabulary(turns: list[Any]) -> None:
    # Any order ([call, text, result], results before calls, ids reused across turns) in any role
    model = ScriptedModel(default=message("Done."))
    messages = [{"role": "user", "content": "Hi"}] + [
        {"role": role, "content": [PIECES[name] for name in names] or "Hm."} for role, names in turns
    ]
    body = {"model": "m", "max_tokens": 10, "messages": messages, "tools": [NATIVE]}
    answered = status(AgenticLoopMiddleware(model, hooks=[hook()]), "/v1/messages", body)
    assert answered in (200, 400)
    if answered == 200:
        sent = orjson.dumps(model.requests[0].body["messages"])
        assert b"server_tool_use" not in sent and b"web_search_tool_result" not in sent


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
MESSAGES_FIELDS = [
    ("call", "id"),
    ("call", "name"),
    ("call", "input"),
    ("call", "type"),
    ("result", "tool_use_id"),
    ("result", "content"),
    ("result", "type"),
    ("item", "url"),
    ("item", "title"),
    ("item", "encrypted_content"),
    ("item", "page_age"),
    ("item", "type"),
    ("text", "citations"),
]
RESPONSES_FIELDS = [(), ("id",), ("status",), ("action",), ("action", "query"), ("action", "sources"), ("results",)]


def status(app: AgenticLoopMiddleware, path: str, body: dict[str, Any]) -> int:
    async def post() -> int:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return (await client.post(path, content=orjson.dumps(body))).status_code

    return asyncio.run(post())


@given(st.sampled_from(MESSAGES_FIELDS), JSON)
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_json_in_any_field_of_a_messages_record_gives_200_or_400(field: tuple[str, str], value: Any) -> None:
    blocks = {"call": copy.deepcopy(CALL), "result": copy.deepcopy(RESULT)}
    blocks["item"] = blocks["result"]["content"][0]
    text = {"type": "text", "text": "It is A.", "citations": [{"type": "web_search_result_location", "url": "x"}]}
    blocks["text"] = text
    blocks[field[0]][field[1]] = value
    app = AgenticLoopMiddleware(ScriptedModel(default=message("Done.")), hooks=[hook()])
    body = {"model": "m", "max_tokens": 10, "messages": history(blocks["call"], blocks["result"], text)}
    assert status(app, "/v1/messages", {**body, "tools": [NATIVE]}) in (200, 400)


@given(st.sampled_from(RESPONSES_FIELDS), JSON)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_json_in_any_field_of_a_web_search_call_gives_200_or_400(field: tuple[str, ...], value: Any) -> None:
    item: Any = {**copy.deepcopy(SEARCH_CALL), "results": [{"url": "https://a.test/", "title": "A"}]}
    if not field:
        item = value  # the item itself
    elif len(field) == 1:
        item[field[0]] = value
    else:
        item["action"][field[1]] = value
    app = AgenticLoopMiddleware(ScriptedModel(default=response("Done.")), hooks=[hook()])
    body = {"model": "m", "input": [{"role": "user", "content": "Hi"}, item], "tools": [{"type": "web_search"}]}
    assert status(app, "/v1/responses", body) in (200, 400)


async def test_codex_s_replayed_search_tells_the_model_its_results_are_not_in_the_history() -> None:
    model = ScriptedModel(response("Done."))
    await openai_client(AgenticLoopMiddleware(model, hooks=[hook()])).responses.create(
        model="m",
        input=[{"role": "user", "content": "What is the capital?"}, SEARCH_CALL],  # type: ignore[list-item]
        tools=[{"type": "web_search"}],
    )
    output = model.requests[0].body["input"][-1]
    assert output["type"] == "function_call_output" and output["call_id"] == "ws_1"
    assert '"capital"' in output["output"] and NOT_HERE in output["output"]
    assert "No results" not in output["output"]


@pytest.mark.parametrize(
    ("blocks", "results"),
    [
        ([CALL], None),  # the result block is missing
        ([CALL, {k: v for k, v in RESULT.items() if k != "content"}], None),
        ([CALL, {**RESULT, "content": None}], None),
        ([CALL, {**RESULT, "content": []}], []),  # the record says the search found nothing: the model reads that
    ],
)
async def test_a_messages_record_without_its_results_is_not_told_as_finding_nothing(
    blocks: list[dict[str, Any]], results: list[Source] | None
) -> None:
    model = ScriptedModel(message("Done."))
    await anthropic_client(AgenticLoopMiddleware(model, hooks=[hook()])).messages.create(
        model="m",
        max_tokens=100,
        messages=history(*blocks),  # type: ignore[arg-type]
        tools=[NATIVE],  # type: ignore[list-item]
    )
    (result,) = told(model)
    assert result["tool_use_id"] == "srvtoolu_1" and "is_error" not in result
    if results is None:
        assert NOT_HERE in result["content"] and "No results" not in result["content"]
    else:
        assert result["content"] == format_sources("capital", results)


async def test_a_plain_text_search_on_responses_is_replayed_as_not_in_the_history() -> None:
    """A tool's plain text has no record: its item carries no results, and the next turn says so."""
    model = ScriptedModel(response(function_call("web_search", {"query": "capital"})), response("Done."))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[hook(text="Canberra, I think.")]))
    answer = await client.responses.create(model="m", input="What is the capital?", tools=[{"type": "web_search"}])
    model.script.append(response("Again."))
    history = [{"role": "user", "content": "What is the capital?"}, *(item.model_dump() for item in answer.output)]
    await client.responses.create(model="m", input=history, tools=[{"type": "web_search"}])  # type: ignore[arg-type]
    output = model.requests[2].body["input"][2]
    assert output["type"] == "function_call_output" and NOT_HERE in output["output"]
