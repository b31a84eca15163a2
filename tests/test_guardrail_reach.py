"""A guardrail is given every word of the request the model reads, not only the `text` fields LiteLLM's proxy reads.

A word a guardrail blocks must not reach the model in a document's text source, a search result, a refusal, a
reasoning summary, an MCP call's output, or the arguments of a tool call in the history; a request whose texts
stand where no guardrail can read them (a message that is a string, `instructions` that are a list) is refused.
Each guardrail is a real LiteLLM `CustomGuardrail`; the clients are the official SDKs.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import orjson
import pytest
from conftest import anthropic_client, http_client, openai_client
from fastapi import HTTPException
from guardrail_kit import SAID, WORD, Guard, Masking, WordBlock

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel, chat_completion, message, response

TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}
DOCUMENT_TEXT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": SAID}}
SEARCH_RESULT = {"type": "search_result", "source": "s", "title": "t", "content": [{"type": "text", "text": SAID}]}


def messages_of(where: str) -> list[Any]:
    """Messages with WORD in one place the model reads outside a `text` LiteLLM's proxy reads."""
    blocks: dict[str, Any] = {
        "document text source": DOCUMENT_TEXT,
        "document content source": {"type": "document", "source": {"type": "content", "content": SAID}},
        "document title": {**DOCUMENT_TEXT, "title": SAID, "source": {**DOCUMENT_TEXT["source"], "data": "x"}},
        "search result": SEARCH_RESULT,
    }
    if where in blocks:
        return [{"role": "user", "content": [blocks[where]]}]
    call = {**TOOL_USE, "input": {"q": SAID}} if where == "tool_use input" else TOOL_USE
    inner = {"tool_result holding a document": DOCUMENT_TEXT, "tool_result holding a search result": SEARCH_RESULT}
    result = [inner[where]] if where in inner else "x"
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result}]},
    ]


@pytest.mark.parametrize(
    "where",
    [
        "document text source",
        "document content source",
        "document title",
        "search result",
        "tool_result holding a document",
        "tool_result holding a search result",
        "tool_use input",
    ],
)
async def test_messages_a_blocked_word_in_documents_results_and_tool_calls_is_blocked(where: str) -> None:
    model = ScriptedModel(message("never"))
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[WordBlock("arguments")]))
    with pytest.raises(anthropic.BadRequestError) as raised:
        await client.messages.create(model="c", max_tokens=9, messages=messages_of(where))
    assert raised.value.status_code == 400
    assert model.requests == []


CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "read", "arguments": orjson.dumps({"q": SAID}).decode()},
}


def chat_of(where: str) -> list[Any]:
    if where == "assistant refusal":
        return [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "refusal": SAID},
            {"role": "user", "content": "go"},
        ]
    if where == "legacy function_call":
        said = {"role": "assistant", "content": None, "function_call": CALL["function"]}
        return [{"role": "user", "content": "hi"}, said, {"role": "function", "name": "read", "content": "x"}]
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "x"},
    ]


@pytest.mark.parametrize("where", ["assistant refusal", "tool_calls arguments", "legacy function_call"])
async def test_chat_a_blocked_word_in_refusals_and_tool_calls_is_blocked(where: str) -> None:
    model = ScriptedModel(chat_completion("never"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[WordBlock("arguments")]))
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="g", messages=chat_of(where))
    assert model.requests == []


def responses_input(where: str) -> list[Any]:
    return {
        "refusal part": [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": SAID}]}],
        "reasoning summary": [{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": SAID}]}],
        "mcp_call output": [
            {"type": "mcp_call", "id": "m1", "server_label": "s", "name": "read", "arguments": "{}", "output": SAID}
        ],
        "function_call arguments": [
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": orjson.dumps({"q": SAID}).decode()},
            {"type": "function_call_output", "call_id": "c1", "output": "x"},
        ],
        "custom_tool_call input": [
            {"type": "custom_tool_call", "call_id": "c1", "name": "read", "input": SAID},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "x"},
        ],
    }[where]


@pytest.mark.parametrize(
    "where",
    ["refusal part", "reasoning summary", "mcp_call output", "function_call arguments", "custom_tool_call input"],
)
async def test_responses_a_blocked_word_in_refusals_summaries_and_calls_is_blocked(where: str) -> None:
    model = ScriptedModel(response("never"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[WordBlock("arguments")]))
    with pytest.raises(openai.BadRequestError):
        await client.responses.create(model="g", input=responses_input(where))  # type: ignore[arg-type]
    assert model.requests == []


async def test_tool_calls_come_as_litellms_proxy_gives_them_openai_calls_on_every_route() -> None:
    guard = WordBlock("arguments")
    model = ScriptedModel(message("ok"), chat_completion("ok"))
    app = AgenticLoopMiddleware(model, hooks=[guard])
    said = {"role": "assistant", "content": [{**TOOL_USE, "input": {"q": 1}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]}
    await anthropic_client(app).messages.create(
        model="c",
        max_tokens=9,
        messages=[{"role": "user", "content": "hi"}, said, result],  # type: ignore[list-item]
    )
    chat_call = {**CALL, "function": {"name": "read", "arguments": "{}"}}
    await openai_client(app).chat.completions.create(
        model="g",
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [chat_call]},  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": "call_1", "content": "x"},
        ],
    )
    function = {"name": "read", "arguments": '{"q":1}'}
    assert guard.tool_calls == [[{"id": "toolu_1", "type": "function", "function": function}], [chat_call]]


async def test_a_guardrails_edit_of_a_document_and_of_tool_calls_reaches_the_app() -> None:
    model = ScriptedModel(message("ok"), chat_completion("ok"), response("ok"))
    app = AgenticLoopMiddleware(model, hooks=[Masking("arguments")])
    messages = messages_of("tool_use input")
    messages[0] = {"role": "user", "content": [DOCUMENT_TEXT]}
    await anthropic_client(app).messages.create(model="c", max_tokens=9, messages=messages)
    await openai_client(app).chat.completions.create(model="g", messages=chat_of("tool_calls arguments"))
    await openai_client(app).responses.create(model="g", input=responses_input("function_call arguments"))  # type: ignore[arg-type]

    sent = [request.body for request in model.requests]
    assert sent[0]["messages"][0]["content"][0]["source"]["data"] == "the masked is here"
    assert sent[0]["messages"][1]["content"][0]["input"] == {"q": "the masked is here"}
    assert orjson.loads(sent[1]["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"q": "the masked is here"}
    assert orjson.loads(sent[2]["input"][0]["arguments"]) == {"q": "the masked is here"}
    assert WORD not in orjson.dumps(sent).decode()


@pytest.mark.parametrize(
    "route, body",
    [
        ("/v1/messages", {"model": "c", "max_tokens": 9, "messages": [SAID]}),
        ("/v1/chat/completions", {"model": "g", "messages": [{"role": "user", "content": "hi"}, SAID]}),
        ("/v1/responses", {"model": "g", "input": [SAID]}),
        ("/v1/responses", {"model": "g", "input": "hi", "instructions": [SAID]}),
        ("/v1/responses", {"model": "g", "input": "hi", "instructions": [{"role": "system", "content": SAID}]}),
    ],
)
async def test_texts_where_no_guardrail_can_read_them_are_refused(route: str, body: dict[str, Any]) -> None:
    model = ScriptedModel(default=message("never"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[WordBlock("arguments")])) as http:
        got = await http.post(route, json=body)
    assert got.status_code == 400
    assert "the guardrails cannot read it" in got.text
    assert model.requests == []


async def test_images_come_to_the_guardrail_as_litellms_proxy_gives_them() -> None:
    guard = WordBlock("arguments")
    model = ScriptedModel(message("ok"), chat_completion("ok"), response("ok"))
    app = AgenticLoopMiddleware(model, hooks=[guard])
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}
    await anthropic_client(app).messages.create(
        model="c",
        max_tokens=9,
        messages=[{"role": "user", "content": [image]}],  # type: ignore[list-item]
    )
    part = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    await openai_client(app).chat.completions.create(model="g", messages=[{"role": "user", "content": [part]}])  # type: ignore[list-item]
    given = {"type": "input_image", "image_url": "https://example.com/b.png", "detail": "auto"}
    await openai_client(app).responses.create(model="g", input=[{"role": "user", "content": [given]}])  # type: ignore[list-item]

    assert guard.images == [
        ["data:image/png;base64,iVBOR"],
        ["https://example.com/a.png"],
        ["https://example.com/b.png"],
    ]


class InPlace(Guard):
    """Masks WORD by editing the lists it is given in place; returns them, or only a dict of its texts."""

    def __init__(self, returns: str) -> None:
        super().__init__("in-place")
        self.returns = returns

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        texts = inputs["texts"]
        for index, text in enumerate(texts):
            texts[index] = text.replace(WORD, "masked")
        for call in inputs.get("tool_calls") or ():
            call["function"]["arguments"] = call["function"]["arguments"].replace(WORD, "masked")
        return inputs if self.returns == "inputs" else {"texts": texts}


@pytest.mark.parametrize("returns", ["inputs", "a dict of its texts"])
async def test_edits_a_guardrail_makes_in_place_reach_the_app(returns: str) -> None:
    model = ScriptedModel(message("ok"), chat_completion("ok"), response("ok"))
    app = AgenticLoopMiddleware(model, hooks=[InPlace(returns)])
    await anthropic_client(app).messages.create(
        model="c", max_tokens=9, system=SAID, messages=messages_of("tool_use input")
    )
    await openai_client(app).chat.completions.create(
        model="g", messages=[*chat_of("tool_calls arguments"), {"role": "user", "content": SAID}]
    )
    await openai_client(app).responses.create(model="g", instructions=SAID, input=SAID)

    assert len(model.requests) == 3
    assert WORD not in orjson.dumps([request.body for request in model.requests]).decode()


class DuringCall(Masking):
    """A masking guardrail that also blocks, mounted as LiteLLM's `during_call` (beside the model call)."""

    def __init__(self) -> None:
        super().__init__("arguments", name="during", event_hook="during_call")

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        if any("forbidden" in text for text in inputs["texts"]):
            raise HTTPException(status_code=400, detail="blocked during the call")
        return await super().apply_guardrail(inputs, request_data, input_type, logging_obj)


async def test_a_during_call_guardrail_judges_the_request_and_its_edits_stay_its_own() -> None:
    model = ScriptedModel(chat_completion("ok"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[DuringCall()]))
    with pytest.raises(openai.BadRequestError, match="blocked during the call"):
        await client.chat.completions.create(model="g", messages=[{"role": "user", "content": "forbidden"}])
    assert model.requests == []

    await client.chat.completions.create(model="g", messages=[{"role": "user", "content": SAID}])
    assert model.requests[0].body["messages"] == [{"role": "user", "content": SAID}]  # as in LiteLLM: not edited


def touched(value: Any) -> None:
    """Marks every JSON object in `value`, however deep, in place."""
    if isinstance(value, dict):
        value["touched_by_guardrail"] = True
        for item in list(value.values()):
            touched(item)
    elif isinstance(value, list):
        for item in value:
            touched(item)


class DuringCallInPlace(Guard):
    """A `during_call` guardrail that edits, in place, every object of the request it is given, however deep."""

    def __init__(self) -> None:
        super().__init__("during-in-place", "during_call")

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        touched([value for name, value in request_data.items() if name != "litellm_logging_obj"])
        touched(inputs)
        return inputs


NESTED = {
    "/v1/chat/completions": {
        "model": "g",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}},
        "metadata": {"k": "v"},
    },
    "/v1/messages": {
        "model": "g",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "u"},
    },
    "/v1/responses": {
        "model": "g",
        "input": "hi",
        "text": {"format": {"type": "text"}},
        "reasoning": {"effort": "low"},
    },
}


@pytest.mark.parametrize("path", list(NESTED))
async def test_a_during_call_guardrails_edits_in_place_however_deep_never_reach_the_app(path: str) -> None:
    answer = {"/v1/chat/completions": chat_completion("ok"), "/v1/messages": message("ok")}.get(path, response("ok"))
    model = ScriptedModel(answer)
    async with http_client(AgenticLoopMiddleware(model, hooks=[DuringCallInPlace()])) as client:
        reply = await client.post(path, json=NESTED[path])
    assert reply.status_code == 200, reply.text
    assert b"touched_by_guardrail" not in model.requests[0].raw
    assert model.requests[0].body == NESTED[path]


async def test_a_guardrail_that_never_judges_a_request_here_is_named_at_start(caplog: pytest.LogCaptureFixture) -> None:
    AgenticLoopMiddleware(ScriptedModel(), hooks=[WordBlock(event_hook="post_call")])
    assert any(
        "event_hook 'post_call'" in record.getMessage() and "never act" in record.getMessage()
        for record in caplog.records
    )
