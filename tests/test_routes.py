"""Routes beyond exact paths: templates, LiteLLM's paths as a preset, and a warning for model routes left out."""

from __future__ import annotations

import logging
from typing import Any

import httpx2
import openai
import pytest
from conftest import anthropic_client, http_client
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from support import Route as WireRoute
from support import ToolHook

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, ServerTools, server_tool
from agentic_middleware.testing import ScriptedModel, function_call, response

MESSAGES, CHAT = WireRoute("messages"), WireRoute("chat")


@server_tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def looping(route: WireRoute) -> ScriptedModel:
    return ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("done"))


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/chat/completions", CHAT),
        ("/v1/chat/completions", CHAT),
        ("/openai/deployments/gpt-4o/chat/completions", CHAT),
        ("/engines/azure/gpt-4o/chat/completions", CHAT),  # LiteLLM's model names may hold a slash
        ("/v1/messages", MESSAGES),
        ("/messages", MESSAGES),
    ],
)
async def test_the_litellm_preset_covers_litellms_paths(path: str, route: WireRoute) -> None:
    model = looping(route)
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()], routes="litellm")) as client:
        response = await client.post(path, json=route.request())

    assert len(model.requests) == 2 and model.requests[1].path == path
    assert route.final_text(response.json()) == "done"


@pytest.mark.parametrize("prefix", ["/v1", "", "/openai/v1"])  # the paths LiteLLM's proxy serves Responses on
async def test_the_litellm_preset_covers_litellms_responses_paths(prefix: str) -> None:
    model = ScriptedModel(response(function_call("lookup", {"key": "k"})), response("done"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], routes="litellm")
    client = openai.AsyncOpenAI(
        api_key="k",
        base_url=f"http://gateway{prefix}",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)),
        max_retries=0,
    )
    answer = await client.responses.create(model="m", input="go")

    assert [request.path for request in model.requests] == [f"{prefix}/responses"] * 2
    assert answer.output_text == "done"


async def test_the_openai_sdk_with_a_base_url_without_v1_gets_the_loop() -> None:
    model = looping(CHAT)
    app = AgenticLoopMiddleware(model, hooks=[ToolHook()], routes="litellm")
    client = openai.AsyncOpenAI(
        api_key="k",
        base_url="http://gateway",  # as LiteLLM's docs write it
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)),
        max_retries=0,
    )
    completion = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])

    assert model.requests[0].path == "/chat/completions"
    assert completion.choices[0].message.content == "done"
    assert not completion.choices[0].message.tool_calls


async def test_the_azure_client_gets_the_loop() -> None:
    model = looping(CHAT)
    app = AgenticLoopMiddleware(model, hooks=[ToolHook()], routes="litellm")
    client = openai.AsyncAzureOpenAI(
        api_key="k",
        azure_endpoint="http://gateway",
        api_version="2024-10-21",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)),
        max_retries=0,
    )
    completion = await client.chat.completions.create(
        model="my-deployment", messages=[{"role": "user", "content": "go"}]
    )

    assert model.requests[0].path == "/openai/deployments/my-deployment/chat/completions"
    assert completion.choices[0].message.content == "done"


async def test_a_template_of_ones_own_and_exact_paths_side_by_side() -> None:
    model = looping(MESSAGES)
    routes = {"/tenants/{tenant}/v1/messages": "messages", "/v1/chat/completions": "chat_completions"}
    app = AgenticLoopMiddleware(model, hooks=[ToolHook()], routes=routes)
    reply = await anthropic_client(app, base_url="http://gateway/tenants/acme").messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}]
    )
    assert [block.type for block in reply.content] == ["text"]
    assert len(model.requests) == 2

    other = ScriptedModel(MESSAGES.calls(("lookup", {"n": 1})))
    async with http_client(AgenticLoopMiddleware(other, hooks=[ToolHook()], routes=routes)) as client:
        response = await client.post("/tenants/acme/extra/v1/messages", json=MESSAGES.request())  # two segments
    assert len(other.requests) == 1 and MESSAGES.tool_names(response.json()) == ["lookup"]  # passed through


@pytest.mark.parametrize(
    ("routes", "match"),
    [
        ({"/x/{model/chat/completions": "chat_completions"}, "brace"),
        ({"/x/{model:int}/chat/completions": "chat_completions"}, "converter"),
        ("no-such-preset", "preset"),
    ],
)
def test_bad_routes_fail_at_start(routes: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        AgenticLoopMiddleware(ScriptedModel(), routes=routes)


def model_routes(model: ScriptedModel) -> list[Any]:
    return [
        Route("/v1/chat/completions", model, methods=["POST"]),
        Route("/chat/completions", model, methods=["POST"]),
        Route("/openai/deployments/{model:path}/chat/completions", model, methods=["POST"]),
        Route("/v1/models", model, methods=["GET"]),
        Mount("/llm", routes=[Route("/v1/messages", model, methods=["POST"])]),
    ]


async def test_a_warning_at_start_names_the_model_routes_no_route_covers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentic_middleware")
    app = Starlette(routes=model_routes(ScriptedModel(CHAT.text("x"))))
    app.add_middleware(AgenticLoopMiddleware, hooks=[ToolHook()])
    async with http_client(app) as client:  # Starlette builds its middleware at the first call
        await client.get("/v1/models")

    [warning] = [r.getMessage() for r in caplog.records if "no configured route covers" in r.getMessage()]
    assert "/chat/completions" in warning and "/openai/deployments/{model:path}/chat/completions" in warning
    assert "/llm/v1/messages" in warning and "/v1/chat/completions," not in warning and "/v1/models" not in warning


def test_no_warning_when_the_routes_cover_them(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentic_middleware")
    app = FastAPI(routes=model_routes(ScriptedModel()))
    AgenticLoopMiddleware(app, hooks=[ToolHook()], routes={"/llm/v1/messages": "messages", **_litellm()})
    assert "no configured route covers" not in caplog.text


def _litellm() -> dict[str, str]:
    from agentic_middleware.routes import LITELLM_ROUTES

    return dict(LITELLM_ROUTES)
