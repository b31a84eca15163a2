"""A scripted model app and response builders, for testing hooks without a real model.

    model = ScriptedModel(message(tool_use("my_tool", {"q": "x"})), message("done"))
    app = AgenticLoopMiddleware(model, hooks=[MyToolCallback()])

Each request the model app receives takes the next reply of its script, and
is recorded in `model.requests`, so a test can check what the loop sent.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

Reply = dict[str, Any] | Response
Script = Reply | Callable[["RecordedRequest"], Reply | Awaitable[Reply]]

_ids = itertools.count(1)


@dataclass
class RecordedRequest:
    """One request as the model app received it."""

    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> Any:
        return orjson.loads(self.raw)


class ScriptedModel:
    """A model app that answers from a script: dicts as 200 JSON, Starlette responses as they are,
    and callables of the recorded request returning either. Once the script is used up, `default`
    answers every request; without one, the model answers 500."""

    def __init__(self, *script: Script, default: Script | None = None) -> None:
        self.script = list(script)
        self.default = default
        self.requests: list[RecordedRequest] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        request = Request(scope, receive)
        recorded = RecordedRequest(scope["path"], dict(request.headers), await request.body())
        self.requests.append(recorded)
        reply = await self.reply(recorded)
        response = reply if isinstance(reply, Response) else JSONResponse(reply)
        await response(scope, receive, send)

    async def reply(self, request: RecordedRequest) -> Reply:
        step = self.script.pop(0) if self.script else self.default
        if step is None:
            return JSONResponse({"error": {"message": "the script has no reply left"}}, status_code=500)
        if callable(step) and not isinstance(step, Response):
            result = step(request)
            return await result if inspect.isawaitable(result) else result
        return step


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    """An Anthropic `tool_use` content block."""
    return {"type": "tool_use", "id": id or f"toolu_{next(_ids):04d}", "name": name, "input": input}


def message(
    *content: str | dict[str, Any],
    stop_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    model: str = "scripted-model",
) -> dict[str, Any]:
    """An Anthropic Messages response; strings become text blocks, the stop reason follows the content."""
    blocks = [{"type": "text", "text": item} if isinstance(item, str) else item for item in content]
    calls_tools = any(block.get("type") == "tool_use" for block in blocks)
    return {
        "id": f"msg_{next(_ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason or ("tool_use" if calls_tools else "end_turn"),
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }


def tool_call(name: str, arguments: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    """An OpenAI chat `tool_calls` entry; the arguments are sent as a JSON string, as the API does."""
    return {
        "id": id or f"call_{next(_ids):04d}",
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
    }


def chat_completion(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    model: str = "scripted-model",
) -> dict[str, Any]:
    """An OpenAI Chat Completions response with one choice."""
    assistant: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        assistant["tool_calls"] = tool_calls
    return {
        "id": f"chatcmpl-{next(_ids):04d}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": assistant,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def function_call(name: str, arguments: dict[str, Any], call_id: str | None = None) -> dict[str, Any]:
    """An OpenAI Responses `function_call` output item; the arguments are a JSON string, as the API sends them."""
    number = next(_ids)
    return {
        "type": "function_call",
        "id": f"fc_{number:04d}",
        "call_id": call_id or f"call_{number:04d}",
        "name": name,
        "arguments": orjson.dumps(arguments).decode(),
        "status": "completed",
    }


def response(
    *output: str | dict[str, Any],
    usage: dict[str, Any] | None = None,
    model: str = "scripted-model",
    **fields: Any,
) -> dict[str, Any]:
    """An OpenAI Responses response; strings become assistant messages, dicts are output items as given."""
    items = [
        {
            "type": "message",
            "id": f"msg_{next(_ids):04d}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": item, "annotations": []}],
        }
        if isinstance(item, str)
        else item
        for item in output
    ]
    return {
        "id": f"resp_{next(_ids):04d}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": model,
        "output": items,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage
        or {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        },
        **fields,
    }
