"""What a guardrail's `apply_guardrail` returns is applied or refused, never dropped nor blamed on it for the
client's own shape.

A tool call the client sent with a null where a tool or its arguments stand (`"arguments": null`, `"custom": null`
beside a function) is read as none, and reaches the app as sent; a masking guardrail returning that call as it was
given (its mask elsewhere, in the id) was told its call was malformed, a 500 for the client's shape. A real
LiteLLM `CustomGuardrail` each; the client is httpx on the middleware, the app a scripted model.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import http_client
from guardrail_kit import WORD, Masking, masked
from test_guardrail_coverage import ANSWERS, messages_body, responses_body, turns
from test_guardrail_parts import chat_body, chat_calls

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel

NAMED = f"call_{WORD}_1"  # a word in an id or a name: the guardrail masks it, and returns the call with the mask
# Each case: (route, body), a tool call the client sent with a null in it, and WORD beside the null.
NULLS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat: arguments null": (
        "/v1/chat/completions",
        chat_calls({"id": NAMED, "type": "function", "function": {"name": "f", "arguments": None}}),
    ),
    "chat: custom null beside a function": (
        "/v1/chat/completions",
        chat_calls({"id": NAMED, "type": "function", "function": {"name": "f", "arguments": "{}"}, "custom": None}),
    ),
    "chat: function null on a custom call": (
        "/v1/chat/completions",
        chat_calls({"id": NAMED, "type": "custom", "function": None, "custom": {"name": "c", "input": "x"}}),
    ),
    "chat: a legacy function_call's arguments null": (
        "/v1/chat/completions",
        chat_body(
            {"role": "assistant", "content": None, "function_call": {"name": NAMED, "arguments": None}},
            {"role": "function", "name": NAMED, "content": "ok"},
        ),
    ),
    "responses: a function_call's arguments null": (
        "/v1/responses",
        responses_body({"type": "function_call", "call_id": "call_1", "name": NAMED, "arguments": None}),
    ),
    "messages: a tool_use's input null": (
        "/v1/messages",
        messages_body([{"type": "tool_use", "id": "toolu_1", "name": NAMED, "input": None}]),
    ),
}


@pytest.mark.parametrize("where", list(NULLS))
async def test_a_clients_null_in_a_tool_call_returned_as_given_is_kept_not_blamed(where: str) -> None:
    """The null is the client's, read as none, not the guardrail's edit: the call reaches the app with the mask and
    the null as sent, as it does under a guardrail that returns nothing of it."""
    route, body = NULLS[where]
    model = ScriptedModel(default=ANSWERS[route]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Masking("all")])) as http:
        got = await http.post(route, json=body)
    assert got.status_code == 200, got.text
    assert model.requests[0].body[turns(route)] == masked(body[turns(route)])
