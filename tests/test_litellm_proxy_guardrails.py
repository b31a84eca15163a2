"""LiteLLM guardrails that judge in the proxy's own hooks, and what they are given of the HTTP request.

Most of LiteLLM's built-in guardrails (Lakera v2, Aporia, Pangea, Lasso, Aim, Pillar...) and LiteLLM's documented
way to write one have no `apply_guardrail`: its proxy calls their `async_pre_call_hook` for `pre_call` and their
`async_moderation_hook` for `during_call`. Mounted here they must judge as there (review-guard F2), or be refused
when the middleware is built; they and the `apply_guardrail` ones get the request's real inbound headers where
LiteLLM's proxy puts them, never copies the client wrote into its body (F3), and a `logging_obj` with the
attributes LiteLLM's own guardrails read (F4). Real LiteLLM guardrails and SDK clients, over uvicorn where a
guardrail calls its service.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from conftest import anthropic_client, http_client, openai_client
from fastapi import HTTPException
from guardrail_kit import SAID, WORD, Guard, Recording, body_for
from litellm.integrations.custom_guardrail import CustomGuardrail
from litellm.proxy.guardrails.guardrail_hooks.generic_guardrail_api.generic_guardrail_api import (
    GenericGuardrailAPI,
)
from litellm.proxy.guardrails.guardrail_hooks.lakera_ai_v2 import LakeraAIGuardrail
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from test_litellm_hooks import sdk, served

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, ServerTools, server_tool
from agentic_middleware.testing import ScriptedModel, chat_completion, message, response, tool_call, tool_use

__all__ = ["sdk"]  # the fixture, shared with the hooks' tests

PATHS = ["/v1/messages", "/v1/chat/completions", "/v1/responses"]


def answer(path: str) -> Any:
    if "messages" in path:
        return message("ok")
    return response("ok") if "responses" in path else chat_completion("ok")


class ProxyStyle(Guard):
    """A guardrail written as LiteLLM documents one: it judges in the proxy's hooks, with no `apply_guardrail`."""

    def __init__(self, event_hook: str, answer: str = "raise", **options: Any) -> None:
        super().__init__("proxy-style", event_hook, **options)
        self.answer = answer
        self.pre_calls: list[dict[str, Any]] = []
        self.moderations: list[dict[str, Any]] = []

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> Any:
        self.pre_calls.append({"data": data, "call_type": call_type, "user": user_api_key_dict})
        if WORD not in str(data.get("messages") or data.get("input")):
            return data
        if self.answer == "string":
            return f"refused: {WORD}"
        if self.answer == "mask":
            return {**data, "messages": [{"role": "user", "content": "masked"}]}
        raise HTTPException(status_code=400, detail=f"pre_call blocked: {WORD}")

    async def async_moderation_hook(self, data: dict, user_api_key_dict: Any, call_type: Any) -> None:
        self.moderations.append({"data": data, "call_type": call_type})
        blocked = WORD in str(data.get("messages") or data.get("input"))
        data["messages"] = [{"role": "user", "content": "edited by moderation"}]  # never reaches the model
        if blocked and self.answer == "raise":
            raise HTTPException(status_code=400, detail=f"moderation blocked: {WORD}")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("event", ["pre_call", "during_call", None])
async def test_a_guardrail_judging_in_the_proxys_hooks_refuses_before_the_model_is_called(
    path: str, event: str | None
) -> None:
    guard = ProxyStyle(event)  # type: ignore[arg-type]
    model = ScriptedModel(answer(path))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=AgenticLoopMiddleware(model, hooks=[guard])), base_url="http://g"
    ) as client:
        refused = await client.post(path, json=body_for(path))
        passed = await client.post(path, json=body_for(path, "a fine request"))
    assert refused.status_code == 400, refused.text
    assert "blocked" in refused.text and WORD in refused.text
    assert passed.status_code == 200
    assert len(model.requests) == 1 and WORD not in str(model.requests[0].body)
    if event != "during_call":
        call_type = {"/v1/messages": "anthropic_messages", "/v1/chat/completions": "acompletion"}.get(path)
        assert guard.pre_calls[0]["call_type"] == (call_type or "aresponses")
    if event is not None:
        assert guard.pre_calls if event == "pre_call" else guard.moderations, "the event's hook was called"
        assert not (guard.moderations if event == "pre_call" else guard.pre_calls)


async def test_a_pre_call_hooks_string_refuses_and_its_returned_data_is_the_request() -> None:
    model = ScriptedModel(chat_completion("ok"))
    refusing = AgenticLoopMiddleware(model, hooks=[ProxyStyle("pre_call", answer="string")])
    with pytest.raises(openai.BadRequestError) as raised:
        await openai_client(refusing).chat.completions.create(model="m", messages=[{"role": "user", "content": SAID}])
    assert f"refused: {WORD}" in str(raised.value) and not model.requests
    masking = AgenticLoopMiddleware(model, hooks=[ProxyStyle("pre_call", answer="mask")])
    await openai_client(masking).chat.completions.create(model="m", messages=[{"role": "user", "content": SAID}])
    assert model.requests[0].body["messages"] == [{"role": "user", "content": "masked"}]


async def test_a_moderation_hooks_edits_never_reach_the_model() -> None:
    model = ScriptedModel(message("ok"))
    guard = ProxyStyle("during_call", answer="pass")
    app = AgenticLoopMiddleware(model, hooks=[guard])
    await anthropic_client(app).messages.create(
        model="m", max_tokens=5, messages=[{"role": "user", "content": "a fine request"}]
    )
    assert guard.moderations and model.requests[0].body["messages"] == [{"role": "user", "content": "a fine request"}]


@server_tool
def define(term: str) -> str:
    """Defines a term (an outside source)."""
    return f"a {term} is a {WORD}"


async def test_a_proxy_style_guardrail_judges_what_a_round_adds_before_the_rerun() -> None:
    model = ScriptedModel(chat_completion(tool_calls=[tool_call("define", {"term": "fruit"})]), chat_completion("x"))
    guard = ProxyStyle("pre_call")
    app = AgenticLoopMiddleware(model, hooks=[guard, ServerTools([define])])
    with pytest.raises(openai.BadRequestError) as raised:
        await openai_client(app).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert f"pre_call blocked: {WORD}" in str(raised.value)
    assert len(model.requests) == 1  # the rerun carrying the tool's words was never sent


class OnlyPreCall(CustomGuardrail):
    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> Any:
        raise HTTPException(status_code=400, detail="no")


def test_a_guardrail_with_no_method_for_its_event_is_refused_at_start() -> None:
    guard = OnlyPreCall(guardrail_name="g", event_hook="during_call", default_on=True)
    with pytest.raises(ConfigurationError, match="async_moderation_hook"):
        AgenticLoopMiddleware(ScriptedModel(), hooks=[guard])


def test_a_proxy_style_guardrail_that_only_runs_when_a_request_names_it_is_refused_at_start() -> None:
    """`should_run_guardrail` with `default_on` off runs it only for requests naming it, which the client writes."""
    guard = OnlyPreCall(guardrail_name="g", event_hook="pre_call")
    with pytest.raises(ConfigurationError, match="default_on=True"):
        AgenticLoopMiddleware(ScriptedModel(), hooks=[guard])


class OnlyPostCall(CustomGuardrail):
    async def async_post_call_success_hook(self, data: dict, user_api_key_dict: Any, response: Any) -> Any:
        raise HTTPException(status_code=400, detail="no")


def test_a_guardrail_judging_only_answers_is_named_at_start_not_taken_for_no_hook(
    caplog: pytest.LogCaptureFixture,
) -> None:
    AgenticLoopMiddleware(ScriptedModel(), hooks=[OnlyPostCall(guardrail_name="g", event_hook="post_call")])
    assert any("OnlyPostCall" in r.getMessage() and "'post_call'" in r.getMessage() for r in caplog.records)
    assert not any("overrides none" in record.getMessage() for record in caplog.records)


class Lakera:
    """A Lakera guard API stand-in: flags any request whose messages hold WORD, and records what it was sent."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.app = Starlette(routes=[Route("/v2/guard", self.guard, methods=["POST"])])

    async def guard(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        return JSONResponse({"flagged": WORD in str(body.get("messages")), "payload": [], "breakdown": []})


@pytest.mark.parametrize("event", ["pre_call", "during_call"])
async def test_litellms_lakera_guardrail_judges_the_request(sdk: Any, event: str) -> None:
    lakera = Lakera()
    async with served(lakera.app) as base:
        guard = LakeraAIGuardrail(
            api_key="k", api_base=base, guardrail_name="lakera", event_hook=event, default_on=True
        )
        model = ScriptedModel(chat_completion("ok"))
        client = openai_client(AgenticLoopMiddleware(model, hooks=[guard]))
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": SAID}])
        assert raised.value.status_code == 400 and "Violated guardrail policy" in str(raised.value)
        assert not model.requests
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "fine"}])
        assert reply.choices[0].message.content == "ok"
    assert [request["messages"] for request in lakera.requests] == [
        [{"role": "user", "content": SAID}],
        [{"role": "user", "content": "fine"}],
    ]


class Tenants:
    """A guardrail service with a per-tenant policy: tenant `trusted` may say anything, others not WORD."""

    def __init__(self) -> None:
        self.headers: list[Any] = []
        self.app = Starlette(routes=[Route("/beta/litellm_basic_guardrail_api", self.check, methods=["POST"])])

    async def check(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.headers.append(body.get("request_headers"))
        tenant = (body.get("request_headers") or {}).get("x-tenant-id")
        if tenant != "trusted" and any(WORD in text for text in body.get("texts") or []):
            return JSONResponse({"action": "BLOCKED", "blocked_reason": "blocked by tenant policy"})
        return JSONResponse({"action": "NONE"})


@pytest.mark.parametrize(
    "forged", [{"metadata": {"headers": {"x-tenant-id": "trusted"}}}, {"headers": {"x-tenant-id": "trusted"}}]
)
async def test_litellms_generic_guardrail_judges_by_the_real_inbound_headers(sdk: Any, forged: Any) -> None:
    """It reads `proxy_server_request.headers`, then `headers`, then `metadata.headers`: the client writes the last
    two in its body, so they must never stand in for the headers it sent."""
    service = Tenants()
    async with served(service.app) as base:
        guard = GenericGuardrailAPI(
            api_base=base, extra_headers=["x-tenant-id"], guardrail_name="g", event_hook="pre_call", default_on=True
        )
        model = ScriptedModel(chat_completion("ok"))
        client = openai.AsyncOpenAI(
            base_url="http://g/v1",
            api_key="sk-secret",
            max_retries=0,
            default_headers={"x-tenant-id": "untrusted"},
            http_client=httpx.AsyncClient(
                transport=httpx.ASGITransport(app=AgenticLoopMiddleware(model, hooks=[guard]))
            ),
        )
        with pytest.raises(openai.BadRequestError, match="blocked by tenant policy"):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": SAID}], extra_body=forged
            )
    assert not model.requests
    assert service.headers[0]["x-tenant-id"] == "untrusted"
    assert "sk-secret" not in str(service.headers)


class Given(Recording):
    """Records the `request_data` and `logging_obj` its `apply_guardrail` is given."""

    def __init__(self) -> None:
        super().__init__("given", "pre_call")
        self.data: list[dict[str, Any]] = []
        self.logging: list[Any] = []

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:
        self.data.append(request_data)
        self.logging.append(logging_obj)
        return inputs


async def test_guardrails_get_the_requests_headers_without_its_credentials_and_never_the_clients_copies() -> None:
    guard = Given()
    app = AgenticLoopMiddleware(ScriptedModel(message("ok")), hooks=[guard])
    forged = {"x-tenant-id": "trusted", "authorization": "Bearer forged"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as client:
        sent = await client.post(
            "/v1/messages?beta=true",
            json={
                **body_for("/v1/messages"),
                "headers": forged,
                "metadata": {"user_id": "u", "headers": forged},
                "litellm_call_id": "forged",
                "User_Api_Key_Hash": "forged",
            },
            headers={
                "x-tenant-id": "untrusted",
                "x-api-key": "sk-secret",
                "authorization": "Bearer sk-secret",
                "cookie": "session=secret",
                "user-agent": "probe/1",
            },
        )
    assert sent.status_code == 200
    data = guard.data[0]
    real = data["proxy_server_request"]["headers"]
    assert real["x-tenant-id"] == "untrusted" and real["user-agent"] == "probe/1"
    assert not {"x-api-key", "authorization", "cookie"} & set(real) and "secret" not in str(data)
    assert data["proxy_server_request"]["url"] == "http://g/v1/messages?beta=true"
    assert data["proxy_server_request"]["method"] == "POST"
    assert "headers" not in data  # the client's top-level copy
    assert data["metadata"]["headers"] == real  # the client's `metadata.headers` replaced by the real ones
    assert data["metadata"]["user_id"] == "u" and data["metadata"]["user_agent"] == "probe/1"
    assert data["metadata"]["requester_metadata"] == {"user_id": "u"}
    # The body as the client sent it, less what stands for the server's keys and its headers.
    assert data["proxy_server_request"]["body"]["messages"] == body_for("/v1/messages")["messages"]
    assert not {"headers", "litellm_call_id", "User_Api_Key_Hash"} & set(data["proxy_server_request"]["body"])
    assert data["litellm_call_id"] != "forged"


async def test_each_reruns_guardrails_get_the_requests_headers_too() -> None:
    """A rerun is the same HTTP request: a policy keyed by a header must not judge it as of no tenant."""
    guard = Given()
    model = ScriptedModel(message(tool_use("define", {"term": "fruit"})), message("done"))
    app = AgenticLoopMiddleware(model, hooks=[guard, ServerTools([define])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as client:
        sent = await client.post(
            "/v1/messages",
            json=body_for("/v1/messages", "hi"),
            headers={"x-tenant-id": "untrusted", "x-api-key": "sk-secret"},
        )
    assert sent.status_code == 200 and len(guard.data) == 2
    first, rerun = guard.data
    assert rerun["proxy_server_request"]["headers"] == first["proxy_server_request"]["headers"]
    assert rerun["proxy_server_request"]["headers"]["x-tenant-id"] == "untrusted"
    assert rerun["metadata"]["headers"]["x-tenant-id"] == "untrusted" and "secret" not in str(rerun)
    assert WORD in str(rerun["messages"])  # it is the rerun's: the tool's words


@pytest.mark.parametrize("path", PATHS)
async def test_the_logging_obj_has_the_attributes_litellms_guardrails_read(path: str) -> None:
    """The generic guardrail API and DeepKeep read `litellm_trace_id`, Gray Swan, Akto and Singulr `call_type`,
    HiddenLayer `model`: without them each fails every request with a 500."""
    guard = Given()
    model = ScriptedModel(answer(path), answer(path))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=AgenticLoopMiddleware(model, hooks=[guard])), base_url="http://g"
    ) as client:
        for _ in range(2):
            assert (await client.post(path, json={**body_for(path), "model": "the-model"})).status_code == 200
    first, second = guard.logging
    call_type = {"/v1/messages": "anthropic_messages", "/v1/chat/completions": "acompletion"}.get(path, "aresponses")
    assert (first.call_type, first.model, first.stream) == (call_type, "the-model", False)
    assert isinstance(first.litellm_trace_id, str) and first.litellm_trace_id
    assert first.litellm_trace_id != second.litellm_trace_id  # one per request, nothing shared between them


async def test_a_clients_guardrail_controls_in_metadata_never_reach_the_guardrails() -> None:
    guard = ProxyStyle("pre_call")
    app = AgenticLoopMiddleware(ScriptedModel(chat_completion("ok")), hooks=[guard])
    metadata = {"disable_global_guardrails": True, "opted_out_global_guardrails": ["proxy-style"], "tags": ["t"]}
    with pytest.raises(openai.BadRequestError):
        await openai_client(app).chat.completions.create(
            model="m", messages=[{"role": "user", "content": SAID}], metadata=metadata
        )
    given = guard.pre_calls[0]["data"]["metadata"]
    assert "disable_global_guardrails" not in given and "opted_out_global_guardrails" not in given
    assert given["tags"] == ["t"]


class Quota(Guard):
    """Two requests per caller, counted in the proxy's `cache` as LiteLLM's rate limiters and quotas count."""

    def __init__(self) -> None:
        super().__init__("quota")
        self.caches: list[Any] = []

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> Any:
        self.caches.append(cache)
        key = f"quota:{data.get('user')}"
        used = await cache.async_get_cache(key=key) or 0
        if used >= 2:
            raise HTTPException(status_code=429, detail=f"quota used: {used}")
        await cache.async_set_cache(key=key, value=used + 1)
        return data


async def test_a_pre_call_hook_is_given_the_processs_dual_cache_as_litellms_proxy_gives_one() -> None:
    """LiteLLM's proxy gives `async_pre_call_hook` its `DualCache` (`user_api_key_cache`); given None, a hook that
    reads it failed every request with a 500. One cache for the process: what a hook writes through one middleware
    is read through another, and callers are kept apart only by the hook's own keys."""
    from litellm.caching.dual_cache import DualCache

    model = ScriptedModel(*[chat_completion("ok")] * 4)
    quota = Quota()
    first, second = (AgenticLoopMiddleware(model, hooks=[quota]) for _ in range(2))
    said = [{"role": "user", "content": "hi"}]
    for app in (first, second):
        await openai_client(app).chat.completions.create(model="m", messages=said, user="ann")
    with pytest.raises(openai.RateLimitError) as raised:
        await openai_client(first).chat.completions.create(model="m", messages=said, user="ann")
    assert "quota used: 2" in str(raised.value)
    await openai_client(second).chat.completions.create(model="m", messages=said, user="bob")
    assert len(model.requests) == 3
    assert isinstance(quota.caches[0], DualCache) and all(cache is quota.caches[0] for cache in quota.caches)


async def test_a_flood_of_other_callers_does_not_evict_a_quota_counted_in_the_cache() -> None:
    """LiteLLM's `DualCache` keeps 200 items in memory by default, the earliest to expire evicted first: 500 other
    callers' requests within the minute would reset a caller's quota counted there. The process's cache holds
    10,000."""
    model = ScriptedModel(default=chat_completion("ok"))
    app = AgenticLoopMiddleware(model, hooks=[Quota()])
    async with http_client(app) as http:

        async def ask(user: str) -> int:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": user}
            return (await http.post("/v1/chat/completions", json=body)).status_code

        assert [await ask("flood-ann"), await ask("flood-ann"), await ask("flood-ann")] == [200, 200, 429]
        assert {await ask(f"flood-{n}") for n in range(500)} == {200}
        assert await ask("flood-ann") == 429
