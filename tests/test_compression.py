"""Built-in compression: stubs go to the model, retrieve brings the original back, the stash dies with the request."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import weakref
from typing import Any

import pytest
from conftest import http_client, openai_client
from support import Route, post

import agentic_middleware.compression as compression_module
from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.compression import CompressionHook, key_of
from agentic_middleware.testing import RecordedRequest, ScriptedModel, function_call, response

LONG = "".join(f"line {n}: the quarterly report says revenue grew. " for n in range(120))  # ~5,600 chars
OTHER = "Another long document. " * 100


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


def history(route: Route, tool_output: str, question: str = "What did the report say?") -> list[dict[str, Any]]:
    """A conversation where the client's own tool returned a long output, then a new question."""
    if route.name == "messages":
        return [
            {"role": "user", "content": "Fetch the report."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "fetch", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": tool_output}]},
            {"role": "assistant", "content": "Fetched."},
            {"role": "user", "content": question},
        ]
    return [
        {"role": "user", "content": "Fetch the report."},
        {"role": "assistant", "content": None, "tool_calls": [_chat_call()]},
        {"role": "tool", "tool_call_id": "t1", "content": tool_output},
        {"role": "assistant", "content": "Fetched."},
        {"role": "user", "content": question},
    ]


def _chat_call() -> dict[str, Any]:
    return {"id": "t1", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}


def stub(key: str, text: str) -> str:
    return (
        f'[compressed: {len(text):,} chars, key {key}; call retrieve(key="{key}") for the full text]\n{text[:200]}...'
    )


def tool_output(route: Route, body: dict[str, Any]) -> Any:
    """The tool result the client's history carries, as the model received it."""
    message = body["messages"][2]
    return message["content"][0]["content"] if route.name == "messages" else message["content"]


def last_result(route: Route, body: dict[str, Any]) -> dict[str, Any]:
    last = body["messages"][-1]
    return dict(last["content"][0]) if route.name == "messages" else dict(last)


async def test_the_model_sees_a_stub_and_retrieve_returns_the_original(route: Route) -> None:
    model = ScriptedModel(route.calls(("retrieve", {"key": key_of(LONG)})), route.text("Revenue grew."))
    app = AgenticLoopMiddleware(model, hooks=[CompressionHook(threshold=1000)])
    async with http_client(app) as client:
        response = await post(client, route, route.request(messages=history(route, LONG)))

    assert response.status_code == 200
    assert route.final_text(response.json()) == "Revenue grew."
    assert "retrieve" not in response.text and "compressed" not in response.text
    first, rerun = (request.body for request in model.requests)
    assert tool_output(route, first) == stub(key_of(LONG), LONG)
    assert LONG not in json.dumps(first)
    assert "retrieve" in json.dumps(first["tools"])
    result = last_result(route, rerun)
    assert result["content"] == LONG and "is_error" not in result
    assert tool_output(route, rerun) == stub(key_of(LONG), LONG)  # the rerun keeps the stubs; only the result is whole


async def test_on_responses_tool_outputs_and_input_text_are_stubbed_and_retrieve_serves_them() -> None:
    items: list[Any] = [
        {"role": "user", "content": [{"type": "input_text", "text": OTHER}]},
        {"type": "function_call", "call_id": "t1", "name": "fetch", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "t1", "output": LONG},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Fetched."}]},
        {"role": "user", "content": f"{LONG} What did the report say?"},
    ]
    model = ScriptedModel(
        response(function_call("retrieve", {"key": key_of(LONG)}, "call_r")), response("Revenue grew.")
    )
    client = openai_client(AgenticLoopMiddleware(model, hooks=[CompressionHook(threshold=1000)]))

    answer = await client.responses.create(model="m", input=items)

    assert answer.output_text == "Revenue grew."
    first, rerun = (request.body for request in model.requests)
    assert first["input"][0]["content"] == [{"type": "input_text", "text": stub(key_of(OTHER), OTHER)}]
    assert first["input"][2]["output"] == stub(key_of(LONG), LONG)
    assert first["input"][4] == items[4]  # the message the model acts on is never stubbed
    assert [tool["name"] for tool in first["tools"]] == ["retrieve"]
    assert rerun["input"][-1] == {"type": "function_call_output", "call_id": "call_r", "output": LONG}


async def test_text_blocks_and_strings_are_stubbed_in_order_and_the_current_turn_is_kept() -> None:
    route = Route("messages")
    messages = [
        {"role": "user", "content": OTHER},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": [{"type": "text", "text": LONG}, {"type": "text", "text": "short"}]},
        {"role": "assistant", "content": "Noted too."},
        {"role": "user", "content": f"{LONG} Summarize both?"},
    ]
    model = ScriptedModel(route.text("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[CompressionHook(threshold=1000)])) as client:
        await post(client, route, route.request(messages=messages))

    sent = model.requests[0].body["messages"]
    assert sent[0]["content"] == stub(key_of(OTHER), OTHER)
    assert sent[2]["content"] == [{"type": "text", "text": stub(key_of(LONG), LONG)}, {"type": "text", "text": "short"}]
    assert sent[4] == messages[4]  # the message the model acts on is never stubbed


async def test_a_short_history_reaches_the_model_byte_for_byte_without_a_retrieve_tool(route: Route) -> None:
    model = ScriptedModel(route.text("ok"))
    raw = json.dumps(route.request(messages=history(route, "short output"))).encode()
    async with http_client(AgenticLoopMiddleware(model, hooks=[CompressionHook(threshold=1000)])) as client:
        await client.post(route.path, content=raw, headers={"content-type": "application/json"})
    assert model.requests[0].raw == raw


async def test_the_clients_own_retrieve_tool_stays_the_clients_when_nothing_was_compressed(route: Route) -> None:
    model = ScriptedModel(route.calls(("retrieve", {"key": "mine"})))
    async with http_client(AgenticLoopMiddleware(model, hooks=[CompressionHook()])) as client:
        response = await post(client, route, route.request())
    assert route.tool_names(response.json()) == ["retrieve"]
    assert len(model.requests) == 1


async def test_an_unknown_key_is_an_error_result_the_model_reads(route: Route) -> None:
    model = ScriptedModel(route.calls(("retrieve", {"key": "c9"})), route.text("sorry"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[CompressionHook(threshold=1000)])) as client:
        await post(client, route, route.request(messages=history(route, LONG)))
    result = last_result(route, model.requests[1].body)
    assert f"no compressed text has the key 'c9'; known keys: {key_of(LONG)}" in result["content"]
    assert result.get("is_error") is True or result["content"].startswith("Error: ")


class WatchedCompression(CompressionHook):
    """Remembers each request's logging_obj weakly, to show the stash goes away with it."""

    def __init__(self) -> None:
        super().__init__(threshold=1000)
        self.watched: list[weakref.ref[Any]] = []

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any] | None:
        self.watched.append(weakref.ref(logging_obj))
        return await super().async_pre_agentic_loop_request_hook(request, logging_obj, kwargs)


async def test_each_request_has_its_own_stash_and_nothing_outlives_the_request(route: Route) -> None:
    hook = WatchedCompression()

    def reply(request: RecordedRequest) -> Any:
        """Retrieve the stubbed document by the key in its stub, then answer with the start of what came back."""
        last = request.body["messages"][-1]
        if last["role"] == "tool" or isinstance(last["content"], list):
            return route.text(last_result(route, request.body)["content"][:12])
        return route.calls(("retrieve", {"key": re.findall(r"key (c[0-9a-f]+);", json.dumps(request.body))[0]}))

    model = ScriptedModel(default=reply)
    texts = [f"document {name}: " + "x" * 2000 for name in "AB"]
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        responses = await asyncio.gather(
            *(post(client, route, route.request(messages=history(route, text))) for text in texts)
        )

    # Each request got its own document back; on these routes nothing is kept past the request.
    assert sorted(route.final_text(response.json()) for response in responses) == ["document A: ", "document B: "]
    del responses
    gc.collect()
    assert len(hook.watched) == 2 and all(ref() is None for ref in hook.watched)
    for state in (vars(hook), vars(compression_module), vars(compression_module.compression_hook)):
        assert "document A" not in repr(state) and "document B" not in repr(state)


@pytest.mark.parametrize("store", [True, False])
@pytest.mark.parametrize("named", [True, False], ids=["a caller", "no caller"])
async def test_on_responses_the_texts_are_kept_for_a_named_caller_and_a_stored_context_alone(
    named: bool, store: bool
) -> None:
    """The app keeps a Responses context with its stubs (unless `store: false`): the texts are kept for the
    follow-ups, in the caller's state; a request that names no one keeps nothing, as such requests would share it."""
    model = ScriptedModel(response("Noted."))
    app = AgenticLoopMiddleware(model, hooks=[CompressionHook(threshold=1000)])
    items = [
        {"role": "user", "content": LONG},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "?"},
    ]
    headers = {"authorization": "Bearer k"} if named else {}
    async with http_client(app) as client:
        answer = await client.post(
            "/v1/responses", json={"model": "m", "input": items, "store": store}, headers=headers
        )
    assert answer.status_code == 200
    assert LONG not in json.dumps(model.requests[0].body)
    assert len(app.setup.state) == (2 if named and store else 0)  # type: ignore[arg-type]  # the text, the marker
