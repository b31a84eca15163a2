"""LiteLLM's proxy-hook guardrails called in LiteLLM's order and as often, and what stays the server's (review today3).

On LiteLLM's proxy every `pre_call` hook runs before any `during_call` one, so a `during_call` moderator only sees
the request the `pre_call` maskers left (F1); a plain `CustomLogger` that overrides `async_pre_call_hook` is called
once per client request, not on every rerun (F2); a `pre_call` hook returning a partial dict does not take the
server's keys away (F3); no credential header reaches a guardrail in any spelling (F4); `logging_obj.stream` is the
client's stream flag (F5); and nothing a `during_call` hook writes through the shared `logging_obj` becomes the
headers later guardrails are given (F6). Real LiteLLM classes and SDK clients, over ASGI.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from conftest import openai_client
from fastapi import HTTPException
from guardrail_kit import WORD, Guard, body_for
from litellm.integrations.custom_logger import CustomLogger

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.testing import ScriptedModel, chat_completion, message, response, tool_call

PII = "alice@example.com"


class Masker(Guard):
    """A `pre_call` PII masker, as LiteLLM's docs write one."""

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> Any:
        for item in data["messages"]:
            if isinstance(item.get("content"), str):
                item["content"] = item["content"].replace(PII, "[EMAIL]")
        return data


class Moderator(Guard):
    """A `during_call` moderator that sends what it judges to another party (recorded here)."""

    def __init__(self) -> None:
        super().__init__("moderate", "during_call")
        self.seen: list[dict[str, Any]] = []

    async def async_moderation_hook(self, data: dict, user_api_key_dict: Any, call_type: Any) -> None:
        self.seen.append(data)


@pytest.mark.parametrize("moderator_first", [True, False])
async def test_every_pre_call_step_runs_before_any_during_call_one(moderator_first: bool) -> None:
    moderator = Moderator()
    hooks = [moderator, Masker()] if moderator_first else [Masker(), moderator]
    model = ScriptedModel(chat_completion("ok"))
    await openai_client(AgenticLoopMiddleware(model, hooks=hooks)).chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"mail {PII} now"}]
    )
    assert len(moderator.seen) == 1 and PII not in str(moderator.seen[0]["messages"])
    assert "[EMAIL]" in str(moderator.seen[0]["messages"]) and PII not in model.requests[0].raw.decode()


@server_tool
def lookup(term: str) -> str:
    """Looks a term up (an outside source)."""
    return f"write to {PII} about {term}"


async def test_a_reruns_during_call_step_sees_what_its_pre_call_steps_masked() -> None:
    moderator = Moderator()
    model = ScriptedModel(chat_completion(tool_calls=[tool_call("lookup", {"term": "x"})]), chat_completion("done"))
    app = AgenticLoopMiddleware(model, hooks=[moderator, Masker(), ServerTools([lookup])])
    await openai_client(app).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert len(moderator.seen) == 2 and PII not in str(moderator.seen)
    assert "[EMAIL]" in str(moderator.seen[1]["messages"])


class Injector(CustomLogger):
    """Not a guardrail: LiteLLM's "modify incoming data" pattern, and a per-request count (a quota)."""

    def __init__(self) -> None:
        super().__init__()
        self.pre_calls = 0
        self.moderations = 0

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> Any:
        self.pre_calls += 1
        data["messages"] = [{"role": "system", "content": "POLICY"}, *data["messages"]]
        return data

    async def async_moderation_hook(self, data: dict, user_api_key_dict: Any, call_type: Any) -> None:
        self.moderations += 1


async def test_a_plain_loggers_request_hooks_run_once_per_client_request() -> None:
    injector = Injector()
    model = ScriptedModel(
        chat_completion(tool_calls=[tool_call("lookup", {"term": "x"})]),
        chat_completion(tool_calls=[tool_call("lookup", {"term": "y"})]),
        chat_completion("done"),
    )
    app = AgenticLoopMiddleware(model, hooks=[injector, ServerTools([lookup])])
    await openai_client(app).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert (injector.pre_calls, injector.moderations) == (1, 1)
    assert len(model.requests) == 3
    roles = [item["role"] for item in model.requests[-1].body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]  # one POLICY, at the start


class Partial(Guard):
    """Returns the request's fields alone, as many hand-written guardrails build their answer."""

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> Any:
        return {"model": data["model"], "messages": data["messages"]}


class Seen(Guard):
    """Records what each `pre_call` step after it is given, and each round's kwargs."""

    def __init__(self) -> None:
        super().__init__("seen")
        self.data: list[dict[str, Any]] = []
        self.rounds: list[dict[str, Any]] = []

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> Any:
        self.data.append(dict(data))
        return None

    async def async_should_run_agentic_loop(
        self, response: Any, model: Any, messages: Any, tools: Any, stream: Any, custom_llm_provider: Any, kwargs: Any
    ) -> Any:
        self.rounds.append(dict(kwargs))
        return False, {}


def with_caller(app: Any) -> Any:
    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})["user_api_key_hash"] = "hash-of-alice"
        await app(scope, receive, send)

    return wrapped


async def test_a_partial_dict_returned_keeps_the_servers_keys() -> None:
    seen = Seen()
    app = with_caller(AgenticLoopMiddleware(ScriptedModel(chat_completion("ok")), hooks=[Partial(), seen]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as client:
        sent = await client.post("/v1/chat/completions", json=body_for("/v1/chat/completions", "hi"))
    assert sent.status_code == 200, sent.text
    given = seen.data[0]
    assert given["user_api_key_hash"] == "hash-of-alice" and given["litellm_call_id"]
    assert given["litellm_logging_obj"] is not None and given["proxy_server_request"]["method"] == "POST"
    assert seen.rounds and seen.rounds[0]["user_api_key_hash"] == "hash-of-alice"


class Headers(Guard):
    def __init__(self, event_hook: str = "pre_call") -> None:
        super().__init__("headers", event_hook)
        self.data: list[dict[str, Any]] = []

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> Any:
        self.data.append(data)
        return None

    async def async_moderation_hook(self, data: dict, user_api_key_dict: Any, call_type: Any) -> None:
        self.data.append(data)


SECRETS = {
    "x-mcp-github-authorization": "Bearer ghp_secret1",
    "x-mcp-linear-x-api-key": "secret2",
    "x-company-key": "secret3",
    "x-openai-api-key": "secret4",
    "anthropic-api-key": "secret5",
    "x-aws-session-token": "secret6",
    "x-litellm-key": "secret7",
    "api_key": "secret8",
    "x_api_key": "secret9",
    "Authorization_Bearer": "secret10",
}


@pytest.mark.parametrize("event", ["pre_call", "during_call"])
async def test_no_credential_header_reaches_a_guardrail_in_any_spelling(event: str) -> None:
    guard = Headers(event)
    app = AgenticLoopMiddleware(ScriptedModel(message("ok")), hooks=[guard])
    kept = {"x-mcp-servers": "github", "x-mcp-access-groups": "dev", "x-tenant-id": "t1", "keep-alive": "5"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as client:
        sent = await client.post("/v1/messages", json=body_for("/v1/messages"), headers={**SECRETS, **kept})
    assert sent.status_code == 200, sent.text
    data = guard.data[0]
    headers = data["proxy_server_request"]["headers"]
    assert "secret" not in str(data) and not {name.lower() for name in SECRETS} & set(headers)
    assert {name: headers[name] for name in kept} == kept and data["metadata"]["headers"] == headers


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/chat/completions", "/v1/responses"])
@pytest.mark.parametrize("stream", [True, False])
async def test_the_logging_objs_stream_is_the_clients_flag(path: str, stream: bool) -> None:
    seen: list[Any] = []

    class Logged(Guard):
        async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> Any:
            seen.append(data["litellm_logging_obj"])

    answer = message("ok") if "messages" in path else response("ok") if "responses" in path else chat_completion("ok")
    app = AgenticLoopMiddleware(ScriptedModel(answer), hooks=[Logged()])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as client:
        sent = await client.post(path, json={**body_for(path), "stream": stream})
    assert sent.status_code == 200, sent.text
    assert seen[0].stream is stream


class Forger(Guard):
    """A `during_call` hook that writes into the headers it can reach through the shared `logging_obj`."""

    def __init__(self) -> None:
        super().__init__("forger", "during_call")

    async def async_moderation_hook(self, data: dict, user_api_key_dict: Any, call_type: Any) -> None:
        details = data["litellm_logging_obj"].model_call_details
        details["litellm_params"]["proxy_server_request"]["headers"]["x-tenant-id"] = "trusted"
        details["litellm_params"]["metadata"]["headers"]["x-tenant-id"] = "trusted"
        data["proxy_server_request"]["headers"]["x-tenant-id"] = "trusted"


async def test_what_a_during_call_hook_writes_through_the_logging_obj_reaches_no_later_guardrail() -> None:
    later = Headers("during_call")
    model = ScriptedModel(chat_completion(tool_calls=[tool_call("lookup", {"term": "x"})]), chat_completion("done"))
    app = AgenticLoopMiddleware(model, hooks=[Forger(), later, ServerTools([lookup])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as client:
        sent = await client.post(
            "/v1/chat/completions", json=body_for("/v1/chat/completions", "hi"), headers={"x-tenant-id": "untrusted"}
        )
    assert sent.status_code == 200, sent.text
    assert len(later.data) == 2  # the first request and the rerun
    for data in later.data:
        assert data["proxy_server_request"]["headers"]["x-tenant-id"] == "untrusted"
        assert data["metadata"]["headers"]["x-tenant-id"] == "untrusted"


async def test_a_real_guardrail_still_judges_each_rerun() -> None:
    """The plain logger's single call (above) is not the guardrails': a refusal on a rerun still refuses."""

    class Refuser(Guard):
        async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> Any:
            if PII in str(data.get("messages")):
                raise HTTPException(status_code=400, detail=f"refused {WORD}")

    model = ScriptedModel(chat_completion(tool_calls=[tool_call("lookup", {"term": "x"})]), chat_completion("done"))
    app = AgenticLoopMiddleware(model, hooks=[Refuser(), ServerTools([lookup])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as client:
        sent = await client.post("/v1/chat/completions", json=body_for("/v1/chat/completions", "hi"))
    assert sent.status_code == 400 and len(model.requests) == 1
