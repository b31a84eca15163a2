"""LiteLLM's own classes: a hook subclassing its CustomLogger and returning its pydantic plan runs unchanged.

Runs only where LiteLLM is installed (it is not a test dependency: it is large and slow to import).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from conftest import anthropic_client, openai_client

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-list download at import
litellm_logger = pytest.importorskip("litellm.integrations.custom_logger")
litellm_types = pytest.importorskip("litellm.types.integrations.custom_logger")

from agentic_middleware import AgenticLoopMiddleware  # noqa: E402
from agentic_middleware.testing import ScriptedModel, chat_completion, message, tool_call, tool_use  # noqa: E402


class LiteLLMHook(litellm_logger.CustomLogger):  # type: ignore[misc]
    """Written against LiteLLM: its base class, its plan and patch models."""

    def __init__(self) -> None:
        super().__init__()
        self.cleaned: list[Any] = []

    async def async_should_run_agentic_loop(
        self, response: Any, model: Any, messages: Any, tools: Any, stream: Any, custom_llm_provider: Any, kwargs: Any
    ) -> Any:
        content = getattr(response, "content", None) or []
        calls = [b for b in content if isinstance(b, dict) and b.get("name") == "my_tool"]
        if response.choices:
            calls = [c for c in response.choices[0].message.tool_calls or [] if c.function.name == "my_tool"]
        return (True, {"tool_calls": calls}) if calls else (False, {})

    async def async_build_agentic_loop_plan(self, tools: Any, messages: Any, **_: Any) -> Any:
        calls = tools["tool_calls"]
        follow_up = [
            *messages,
            {"role": "assistant", "content": calls},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": c["id"], "content": "42"} for c in calls],
            },
        ]
        return litellm_types.AgenticLoopPlan(
            run_agentic_loop=True,
            request_patch=litellm_types.AgenticLoopRequestPatch(messages=follow_up),
            metadata={"litellm": True},
        )

    async def async_build_chat_completion_agentic_loop_plan(self, tools: Any, messages: Any, **_: Any) -> Any:
        calls = tools["tool_calls"]
        follow_up = [
            *messages,
            {"role": "assistant", "content": None, "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c["id"], "content": "42"} for c in calls),
        ]
        return litellm_types.AgenticLoopPlan(
            run_agentic_loop=True, request_patch=litellm_types.AgenticLoopRequestPatch(messages=follow_up)
        )

    async def async_agentic_loop_cleanup_hook(self, plan: Any, kwargs: Any) -> None:
        self.cleaned.append(plan)


async def test_a_litellm_hook_runs_unchanged_on_both_routes() -> None:
    hook = LiteLLMHook()
    model = ScriptedModel(
        message(tool_use("my_tool", {"q": 1})),
        message("The answer is 42."),
        chat_completion(tool_calls=[tool_call("my_tool", {"q": 1})]),
        chat_completion("The answer is 42."),
    )
    app = AgenticLoopMiddleware(model, hooks=[hook])

    reply = await anthropic_client(app).messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "?"}]
    )
    completion = await openai_client(app).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "?"}]
    )

    assert reply.content[0].text == "The answer is 42."  # type: ignore[union-attr]
    assert completion.choices[0].message.content == "The answer is 42."
    assert len(model.requests) == 4
    assert isinstance(hook.cleaned[0], litellm_types.AgenticLoopPlan)
    assert hook.cleaned[0].metadata == {"litellm": True}
