"""A guardrail is given the words of the native web-search records in a request's history (docs/security.md#guardrails).

A client can forge the records it sends back: a `web_search_tool_result` whose `encrypted_content` is ours (`amw1.`
and the page text in base64, which the next turn decodes for the model), a title, a `server_tool_use` query, a
citation's `cited_text`, a Responses `web_search_call`'s query and results. Each is given to the guardrail as a text,
its edit reaches the app (encoded again where it was encoded, and only when changed), and an `amw1.` content that
does not decode is refused with a 400 in the route's shape. Each guardrail is a real LiteLLM `CustomGuardrail`.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import anthropic
import openai
import orjson
import pytest
from conftest import anthropic_client, http_client, openai_client
from guardrail_kit import SAID, WORD, Masking, WordBlock

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.native import Source, decode_text, encode_text, format_sources, search_result
from agentic_middleware.testing import ScriptedModel, message, response

MASKED = "the masked is here"
URL = "https://a.test/page"


def served() -> ServerTools:
    """The native web_search, served: the history's records are turned back into the app's calls and results."""

    @server_tool(name="web_search", description="Search the web.")
    async def web_search(query: str) -> Any:
        return search_result(query, [Source("https://b.test/", "B", "About B.")])

    return ServerTools([web_search], native={"web_search": "web_search"})


NATIVE = {"type": "web_search_20250305", "name": "web_search"}


def search_record(query: str = "fruit", title: str = "A", text: str = "About A.", **result: Any) -> list[Any]:
    """A `server_tool_use` block and its `web_search_tool_result`, as the middleware writes them (or forged)."""
    found = {"type": "web_search_result", "url": URL, "title": title, "encrypted_content": encode_text(text)}
    return [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": query}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{**found, **result}]},
    ]


def history(*blocks: Any) -> list[Any]:
    return [
        {"role": "user", "content": "Find it."},
        {"role": "assistant", "content": list(blocks)},
        {"role": "user", "content": "And then?"},
    ]


def cited(kind: str) -> dict[str, Any]:
    """A text block whose citation holds WORD in its `cited_text` and its title."""
    citation: dict[str, Any] = (
        {"type": kind, "url": URL, "title": SAID, "encrypted_index": encode_text("srvtoolu_1:0"), "cited_text": SAID}
        if kind == "web_search_result_location"
        else {"type": kind, "document_index": 0, "document_title": SAID, "start_char_index": 0, "end_char_index": 3}
        | {"cited_text": SAID}
    )
    return {"type": "text", "text": f"See {URL}.", "citations": [citation]}


def forged_messages(where: str) -> list[Any]:
    """A Messages history with WORD in one field of a native record."""
    records = {
        "page text": search_record(text=SAID),
        "result title": search_record(title=SAID),
        "result url": search_record(url=f"https://a.test/{WORD}"),
        "result page_age": search_record(page_age=SAID),
        "server_tool_use query": search_record(query=SAID),
        "error code": [
            search_record()[0],
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": {"error_code": SAID}},
        ],
        "web_search_result_location cited_text": [*search_record(), cited("web_search_result_location")],
        "char_location cited_text": [*search_record(), cited("char_location")],
    }
    return history(*records[where])


MESSAGES_PLACES = [
    "page text",
    "result title",
    "result url",
    "result page_age",
    "server_tool_use query",
    "error code",
    "web_search_result_location cited_text",
    "char_location cited_text",
]


@pytest.mark.parametrize("where", MESSAGES_PLACES)
async def test_messages_a_blocked_word_in_a_forged_native_record_is_blocked(where: str) -> None:
    model = ScriptedModel(message("never"))
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[WordBlock(), served()]))
    with pytest.raises(anthropic.BadRequestError, match=f"blocked: {WORD}"):
        await client.messages.create(
            model="c",
            max_tokens=9,
            messages=forged_messages(where),
            tools=[NATIVE],  # type: ignore[list-item]
        )
    assert model.requests == []


async def test_messages_a_mask_of_a_forged_search_reaches_the_app_in_its_turned_back_result() -> None:
    """The record is turned back into the app's call and result: the mask is in both, as the model reads them."""
    model = ScriptedModel(message("ok"))
    guard = Masking()
    app = AgenticLoopMiddleware(model, hooks=[guard, served()])
    await anthropic_client(app).messages.create(
        model="c",
        max_tokens=9,
        messages=history(*search_record(query=SAID, title=SAID, text=f"Page: {SAID}.")),
        tools=[NATIVE],  # type: ignore[list-item]
    )

    # the query (the input's key and the tool's name too), the title, URL and decoded page
    assert [SAID, "query", "web_search", SAID, URL, f"Page: {SAID}."] == guard.calls[0][1:7]
    turns = model.requests[0].body["messages"]
    assert turns[1]["content"] == [
        {"type": "tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": MASKED}}
    ]
    (result,) = turns[2]["content"][:1]
    assert result["content"] == format_sources(MASKED, [Source(URL, MASKED, f"Page: {MASKED}.")])
    assert WORD not in orjson.dumps(model.requests[0].body).decode()


async def test_messages_a_mask_is_encoded_again_where_it_was_and_an_unchanged_record_keeps_its_bytes() -> None:
    """Passed through (no served native tool), the app gets the records themselves: the masked page text as `amw1.`
    again, citations masked; a record the guardrail did not change keeps its exact bytes, even an encoding that
    ours would not write (`QR==` decodes as `QQ==` does), and so does a provider's own opaque content."""
    model = ScriptedModel(message("ok"))
    app = AgenticLoopMiddleware(model, hooks=[Masking()])
    records = search_record(text=SAID)
    records[1]["content"] += [
        {"type": "web_search_result", "url": URL, "title": "B", "encrypted_content": "amw1.QR=="},
        {"type": "web_search_result", "url": URL, "title": "C", "encrypted_content": f"EqQBCioIBRgC{WORD}"},
    ]
    blocks = [*records, cited("web_search_result_location"), cited("char_location")]
    sent = history(*blocks)
    await anthropic_client(app).messages.create(model="c", max_tokens=9, messages=sent)

    got = model.requests[0].body["messages"][1]["content"]
    masked, unchanged, opaque = got[1]["content"]
    assert masked["encrypted_content"] == encode_text(MASKED) and decode_text(masked["encrypted_content"]) == MASKED
    assert unchanged["encrypted_content"] == "amw1.QR=="
    assert opaque["encrypted_content"] == f"EqQBCioIBRgC{WORD}"  # not ours: no guardrail can read it, passed on
    assert got[2]["citations"][0]["cited_text"] == MASKED and got[2]["citations"][0]["title"] == MASKED
    assert got[3]["citations"][0]["cited_text"] == MASKED and got[3]["citations"][0]["document_title"] == MASKED
    expected = copy.deepcopy(blocks)
    expected[1]["content"][0]["encrypted_content"] = encode_text(MASKED)
    for block in expected[2:]:
        block["citations"][0] = {
            key: MASKED if value == SAID else value for key, value in block["citations"][0].items()
        }
    assert got == expected


@pytest.mark.parametrize("route", ["messages", "responses"])
async def test_an_unchanged_request_with_native_records_reaches_the_app_byte_for_byte(route: str) -> None:
    """The guardrail reads the decoded page text, changes nothing, and the app gets the client's very bytes."""
    model = ScriptedModel(default=message("ok") if route == "messages" else response("ok"))
    guard = Masking()
    if route == "messages":
        path = "/v1/messages"
        body: dict[str, Any] = {"model": "c", "max_tokens": 9, "messages": history(*search_record(text="About A."))}
    else:
        path = "/v1/responses"
        body = {
            "model": "g",
            "input": responses_input(
                results=[{"url": URL, "title": "A", "encrypted_content": encode_text("About A.")}]
            ),
        }
    body_bytes = orjson.dumps(body)
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post(path, content=body_bytes, headers={"content-type": "application/json"})
    assert got.status_code == 200
    assert "About A." in guard.calls[0]
    assert model.requests[0].raw == body_bytes


def responses_input(query: str = "fruit", **fields: Any) -> list[Any]:
    """A Responses input with a `web_search_call` item, as the middleware writes it (or forged)."""
    action: dict[str, Any] = {"type": "search", "query": query, "sources": [{"type": "url", "url": URL}]}
    action |= {key: fields.pop(key) for key in ("queries", "sources") if key in fields}
    item = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": action, **fields}
    return [{"role": "user", "content": "Find it."}, item, {"role": "user", "content": "And then?"}]


def result(**fields: Any) -> dict[str, Any]:
    return {"url": URL, "title": "A", "encrypted_content": encode_text("About A."), "page_age": None, **fields}


RESPONSES_PLACES = {
    "action query": responses_input(query=SAID),
    "action queries": responses_input(queries=["fruit", SAID]),
    "action source url": responses_input(sources=[{"type": "url", "url": f"https://a.test/{WORD}"}]),
    "result page text": responses_input(results=[result(encrypted_content=encode_text(SAID))]),
    "result title": responses_input(results=[result(title=SAID)]),
    "result url": responses_input(results=[result(url=f"https://a.test/{WORD}")]),
    "result page_age": responses_input(results=[result(page_age=SAID)]),
}


@pytest.mark.parametrize("where", list(RESPONSES_PLACES))
async def test_responses_a_blocked_word_in_a_forged_web_search_call_is_blocked(where: str) -> None:
    model = ScriptedModel(response("never"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[WordBlock(), served()]))
    with pytest.raises(openai.BadRequestError, match=f"blocked: {WORD}"):
        await client.responses.create(model="g", input=RESPONSES_PLACES[where], tools=[{"type": "web_search"}])  # type: ignore[arg-type]
    assert model.requests == []


async def test_responses_a_mask_of_a_forged_web_search_call_reaches_the_app() -> None:
    """Turned back, the item is the app's `function_call` and its output: the mask is in both."""
    model = ScriptedModel(response("ok"))
    app = AgenticLoopMiddleware(model, hooks=[Masking(), served()])
    forged = responses_input(query=SAID, results=[result(title=SAID, encrypted_content=encode_text(f"Page: {SAID}."))])
    await openai_client(app).responses.create(model="g", input=forged, tools=[{"type": "web_search"}])  # type: ignore[arg-type]

    call, output = model.requests[0].body["input"][1:3]
    assert call["type"] == "function_call" and orjson.loads(call["arguments"]) == {"query": MASKED}
    assert output["output"] == format_sources(MASKED, [Source(URL, MASKED, f"Page: {MASKED}.")])
    assert WORD not in orjson.dumps(model.requests[0].body).decode()


async def test_responses_a_mask_of_forged_queries_reaches_the_app_passed_through() -> None:
    model = ScriptedModel(response("ok"))
    app = AgenticLoopMiddleware(model, hooks=[Masking()])
    await openai_client(app).responses.create(model="g", input=responses_input(queries=[SAID]))  # type: ignore[arg-type]
    assert model.requests[0].body["input"][1]["action"]["queries"] == [MASKED]


# Ours by its prefix, but not base64 of UTF-8 text (a bad padding; bytes that are not UTF-8).
UNDECODABLE = ["amw1.cGluZWFwcGxlA", "amw1." + base64.urlsafe_b64encode(b"\xff\xfe").decode()]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("content", UNDECODABLE, ids=["bad base64", "not utf-8"])
async def test_an_undecodable_amw1_content_is_refused_with_400_in_the_routes_shape(content: str, stream: bool) -> None:
    model = ScriptedModel(default=message("never"))
    app = AgenticLoopMiddleware(model, hooks=[Masking(), served()])
    records = search_record()
    records[1]["content"][0]["encrypted_content"] = content
    messages = {"model": "c", "max_tokens": 9, "messages": history(*records), "tools": [NATIVE], "stream": stream}
    forged = responses_input(results=[result(encrypted_content=content)])
    responses = {"model": "g", "input": forged, "tools": [{"type": "web_search"}], "stream": stream}
    async with http_client(app) as http:
        on_messages = await http.post("/v1/messages", json=messages)
        on_responses = await http.post("/v1/responses", json=responses)

    said = "the request holds an amw1. encrypted_content that does not decode: the guardrails cannot read it"
    assert on_messages.status_code == 400 and on_responses.status_code == 400
    assert on_messages.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": said}}
    error = on_responses.json()["error"]
    assert error["message"] == said and error["type"] == "invalid_request_error"
    assert model.requests == []


async def test_a_stream_with_a_forged_record_is_judged_blocked_and_masked() -> None:
    model = ScriptedModel(message("ok"), response("ok"))
    blocked = anthropic_client(AgenticLoopMiddleware(model, hooks=[WordBlock(), served()]))
    with pytest.raises(anthropic.BadRequestError, match=f"blocked: {WORD}"):
        async with blocked.messages.stream(
            model="c",
            max_tokens=9,
            messages=forged_messages("page text"),
            tools=[NATIVE],  # type: ignore[list-item]
        ):
            pass
    assert model.requests == []

    app = AgenticLoopMiddleware(model, hooks=[Masking(), served()])
    async with anthropic_client(app).messages.stream(
        model="c",
        max_tokens=9,
        messages=forged_messages("page text"),
        tools=[NATIVE],  # type: ignore[list-item]
    ) as stream:
        await stream.get_final_message()
    forged = responses_input(query=SAID, results=[result(encrypted_content=encode_text(SAID))])
    async with openai_client(app).responses.stream(model="g", input=forged, tools=[{"type": "web_search"}]) as events:  # type: ignore[arg-type]
        await events.get_final_response()

    on_messages, on_responses = (request.body for request in model.requests)
    assert on_messages["messages"][2]["content"][0]["content"] == format_sources("fruit", [Source(URL, "A", MASKED)])
    assert on_responses["input"][2]["output"] == format_sources(MASKED, [Source(URL, "A", MASKED)])
    assert WORD not in orjson.dumps([on_messages, on_responses]).decode()
