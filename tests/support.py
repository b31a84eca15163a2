"""Test helpers: one object per wire format, and a hook that serves a tool on both routes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from starlette.types import Message, Receive

from agentic_middleware import AgenticLoopPlan, AgenticLoopRequestPatch, CustomLogger, server_tool
from agentic_middleware.declare import ServerTool
from agentic_middleware.testing import chat_completion, message, tool_call, tool_use

# The `metadata` keys the pre-call hooks are given from the HTTP request, as LiteLLM's proxy writes them.
SERVER_METADATA = frozenset(("headers", "endpoint", "requester_ip_address", "user_agent", "requester_metadata"))


class Route:
    """Builds requests and scripted replies in one wire format, and reads its responses."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = {"messages": "/v1/messages", "chat": "/v1/chat/completions"}[name]

    def __repr__(self) -> str:
        return self.name

    def request(self, text: str = "hi", **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "scripted", "messages": [{"role": "user", "content": text}]}
        if self.name == "messages":
            body["max_tokens"] = 100
        return {**body, **extra}

    def calls(self, *calls: tuple[Any, ...], text: str | None = None) -> Any:
        """A reply calling the tools given as (name, input) or (name, input, id)."""
        if self.name == "messages":
            blocks = [tool_use(*call) for call in calls]
            return message(*([text] if text else []), *blocks)
        return chat_completion(content=text, tool_calls=[tool_call(*call) for call in calls])

    def text(self, text: str) -> dict[str, Any]:
        return message(text) if self.name == "messages" else chat_completion(content=text)

    def final_text(self, body: dict[str, Any]) -> str:
        if self.name == "messages":
            return "".join(b["text"] for b in body["content"] if b["type"] == "text")
        return body["choices"][0]["message"]["content"] or ""

    def tool_names(self, body: dict[str, Any]) -> list[str]:
        if self.name == "messages":
            return [b["name"] for b in body["content"] if b["type"] == "tool_use"]
        return [c["function"]["name"] for c in body["choices"][0]["message"].get("tool_calls") or []]

    def stop(self, body: dict[str, Any]) -> str:
        return body["stop_reason"] if self.name == "messages" else body["choices"][0]["finish_reason"]

    def error(self, body: dict[str, Any]) -> tuple[str, str]:
        """The error's type and message, checking the route's error shape on the way."""
        if self.name == "messages":
            assert body["type"] == "error"
            return body["error"]["type"], body["error"]["message"]
        assert set(body["error"]) >= {"message", "type", "code"}
        return body["error"]["type"], body["error"]["message"]


def response_calls(response: Any) -> list[Any]:
    """The tool calls of a response in either format, read through attribute access."""
    if response.choices is not None:
        return [call for choice in response.choices for call in choice.message.tool_calls or []]
    return [block for block in response.content or [] if block.type == "tool_use"]


def call_name(call: Any) -> str:
    return str(call.name if call.function is None else call.function.name)


def call_input(call: Any) -> Any:
    return call.input if call.function is None else json.loads(call.function.arguments)


class ToolHook(CustomLogger):
    """Serves one tool on both routes, answering `<tool> result for <input>`, and records what it saw."""

    def __init__(self, tool: str = "lookup") -> None:
        self.tool = tool
        self.gates: list[dict[str, Any]] = []
        self.plans: list[dict[str, Any]] = []
        self.cleanups: list[Any] = []

    async def async_should_run_agentic_loop(
        self,
        response: Any,
        model: str,
        messages: list[Any],
        tools: Any,
        stream: bool,
        custom_llm_provider: str,
        kwargs: dict[str, Any],
    ) -> tuple[bool, dict[str, Any]]:
        self.gates.append({"model": model, "tools": tools, "provider": custom_llm_provider, "kwargs": kwargs})
        calls = [call for call in response_calls(response) if call_name(call) == self.tool]
        return (True, {"tool_calls": calls}) if calls else (False, {})

    def result(self, call: Any) -> str:
        return f"{self.tool} result for {json.dumps(call_input(call), sort_keys=True)}"

    async def async_build_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
        self.plans.append({"tools": tools, **arguments})
        calls = tools["tool_calls"]
        follow_up = [
            *arguments["messages"],
            {"role": "assistant", "content": calls},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": c.id, "content": self.result(c)} for c in calls],
            },
        ]
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=follow_up))

    async def async_build_chat_completion_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
        self.plans.append({"tools": tools, **arguments})
        calls = tools["tool_calls"]
        follow_up = [
            *arguments["messages"],
            {"role": "assistant", "content": None, "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c.id, "content": self.result(c)} for c in calls),
        ]
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=follow_up))

    async def async_agentic_loop_cleanup_hook(self, plan: Any, kwargs: dict[str, Any]) -> None:
        self.cleanups.append(plan)


async def post(client: httpx.AsyncClient, route: Route, body: Any, **options: Any) -> httpx.Response:
    return await client.post(route.path, json=body, **options)


async def read_body(receive: Receive) -> bytes:
    """A plain ASGI app's whole request body, however many messages it comes in."""
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


def client_receive(raw: bytes, left: asyncio.Event | None = None) -> Receive:
    """A client's `receive` for a request of `raw`: the body in one message, then a disconnect once `left` is set
    (never, without it: a server that does not say the client left)."""
    incoming: list[Message] = [{"type": "http.request", "body": raw, "more_body": False}]

    async def receive() -> Message:
        if incoming:
            return incoming.pop()
        await (left or asyncio.Event()).wait()
        return {"type": "http.disconnect"}

    return receive


def gated_lookup() -> tuple[ServerTool, asyncio.Event, list[str]]:
    """A `slow_lookup` server tool that runs until `release` is set, noting each key it is called with in `runs`."""
    release = asyncio.Event()
    runs: list[str] = []

    @server_tool
    async def slow_lookup(key: str) -> str:
        runs.append(key)
        await release.wait()
        return f"value of {key}"

    return slow_lookup, release, runs
