"""Guardrails are given a `type` that is no type, thinking outside the place its provider signs it, and refuse a
Chat tool call a guardrail returns in a shape no app reads.

The walk left a `type` out wherever a reader listed it among a known object's fields, whatever it held: on objects
whose type no reader looks at (a message's own `type`, which no API has, a citation's, the object inside Chat's
`image_url`, `input_audio` and `file` parts, a Chat call's `function` or `custom` tool, a web search result or
action), free text there reached the app unjudged. Now a `type` is left out only while it holds one token, as the
APIs' types all are. It left `thinking` and `redacted_thinking` parts out whole anywhere (a user turn, a system
prompt, a tool's result, Chat and Responses parts, LiteLLM's `thinking_blocks`), with or without a signature,
their made-up fields too. Now thinking is left out only where the provider signs it and would refuse it altered
(an assistant turn, a signature of one token), and given elsewhere, its mask written in place. And a Chat tool call
a guardrail returned was written back as returned: arguments as an object, a call that is a string or null reached
the app, where Responses refuses the same edit. A real LiteLLM `CustomGuardrail` each; the client is httpx on the
middleware, the app a scripted model.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from conftest import http_client
from guardrail_kit import SAID, WORD, Masking, WordBlock, masked
from test_guardrail_coverage import ANSWERS, messages_body, refusal, responses_body, turns
from test_guardrail_fields import Given
from test_guardrail_parts import CALL, FUNCTION, chat_body, chat_calls, chat_parts, define, user_blocks

from agentic_middleware import AgenticLoopMiddleware, ServerTools
from agentic_middleware.testing import ScriptedModel, message, tool_use

TYPE = {"type": SAID}
CITED = {"type": SAID, "cited_text": "c", "document_index": 0, "start_char_index": 0, "end_char_index": 1}
SEARCHED = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
# A signature as Anthropic writes one (base64), and thinking as Claude Code sends it back in its history.
SIGNATURE = "ErUBCkYIBRgCIkDr3fq1pXzvU9b0n7Qm+Lk2s8Wc4hT1/aZyKjR0eV6uN5oG3iPdLwFx=="
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnLs=="
THINKING = {"type": "thinking", "thinking": SAID}


def user_turn(content: Any) -> dict[str, Any]:
    return {"model": "c", "max_tokens": 9, "messages": [{"role": "user", "content": copy.deepcopy(content)}]}


async def masked_request(route: str, body: dict[str, Any], guard: Any = None) -> Any:
    """The body the app got for `body` on `route` under a guardrail masking texts and tool call arguments (unless
    told), after asserting no WORD reached it."""
    model = ScriptedModel(default=ANSWERS[route]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard or Masking("arguments")])) as http:
        got = await http.post(route, json=body)
    assert got.status_code == 200, got.text
    assert WORD not in model.requests[0].raw.decode()
    return model.requests[0].body


# Each case: (route, body), WORD only in a `type` of an object whose type no reader dispatches on.
TYPES: dict[str, tuple[str, dict[str, Any]]] = {
    "messages: a message's type": (
        "/v1/messages",
        user_turn("hi") | {"messages": [{"role": "user", "content": "hi"} | TYPE]},
    ),
    "messages: a citation's type": (
        "/v1/messages",
        messages_body([{"type": "text", "text": "x", "citations": [CITED]}]),
    ),
    "messages: a web search result's type": (
        "/v1/messages",
        messages_body(
            [
                SEARCHED,
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_1",
                    "content": [TYPE | {"url": "https://a.test", "title": "t"}],
                },
                {"type": "text", "text": "t"},
            ]
        ),
    ),
    "chat: a message's type": ("/v1/chat/completions", chat_body({"role": "user", "content": "go"} | TYPE)),
    "chat: an image_url object's type": (
        "/v1/chat/completions",
        chat_parts({"type": "image_url", "image_url": {"url": "https://a.test/c.png"} | TYPE}),
    ),
    "chat: an input_audio object's type": (
        "/v1/chat/completions",
        chat_parts({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"} | TYPE}),
    ),
    "chat: a file object's type": (
        "/v1/chat/completions",
        chat_parts({"type": "file", "file": {"file_id": "file-1"} | TYPE}),
    ),
    "chat: a call's function's type": ("/v1/chat/completions", chat_calls(CALL | {"function": FUNCTION | TYPE})),
    "chat: a custom call's custom's type": (
        "/v1/chat/completions",
        chat_calls({"id": "call_1", "type": "custom", "custom": {"name": "f", "input": "x"} | TYPE}),
    ),
    "chat: a legacy function_call's type": (
        "/v1/chat/completions",
        chat_calls({}, content=None, function_call=FUNCTION | TYPE),
    ),
    "chat: an assistant audio's type": (
        "/v1/chat/completions",
        chat_calls({}, content="x", audio={"id": "audio_1"} | TYPE),
    ),
    "responses: a web_search_call action's type": (
        "/v1/responses",
        responses_body(
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": TYPE | {"query": "q"}}
        ),
    ),
}


@pytest.mark.parametrize("where", list(TYPES))
async def test_a_blocked_word_in_a_type_no_reader_dispatches_on_is_refused(where: str) -> None:
    route, body = TYPES[where]
    error = await refusal(route, body, WordBlock("texts"))  # a call's type is among the texts, not the arguments
    assert error["error"]["message"] == f"blocked: {WORD}"


@pytest.mark.parametrize("where", list(TYPES))
async def test_a_mask_in_a_type_no_reader_dispatches_on_is_written_where_the_word_was(where: str) -> None:
    route, body = TYPES[where]
    sent = await masked_request(route, body, Masking("texts"))
    assert orjson.dumps(sent[turns(route)]) == orjson.dumps(masked(body[turns(route)]))  # in place: keys in order


def with_call(thinking: dict[str, Any]) -> dict[str, Any]:
    """A Messages history whose tool call's result holds `thinking`."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [copy.deepcopy(thinking)]}
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]
    return {"model": "c", "max_tokens": 9, "messages": turns}


def chat_thinking(*blocks: dict[str, Any], role: str = "assistant") -> dict[str, Any]:
    return chat_body({"role": role, "content": "x", "thinking_blocks": list(blocks)}, {"role": "user", "content": "go"})


# Each case: (route, body), WORD only in thinking outside the place its provider signs it, or in a field made up on
# a signed thinking block.
THOUGHTS: dict[str, tuple[str, dict[str, Any]]] = {
    "messages: a user turn's thinking": ("/v1/messages", user_blocks([THINKING, {"type": "text", "text": "hi"}])),
    "messages: a user turn's thinking with a signature": (
        "/v1/messages",
        user_blocks([THINKING | {"signature": SIGNATURE}, {"type": "text", "text": "hi"}]),
    ),
    "messages: thinking in the system prompt": (
        "/v1/messages",
        user_turn("hi") | {"system": [THINKING | {"signature": SIGNATURE}, {"type": "text", "text": "sys"}]},
    ),
    "messages: thinking in a tool's result": ("/v1/messages", with_call(THINKING | {"signature": SIGNATURE})),
    "messages: an assistant's thinking with no signature": (
        "/v1/messages",
        messages_body([THINKING, {"type": "text", "text": "t"}]),
    ),
    "messages: an assistant's thinking with an empty signature": (
        "/v1/messages",
        messages_body([THINKING | {"signature": ""}, {"type": "text", "text": "t"}]),
    ),
    "messages: an assistant's thinking whose signature is words": (
        "/v1/messages",
        messages_body([{"type": "thinking", "thinking": "x", "signature": SAID}, {"type": "text", "text": "t"}]),
    ),
    "messages: a made-up field on an assistant's signed thinking": (
        "/v1/messages",
        messages_body([{"type": "thinking", "thinking": "x", "signature": SIGNATURE, "note": SAID}]),
    ),
    "messages: an assistant's redacted_thinking of words": (
        "/v1/messages",
        messages_body([{"type": "redacted_thinking", "data": SAID}, {"type": "text", "text": "t"}]),
    ),
    "messages: a user turn's redacted_thinking": (
        "/v1/messages",
        user_blocks([{"type": "redacted_thinking", "data": WORD}, {"type": "text", "text": "hi"}]),
    ),
    "chat: a user part of thinking": ("/v1/chat/completions", chat_parts(THINKING, {"type": "text", "text": "hi"})),
    "chat: a tool message's part of thinking": (
        "/v1/chat/completions",
        chat_body(
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": [THINKING | {"signature": SIGNATURE}]},
        ),
    ),
    "chat: thinking_blocks with no signature": ("/v1/chat/completions", chat_thinking(THINKING)),
    "chat: a made-up key on signed thinking_blocks": (
        "/v1/chat/completions",
        chat_thinking({"type": "thinking", "thinking": "x", "signature": SIGNATURE, "note": SAID}),
    ),
    "chat: a user message's thinking_blocks": (
        "/v1/chat/completions",
        chat_thinking(THINKING | {"signature": SIGNATURE}, role="user"),
    ),
    "responses: a user message's part of thinking": (
        "/v1/responses",
        responses_body({"role": "user", "content": [THINKING | {"signature": SIGNATURE}]}),
    ),
    "responses: a function_call_output's part of thinking": (
        "/v1/responses",
        {
            "model": "g",
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": [THINKING]},
            ],
        },
    ),
    "responses: a prompt variable of thinking": (
        "/v1/responses",
        {"model": "g", "input": "hi", "prompt": {"id": "pmpt_1", "variables": {"v": THINKING}}},
    ),
}


def sent_part(route: str, body: dict[str, Any]) -> str:
    """The field of `body` that holds its WORD: a prompt's variables hold it outside the turns."""
    return "prompt" if "prompt" in body else "system" if "system" in body else turns(route)


@pytest.mark.parametrize("where", list(THOUGHTS))
async def test_a_blocked_word_in_thinking_outside_its_signed_place_is_refused(where: str) -> None:
    route, body = THOUGHTS[where]
    error = await refusal(route, body)
    assert error["error"]["message"] == f"blocked: {WORD}"


@pytest.mark.parametrize("where", list(THOUGHTS))
async def test_a_mask_in_thinking_outside_its_signed_place_is_written_where_the_word_was(where: str) -> None:
    route, body = THOUGHTS[where]
    sent = await masked_request(route, body)
    field = sent_part(route, body)
    assert orjson.dumps(sent[field]) == orjson.dumps(masked(body[field]))  # in place: keys in order


@pytest.mark.parametrize(
    "said",
    [THINKING, {"type": "text", "text": "x", "citations": [CITED]}],
    ids=["thinking with no signature", "a citation whose type is words"],
)
async def test_the_models_own_unsigned_thinking_and_citation_types_are_judged_before_the_rerun(
    said: dict[str, Any],
) -> None:
    """The loop carries the model's answer into the rerun: thinking it sent with no signature (no provider checks
    it), or a citation whose type is words, is judged there, and a word a guardrail blocks in it ends the turn."""
    model = ScriptedModel(message(said, tool_use("define", {"term": "x"})), message("done"))
    app = AgenticLoopMiddleware(model, hooks=[WordBlock("all"), ServerTools([define])])
    async with http_client(app) as http:
        got = await http.post("/v1/messages", json=user_turn("hi"))
    assert got.status_code == 400 and got.json()["error"]["message"] == f"blocked: {WORD}"
    assert len(model.requests) == 1


# Claude Code's history with extended thinking: each assistant turn opens with its signed thinking (and, where the
# provider redacted it, encrypted thinking), which Anthropic refuses altered; the last user turn is cached.
SIGNED_HISTORY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32000,
    "thinking": {"type": "enabled", "budget_tokens": 10000},
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": "The user wants the test fixed. Let me read it: it's in tests/.",
                    "signature": SIGNATURE,
                },
                {"type": "text", "text": "I'll read the test first."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A09q90qw90lq917835lq9",
                    "name": "Read",
                    "input": {"file_path": "/r/t.py"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "def test(): ..."}
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": REDACTED},
                {
                    "type": "thinking",
                    "thinking": "The assertion compares 1 with 2; the fix is one line.",
                    "signature": SIGNATURE,
                },
                {"type": "text", "text": "Found it."},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "Go ahead.", "cache_control": {"type": "ephemeral"}}]},
    ],
}


async def test_signed_thinking_is_given_and_reaches_the_app_as_sent_unless_masked() -> None:
    """Thinking where its provider signs it (an assistant turn, a signature of one token) is given: no one here can
    check a signature, and LiteLLM replays a forged one unchecked to providers that read it as the model's own
    reasoning (seventh review, G2). Unmasked, it reaches the app in the client's very bytes; a block a guardrail
    masks is left out of its message, not sent altered: Anthropic refuses a signed block altered, on every later turn
    too, and takes an earlier turn's thinking left out (eighth review, H1)."""
    body_bytes = orjson.dumps(SIGNED_HISTORY)
    guard = Given("given", "pre_call")
    model = ScriptedModel(default=message("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/messages", content=body_bytes, headers={"content-type": "application/json"})
    assert got.status_code == 200, got.text
    assert guard.texts == [
        "Fix the failing test.",
        "The user wants the test fixed. Let me read it: it's in tests/.",
        "I'll read the test first.",
        "def test(): ...",
        "The assertion compares 1 with 2; the fix is one line.",
        "Found it.",
        "Go ahead.",
    ]
    assert model.requests[0].raw == body_bytes

    said = copy.deepcopy(SIGNED_HISTORY)
    blocks = said["messages"][-2]["content"]
    blocks[1]["thinking"] = SAID
    sent = await masked_request("/v1/messages", said)
    assert sent["messages"][-2]["content"] == [blocks[0], blocks[2]]  # left out, not altered
    assert sent["messages"][:-2] == SIGNED_HISTORY["messages"][:-2]


async def test_litellms_signed_thinking_blocks_of_a_chat_assistant_are_given_but_redacted_data() -> None:
    """LiteLLM carries Anthropic's thinking blocks on a Chat assistant message (`thinking_blocks`) and replays them
    to the provider: the thinking is given, a redacted block's encrypted data (one token) is not; both reach the app
    as sent."""
    blocks = [
        {"type": "thinking", "thinking": "Let me think this through.", "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": REDACTED},
    ]
    body = chat_thinking(*blocks)
    guard = Given("given", "pre_call")
    model = ScriptedModel(default=ANSWERS["/v1/chat/completions"]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/chat/completions", json=body)
    assert got.status_code == 200, got.text
    assert guard.texts == ["hi", "x", "Let me think this through.", "go"]
    assert model.requests[0].body["messages"] == body["messages"]


class Returns(WordBlock):
    """Returns the tool calls it was given, each as `edit` makes it."""

    def __init__(self, edit: Any) -> None:
        super().__init__("all")
        self.edit = edit

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        self.record(inputs)
        return {**inputs, "tool_calls": [self.edit(call) for call in inputs["tool_calls"]]}


ARGUMENTS = orjson.dumps({"q": "x"}).decode()
# Each case: the calls of a Chat history, an edit a guardrail makes of the call it is given, and what it is told.
EDITS: dict[str, tuple[dict[str, Any], Any, str]] = {
    "arguments returned as an object": (
        chat_calls(CALL | {"function": {"name": "f", "arguments": ARGUMENTS}}),
        lambda call: call | {"function": call["function"] | {"arguments": {"q": "masked"}}},
        "returned a tool call whose arguments are not a string",
    ),
    "arguments left out": (
        chat_calls(CALL | {"function": {"name": "f", "arguments": ARGUMENTS}}),
        lambda call: call | {"function": {"name": "f"}},
        "returned a tool call whose arguments are not a string",
    ),
    "a call returned as a string": (
        chat_calls(CALL),
        lambda call: "masked",
        "returned a tool call that is str, not an object",
    ),
    "a call returned as null": (
        chat_calls(CALL),
        lambda call: None,
        "returned a tool call that is NoneType, not an object",
    ),
    "a function returned as null": (
        chat_calls(CALL),
        lambda call: call | {"function": None},
        "returned a tool call whose function is not an object",
    ),
    "a custom tool's input returned as an object": (
        chat_calls({"id": "call_1", "type": "custom", "custom": {"name": "f", "input": "x"}}),
        lambda call: call | {"custom": {"name": "f", "input": {"q": "x"}}},
        "returned a tool call whose input is not a string",
    ),
    "a legacy function_call's arguments returned as an object": (
        chat_calls({}, content=None, function_call=FUNCTION),
        lambda call: call | {"function": call["function"] | {"arguments": {}}},
        "returned a tool call whose arguments are not a string",
    ),
}


@pytest.mark.parametrize("where", list(EDITS))
async def test_a_chat_tool_call_a_guardrail_returns_malformed_is_refused_as_on_responses(where: str) -> None:
    """A guardrail's Chat tool call is written back only in the shape the API has, as on Responses: else a call
    that is no object, or arguments no guardrail judged as JSON, would reach the app. A hook error: 500 in the
    route's shape, naming the guardrail, the app not called."""
    body, edit, problem = EDITS[where]
    model = ScriptedModel(default=ANSWERS["/v1/chat/completions"]("never"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Returns(edit)])) as http:
        got = await http.post("/v1/chat/completions", json=body)
    assert got.status_code == 500
    error = got.json()["error"]
    assert error["code"] == "agentic_hook_error" and error["type"] == "server_error"
    assert error["message"] == f"agentic hook Returns.apply_guardrail failed: {problem}"
    assert model.requests == []
