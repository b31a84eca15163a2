"""A LiteLLM `CustomGuardrail` that blocks a word cannot be walked around, and its block reaches the client as sent.

Each guardrail here is a real `CustomGuardrail` subclass, as a LiteLLM user writes one; the clients are the
official SDKs. A guardrail sees every text LiteLLM's proxy gives it (system prompts, tool results, instructions),
honours LiteLLM's skip settings, blocks with its own status and message in the route's error shape, and judges
requests that the loop does not take part in (streams with `streaming=False`, a loop limit of 0); a request it
cannot judge (a body over `max_body_bytes`, a body that is not a JSON object, a websocket) is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from conftest import anthropic_client, http_client, openai_client
from fastapi import HTTPException
from guardrail_kit import Guard
from litellm.exceptions import BlockedPiiEntityError, GuardrailRaisedException
from streams import event_stream
from support import ToolHook

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.sse import chat_chunks, messages_events
from agentic_middleware.testing import ScriptedModel, chat_completion, message, response

litellm = pytest.importorskip("litellm")  # imported by guardrail_kit, which set it up to skip the price list

WORD = "pineapple"


class WordBlock(Guard):
    """Blocks any request with WORD in a text it is given, the LiteLLM way; records what it was given."""

    def __init__(self, raise_: Callable[[], BaseException] | None = None, **options: Any) -> None:
        super().__init__("word-block", **options)
        self.raise_ = raise_ or (lambda: HTTPException(status_code=400, detail=f"blocked: {WORD} is not allowed"))
        self.given: list[list[str]] = []
        self.structured: list[list[Any]] = []

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        self.given.append(list(inputs["texts"]))
        self.structured.append(list(inputs.get("structured_messages") or []))
        if any(WORD in text for text in inputs["texts"]):
            raise self.raise_()
        return inputs


class Masking(Guard):
    """Rewrites WORD in every text it is given, returning the texts (LiteLLM writes each back where it was)."""

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        return {**inputs, "texts": [text.replace(WORD, "[masked]") for text in inputs["texts"]]}


TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}
READ_TOOL = {"name": "read", "description": "Read", "input_schema": {"type": "object", "properties": {}}}


def messages_request(where: str) -> dict[str, Any]:
    """A Messages request with WORD in one place."""
    said = f"the {WORD} is here"
    request: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    if where == "system string":
        request["system"] = said
    elif where == "system blocks":
        request["system"] = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": said}]
    elif where == "user text block":
        request["messages"] = [{"role": "user", "content": [{"type": "text", "text": said}]}]
    elif where == "assistant text block":
        request["messages"] += [
            {"role": "assistant", "content": [{"type": "text", "text": said}]},
            {"role": "user", "content": "go on"},
        ]
    else:  # tool_result, its content a string or text blocks
        content: Any = said if where == "tool_result string" else [{"type": "text", "text": said}]
        request["messages"] += [
            {"role": "assistant", "content": [TOOL_USE]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": content}]},
        ]
        request["tools"] = [READ_TOOL]
    return request


MESSAGES_PLACES = [
    "system string",
    "system blocks",
    "user text block",
    "assistant text block",
    "tool_result string",
    "tool_result blocks",
]


@pytest.mark.parametrize("where", MESSAGES_PLACES)
async def test_messages_a_blocked_word_anywhere_is_blocked_with_the_guardrails_400(where: str) -> None:
    model = ScriptedModel(message("never"))
    guard = WordBlock()
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[guard]))
    with pytest.raises(anthropic.BadRequestError) as raised:
        await client.messages.create(model="claude-x", max_tokens=50, **messages_request(where))

    assert raised.value.status_code == 400
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": f"blocked: {WORD} is not allowed"},
    }
    assert model.requests == []
    assert len(guard.given) == 1


async def test_messages_texts_come_as_litellms_proxy_gives_them_system_first() -> None:
    model = ScriptedModel(message("ok"))
    guard = WordBlock()
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[guard]))
    await client.messages.create(
        model="claude-x",
        max_tokens=50,
        system=[{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}],
        messages=[
            {"role": "user", "content": "U1"},
            {"role": "assistant", "content": [{"type": "text", "text": "A1"}, TOOL_USE]},  # type: ignore[list-item]
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "T1"}]},
                    {"type": "text", "text": "U2"},
                ],
            },
        ],
        tools=[READ_TOOL],  # type: ignore[list-item]
    )
    assert guard.given == [["S1", "S2", "U1", "A1", "T1", "U2"]]
    assert guard.structured[0][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}],
    }


CHAT_PLACES = ["system", "user", "user text part", "assistant", "tool"]


def chat_messages(where: str) -> list[Any]:
    said = f"the {WORD} is here"
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    if where == "system":
        messages.insert(0, {"role": "system", "content": said})
    elif where == "user":
        messages[0]["content"] = said
    elif where == "user text part":
        messages[0]["content"] = [{"type": "text", "text": said}]
    elif where == "assistant":
        messages += [{"role": "assistant", "content": said}, {"role": "user", "content": "go on"}]
    else:
        call = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": said},
        ]
    return messages


@pytest.mark.parametrize("where", CHAT_PLACES)
async def test_chat_a_blocked_word_anywhere_is_blocked_with_the_guardrails_400(where: str) -> None:
    model = ScriptedModel(chat_completion("never"))
    guard = WordBlock()
    client = openai_client(AgenticLoopMiddleware(model, hooks=[guard]))
    with pytest.raises(openai.BadRequestError) as raised:
        await client.chat.completions.create(model="gpt-x", messages=chat_messages(where))

    assert raised.value.status_code == 400
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["message"] == f"blocked: {WORD} is not allowed"
    assert raised.value.body["type"] == "invalid_request_error"
    assert model.requests == []


RESPONSES_PLACES = ["instructions", "input string", "input message", "function_call_output"]


def responses_request(where: str) -> dict[str, Any]:
    said = f"the {WORD} is here"
    if where == "instructions":
        return {"instructions": said, "input": "hi"}
    if where == "input string":
        return {"input": said}
    if where == "input message":
        return {"input": [{"role": "user", "content": [{"type": "input_text", "text": said}]}]}
    return {
        "input": [
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": said},
        ]
    }


@pytest.mark.parametrize("where", RESPONSES_PLACES)
async def test_responses_a_blocked_word_anywhere_is_blocked_with_the_guardrails_400(where: str) -> None:
    model = ScriptedModel(response("never"))
    guard = WordBlock()
    client = openai_client(AgenticLoopMiddleware(model, hooks=[guard]))
    with pytest.raises(openai.BadRequestError) as raised:
        await client.responses.create(model="gpt-x", **responses_request(where))

    assert raised.value.status_code == 400
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["message"] == f"blocked: {WORD} is not allowed"
    assert model.requests == []


# --- LiteLLM's skip settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["the guardrail's own", "LiteLLM's global"])
async def test_skip_settings_leave_system_and_tool_texts_out_as_in_litellm(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if how == "the guardrail's own":
        guard = WordBlock()
        guard.skip_system_message_in_guardrail = True  # as LiteLLM's proxy sets them from litellm_params
        guard.skip_tool_message_in_guardrail = True
    else:
        monkeypatch.setattr(litellm, "skip_system_message_in_guardrail", True)
        monkeypatch.setattr(litellm, "skip_tool_message_in_guardrail", True)
        guard = WordBlock()
    model = ScriptedModel(message("ok"), chat_completion("ok"), response("ok"))
    app = AgenticLoopMiddleware(model, hooks=[guard])
    request = messages_request("tool_result string")
    await anthropic_client(app).messages.create(model="c", max_tokens=9, system=f"{WORD} sys", **request)
    await openai_client(app).chat.completions.create(
        model="g", messages=[{"role": "system", "content": f"{WORD} sys"}, *chat_messages("tool")]
    )
    await openai_client(app).responses.create(model="g", instructions=f"{WORD} sys", **responses_request("tool"))

    assert len(model.requests) == 3  # nothing blocked: the word was only where the settings skip
    assert guard.given == [["hi"], ["hi"], []]
    # A guardrail's own False wins over LiteLLM's global True, as in LiteLLM.
    if how == "LiteLLM's global":
        strict = WordBlock()
        strict.skip_system_message_in_guardrail = False
        with pytest.raises(anthropic.BadRequestError):
            await anthropic_client(AgenticLoopMiddleware(ScriptedModel(), hooks=[strict])).messages.create(
                model="c", max_tokens=9, system=f"{WORD} sys", messages=[{"role": "user", "content": "hi"}]
            )


# --- Edits a guardrail makes reach the app, each where it came from -----------------------------------------------


async def test_masked_texts_are_written_where_they_came_from_system_and_tool_results_included() -> None:
    model = ScriptedModel(message("ok"), message("ok"), chat_completion("ok"), response("ok"))
    app = AgenticLoopMiddleware(model, hooks=[Masking()])
    said = f"the {WORD} is here"
    await anthropic_client(app).messages.create(
        model="c", max_tokens=9, system=said, **messages_request("tool_result blocks")
    )
    await anthropic_client(app).messages.create(model="c", max_tokens=9, **messages_request("system blocks"))
    await openai_client(app).chat.completions.create(model="g", messages=chat_messages("tool"))
    await openai_client(app).responses.create(model="g", **responses_request("instructions"))

    first, second, chat, responses = (request.body for request in model.requests)
    assert first["system"] == "the [masked] is here"
    assert first["messages"][-1]["content"][0]["content"] == [{"type": "text", "text": "the [masked] is here"}]
    assert second["system"] == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "the [masked] is here"}]
    assert chat["messages"][-1]["content"] == "the [masked] is here"
    assert responses["instructions"] == "the [masked] is here"


class SystemRewrite(Guard):
    """Edits the structured messages: the system entry it is given is replaced."""

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        messages = [
            {"role": "system", "content": "Policy first."} if item.get("role") == "system" else item
            for item in inputs["structured_messages"]
        ]
        return {**inputs, "structured_messages": messages}


async def test_a_structured_edit_of_the_system_prompt_reaches_the_app() -> None:
    model = ScriptedModel(message("ok"))
    app = AgenticLoopMiddleware(model, hooks=[SystemRewrite()])
    await anthropic_client(app).messages.create(
        model="c", max_tokens=9, system="Anything goes.", messages=[{"role": "user", "content": "hi"}]
    )
    sent = model.requests[0].body
    assert sent["system"] == "Policy first."
    assert sent["messages"] == [{"role": "user", "content": "hi"}]


# --- A block keeps its status and message -----------------------------------------------------------------------


def retrying_openai(app: Any) -> openai.AsyncOpenAI:
    """The openai SDK as users run it: two retries on 429 and 5xx answers."""
    return openai.AsyncOpenAI(
        api_key="k",
        base_url="http://gateway/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)),
    )


async def test_a_400_block_is_not_retried_by_the_openai_sdk_and_runs_the_guardrail_once() -> None:
    guard = WordBlock()
    client = retrying_openai(AgenticLoopMiddleware(ScriptedModel(), hooks=[guard]))
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="g", messages=chat_messages("user"))
    assert len(guard.given) == 1


@pytest.mark.parametrize(
    ("raised", "status", "error", "message"),
    [
        (lambda: HTTPException(status_code=403, detail="not for you"), 403, "PermissionDeniedError", "not for you"),
        (
            lambda: HTTPException(status_code=429, detail="slow down", headers={"retry-after": "7"}),
            429,
            "RateLimitError",
            "slow down",
        ),
        (
            lambda: HTTPException(status_code=400, detail={"error": "Violated guardrail policy", "word": WORD}),
            400,
            "BadRequestError",
            '{"error":"Violated guardrail policy","word":"pineapple"}',
        ),
        (
            lambda: GuardrailRaisedException("word-block", "no fruit", should_wrap_with_default_message=False),
            400,
            "BadRequestError",
            "no fruit",
        ),
        (lambda: BlockedPiiEntityError("FRUIT", "word-block"), 400, "BadRequestError", "Blocked entity detected"),
    ],
    ids=["403", "429 with retry-after", "dict detail", "GuardrailRaisedException", "BlockedPiiEntityError"],
)
async def test_every_http_refusal_keeps_its_status_and_message_on_every_route(
    raised: Callable[[], BaseException], status: int, error: str, message: str
) -> None:
    model = ScriptedModel()
    app = AgenticLoopMiddleware(model, hooks=[WordBlock(raised)])
    caught: list[anthropic.APIStatusError | openai.APIStatusError] = []
    with pytest.raises(getattr(anthropic, error)) as on_messages:
        await anthropic_client(app).messages.create(model="c", max_tokens=9, **messages_request("system string"))
    caught.append(on_messages.value)
    with pytest.raises(getattr(openai, error)) as on_chat:
        await openai_client(app).chat.completions.create(model="g", messages=chat_messages("system"))
    caught.append(on_chat.value)
    with pytest.raises(getattr(openai, error)) as on_responses:
        await openai_client(app).responses.create(model="g", **responses_request("instructions"))
    caught.append(on_responses.value)

    for exception in caught:
        assert exception.status_code == status
        assert message in exception.message
        if status == 429:
            assert exception.response.headers["retry-after"] == "7"
    assert model.requests == []


@pytest.mark.parametrize("route", ["messages", "chat", "responses"])
async def test_a_stream_refused_before_its_start_keeps_the_status(route: str) -> None:
    model = ScriptedModel()
    app = AgenticLoopMiddleware(model, hooks=[WordBlock()])
    with pytest.raises((anthropic.BadRequestError, openai.BadRequestError)) as raised:
        if route == "messages":
            async with anthropic_client(app).messages.stream(
                model="c", max_tokens=9, **messages_request("system string")
            ):
                pass
        elif route == "chat":
            await openai_client(app).chat.completions.create(model="g", messages=chat_messages("tool"), stream=True)
        else:
            await openai_client(app).responses.create(
                model="g", stream=True, **responses_request("function_call_output")
            )
    assert f"blocked: {WORD}" in raised.value.message
    assert model.requests == []


async def test_any_other_exception_stays_a_500_hook_error() -> None:
    app = AgenticLoopMiddleware(ScriptedModel(), hooks=[WordBlock(lambda: ValueError("bug"))])
    with pytest.raises(openai.InternalServerError) as raised:
        await openai_client(app).chat.completions.create(model="g", messages=chat_messages("user"))
    assert isinstance(raised.value.body, dict) and raised.value.body["code"] == "agentic_hook_error"


# --- Fail closed where the hooks cannot look --------------------------------------------------------------------


async def test_a_body_over_max_body_bytes_is_refused_with_413_when_a_guardrail_is_mounted() -> None:
    model = ScriptedModel(message("ok"))
    guard = WordBlock()
    app = AgenticLoopMiddleware(model, hooks=[guard], max_body_bytes=2000)
    big = f"{WORD} " + "x" * 3000
    with pytest.raises(anthropic.APIStatusError) as raised:
        await anthropic_client(app).messages.create(
            model="c", max_tokens=9, messages=[{"role": "user", "content": big}]
        )
    assert raised.value.status_code == 413
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "request_too_large", "message": "the request body is over max_body_bytes=2000"},
    }
    with pytest.raises(openai.APIStatusError) as on_chat:
        await openai_client(app).chat.completions.create(model="g", messages=[{"role": "user", "content": big}])
    assert on_chat.value.status_code == 413
    assert model.requests == [] and guard.given == []


async def test_without_guardrails_a_body_over_the_limit_still_passes_through() -> None:
    model = ScriptedModel(message("ok"))
    app = AgenticLoopMiddleware(model, hooks=[ToolHook()], max_body_bytes=2000)  # a server tool, no guardrail
    reply = await anthropic_client(app).messages.create(
        model="c", max_tokens=9, messages=[{"role": "user", "content": "x" * 3000}]
    )
    assert reply.content[0].text == "ok"  # type: ignore[union-attr]


@pytest.mark.parametrize("route", ["messages", "chat"])
async def test_with_streaming_off_a_stream_is_still_judged_and_then_passes_through(route: str) -> None:
    final = message("fine") if route == "messages" else chat_completion("fine")
    events = messages_events(final) if route == "messages" else chat_chunks(final, False)
    model = ScriptedModel(lambda request: event_stream(list(events)))
    guard = WordBlock()
    app = AgenticLoopMiddleware(model, hooks=[guard, Masking()], streaming=False)
    if route == "messages":
        with pytest.raises(anthropic.BadRequestError):
            async with anthropic_client(app).messages.stream(
                model="c", max_tokens=9, **messages_request("tool_result blocks")
            ):
                pass
        async with anthropic_client(app).messages.stream(
            model="c", max_tokens=9, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            text = "".join([chunk async for chunk in stream.text_stream])
    else:
        with pytest.raises(openai.BadRequestError):
            await openai_client(app).chat.completions.create(model="g", messages=chat_messages("tool"), stream=True)
        chunks = await openai_client(app).chat.completions.create(
            model="g", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in chunks if chunk.choices])
    assert text == "fine"  # the app's own stream, passed through after the guardrails judged the request
    assert len(model.requests) == 1 and model.requests[0].body["stream"] is True
    assert len(guard.given) == 2


async def test_with_streaming_off_a_guardrails_edits_reach_the_streaming_app() -> None:
    events = list(chat_chunks(chat_completion("fine"), False))
    model = ScriptedModel(lambda request: event_stream(events))
    app = AgenticLoopMiddleware(model, hooks=[Masking()], streaming=False)
    chunks = await openai_client(app).chat.completions.create(model="g", messages=chat_messages("system"), stream=True)
    _ = [chunk async for chunk in chunks]
    assert model.requests[0].body["messages"][0]["content"] == "the [masked] is here"


async def test_with_a_loop_limit_of_0_the_guardrails_still_judge() -> None:
    model = ScriptedModel(message("ok"))
    app = AgenticLoopMiddleware(model, hooks=[WordBlock()], max_agentic_loops=0)
    with pytest.raises(anthropic.BadRequestError):
        await anthropic_client(app).messages.create(model="c", max_tokens=9, **messages_request("system string"))
    assert model.requests == []


@pytest.mark.parametrize("body", [b"[]", b'"hi"', b"null", b""], ids=["array", "string", "null", "empty"])
async def test_a_body_that_is_not_a_json_object_is_refused_when_a_guardrail_is_mounted(body: bytes) -> None:
    model = ScriptedModel(chat_completion("ok"))
    app = AgenticLoopMiddleware(model, hooks=[WordBlock()])
    async with http_client(app) as client:
        answer = await client.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "the request body must be a JSON object"
    assert model.requests == []


async def test_a_websocket_on_a_judged_route_is_closed_before_it_opens() -> None:
    model = ScriptedModel()
    app = AgenticLoopMiddleware(model, hooks=[WordBlock()])
    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "websocket.connect"}

    async def send(event: Any) -> None:
        sent.append(event)

    scope = {"type": "websocket", "path": "/v1/responses", "headers": [], "asgi": {"version": "3.0"}}
    await app(scope, receive, send)
    assert sent[0]["type"] == "websocket.close" and sent[0]["code"] == 1008
    assert model.requests == []


async def test_a_compact_request_is_judged_as_a_responses_request() -> None:
    """`POST /v1/responses/compact` sends the conversation to the model: LiteLLM's proxy runs its guardrails on it."""
    compacted = {"id": "cmp_1", "object": "response.compaction", "output": [], "usage": None}
    model = ScriptedModel(compacted)
    guard = WordBlock()
    client = openai_client(AgenticLoopMiddleware(model, hooks=[guard], chain_store=False))
    with pytest.raises(openai.BadRequestError):
        await client.responses.compact(model="g", **responses_request("function_call_output"))  # type: ignore[arg-type]
    assert model.requests == []
    await client.responses.compact(model="g", input="hi", instructions="Be brief.")
    assert [request.path for request in model.requests] == ["/v1/responses/compact"]
    assert guard.given[-1] == ["Be brief.", "hi"]


@pytest.mark.parametrize(
    "content",
    [{"type": "text", "text": WORD}, [WORD], [{"type": "text", "text": [WORD]}]],
    ids=["content an object", "a part a string", "a text a list"],
)
async def test_a_text_of_a_shape_no_guardrail_can_read_is_refused(content: Any) -> None:
    """A lenient app might read what the guardrail was never given: such a request is refused with a 400."""
    model = ScriptedModel(chat_completion("never"))
    app = AgenticLoopMiddleware(model, hooks=[WordBlock()])
    async with http_client(app) as client:
        answer = await client.post(
            "/v1/chat/completions", json={"model": "g", "messages": [{"role": "user", "content": content}]}
        )
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].endswith("the guardrails cannot read it")
    assert model.requests == []
