"""A client's body nested deeper than the hooks' bodies can be written (orjson writes 254 levels, reads 1024) is
refused with a 400 in the route's shape, never blamed on a hook nor failed with an unhandled RecursionError; a body
the hooks do not see passes through as it came."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from conftest import http_client
from guardrail_kit import Guard

from agentic_middleware import (
    AgenticLoopMiddleware,
    AgenticLoopPlan,
    AgenticLoopRequestPatch,
    CustomLogger,
    ServerTools,
    ToolPolicy,
    server_tool,
)
from agentic_middleware.testing import ScriptedModel, chat_completion, message, response, tool_use

MAX_DEPTH = 254  # docs/errors.md: the deepest body the hooks take part in


@server_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return key


class Passing(Guard):
    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        return inputs


ROUTES = {
    "/v1/messages": ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}, message),
    "/v1/chat/completions": ({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, chat_completion),
    "/v1/responses": ({"model": "m", "input": "hi"}, response),
}

# What the hooks see: a tool hook, a guardrail, a tool policy (which reads the client's tools as bytes).
MOUNTS = {
    "tool hook": lambda: {"hooks": [ServerTools([lookup])]},
    "guardrail": lambda: {"hooks": [Passing()]},
    "policy": lambda: {"hooks": [ServerTools([lookup])], "tool_policy": lambda scope: ToolPolicy()},
}


def nested(levels: int) -> Any:
    """`levels` levels of arrays: in a field of the body (itself one level), the body is `levels + 1` deep."""
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def with_nested(body: dict[str, Any], levels: int, where: str = "extra") -> bytes:
    """`body` with `nested(levels)` in its field `where`, as JSON (written by hand: no JSON writer goes that deep)."""
    return orjson.dumps({**body, where: "@"}).replace(b'"@"', b"[" * levels + b"]" * levels)


async def posted(client: Any, path: str, raw: bytes) -> Any:
    return await client.post(path, content=raw, headers={"content-type": "application/json"})


def refused(path: str, reply: Any) -> bool:
    error = reply.json()["error"]
    shape = error["type"] == "invalid_request_error" and str(MAX_DEPTH) in error["message"]
    return (
        reply.status_code == 400 and shape and (path.startswith("/v1/messages") or error["code"] == "invalid_request")
    )


@pytest.mark.parametrize("levels", [MAX_DEPTH, 1000], ids=["255 deep", "1001 deep"])
@pytest.mark.parametrize("mount", list(MOUNTS))
@pytest.mark.parametrize("path", list(ROUTES))
async def test_a_body_too_deep_for_the_hooks_is_refused_in_the_routes_shape(path: str, mount: str, levels: int) -> None:
    body, answer = ROUTES[path]
    model = ScriptedModel(default=answer("ok"))
    async with http_client(AgenticLoopMiddleware(model, **MOUNTS[mount]())) as client:
        reply = await posted(client, path, with_nested(body, levels, where="tools"))
    assert refused(path, reply), reply.text
    assert not model.requests


@pytest.mark.parametrize("mount", list(MOUNTS))
@pytest.mark.parametrize("path", list(ROUTES))
async def test_a_body_as_deep_as_the_hooks_can_write_is_looped(path: str, mount: str) -> None:
    body, answer = ROUTES[path]
    model = ScriptedModel(default=answer("ok"))
    async with http_client(AgenticLoopMiddleware(model, **MOUNTS[mount]())) as client:
        reply = await client.post(path, json={**body, "extra": nested(MAX_DEPTH - 1)})
    assert reply.status_code == 200, reply.text
    assert model.requests[0].body["extra"] == nested(MAX_DEPTH - 1)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/messages/count_tokens", ROUTES["/v1/messages"][0]),
        ("/v1/responses/input_tokens", ROUTES["/v1/responses"][0]),
    ],
)
@pytest.mark.parametrize("levels", [MAX_DEPTH, 1000], ids=["255 deep", "1001 deep"])
async def test_a_token_count_too_deep_for_the_tool_hooks_is_refused_in_the_routes_shape(
    path: str, body: dict[str, Any], levels: int
) -> None:
    model = ScriptedModel(default={"input_tokens": 1})
    mount = MOUNTS["policy"]()
    async with http_client(AgenticLoopMiddleware(model, **mount)) as client:
        reply = await posted(client, path, with_nested(body, levels))
    assert refused(path, reply), reply.text
    assert not model.requests


async def test_without_hooks_a_deep_body_passes_through_as_sent() -> None:
    model = ScriptedModel(default=chat_completion("ok"))
    async with http_client(AgenticLoopMiddleware(model)) as client:
        reply = await posted(client, "/v1/chat/completions", with_nested(ROUTES["/v1/chat/completions"][0], 1000))
    assert reply.status_code == 200 and len(model.requests) == 1


class Asks(CustomLogger):
    """A hook of a plan alone: the first call goes as the client sent it (nothing written), the rerun is written."""

    async def async_should_run_agentic_loop(self, response, **rest):  # type: ignore[no-untyped-def]
        calls = [block for block in response["content"] if block["type"] == "tool_use"]
        return bool(calls), {"tool_calls": calls}

    async def async_build_agentic_loop_plan(self, tools, messages, **rest):  # type: ignore[no-untyped-def]
        call = tools["tool_calls"][0]
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}
        history = [*messages, {"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=history))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_body_too_deep_to_rerun_is_the_clients_400_not_the_hooks_error(stream: bool) -> None:
    """No write comes before the rerun's: the depth is found there, and answered as the client's, in the route's
    shape (its error event once the stream began), never a 500 naming the hook."""
    body, _ = ROUTES["/v1/messages"]
    model = ScriptedModel(message(tool_use("t", {})), message("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Asks()], streaming=stream)) as client:
        reply = await posted(client, "/v1/messages", with_nested({**body, "stream": stream}, MAX_DEPTH))
    assert "Asks" not in reply.text and "254 levels" in reply.text, reply.text
    if stream:
        assert "event: error" in reply.text and "invalid_request_error" in reply.text
    else:
        assert refused("/v1/messages", reply), reply.text


class Walks(CustomLogger):
    """A request hook whose own recursive walk of the request cannot go as deep as orjson reads."""

    async def async_pre_agentic_loop_request_hook(self, request, **rest):  # type: ignore[no-untyped-def]
        def walk(value: Any) -> Any:
            return [walk(item) for item in value] if isinstance(value, list) else value

        return {**request, "extra": walk(request["extra"])}


@pytest.mark.parametrize("path", list(ROUTES))
async def test_a_hook_that_cannot_walk_a_body_too_deep_is_the_clients_400(path: str) -> None:
    body, answer = ROUTES[path]
    model = ScriptedModel(default=answer("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Walks(), ServerTools([lookup])])) as client:
        reply = await posted(client, path, with_nested(body, 1000))
    assert refused(path, reply) and "Walks" not in reply.text, reply.text
    assert not model.requests


async def test_a_hook_nesting_a_shallow_body_too_deep_is_still_the_hooks_500() -> None:
    """Only the client's structure is measured once the write fails: what its strings hold never counts."""

    class Deepens(CustomLogger):
        async def async_pre_agentic_loop_request_hook(self, request, **rest):  # type: ignore[no-untyped-def]
            return {**request, "extra": nested(MAX_DEPTH)}

    body, answer = ROUTES["/v1/chat/completions"]
    text = '[{ \\" [ \\\\' * 300  # brackets, escaped quotes and backslashes in a string are no nesting
    model = ScriptedModel(default=answer("ok"))
    request = {**body, "messages": [{"role": "user", "content": text}]}
    async with http_client(AgenticLoopMiddleware(model, hooks=[Deepens()])) as client:
        reply = await client.post("/v1/chat/completions", json=request)
    assert reply.status_code == 500 and "Deepens" in reply.text and "254" not in reply.text, reply.text
    assert not model.requests


async def test_a_stream_the_hooks_pass_by_is_handed_on_unchecked_as_sent() -> None:
    """A stream no hook takes part in (streaming=False) is never read for its depth: the app gets its bytes."""
    body, answer = ROUTES["/v1/chat/completions"]
    model = ScriptedModel(default=answer("ok"))
    raw = with_nested({**body, "stream": True}, 1000)
    mount = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], streaming=False)
    async with http_client(mount) as client:
        reply = await posted(client, "/v1/chat/completions", raw)
    assert reply.status_code == 200 and [request.raw for request in model.requests] == [raw], reply.text


@pytest.mark.parametrize("levels", [MAX_DEPTH, 1000], ids=["255 deep", "1001 deep"])
async def test_a_stream_passed_by_whose_tools_the_policy_judges_is_handed_on_as_sent(levels: int) -> None:
    """The policy reads the client's tools (the name it judges is there), nothing writes the body: the app gets its
    bytes, deep as they are, and the policy's judgment stands (a denied name is still refused, tests/test_policy*)."""
    body, answer = ROUTES["/v1/chat/completions"]
    tool = {"type": "function", "function": {"name": "f", "parameters": "@"}}
    raw = orjson.dumps({**body, "stream": True, "tools": [tool]}).replace(b'"@"', b"[" * levels + b"]" * levels)
    model = ScriptedModel(default=answer("ok"))
    policy = ToolPolicy(denied_tools=["db_*"])
    hooks = [ServerTools([lookup])]
    mount = AgenticLoopMiddleware(model, hooks=hooks, tool_policy=lambda scope: policy, streaming=False)
    async with http_client(mount) as client:
        reply = await posted(client, "/v1/chat/completions", raw)
    assert reply.status_code == 200 and [request.raw for request in model.requests] == [raw], reply.text
