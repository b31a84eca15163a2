"""LiteLLM's pre-call lifecycle on `/v1/responses`: guardrails see the Responses input's texts, and what they and
`async_pre_call_deployment_hook` change of `input` and `instructions` is what the app gets."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from conftest import openai_client
from guardrail_kit import Guard

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.testing import ScriptedModel, response


@server_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


class Masking(Guard):
    """Refuses a request naming "forbidden", and masks digits in every text it is given."""

    def __init__(self) -> None:
        super().__init__("masking")
        self.seen: list[list[str]] = []

    async def apply_guardrail(self, inputs: Any, request_data: Any, input_type: Any, logging_obj: Any = None) -> Any:
        self.seen.append(list(inputs["texts"]))
        if any("forbidden" in text for text in inputs["texts"]):
            raise ValueError("blocked by guardrail")
        return {**inputs, "texts": ["".join("#" if c.isdigit() else c for c in text) for text in inputs["texts"]]}


def app_with(*hooks: Any) -> tuple[ScriptedModel, Any]:
    model = ScriptedModel(default=lambda request: response("done"))
    return model, AgenticLoopMiddleware(model, hooks=[*hooks, ServerTools([lookup])])


ITEMS: list[Any] = [
    {"role": "user", "content": [{"type": "input_text", "text": "card 1234"}]},
    {"type": "function_call", "call_id": "c1", "name": "client_fn", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "pin 99"},
    {"role": "user", "content": "call 555"},
]


@pytest.mark.parametrize(
    "given", ["tell me the forbidden thing", [*ITEMS[:1], {"role": "user", "content": "forbidden"}]]
)
async def test_a_guardrail_refuses_a_responses_request_as_on_chat(given: Any) -> None:
    guardrail = Masking()
    model, app = app_with(guardrail)

    with pytest.raises(openai.InternalServerError, match="blocked by guardrail"):
        await openai_client(app).responses.create(model="m", input=given)

    assert guardrail.seen and model.requests == []


async def test_a_guardrail_sees_the_responses_texts_and_its_masked_texts_reach_the_app() -> None:
    guardrail = Masking()
    model, app = app_with(guardrail)

    await openai_client(app).responses.create(model="m", input=ITEMS, instructions="rule 7")
    await openai_client(app).responses.create(model="m", input="my SSN is 123-45-6789")

    assert guardrail.seen == [["rule 7", "card 1234", "pin 99", "call 555"], ["my SSN is 123-45-6789"]]
    first, second = (request.body for request in model.requests)
    assert first["instructions"] == "rule #"
    assert first["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "card ####"}]},
        ITEMS[1],
        {"type": "function_call_output", "call_id": "c1", "output": "pin ##"},
        {"role": "user", "content": "call ###"},
    ]
    assert ITEMS[0]["content"][0]["text"] == "card 1234"  # the client's items are not edited in place
    assert second["input"] == "my SSN is ###-##-####"


class Redacting(ServerTools):
    async def async_pre_call_deployment_hook(self, kwargs: dict[str, Any], call_type: Any) -> dict[str, Any]:
        assert call_type == "aresponses"
        kwargs["input"] = "[REDACTED]"
        return kwargs


async def test_the_deployment_hooks_edit_of_input_reaches_the_app() -> None:
    model = ScriptedModel(default=lambda request: response("done"))
    app = AgenticLoopMiddleware(model, hooks=[Redacting([lookup])])

    await openai_client(app).responses.create(model="m", input="my SSN is 123-45-6789")

    assert model.requests[0].body["input"] == "[REDACTED]"
