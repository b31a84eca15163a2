"""LiteLLM's own web-search hook on /v1/responses: its Responses gate and plan builder, unchanged, in the loop."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import openai_client
from test_litellm_hooks import Search, served

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-list download at import
handler = pytest.importorskip("litellm.integrations.websearch_interception.handler")

from agentic_middleware import AgenticLoopMiddleware  # noqa: E402
from agentic_middleware.testing import ScriptedModel, function_call, response  # noqa: E402

SEARCH_TOOL = {"type": "function", "name": "litellm_web_search", "parameters": {"type": "object"}, "strict": False}


@pytest.fixture
async def search(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Search]:
    stand_in = Search()
    async with served(stand_in.app) as base:
        monkeypatch.setenv("PERPLEXITY_API_BASE", base)
        monkeypatch.setenv("PERPLEXITYAI_API_KEY", "test-key")
        yield stand_in


@pytest.mark.parametrize("tool", [SEARCH_TOOL, {"type": "web_search_preview"}], ids=["function", "native"])
async def test_litellms_websearch_hook_runs_on_responses(search: Search, tool: dict[str, Any]) -> None:
    model = ScriptedModel(
        response(function_call("litellm_web_search", {"query": "Paris weather"}, "call_s1")),
        response("It is sunny in Paris."),
    )
    hook = handler.WebSearchInterceptionLogger(enabled_providers=["openai"])
    client = openai_client(AgenticLoopMiddleware(model, hooks=[hook]))

    result = await client.responses.create(
        model="gpt-x",
        input="Weather in Paris?",
        tools=[tool],
        instructions="Be brief.",  # type: ignore[list-item]
    )

    assert result.output_text == "It is sunny in Paris."
    assert search.queries == ["Paris weather"]
    first, rerun = (request.body for request in model.requests)
    assert rerun["input"][0] == {"role": "user", "content": "Weather in Paris?"}
    call, output = rerun["input"][1:]
    assert (call["type"], call["call_id"], call["name"]) == ("function_call", "call_s1", "litellm_web_search")
    assert (output["type"], output["call_id"]) == ("function_call_output", "call_s1")
    assert "Sunny, 21 C." in output["output"]
    assert rerun["instructions"] == "Be brief." and rerun["model"] == first["model"]
