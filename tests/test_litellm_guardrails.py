"""LiteLLM's Headroom and Compresr guardrails inside the middleware, against local stand-ins of their services.

Both compress the request in `apply_guardrail(input_type="request")`, add a retrieve tool, and answer the model's
retrieve calls in their agentic loop methods. Inside LiteLLM they run only on its proxy: its SDK runs a guardrail's
`apply_guardrail` through the proxy's unified guardrail, which needs `litellm[proxy]`, and only on chat completions.
The last test shows exactly that, so here the middleware is checked on its own against what LiteLLM's proxy does:
the service is called, the model sees the compressed history and the retrieve tool, the retrieve call is answered
with the original and never reaches the client.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from conftest import anthropic_client, openai_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from test_litellm_hooks import bodies, sdk, served, tool_names

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-list download at import
litellm = pytest.importorskip("litellm")

from litellm.proxy._types import UserAPIKeyAuth  # noqa: E402
from litellm.proxy.guardrails.guardrail_hooks.compresr import CompresrGuardrail  # noqa: E402
from litellm.proxy.guardrails.guardrail_hooks.headroom import HeadroomGuardrail  # noqa: E402

from agentic_middleware import AgenticLoopMiddleware  # noqa: E402
from agentic_middleware.testing import (  # noqa: E402
    RecordedRequest,
    ScriptedModel,
    chat_completion,
    message,
    tool_call,
    tool_use,
)

__all__ = ["sdk"]  # the fixture, shared with the hooks' tests

CONFIG = "Here is the config: " + "alpha=1 beta=2. " * 100


class Headroom:
    """A Headroom service stand-in: compresses every long text into a marker with a hash, and gives it back."""

    def __init__(self) -> None:
        self.originals: dict[str, str] = {}
        self.compressed: list[Any] = []
        self.retrieved: list[str] = []
        self.app = Starlette(
            routes=[
                Route("/v1/compress", self.compress, methods=["POST"]),
                Route("/v1/retrieve/{hash}", self.retrieve),
            ]
        )

    async def compress(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.compressed.append(body)
        messages, hashes = [], []
        for item in body["messages"]:
            content = item.get("content")
            if isinstance(content, str) and len(content) > 500:
                digest = hashlib.sha256(content.encode()).hexdigest()[:16]
                self.originals[digest] = content
                hashes.append(digest)
                item = {**item, "content": f"[compressed: call headroom_retrieve with hash={digest}]"}
            messages.append(item)
        return JSONResponse({"messages": messages, "ccr_hashes": hashes, "tokens_before": 900, "tokens_after": 20})

    async def retrieve(self, request: Request) -> JSONResponse:
        digest = request.path_params["hash"]
        self.retrieved.append(digest)
        if digest not in self.originals:
            return JSONResponse({"error": "not found"}, status_code=404)
        return JSONResponse({"original_content": self.originals[digest]})


@pytest.fixture
async def headroom() -> AsyncIterator[tuple[Headroom, str]]:
    stand_in = Headroom()
    async with served(stand_in.app) as base:
        yield stand_in, base


def marker_hash(request: RecordedRequest) -> str:
    found = re.search(r"hash=([0-9a-f]{12,24})", orjson.dumps(request.body["messages"]).decode())
    assert found, request.body["messages"]
    return found.group(1)


HISTORY = [
    {"role": "user", "content": CONFIG},
    {"role": "assistant", "content": "Ok."},
    {"role": "user", "content": "What does the config set?"},
]


async def test_headroom_on_chat_compresses_and_answers_its_retrieve_calls(headroom: tuple[Headroom, str]) -> None:
    service, base = headroom
    model = ScriptedModel(
        lambda request: chat_completion(
            tool_calls=[tool_call("headroom_retrieve", {"hash": marker_hash(request)}, id="call_h1")]
        ),
        chat_completion("alpha=1 and beta=2."),
    )
    guard = HeadroomGuardrail(api_base=base, guardrail_name="headroom", event_hook="pre_call", default_on=True)
    app = AgenticLoopMiddleware(model, hooks=[guard])
    reply = await openai_client(app).chat.completions.create(model="gpt-x", messages=HISTORY)  # type: ignore[arg-type]

    first, rerun = bodies(model)
    assert len(service.compressed) == 1
    assert first["messages"][0]["content"].startswith("[compressed: ")
    assert first["messages"][1:] == HISTORY[1:]  # the last user turn is never compressed
    assert tool_names(first) == ["headroom_retrieve"]
    assert service.retrieved == [marker_hash(model.requests[0])]
    assert rerun["messages"][-1] == {"role": "tool", "tool_call_id": "call_h1", "content": CONFIG}
    assert rerun["model"] == "gpt-x"
    assert reply.choices[0].message.content == "alpha=1 and beta=2."
    assert reply.choices[0].message.tool_calls is None


async def test_headroom_on_messages_gets_the_tools_in_its_own_shape_and_the_route_keeps_its(
    headroom: tuple[Headroom, str],
) -> None:
    service, base = headroom
    model = ScriptedModel(
        lambda request: message(tool_use("headroom_retrieve", {"hash": marker_hash(request)}, id="toolu_h1")),
        message("alpha=1 and beta=2."),
    )
    guard = HeadroomGuardrail(api_base=base, guardrail_name="headroom", event_hook="pre_call", default_on=True)
    app = AgenticLoopMiddleware(model, hooks=[guard])
    own_tool = {"name": "lookup", "description": "Look up", "input_schema": {"type": "object", "properties": {}}}
    reply = await anthropic_client(app).messages.create(
        model="claude-x",
        max_tokens=100,
        messages=HISTORY,  # type: ignore[arg-type]
        tools=[own_tool],  # type: ignore[list-item]
    )

    first, rerun = bodies(model)
    assert first["messages"][0]["content"].startswith("[compressed: ")
    # The retrieve tool the guardrail added (an OpenAI function tool) reaches the app as an Anthropic tool.
    assert first["tools"][0] == own_tool
    assert first["tools"][1]["name"] == "headroom_retrieve" and "input_schema" in first["tools"][1]
    result = rerun["messages"][-1]["content"][0]
    assert (result["type"], result["tool_use_id"], result["content"]) == ("tool_result", "toolu_h1", CONFIG)
    assert [block.type for block in reply.content] == ["text"]
    assert service.retrieved == [marker_hash(model.requests[0])]


async def test_headroom_rejects_a_hash_its_compression_did_not_make(headroom: tuple[Headroom, str]) -> None:
    """The request context `apply_guardrail` wrote reaches the plan builder; a hash from elsewhere is refused."""
    service, base = headroom
    model = ScriptedModel(
        chat_completion(tool_calls=[tool_call("headroom_retrieve", {"hash": "0123456789abcdef"}, id="call_x")]),
        chat_completion("no"),
    )
    guard = HeadroomGuardrail(api_base=base, guardrail_name="headroom", event_hook="pre_call", default_on=True)
    app = AgenticLoopMiddleware(model, hooks=[guard])
    await openai_client(app).chat.completions.create(model="gpt-x", messages=HISTORY)  # type: ignore[arg-type]

    assert "was not produced by the current request" in bodies(model)[1]["messages"][-1]["content"]
    assert service.retrieved == []


async def test_a_guardrail_without_pre_call_in_its_event_hook_is_not_applied(headroom: tuple[Headroom, str]) -> None:
    service, base = headroom
    model = ScriptedModel(chat_completion("fine"))
    guard = HeadroomGuardrail(api_base=base, guardrail_name="headroom", event_hook="post_call", default_on=True)
    app = AgenticLoopMiddleware(model, hooks=[guard])
    await openai_client(app).chat.completions.create(model="gpt-x", messages=HISTORY)  # type: ignore[arg-type]

    assert service.compressed == []
    assert bodies(model)[0]["messages"] == HISTORY


# --- Compresr -------------------------------------------------------------------------------------------------


class Compresr:
    """A Compresr service stand-in: question-specific compression keeps the first sentence."""

    def __init__(self) -> None:
        self.contexts: list[str] = []
        self.app = Starlette(routes=[Route("/api/compress/question-specific/", self.compress, methods=["POST"])])

    async def compress(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.contexts.append(body["context"])
        short = body["context"].split(". ")[0] + "."
        return JSONResponse({"data": {"compressed_context": short, "original_tokens": 400, "compressed_tokens": 8}})


def with_caller(app: ASGIApp, api_key: str) -> ASGIApp:
    """The gateway's auth in front of the middleware: it puts the caller's identity in `request.state`."""

    async def authenticated(scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault("state", {})["user_api_key_auth"] = UserAPIKeyAuth(api_key=api_key)
        await app(scope, receive, send)

    return authenticated


TOOL_HISTORY = [
    {"role": "user", "content": "Read the config file."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_read", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "call_read", "content": CONFIG},
    {"role": "user", "content": "What does the config set?"},
]


@pytest.mark.parametrize("caller", [True, False], ids=["with caller identity", "without"])
async def test_compresr_on_chat_compresses_and_retrieves_for_the_caller(caller: bool) -> None:
    service = Compresr()

    def ask(request: RecordedRequest) -> dict[str, Any]:
        found = re.search(r"compresr hash=([0-9a-f]+)", orjson.dumps(request.body["messages"]).decode())
        if not found:
            return chat_completion("I cannot see the whole config.")
        return chat_completion(tool_calls=[tool_call("compresr_retrieve", {"hash": found.group(1)}, id="call_c1")])

    model = ScriptedModel(ask, chat_completion("alpha=1 and beta=2."))
    async with served(service.app) as base:
        guard = CompresrGuardrail(
            api_base=base, api_key="test-key", guardrail_name="compresr", event_hook="pre_call", default_on=True
        )
        middleware = AgenticLoopMiddleware(model, hooks=[guard])
        app = with_caller(middleware, "hashed-key-1") if caller else middleware
        reply = await openai_client(app).chat.completions.create(model="gpt-x", messages=TOOL_HISTORY)  # type: ignore[arg-type]

    assert service.contexts == [CONFIG]
    assert bodies(model)[0]["messages"][2]["content"].startswith("Here is the config: alpha=1 beta=2.")
    if not caller:  # Compresr keeps originals per caller only: no identity, no retrieve tool, no rerun
        assert "tools" not in bodies(model)[0]
        assert reply.choices[0].message.content == "I cannot see the whole config."
        return
    assert tool_names(bodies(model)[0]) == ["compresr_retrieve"]
    assert bodies(model)[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_c1", "content": CONFIG}
    assert reply.choices[0].message.content == "alpha=1 and beta=2."


# --- Inside LiteLLM's SDK -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["headroom", "compresr"])
async def test_inside_litellms_sdk_these_guardrails_need_its_proxy(sdk: Any, kind: str) -> None:
    """LiteLLM's SDK hands an `apply_guardrail` guardrail to its proxy's unified guardrail: without `litellm[proxy]`
    the call fails before the model is asked. (On `/v1/messages` its SDK does not run guardrails at all.)"""
    guard = (
        HeadroomGuardrail(api_base="http://127.0.0.1:9", guardrail_name=kind, event_hook="pre_call", default_on=True)
        if kind == "headroom"
        else CompresrGuardrail(
            api_base="http://127.0.0.1:9", api_key="k", guardrail_name=kind, event_hook="pre_call", default_on=True
        )
    )
    model = ScriptedModel(chat_completion("never asked"))
    sdk.callbacks = [guard]
    async with served(model) as base:
        with pytest.raises(ImportError, match=r"litellm\[proxy\]"):
            await sdk.acompletion(
                model="openai/gpt-x", messages=HISTORY, api_base=f"{base}/v1", api_key="k", guardrails=[kind]
            )
    assert model.requests == []
