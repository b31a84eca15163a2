"""The hook of cases 5 and 6 and the client loop it stands in for: claim `lookup` calls, answer each "42 results".

`claim` and `follow_up` are the whole logic; `lookup_hook` registers it in our gateway (its config names it by
dotted path) and `benchmarks/litellm_hook.py` registers the same two functions in LiteLLM. A client looping by
itself runs `follow_up` too, so all sides send the upstream the same bodies.
"""

from __future__ import annotations

from typing import Any

from agentic_middleware import AgenticLoopPlan, AgenticLoopRequestPatch, CustomLogger

TOOL = "lookup"
TOOLS = [{"name": TOOL, "description": "Look a page up.", "input_schema": {"type": "object"}}]


def claim(response: Any) -> tuple[bool, dict[str, Any]]:
    """The gate: the answer's `lookup` calls, if any."""
    calls = [b for b in response.get("content") or () if b.get("type") == "tool_use" and b.get("name") == TOOL]
    return (True, {"tool_calls": calls}) if calls else (False, {})


def follow_up(calls: list[Any], messages: list[Any]) -> list[Any]:
    """The next request's messages: the history, the assistant's calls, and one result per call."""
    results = [{"type": "tool_result", "tool_use_id": c["id"], "content": "42 results"} for c in calls]
    return [*messages, {"role": "assistant", "content": calls}, {"role": "user", "content": results}]


def request(model: str, pages: int) -> dict[str, Any]:
    """A client request that makes the upstream call `lookup` `pages` times before it answers."""
    return {
        "model": model,
        "max_tokens": 256,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": f"pages={pages}"}],
    }


class Lookup(CustomLogger):
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
    ) -> AgenticLoopPlan:
        patch = AgenticLoopRequestPatch(messages=follow_up(tools["tool_calls"], messages))
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=patch)


lookup_hook = Lookup()
