"""Guardrails fail closed on the shapes and fields a first reading missed (hostile review, guard F2 F4 F5 F6).

A tool call of a shape no guardrail reads (a Chat call that is a string, `tool_calls` that is an object, arguments
that are an object: LiteLLM's content filter reads string arguments only) is refused, not passed on; the texts
the model reads outside the messages (a structured output's schema, a stored prompt's variables) are given and
masked in place; a known record's nested `status` and an image field holding words are given; and a request
nested past the walk's limit is a 400 in the route's shape, not a guardrail's 500. Guardrails are real LiteLLM
`CustomGuardrail`s; the client is httpx on the middleware, the app a scripted model.
"""

from __future__ import annotations

from typing import Any

import media_kit
import orjson
import pytest
from conftest import http_client
from guardrail_kit import SAID, WORD, Masking, WordBlock

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel, chat_completion, message, response

U = {"role": "user", "content": "hi"}


ROUTES = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
ANSWERS = {"chat": chat_completion("never"), "responses": response("never"), "messages": message("never")}


def error_message(route: str, got: Any) -> str:
    """The refusal's message, read in the route's own error shape."""
    body = got.json()
    if route == "messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    else:
        assert body["error"]["type"] == "invalid_request_error"
    message_: str = body["error"]["message"]
    return message_


async def refusal(route: str, body: dict[str, Any]) -> str:
    """The message of the 400 in the route's shape that `body` is refused with; the app is not called."""
    model = ScriptedModel(default=ANSWERS[route])
    async with http_client(AgenticLoopMiddleware(model, hooks=[WordBlock("all")])) as http:
        got = await http.post(ROUTES[route], json={"model": "g", **body})
    assert got.status_code == 400
    assert model.requests == []
    return error_message(route, got)


UNREADABLE_CALLS = {
    "chat tool_calls entry a string": ("chat", {"messages": [U, {"role": "assistant", "tool_calls": [SAID]}, U]}),
    "chat tool_calls an object": (
        "chat",
        {"messages": [U, {"role": "assistant", "tool_calls": {"id": "c", "function": {"name": "f"}}}, U]},
    ),
    "chat function_call a string": ("chat", {"messages": [U, {"role": "assistant", "function_call": SAID}, U]}),
    "chat arguments an object": (
        "chat",
        {
            "messages": [
                U,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"q": SAID}}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c", "content": "ok"},
            ]
        },
    ),
    "chat legacy arguments an object": (
        "chat",
        {"messages": [U, {"role": "assistant", "function_call": {"name": "f", "arguments": {"q": SAID}}}, U]},
    ),
    "responses arguments an object": (
        "responses",
        {
            "input": [
                U,
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": {"q": SAID}},
                {"type": "function_call_output", "call_id": "c", "output": "ok"},
            ]
        },
    ),
    "messages tool_use input a string": (
        "messages",
        {
            "max_tokens": 5,
            "messages": [
                U,
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": SAID}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]},
            ],
        },
    ),
}


@pytest.mark.parametrize("case", list(UNREADABLE_CALLS))
async def test_a_tool_call_of_a_shape_no_guardrail_reads_is_refused_in_the_routes_shape(case: str) -> None:
    route, body = UNREADABLE_CALLS[case]
    assert (await refusal(route, body)).endswith("the guardrails cannot read it")


SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "description": SAID}}}
OUTSIDE = {
    "chat response_format schema": (
        "chat",
        {"messages": [U], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}},
        ("response_format", "json_schema", "schema", "properties", "answer", "description"),
    ),
    "chat response_format description": (
        "chat",
        {
            "messages": [U],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "description": SAID}},
        },
        ("response_format", "json_schema", "description"),
    ),
    "responses text.format schema": (
        "responses",
        {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": SCHEMA}}},
        ("text", "format", "schema", "properties", "answer", "description"),
    ),
    "responses prompt variable": (
        "responses",
        {"input": "hi", "prompt": {"id": "pmpt_1", "variables": {"topic": SAID}}},
        ("prompt", "variables", "topic"),
    ),
    "responses prompt variable input_text": (
        "responses",
        {"input": "hi", "prompt": {"id": "pmpt_1", "variables": {"topic": {"type": "input_text", "text": SAID}}}},
        ("prompt", "variables", "topic", "text"),
    ),
    "messages output_format schema": (
        "messages",
        {"max_tokens": 5, "messages": [U], "output_format": {"type": "json_schema", "schema": SCHEMA}},
        ("output_format", "schema", "properties", "answer", "description"),
    ),
    "messages output_config.format schema": (  # structured outputs as released (fourth review, F1)
        "messages",
        {
            "max_tokens": 5,
            "messages": [U],
            "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": SCHEMA}},
        },
        ("output_config", "format", "schema", "properties", "answer", "description"),
    ),
    "messages output_config.format made-up field": (
        "messages",
        {
            "max_tokens": 5,
            "messages": [U],
            "output_config": {"format": {"type": "json_schema", "schema": {}, "note": SAID}},
        },
        ("output_config", "format", "note"),
    ),
    # the format objects' own type, and fields made up on them (third review, a17)
    "chat response_format type of words": (
        "chat",
        {"messages": [U], "response_format": {"type": SAID, "json_schema": {"name": "x", "schema": {}}}},
        ("response_format", "type"),
    ),
    "chat response_format made-up field": (
        "chat",
        {"messages": [U], "response_format": {"type": "json_object", "note": SAID}},
        ("response_format", "note"),
    ),
    "chat json_schema made-up field": (
        "chat",
        {"messages": [U], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "note": SAID}}},
        ("response_format", "json_schema", "note"),
    ),
    "responses text.format type of words": (
        "responses",
        {"input": "hi", "text": {"format": {"type": SAID, "name": "x", "schema": {}}}},
        ("text", "format", "type"),
    ),
    "responses text.format made-up field": (
        "responses",
        {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {}, "note": SAID}}},
        ("text", "format", "note"),
    ),
    "messages output_format type of words": (
        "messages",
        {"max_tokens": 5, "messages": [U], "output_format": {"type": SAID, "schema": {}}},
        ("output_format", "type"),
    ),
    "messages output_format made-up field": (
        "messages",
        {"max_tokens": 5, "messages": [U], "output_format": {"type": "json_schema", "schema": {}, "note": SAID}},
        ("output_format", "note"),
    ),
}


@pytest.mark.parametrize(
    ("route", "body"),
    [
        (
            "chat",
            {
                "messages": [U],
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "description": "d", "schema": {}, "strict": True},
                },
            },
        ),
        ("chat", {"messages": [U], "response_format": {"type": "json_object"}}),
        (
            "responses",
            {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {}, "strict": True}}},
        ),
        ("messages", {"max_tokens": 5, "messages": [U], "output_format": {"type": "json_schema", "schema": {}}}),
        (
            "messages",
            {"max_tokens": 5, "messages": [U], "output_config": {"format": {"type": "json_schema", "schema": {}}}},
        ),
    ],
    ids=["chat json_schema", "chat json_object", "responses", "messages", "messages output_config"],
)
async def test_a_structured_outputs_own_fields_are_no_texts(route: str, body: dict[str, Any]) -> None:
    """An ordinary format's type and `strict` flag are the API's, not words: only its name and description are given."""
    guard = Masking()
    model = ScriptedModel(default={**ANSWERS[route]})
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post(ROUTES[route], json={"model": "g", **body})
    assert got.status_code == 200
    assert [text for text in guard.texts if text not in ("hi", "x", "d")] == []


@pytest.mark.parametrize("case", list(OUTSIDE))
async def test_a_blocked_word_in_a_schema_or_prompt_variable_is_refused(case: str) -> None:
    route, body, _ = OUTSIDE[case]
    assert (await refusal(route, body)) == f"blocked: {WORD}"


@pytest.mark.parametrize("case", list(OUTSIDE))
async def test_a_mask_in_a_schema_or_prompt_variable_is_written_where_the_word_was(case: str) -> None:
    route, body, path = OUTSIDE[case]
    model = ScriptedModel(default={**ANSWERS[route]})
    async with http_client(AgenticLoopMiddleware(model, hooks=[Masking()])) as http:
        got = await http.post(ROUTES[route], json={"model": "g", **body})
    assert got.status_code == 200
    sent: Any = model.requests[0].body
    for key in path:
        sent = sent[key]
    assert sent == "the masked is here"
    assert WORD not in model.requests[0].raw.decode()


PNG = media_kit.PNG
BASH = {"type": "bash_code_execution_result", "stdout": "", "stderr": "", "return_code": 0, "content": []}
RECORDS = {
    "nested status in a bash result": (
        "messages",
        {
            "max_tokens": 5,
            "messages": [
                U,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "bash_code_execution", "input": {}},
                        {
                            "type": "bash_code_execution_tool_result",
                            "tool_use_id": "srvtoolu_1",
                            "content": {**BASH, "status": SAID},
                        },
                    ],
                },
                U,
            ],
        },
    ),
    "nested type in a file search result": (
        "responses",
        {"input": [U, {"type": "file_search_call", "id": "fs", "queries": [], "results": [{"type": SAID}]}, U]},
    ),
    "computer_call_output output of words": (
        "responses",
        {"input": [U, {"type": "computer_call_output", "call_id": "c", "output": SAID}, U]},
    ),
    "computer screenshot url of words": (
        "responses",
        {
            "input": [
                U,
                {
                    "type": "computer_call_output",
                    "call_id": "c",
                    "output": {"type": "computer_screenshot", "image_url": SAID},
                },
                U,
            ]
        },
    ),
    "image_generation_call result of words": (
        "responses",
        {"input": [U, {"type": "image_generation_call", "id": "ig", "status": "completed", "result": SAID}, U]},
    ),
}


@pytest.mark.parametrize("case", list(RECORDS))
async def test_words_nested_in_a_record_or_written_where_an_image_belongs_are_judged(case: str) -> None:
    route, body = RECORDS[case]
    assert (await refusal(route, body)) == f"blocked: {WORD}"


async def test_an_image_where_an_image_belongs_is_not_given_as_a_text() -> None:
    guard = WordBlock("all")
    model = ScriptedModel(default=response("ok"))
    screenshot = {"type": "computer_screenshot", "image_url": f"data:image/png;base64,{PNG}"}
    items = [
        U,
        {"type": "image_generation_call", "id": "ig", "status": "completed", "result": PNG},
        {"type": "computer_call_output", "call_id": "c", "output": screenshot},
    ]
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/responses", json={"model": "g", "input": items})
    assert got.status_code == 200
    assert guard.texts == ["hi"]
    assert model.requests[0].body["input"] == items


def nested_tool_result(levels: int) -> list[Any]:
    inner: list[Any] = [{"type": "text", "text": SAID}]
    for _ in range(levels):
        inner = [{"type": "tool_result", "tool_use_id": "t", "content": inner}]
    return inner


def nested_document(levels: int) -> list[Any]:
    inner: list[Any] = [{"type": "text", "text": SAID}]
    for _ in range(levels):
        inner = [{"type": "document", "source": {"type": "content", "content": inner}}]
    return inner


@pytest.mark.parametrize("content", [nested_tool_result(100), nested_document(80)], ids=["tool_result", "document"])
async def test_content_nested_past_the_limit_is_a_400_in_the_routes_shape_not_a_guardrails_500(
    content: list[Any],
) -> None:
    model = ScriptedModel(default=message("never"))
    body = {"model": "g", "max_tokens": 5, "messages": [{"role": "user", "content": content}]}
    async with http_client(AgenticLoopMiddleware(model, hooks=[WordBlock("all")])) as http:
        got = await http.post("/v1/messages", content=orjson.dumps(body), headers={"content-type": "application/json"})
    assert got.status_code == 400
    assert error_message("messages", got) == (
        "the request holds a value nested deeper than 64 levels: the guardrails cannot read it"
    )
    assert model.requests == []
