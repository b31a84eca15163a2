"""A body that is not valid JSON on a route that takes part: refused in the route's own error shape.

A lenient app (Starlette's and FastAPI's `request.json()`, LiteLLM's proxy) reads `NaN` or a lone surrogate escape
that orjson refuses; passed on, such a body would skip every hook and keep the fields only server code may set.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import http_client

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.testing import ScriptedModel


@server_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def gateway() -> tuple[ScriptedModel, Any]:
    model = ScriptedModel()
    return model, AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])


NAN = b',"metadata":{"n":NaN},"max_agentic_loops":99}'
BODIES = {
    "/v1/chat/completions": b'{"model":"m","messages":[{"role":"user","content":"hi"}]' + NAN,
    "/v1/responses": b'{"model":"m","input":"hi"' + NAN,
    "/v1/messages": b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]' + NAN,
}


@pytest.mark.parametrize("path", list(BODIES))
async def test_nan_is_refused_in_the_routes_error_shape(path: str) -> None:
    model, app = gateway()

    reply = await http_client(app).post(path, content=BODIES[path], headers={"content-type": "application/json"})

    assert reply.status_code == 400
    if path == "/v1/messages":
        assert reply.json()["type"] == "error"
        assert reply.json()["error"]["type"] == "invalid_request_error"
    else:
        assert reply.json()["error"]["code"] == "invalid_json"
    assert reply.json()["error"]["message"].startswith("the request body is not valid JSON: ")
    assert model.requests == []


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
async def test_a_lone_surrogate_escape_is_refused_saying_why(path: str) -> None:
    model, app = gateway()
    body = b'{"model":"m","input":"\\ud800","messages":[{"role":"user","content":"\\ud800"}],"max_agentic_loops":99}'

    reply = await http_client(app).post(path, content=body, headers={"content-type": "application/json"})

    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "invalid_json" and error["type"] == "invalid_request_error"
    assert "surrogate" in error["message"]
    assert model.requests == []
