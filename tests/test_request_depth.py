"""A client's body nested deeper than the hooks' bodies can be written (orjson writes 254 levels, reads 1024) is
refused with a 400 in the route's shape, never blamed on a hook nor failed with an unhandled RecursionError; a body
the hooks do not see passes through as it came."""

from __future__ import annotations

import os
from typing import Any

import orjson
import pytest
from conftest import http_client

from agentic_middleware import AgenticLoopMiddleware, ServerTools, ToolPolicy, server_tool
from agentic_middleware.testing import ScriptedModel, chat_completion, message, response

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

from litellm.integrations.custom_guardrail import CustomGuardrail

MAX_DEPTH = 254  # docs/errors.md: the deepest body the hooks take part in


@server_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return key


class Passing(CustomGuardrail):
    def __init__(self) -> None:
        super().__init__(guardrail_name="passing", event_hook="pre_call", default_on=True)

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
