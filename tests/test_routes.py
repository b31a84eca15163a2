"""Routes beyond exact paths: templates, LiteLLM's paths as a preset, and a warning for model routes left out."""

from __future__ import annotations

import logging
import os
from typing import Any

import httpx2
import openai
import pytest
from conftest import anthropic_client, http_client
from fastapi import APIRouter, FastAPI
from fastapi.routing import iter_route_contexts
from starlette.applications import Starlette
from starlette.routing import Host, Mount, Route, Router
from support import Route as WireRoute
from support import ToolHook

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, ServerTools, server_tool
from agentic_middleware.routes import LITELLM_ROUTES, NOT_MODEL_ROUTES
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
        ("/queue/chat/completions", CHAT),
        ("/v1/messages", MESSAGES),
        ("/claude_code_gateway/v1/messages", MESSAGES),
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


def uncovered_warning(caplog: pytest.LogCaptureFixture) -> str:
    warnings = [r.getMessage() for r in caplog.records if "no configured route covers" in r.getMessage()]
    assert len(warnings) <= 1
    return warnings[0] if warnings else ""


def test_the_warning_sees_included_routers_mounts_and_hosts(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentic_middleware")
    model = ScriptedModel()
    inner = APIRouter()
    inner.add_api_route("/chat/completions", model, methods=["POST"])
    outer = APIRouter()
    outer.add_api_route("/v1/messages", model, methods=["POST"])
    outer.include_router(inner, prefix="/deep")
    sub = FastAPI()
    sub.include_router(outer)
    app = FastAPI()
    app.include_router(outer, prefix="/team")
    app.router.routes.append(Mount("/sub", app=sub))
    app.router.routes.append(Host("llm.example", app=Router([Route("/v1/responses", model, methods=["POST"])])))
    app.router.routes.append(Route("/v1/threads/{thread_id}/messages", model, methods=["POST"]))  # Assistants

    AgenticLoopMiddleware(app, hooks=[ToolHook()], routes={"/v1/chat/completions": "chat_completions"})

    named = uncovered_warning(caplog).split("serves POST ")[1].split(", which")[0].split(", ")
    assert sorted(named) == [
        "/sub/deep/chat/completions",
        "/sub/v1/messages",
        "/team/deep/chat/completions",
        "/team/v1/messages",
        "/v1/responses",
    ]


@pytest.fixture(scope="module")
def litellm_app() -> Any:
    """LiteLLM's proxy app with every router it registers lazily (at a path's first request) registered now."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-list download at import
    try:
        from litellm.proxy._lazy_features import register_all_features
        from litellm.proxy.proxy_server import app
    except ImportError as error:  # not in the test extra: with them, LiteLLM's SDK runs guardrails otherwise
        pytest.skip(f"LiteLLM's proxy app needs the `litellm-proxy` extra: {error}")

    register_all_features(app)
    return app


def served_post_paths(app: Any) -> set[str]:
    """The POST paths an app serves, read with FastAPI's own walk of its routes (as its OpenAPI schema is)."""
    found = set()

    def walk(routes: list[Any], prefix: str) -> None:
        for context in iter_route_contexts(routes):
            children = getattr(context, "routes", None)
            if isinstance(children, list):
                walk(children, prefix + (context.path or ""))
            elif context.path and "POST" in (context.methods or ()):
                found.add(prefix + context.path)

    walk(app.routes, "")
    return found


def test_the_litellm_preset_is_what_litellms_proxy_serves(litellm_app: Any, caplog: pytest.LogCaptureFixture) -> None:
    served = served_post_paths(litellm_app)
    assert set(LITELLM_ROUTES) <= served  # no preset path LiteLLM does not serve
    model_paths = {path for path in served if path.endswith(("/chat/completions", "/messages", "/responses"))}
    left_out = {"/cursor/chat/completions"}  # Responses bodies on a chat path: see docs/configuration.md
    assert model_paths - set(LITELLM_ROUTES) - set(NOT_MODEL_ROUTES) == left_out

    caplog.set_level(logging.WARNING, logger="agentic_middleware")
    AgenticLoopMiddleware(litellm_app, hooks=[ToolHook()], routes="litellm")
    assert "serves POST /cursor/chat/completions, which" in uncovered_warning(caplog)


def test_with_the_default_routes_the_warning_names_litellms_other_paths(
    litellm_app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentic_middleware")
    AgenticLoopMiddleware(litellm_app, hooks=[ToolHook()])

    named = set(uncovered_warning(caplog).split("serves POST ")[1].split(", which")[0].split(", "))
    assert named == set(LITELLM_ROUTES) - {"/v1/chat/completions", "/v1/messages", "/v1/responses"} | {
        "/cursor/chat/completions"
    }
