"""Every spelling of a model route the servers behind `agentic-gateway` answer is judged and looped as the route,
and with a guardrail or tool policy mounted no other POST goes up unless `forward_unjudged` lists it.

llama.cpp's `llama-server` and LiteLLM's proxy serve `/chat/completions` and `/responses` without `/v1`, and a
forwarding gateway hands `/v1/messages/` on as it came: before, all of them reached the model unjudged. The gateway
runs under uvicorn in front of a scripted upstream that answers every path and records what it got.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from fastapi import HTTPException
from guardrail_kit import (  # before litellm: it keeps LiteLLM from downloading its price list
    SAID,
    WORD,
    WordBlock,
    body_for,
)
from litellm.integrations.custom_logger import CustomLogger
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from support import ToolHook

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, Settings, load_config
from agentic_middleware.gateway import Upstream, cli, create_app, environment, serving
from agentic_middleware.gateway.paths import unjudged_described
from agentic_middleware.testing import (
    RecordedRequest,
    ScriptedModel,
    chat_completion,
    message,
    response,
    tool_call,
    tool_use,
)


class DeploymentBlock(CustomLogger):
    """A pre-call hook that is not a guardrail: refuses any request with WORD in it."""

    async def async_pre_call_deployment_hook(self, kwargs: dict, call_type: Any) -> dict:  # type: ignore[override]
        if WORD in str(kwargs.get("input")) + str(kwargs.get("messages")):
            raise HTTPException(status_code=400, detail=f"blocked: {WORD}")
        return kwargs


def answer(request: RecordedRequest) -> dict[str, Any]:
    """The upstream's answer for any path, in the shape its ending names."""
    if request.path.endswith("/count_tokens"):
        return {"input_tokens": 7}
    if request.path.endswith("messages") or request.path.endswith("messages/"):
        return message("ok")
    if "responses" in request.path:
        return response("ok")
    if "completions" in request.path:
        return chat_completion("ok")
    return {"object": "list", "data": []}


@asynccontextmanager
async def gateway(settings: Settings, model: ScriptedModel) -> AsyncIterator[str]:
    async with serving(model) as upstream, serving(create_app(settings, Upstream(upstream + "/v1"))) as url:
        yield url


SPELLINGS = [
    "/chat/completions",
    "/chat/completions/",
    "/v1/chat/completions/",
    "/messages",
    "/messages/",
    "/v1/messages/",
    "/responses",
    "/responses/",
    "/v1/responses/",
    "/responses/compact",
    "/v1/responses/compact/",
]


@pytest.mark.parametrize("path", SPELLINGS)
async def test_every_spelling_of_a_model_route_is_judged_and_a_block_never_reaches_the_upstream(path: str) -> None:
    model = ScriptedModel(default=answer)
    async with gateway(Settings(hooks=(WordBlock(),)), model) as url, httpx.AsyncClient(base_url=url) as client:
        blocked = await client.post(path, json=body_for(path))
        clean = await client.post(path, json=body_for(path, "hello"))
    assert blocked.status_code == 400 and WORD in blocked.text
    assert clean.status_code == 200
    canonical = "/v1" + path.removeprefix("/v1").removesuffix("/")
    assert [request.path for request in model.requests] == [canonical]  # the clean one alone, at the route's path
    assert WORD.encode() not in model.requests[0].body


async def test_the_official_sdk_on_an_unprefixed_base_url_and_a_bare_messages_path_are_looped() -> None:
    """An OpenAI SDK whose base URL lacks `/v1` (as llama.cpp's docs write it) calls `/chat/completions`: the
    server's tool runs and the model is asked again, at the route's own path; `/messages/` likewise."""
    model = ScriptedModel(
        chat_completion(tool_calls=[tool_call("lookup", {"key": "k"})]),
        chat_completion("done"),
        message(tool_use("lookup", {"key": "k"})),
        message("done"),
        default=answer,
    )
    async with gateway(Settings(hooks=(ToolHook(), WordBlock())), model) as url:
        async with openai.AsyncOpenAI(base_url=url, api_key="sk", max_retries=0) as gpt:
            chat = await gpt.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            with pytest.raises(openai.BadRequestError, match="blocked"):
                await gpt.chat.completions.create(model="m", messages=[{"role": "user", "content": SAID}])
        async with httpx.AsyncClient(base_url=url) as client:
            messages = await client.post("/messages/", json=body_for("/messages", "hi"))
    assert chat.choices[0].message.content == "done"
    assert messages.json()["content"][-1]["text"] == "done"
    paths = [request.path for request in model.requests]
    assert paths == ["/v1/chat/completions"] * 2 + ["/v1/messages"] * 2


BAD_POSTS = [
    ("/v1/completions", "openai"),
    ("/completions", "openai"),
    ("/v1/embeddings", "openai"),
    ("/v1/messages/batches", "anthropic"),
    ("//v1/messages", "openai"),
    ("/V1/messages", "openai"),
    ("/v1/chat/completions//", "openai"),
    ("/v1/responses//compact", "openai"),
]


@pytest.mark.parametrize(("path", "shape"), BAD_POSTS)
async def test_with_a_guardrail_a_post_the_gateway_does_not_judge_is_refused_in_the_routes_shape(
    path: str, shape: str
) -> None:
    model = ScriptedModel(default=answer)
    async with gateway(Settings(hooks=(WordBlock(),)), model) as url, httpx.AsyncClient() as client:
        refused = await client.post(url + path, json=body_for(path))  # a whole URL: `//` stays as it is
        put = await client.put(url + path, json=body_for(path))
    assert refused.status_code == put.status_code == 403
    error = refused.json()
    if shape == "anthropic":
        assert error["type"] == "error" and "forward_unjudged" in error["error"]["message"]
    else:
        assert error["error"]["code"] == "path_not_forwarded" and "forward_unjudged" in error["error"]["message"]
    assert model.requests == []


async def test_reads_token_counts_and_claude_codes_beta_query_still_go_up() -> None:
    """What the SDKs, Claude Code and Codex send besides the routes: `GET /v1/models`, `DELETE` of a stored
    response, and the token counts (listed by default) still go up; `/v1/messages?beta=true` is judged."""
    model = ScriptedModel(default=answer)
    async with gateway(Settings(hooks=(WordBlock(),)), model) as url:
        async with anthropic.AsyncAnthropic(base_url=url, api_key="sk", max_retries=0) as claude:
            counted = await claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
        async with httpx.AsyncClient(base_url=url) as client:
            beta = await client.post("/v1/messages/count_tokens?beta=true", json=body_for("/v1/messages"))
            blocked = await client.post("/v1/messages?beta=true", json=body_for("/v1/messages"))
            models = await client.get("/v1/models")
            deleted = await client.delete("/v1/responses/resp_1")
            tokens = await client.post("/v1/responses/input_tokens", json=body_for("/v1/responses", "hi"))
    assert counted.input_tokens == 7 and beta.status_code == 200 and blocked.status_code == 400
    assert models.status_code == deleted.status_code == tokens.status_code == 200
    assert [request.path for request in model.requests] == [
        "/v1/messages/count_tokens",
        "/v1/messages/count_tokens",
        "/v1/models",
        "/v1/responses/resp_1",
        "/v1/responses/input_tokens",
    ]


async def test_forward_unjudged_lists_what_goes_up_and_replaces_the_default() -> None:
    model = ScriptedModel(default=answer)
    settings = Settings(hooks=(WordBlock(),), forward_unjudged=["/v1/embeddings", "/v1/responses/{id}/cancel"])
    async with gateway(settings, model) as url, httpx.AsyncClient(base_url=url) as client:
        embedded = await client.post("/v1/embeddings", json={"model": "m", "input": SAID})
        cancelled = await client.post("/v1/responses/resp_1/cancel")
        counted = await client.post("/v1/messages/count_tokens", json=body_for("/v1/messages"))
    assert embedded.status_code == cancelled.status_code == 200
    assert counted.status_code == 403  # no longer listed
    assert [request.path for request in model.requests] == ["/v1/embeddings", "/v1/responses/resp_1/cancel"]


async def test_a_tool_policy_alone_refuses_unlisted_posts_and_without_either_they_go_up() -> None:
    model = ScriptedModel(default=answer)
    policed = Settings(hooks=(ToolHook(),), tool_policy=lambda scope: None)
    async with gateway(policed, model) as url, httpx.AsyncClient(base_url=url) as client:
        refused = await client.post("/v1/completions", json={"model": "m", "prompt": SAID})
    async with gateway(Settings(hooks=(ToolHook(),)), model) as url, httpx.AsyncClient(base_url=url) as client:
        forwarded = await client.post("/v1/completions", json={"model": "m", "prompt": SAID})
        aliased = await client.post("/chat/completions", json=body_for("/chat/completions", "hi"))
    assert refused.status_code == 403 and forwarded.status_code == aliased.status_code == 200
    assert [request.path for request in model.requests] == ["/v1/completions", "/v1/chat/completions"]


def test_forward_unjudged_is_checked_and_read_from_yaml(tmp_path: Path) -> None:
    config = tmp_path / "gw.yaml"
    config.write_text("agentic_middleware:\n  forward_unjudged: [/v1/embeddings]\n")
    assert load_config(config).forward_unjudged == ("/v1/embeddings",)
    for bad in ("/v1/embeddings", ["v1/embeddings"], ["/v1/{x"], [3]):
        with pytest.raises(ConfigurationError, match="forward_unjudged"):
            Settings(forward_unjudged=bad)  # type: ignore[arg-type]


def test_the_start_line_says_which_posts_go_up_unjudged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    variables = [name for name in vars(environment).values() if isinstance(name, str) and name.startswith("AGENTIC_")]
    for name in variables:  # set once through monkeypatch, so that what `cli.main` writes is removed at the end
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(cli, "_serve", lambda args: None)
    guard = tmp_path / "guard.py"
    guard.write_text(
        "from litellm.integrations.custom_guardrail import CustomGuardrail\n"
        "guard = CustomGuardrail(guardrail_name='g', event_hook='pre_call', default_on=True)\n"
        "async def apply_guardrail(inputs, request_data, input_type, logging_obj=None):\n    return inputs\n"
        "guard.apply_guardrail = apply_guardrail\n"
    )
    config = tmp_path / "gw.yaml"
    config.write_text("agentic_middleware:\n  hooks: [guard.guard]\n")
    assert cli.main(["--upstream", "http://127.0.0.1:9/v1", "--config", str(config), "--port", "0"]) == 0
    guarded = capsys.readouterr().out
    assert "POSTs forwarded unjudged: /v1/messages/count_tokens, /v1/responses/input_tokens (forward_unjudged)" in (
        guarded
    )  # compaction is judged by the guardrail, so not named
    assert "other unjudged paths are refused" in guarded
    os.environ.pop(environment.CONFIG)  # what the first start wrote for its workers
    assert cli.main(["--upstream", "http://127.0.0.1:9/v1", "--port", "0"]) == 0
    assert "POSTs to any path but the model routes are forwarded unjudged" in capsys.readouterr().out


async def test_the_bare_middleware_judges_a_route_with_a_trailing_slash_under_a_catch_all_app() -> None:
    """An app that answers every path (a proxy of its own) gets `/v1/messages/` as it came: with a guardrail
    mounted the middleware judges it as the route, without looping it."""
    got: list[str] = []

    async def anything(request: Any) -> JSONResponse:
        got.append(request.url.path)
        return JSONResponse(message("ok") if "messages" in request.url.path else response("ok"))

    app = Starlette(routes=[Route("/{path:path}", anything, methods=["POST"])])
    wrapped = AgenticLoopMiddleware(app, hooks=[WordBlock()])
    transport = httpx.ASGITransport(app=wrapped)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        blocked = [await client.post(path, json=body_for(path)) for path in ("/v1/messages/", "/v1/responses/compact/")]
        clean = await client.post("/v1/messages/", json=body_for("/v1/messages/", "hi"))
    assert [answer.status_code for answer in blocked] == [400, 400] and clean.status_code == 200
    assert got == ["/v1/messages/"]


async def test_with_a_pre_call_hook_that_is_no_guardrail_a_compaction_is_refused_unless_listed() -> None:
    """A deployment hook runs on looped requests alone and a compaction never loops (review paths F3): with one
    mounted, `/v1/responses/compact` leaves the default `forward_unjudged`, with or without a guardrail beside it;
    an operator who lists it sends it up."""
    model = ScriptedModel(default=answer)
    async with gateway(Settings(hooks=(DeploymentBlock(),)), model) as url, httpx.AsyncClient(base_url=url) as client:
        refused = [
            await client.post(path, json=body_for(path)) for path in ("/v1/responses/compact", "/responses/compact/")
        ]
        blocked = await client.post("/v1/responses", json=body_for("/v1/responses"))
        counted = await client.post("/v1/messages/count_tokens", json=body_for("/v1/messages", "hi"))
    both = Settings(hooks=(WordBlock(), DeploymentBlock()))
    async with gateway(both, model) as url, httpx.AsyncClient(base_url=url) as client:
        beside = await client.post("/v1/responses/compact", json=body_for("/v1/responses", "hi"))
    listed = Settings(hooks=(DeploymentBlock(),), forward_unjudged=["/v1/responses/compact"])
    async with gateway(listed, model) as url, httpx.AsyncClient(base_url=url) as client:
        forwarded = await client.post("/v1/responses/compact", json=body_for("/v1/responses", "hi"))
    assert [answered.status_code for answered in refused] == [403, 403] and beside.status_code == 403
    assert refused[0].json()["error"]["code"] == "path_not_forwarded"
    assert blocked.status_code == 400 and counted.status_code == forwarded.status_code == 200
    assert [request.path for request in model.requests] == ["/v1/messages/count_tokens", "/v1/responses/compact"]
    described = unjudged_described(Settings(hooks=(DeploymentBlock(),)))
    assert "POSTs forwarded unjudged: /v1/messages/count_tokens, /v1/responses/input_tokens (forward_unjudged)" in (
        described
    )


async def test_a_refused_post_is_told_to_list_its_path_and_other_methods_on_a_model_path_that_only_posts_go() -> None:
    """Review `gateway` F2: a refused POST on a model sub-path was told "only a POST is judged here". It is told that
    `forward_unjudged` does not list the path, and to list it there; that only a POST is judged is said to the other
    methods on a model path, which listing would not let through."""
    model = ScriptedModel(default=answer)
    async with gateway(Settings(hooks=(DeploymentBlock(),)), model) as url, httpx.AsyncClient(base_url=url) as client:
        compact = await client.post("/v1/responses/compact", json=body_for("/v1/responses", "hi"))
        put = await client.put("/v1/responses/compact", json=body_for("/v1/responses", "hi"))
    unlisted = Settings(hooks=(WordBlock(),), forward_unjudged=[])
    async with gateway(unlisted, model) as url, httpx.AsyncClient(base_url=url) as client:
        counted = await client.post("/v1/messages/count_tokens", json=body_for("/v1/messages", "hi"))
        got = await client.request("GET", "/v1/messages/count_tokens", json=body_for("/v1/messages", "hi"))
    for answered in (compact, counted):
        assert answered.status_code == 403
        said = answered.json()["error"]["message"]
        assert "forward_unjudged does not list it" in said and "list the path in forward_unjudged" in said, said
        assert "only a POST" not in said
    assert counted.json()["type"] == "error"  # Anthropic's shape under /v1/messages
    for answered in (put, got):
        assert answered.status_code == 403
        assert "only a POST is judged here, listed in forward_unjudged or not" in answered.json()["error"]["message"]
    assert model.requests == []
