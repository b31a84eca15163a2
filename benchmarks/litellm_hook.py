"""The hook of `e2e_hooks.py` registered in LiteLLM: the same `claim` and `follow_up`, LiteLLM's base class and plan.

Imported only by an interpreter that has LiteLLM (the LiteLLM side of case 6 and its proxy's config).
"""

# mypy: disable-error-code="import-not-found, misc, no-any-return"

from __future__ import annotations

from typing import Any

from litellm.integrations.custom_logger import CustomLogger
from litellm.types.integrations.custom_logger import AgenticLoopPlan, AgenticLoopRequestPatch

from .e2e_hooks import claim, follow_up


class LiteLLMLookup(CustomLogger):
    async def async_should_run_agentic_loop(
        self,
        response: Any,
        model: str,
        messages: list[Any],
        tools: list[Any] | None,
        stream: bool,
        custom_llm_provider: str,
        kwargs: dict[str, Any],
    ) -> tuple[bool, dict[str, Any]]:
        return claim(response)

    async def async_build_agentic_loop_plan(
        self,
        tools: dict[str, Any],
        model: str,
        messages: list[Any],
        response: Any,
        anthropic_messages_provider_config: Any,
        anthropic_messages_optional_request_params: dict[str, Any],
        logging_obj: Any,
        stream: bool,
        kwargs: dict[str, Any],
    ) -> Any:
        patch = AgenticLoopRequestPatch(messages=follow_up(tools["tool_calls"], messages))
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=patch)


lookup_hook = LiteLLMLookup()
