"""What a guardrail is given to change, and what of its changes is applied, on the edges: a `during_call`
guardrail's copy of a request holding an object that cannot be copied, a tag-based `Mode` event hook, tools it
edits in place and returns, a client's tool it cannot be given. Each guardrail is a real LiteLLM `CustomGuardrail`."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
from conftest import http_client
from guardrail_kit import Guard
from litellm.types.guardrails import Mode

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel, chat_completion, message, response

REQUESTS = {
    "/v1/messages": ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "secret"}]}, message),
    "/v1/chat/completions": ({"model": "m", "messages": [{"role": "user", "content": "secret"}]}, chat_completion),
    "/v1/responses": ({"model": "m", "input": "secret"}, response),
}


class KeepsContext(Guard):
    """A pre_call guardrail keeping per-request context in `request_data`, as proxy guardrails do: a lock."""

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        request_data["guard_context"] = {"lock": threading.Lock(), "seen": 1}
        return inputs


class Masking(Guard):
    """Masks every text, in place of what it was given and in its result; records the context it was given."""

    def __init__(self, event_hook: Any) -> None:
        super().__init__("mask", event_hook)
        self.contexts: list[Any] = []

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        self.contexts.append(request_data.get("guard_context"))
        return {**inputs, "texts": ["MASKED"] * len(inputs["texts"])}


def sent_text(body: dict[str, Any]) -> Any:
    if "input" in body:
        return body["input"] if isinstance(body["input"], str) else body["input"][0]["content"]
    content = body["messages"][0]["content"]
    return content if isinstance(content, str) else content[0]["text"]


@pytest.mark.parametrize("path", list(REQUESTS))
async def test_a_during_call_guardrail_judges_a_request_holding_an_object_that_cannot_be_copied(path: str) -> None:
    """Its copy is of the request's JSON; an earlier guardrail's lock is shared, and the request is sent."""
    body, answer = REQUESTS[path]
    model = ScriptedModel(default=answer("ok"))
    during = Masking("during_call")
    async with http_client(AgenticLoopMiddleware(model, hooks=[KeepsContext(), during])) as client:
        reply = await client.post(path, json=body)
    assert reply.status_code == 200, reply.text
    assert during.contexts[0]["seen"] == 1 and isinstance(during.contexts[0]["lock"], type(threading.Lock()))
    assert sent_text(model.requests[0].body) == "secret"  # its mask is its own


@pytest.mark.parametrize(
    ("event_hook", "applied"),
    [
        (Mode(tags={"team-x": "pre_call"}, default="during_call"), False),
        (Mode(tags={}, default=["during_call"]), False),
        (Mode(tags={"team-x": "during_call"}, default=None), False),
        (Mode(tags={"team-x": "during_call"}, default="pre_call"), True),
        (Mode(tags={"team-x": ["pre_call", "during_call"]}, default=None), True),
    ],
    ids=["default during_call", "default [during_call]", "tags only during_call", "default pre_call", "tags both"],
)
async def test_a_tag_based_mode_is_read_as_litellm_reads_it_for_a_request_of_no_tag(
    event_hook: Any, applied: bool
) -> None:
    """No tag is read here: the `Mode`'s default applies, or without one every event its tags name."""
    body, answer = REQUESTS["/v1/chat/completions"]
    model = ScriptedModel(default=answer("ok"))
    guardrail = Masking(event_hook)
    async with http_client(AgenticLoopMiddleware(model, hooks=[guardrail])) as client:
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    assert len(guardrail.contexts) == 1  # it judged the request
    assert sent_text(model.requests[0].body) == ("MASKED" if applied else "secret")


class AppendsAndReturns(Guard):
    """Appends a tool to the request's own `tools` in place, as LiteLLM's guardrails edit `request_data`, and
    returns the tools it was given plus one of its own."""

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        request_data["tools"].append({"name": "in_place", "input_schema": {"type": "object"}})
        guard = {"type": "function", "function": {"name": "guard_tool", "parameters": {"type": "object"}}}
        return {**inputs, "tools": [*copy.deepcopy(inputs["tools"]), guard]}


MINE = {"name": "mine", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}


async def test_a_guardrail_that_edits_messages_tools_in_place_and_returns_tools_has_those_applied() -> None:
    body = {**REQUESTS["/v1/messages"][0], "tools": [MINE]}
    model = ScriptedModel(default=message("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[AppendsAndReturns()])) as client:
        reply = await client.post("/v1/messages", json=body)
    assert reply.status_code == 200, reply.text
    guard = {"name": "guard_tool", "description": "", "input_schema": {"type": "object"}}
    assert model.requests[0].body["tools"] == [MINE, guard]  # what it returned; the client's own as sent


@pytest.mark.parametrize(
    "tool",
    [{"input_schema": {"type": "object"}}, {"name": 5, "input_schema": {}}],
    ids=["no name", "a name that is no string"],
)
async def test_a_messages_tool_a_guardrail_cannot_be_given_goes_to_the_app_as_sent(tool: dict[str, Any]) -> None:
    body = {**REQUESTS["/v1/messages"][0], "tools": [tool, MINE]}
    model = ScriptedModel(default=message("ok"))
    guardrail = Masking("pre_call")
    async with http_client(AgenticLoopMiddleware(model, hooks=[guardrail])) as client:
        reply = await client.post("/v1/messages", json=body)
    assert reply.status_code == 200, reply.text
    assert model.requests[0].body["tools"] == [tool, MINE]
