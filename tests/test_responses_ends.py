"""How a Responses turn ends when the loop may not rerun, and calls the app sent without a `call_id`."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from conftest import openai_client

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.closing import DEFAULT_CLOSING_TEXT
from agentic_middleware.testing import ScriptedModel, function_call, response
from agentic_middleware.tools import ServerTools, server_tool


@server_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


CLIENT_TOOL = {"type": "function", "name": "client_fn", "parameters": {"type": "object", "properties": {}}}


@pytest.mark.parametrize("end", ["repeat", "cap"])
async def test_a_refused_mixed_turn_gives_the_clients_call_and_no_made_up_message(end: str) -> None:
    keys = itertools.count()

    def mixed(request: Any) -> dict[str, Any]:
        key = "same" if end == "repeat" else str(next(keys))
        return response(function_call("lookup", {"key": key}, "call_s"), function_call("client_fn", {}, "call_c"))

    model = ScriptedModel(default=mixed)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], max_agentic_loops=1)

    turn = await openai_client(app).responses.create(model="m", input="x", tools=[CLIENT_TOOL])

    assert [(item.type, getattr(item, "name", None)) for item in turn.output] == [("function_call", "client_fn")]
    assert DEFAULT_CLOSING_TEXT not in turn.output_text
    assert turn.output_text == ""


async def test_a_call_without_a_call_id_gets_one_in_the_item_and_its_output() -> None:
    call = function_call("lookup", {"key": "a"})
    del call["call_id"]
    model = ScriptedModel(response(call), response("done"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])]))

    result = await client.responses.create(model="m", input="x")

    assert result.output_text == "done"
    item, output = model.requests[1].body["input"][1:]
    assert item["type"] == "function_call" and isinstance(item["call_id"], str) and item["call_id"]
    assert output == {"type": "function_call_output", "call_id": item["call_id"], "output": "value of a"}
