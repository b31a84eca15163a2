"""A request through the middleware: the model calls a server tool, a hook fulfils it, the client sees one answer.

Run from the repository root:  python examples/demo.py
No keys and no network: the model app is a small scripted stand-in, and the
clients are the official `anthropic` and `openai` SDKs talking to it in-process.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx2
import openai

from agentic_middleware import AgenticLoopMiddleware, AgenticLoopPlan, AgenticLoopRequestPatch, CustomLogger
from agentic_middleware.testing import RecordedRequest, ScriptedModel, chat_completion, message, tool_call, tool_use

CLOCK = {"Paris": "14:05", "Tokyo": "22:05"}


def demo_model(request: RecordedRequest) -> dict[str, Any]:
    """A stand-in model: asks for the time in the city it was asked about, then answers with the tool's result."""
    body = request.body
    last = body["messages"][-1]
    chat = request.path.endswith("/chat/completions")
    if chat and last["role"] == "tool":
        return chat_completion(f"It is {last['content']} there right now.")
    if not chat and isinstance(last["content"], list) and last["content"][0].get("type") == "tool_result":
        return message(f"It is {last['content'][0]['content']} there right now.")
    city = "Tokyo" if "Tokyo" in json.dumps(last) else "Paris"
    if chat:
        return chat_completion(tool_calls=[tool_call("local_time", {"city": city})])
    return message(tool_use("local_time", {"city": city}))


class LocalTimeHook(CustomLogger):
    """Fulfils `local_time` on the server, on both routes."""

    async def async_should_run_agentic_loop(
        self, response: Any, model: str, messages: list[Any], tools: Any, stream: bool, custom_llm_provider: str,
        kwargs: dict[str, Any],
    ) -> tuple[bool, dict[str, Any]]:  # fmt: skip
        if response.choices:  # chat completions
            calls = [c for c in response.choices[0].message.tool_calls or [] if c.function.name == "local_time"]
        else:  # messages
            calls = [b for b in response.content if b.type == "tool_use" and b.name == "local_time"]
        return (True, {"tool_calls": calls}) if calls else (False, {})

    async def async_build_agentic_loop_plan(
        self, tools: dict[str, Any], model: str, messages: list[Any], response: Any,
        anthropic_messages_provider_config: Any, anthropic_messages_optional_request_params: dict[str, Any],
        logging_obj: Any, stream: bool, kwargs: dict[str, Any],
    ) -> AgenticLoopPlan:  # fmt: skip
        calls = tools["tool_calls"]
        results = [{"type": "tool_result", "tool_use_id": c.id, "content": CLOCK[c.input["city"]]} for c in calls]
        follow_up = [*messages, {"role": "assistant", "content": calls}, {"role": "user", "content": results}]
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=follow_up))

    async def async_build_chat_completion_agentic_loop_plan(
        self, tools: dict[str, Any], model: str, messages: list[Any], response: Any, optional_params: dict[str, Any],
        logging_obj: Any, stream: bool, kwargs: dict[str, Any],
    ) -> AgenticLoopPlan:  # fmt: skip
        calls = tools["tool_calls"]
        results = [
            {"role": "tool", "tool_call_id": c.id, "content": CLOCK[json.loads(c.function.arguments)["city"]]}
            for c in calls
        ]
        follow_up = [*messages, {"role": "assistant", "content": None, "tool_calls": calls}, *results]
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=follow_up))


async def main() -> None:
    model = ScriptedModel(default=demo_model)
    gateway = AgenticLoopMiddleware(model, hooks=[LocalTimeHook()])
    transport = httpx2.ASGITransport(app=gateway)

    claude = anthropic.AsyncAnthropic(
        api_key="demo", base_url="http://gateway", http_client=httpx2.AsyncClient(transport=transport)
    )
    reply = await claude.messages.create(
        model="demo", max_tokens=100, messages=[{"role": "user", "content": "What time is it in Paris?"}]
    )
    text = "".join(block.text for block in reply.content if block.type == "text")
    print("anthropic SDK, /v1/messages:        ", text, f"(stop_reason={reply.stop_reason})")

    gpt = openai.AsyncOpenAI(
        api_key="demo", base_url="http://gateway/v1", http_client=httpx2.AsyncClient(transport=transport)
    )
    completion = await gpt.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "What time is it in Tokyo?"}]
    )
    choice = completion.choices[0]
    print("openai SDK, /v1/chat/completions:   ", choice.message.content, f"(finish_reason={choice.finish_reason})")

    print(f"\nThe model app was called {len(model.requests)} times for 2 client requests:")
    for request in model.requests:
        print("  ", request.path, "<-", json.dumps(request.body["messages"][-1])[:90])


if __name__ == "__main__":
    asyncio.run(main())
