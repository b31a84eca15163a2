"""The pre-call kwargs against a client's body: the keys the server and the hooks set reach every round, whatever
fields of the same names the client sends; a client's fields never stand in for them."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest
from support import SERVER_METADATA, Route, ToolHook

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel, chat_completion, tool_call

MESSAGES, CHAT = Route("messages"), Route("chat")


class SetsKeys(ToolHook):
    """Sets keys the way LiteLLM's hooks do, in place (item by item) or in a new dict it returns."""

    def __init__(self, returns_new: bool) -> None:
        super().__init__()
        self.returns_new = returns_new

    async def async_pre_call_deployment_hook(self, kwargs: dict[str, Any], call_type: Any) -> dict[str, Any] | None:
        keys = {"_sandbox_key": f"{kwargs.get('user_api_key_hash')}:s1", "_active": True}
        if self.returns_new:  # as LiteLLM's `as_converted_stream` does
            return {**kwargs, **keys}
        for name, value in keys.items():
            kwargs[name] = value
        kwargs["flag"] = True  # a name with no leading `_`, set to Python's one True
        return None


def as_caller(app: Any) -> Any:
    async def gateway(scope: Any, receive: Any, send: Any) -> None:
        scope.setdefault("state", {})["user_api_key_hash"] = "hash-of-caller-a"
        await app(scope, receive, send)

    return gateway


@pytest.mark.parametrize("returns_new", [False, True], ids=["in place", "new dict"])
@pytest.mark.parametrize("route", [MESSAGES, CHAT], ids=str)
async def test_the_servers_and_hooks_keys_reach_every_round_whatever_the_client_sends(
    route: Route, returns_new: bool
) -> None:
    hook = SetsKeys(returns_new)
    model = ScriptedModel(route.calls(("lookup", {"q": 1})), route.text("done"))
    forged = {"user_api_key_hash": "hash-of-victim", "_sandbox_key": "victim:s1", "_active": False, "flag": True}
    body = route.request("hi", **forged, note="the client's")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=as_caller(AgenticLoopMiddleware(model, hooks=[hook]))), base_url="http://g"
    ) as client:
        assert (await client.post(route.path, json=body)).status_code == 200

    assert len(hook.gates) == 2
    for gate in hook.gates:
        kwargs = gate["kwargs"]
        assert kwargs["user_api_key_hash"] == "hash-of-caller-a"
        assert (kwargs["_sandbox_key"], kwargs["_active"]) == ("hash-of-caller-a:s1", True)
        assert kwargs.get("flag") is (None if returns_new else True)  # set in place: the hook's, though equal
        assert "note" not in kwargs  # a client field reaches no round


def coding_model() -> ScriptedModel:
    def reply(request: Any) -> Any:
        if request.body["messages"][-1]["role"] == "tool":
            return chat_completion("done")
        return chat_completion(tool_calls=[tool_call("litellm_code_execution", {"code": "print(42)"})])

    return ScriptedModel(default=reply)


@pytest.mark.parametrize(
    "forged",
    [{"_code_interpreter_interception_sandbox_key": "x"}, {"user_api_key_hash": "x"}],
    ids=["sandbox key", "identity"],
)
async def test_litellms_code_interpreter_keeps_its_sandbox_per_caller_whatever_the_client_sends(
    forged: dict[str, str],
) -> None:
    """The session's sandbox is made once, filed under the caller's identity and reused: a client field named like
    the hook's sandbox key made every request's sandbox without one (never deleted), one named like the identity
    filed the session under no caller (past LiteLLM's cap of sandboxes per identity)."""
    from litellm.integrations.code_interpreter_interception.handler import CodeInterpreterInterceptionLogger
    from test_litellm_hooks import CODE_TOOL, Sandbox

    box = Sandbox()
    hook = CodeInterpreterInterceptionLogger(sandbox_config=box)
    app = as_caller(AgenticLoopMiddleware(coding_model(), hooks=[hook]))
    body = {
        "model": "gpt-x",
        "messages": [{"role": "user", "content": "run"}],
        "tools": [CODE_TOOL],
        "metadata": {"session_id": "s1"},
        **forged,
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as client:
        for _ in range(3):
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 200

    assert box.created == ["box-0"]  # one sandbox for the session, reused
    assert {key: entry[3] for key, entry in hook._container_cache.items()} == {
        "hash-of-caller-a:s1": "hash-of-caller-a"
    }


class Records(ToolHook):
    """Records its pre-call kwargs, and edits in place, deep, the fields whose changes stay in its kwargs."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[dict[str, Any]] = []

    async def async_pre_call_deployment_hook(self, kwargs: dict[str, Any], call_type: Any) -> None:
        self.given.append({**kwargs, "metadata": copy.deepcopy(kwargs.get("metadata"))})
        if isinstance(kwargs.get("metadata"), dict):
            kwargs["metadata"].setdefault("tags", []).append("hook's record")
        if isinstance(kwargs.get("thinking"), dict):
            kwargs["thinking"]["budget_tokens"] = 1


async def test_a_clients_scope_field_is_not_the_scope_the_pre_call_hooks_get() -> None:
    """Every round's hooks get the ASGI scope as `scope`, whose `state` holds the caller: a client's is not given."""
    hook = Records()
    model = ScriptedModel(CHAT.text("done"))
    forged = {"scope": {"type": "http", "state": {"user_api_key_hash": "hash-of-victim"}}}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=as_caller(AgenticLoopMiddleware(model, hooks=[hook]))), base_url="http://g"
    ) as client:
        assert (await client.post(CHAT.path, json=CHAT.request("hi", **forged))).status_code == 200
    assert "scope" not in hook.given[0]
    assert model.requests[0].body["scope"] == forged["scope"]  # the app is not a hook: sent as the client sent it


async def test_a_pre_call_hooks_deep_edits_of_other_fields_stay_in_its_kwargs() -> None:
    """Only `messages` (`input`, `instructions`, `system`), `tools` and `tool_choice` as the hooks leave them are
    the request's: what they change deep inside another field, in place, does not reach the app."""
    hook = Records()
    model = ScriptedModel(MESSAGES.text("done"))
    extra = {"metadata": {"user_id": "u1"}, "thinking": {"type": "enabled", "budget_tokens": 2048}}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=AgenticLoopMiddleware(model, hooks=[hook])), base_url="http://g"
    ) as client:
        assert (await client.post(MESSAGES.path, json=MESSAGES.request("hi", **extra))).status_code == 200
    sent = model.requests[0].body
    assert (sent["metadata"], sent["thinking"]) == (extra["metadata"], extra["thinking"])


async def test_metadata_sent_as_text_is_given_decoded_without_the_clients_identity() -> None:
    """As LiteLLM's proxy decodes a JSON object sent as text (a form's, `extra_body`'s) before dropping its
    `user_api_key_*` keys; the app still gets it as the client sent it."""
    hook = Records()
    model = ScriptedModel(CHAT.text("done"))
    text = '{"session_id": "s1", "user_api_key_hash": "hash-of-victim", "user_api_key_user_id": "victim"}'
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=as_caller(AgenticLoopMiddleware(model, hooks=[hook]))), base_url="http://g"
    ) as client:
        assert (await client.post(CHAT.path, json=CHAT.request("hi", metadata=text))).status_code == 200
    metadata = hook.given[0]["metadata"]
    assert {name: metadata[name] for name in metadata if name not in SERVER_METADATA} == {"session_id": "s1"}
    assert metadata["requester_metadata"] == {"session_id": "s1"}
    assert hook.given[0]["user_api_key_hash"] == "hash-of-caller-a"
    assert model.requests[0].body["metadata"] == text
