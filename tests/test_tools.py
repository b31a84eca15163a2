"""The toolkit: tools declared to the model, run concurrently under timeouts, answered in each route's format."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from conftest import anthropic_client, http_client, openai_client
from streams import event_stream
from support import Route, post

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, ServerTools, server_tool, sse
from agentic_middleware.surfaces import Image, ToolResult
from agentic_middleware.testing import (
    RecordedRequest,
    ScriptedModel,
    chat_completion,
    function_call,
    message,
    response,
    tool_call,
    tool_use,
)


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


@server_tool(description="Look a word up in the dictionary.")
async def define(word: str, language: str = "en") -> str:
    return f"{word} ({language}): a word"


@server_tool
def add(a: int, b: int) -> dict[str, int]:
    """Add two numbers."""
    return {"sum": a + b}


def test_a_declared_tool_takes_its_name_description_and_schema_from_the_function() -> None:
    assert define.name == "define"
    assert define.description == "Look a word up in the dictionary."
    assert define.input_schema == {
        "type": "object",
        "properties": {"word": {"type": "string"}, "language": {"type": "string", "default": "en"}},
        "required": ["word"],
    }
    assert add.description == "Add two numbers."
    assert add.input_schema["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}


async def test_the_tools_are_declared_to_the_model_in_each_routes_format() -> None:
    model = ScriptedModel(message("hi"), chat_completion("hi"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([define])])
    await anthropic_client(app).messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    await openai_client(app).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])

    messages_tools, chat_tools = (request.body["tools"] for request in model.requests)
    assert messages_tools == [
        {"name": "define", "description": define.description, "input_schema": define.input_schema}
    ]
    assert chat_tools == [
        {
            "type": "function",
            "function": {"name": "define", "description": define.description, "parameters": define.input_schema},
        }
    ]


async def test_a_native_tool_is_mapped_onto_ours_and_client_tools_are_kept() -> None:
    model = ScriptedModel(message("hi"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([define], native={"web_search": "define"})])
    client_tool = {"name": "client_tool", "description": "mine", "input_schema": {"type": "object"}}
    await anthropic_client(app).messages.create(
        model="m",
        max_tokens=5,
        messages=[{"role": "user", "content": "x"}],
        tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}, client_tool],  # type: ignore[list-item]
    )
    assert [tool["name"] for tool in model.requests[0].body["tools"]] == ["client_tool", "define"]


async def test_calls_run_concurrently_and_results_come_back_matched_by_id(route: Route) -> None:
    both_running = asyncio.Barrier(2)

    @server_tool
    async def slow(n: int) -> str:
        async with asyncio.timeout(5):
            await both_running.wait()  # only returns when both calls are running at once
        return f"slow {n}"

    model = ScriptedModel(route.calls(("slow", {"n": 1}, "id_a"), ("slow", {"n": 2}, "id_b")), route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ServerTools([slow])])) as client:
        response = await post(client, route, route.request())

    assert route.final_text(response.json()) == "done"
    follow_up = model.requests[1].body["messages"]
    if route.name == "messages":
        assert follow_up[-1]["content"] == [
            {"type": "tool_result", "tool_use_id": "id_a", "content": "slow 1"},
            {"type": "tool_result", "tool_use_id": "id_b", "content": "slow 2"},
        ]
    else:
        assert follow_up[-2:] == [
            {"role": "tool", "tool_call_id": "id_a", "content": "slow 1"},
            {"role": "tool", "tool_call_id": "id_b", "content": "slow 2"},
        ]


async def test_a_failing_or_slow_tool_becomes_an_error_result_the_model_reads(route: Route) -> None:
    @server_tool
    async def broken() -> str:
        raise RuntimeError("index offline")

    @server_tool(timeout=0.05)
    async def stuck() -> str:
        await asyncio.sleep(10)
        return "never"

    model = ScriptedModel(route.calls(("broken", {}, "id_1"), ("stuck", {}, "id_2")), route.text("sorry"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ServerTools([broken, stuck])])) as client:
        response = await post(client, route, route.request())

    assert response.status_code == 200
    follow_up = model.requests[1].body["messages"]
    if route.name == "messages":
        results = follow_up[-1]["content"]
        assert [r["is_error"] for r in results] == [True, True]
        texts = [r["content"] for r in results]
    else:
        texts = [m["content"] for m in follow_up[-2:]]
        assert all(text.startswith("Error: ") for text in texts)
    assert "broken failed: RuntimeError: index offline" in texts[0]
    assert "stuck timed out after 0.05 s" in texts[1]


async def test_the_assistant_turn_keeps_thinking_first_and_text_as_sent() -> None:
    thinking = {"type": "thinking", "thinking": "I should look it up.", "signature": "sig"}
    model = ScriptedModel(
        message(thinking, "Let me check.", tool_use("define", {"word": "ozone"}, id="toolu_x")),
        message("Ozone is a gas."),
    )
    client = anthropic_client(AgenticLoopMiddleware(model, hooks=[ServerTools([define])]))
    reply = await client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "ozone?"}])

    assert reply.content[0].text == "Ozone is a gas."  # type: ignore[union-attr]
    assistant = model.requests[1].body["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            thinking,
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_x", "name": "define", "input": {"word": "ozone"}},
        ],
    }


def mixed_model(route: Route) -> ScriptedModel:
    """Calls our tool and the client's in one turn; once it has our result, calls only the client's."""

    def reply(request: RecordedRequest) -> Any:
        history = json.dumps(request.body["messages"])
        if "a word" in history:  # our tool's result is in the history
            return route.calls(("client_tool", {"x": 1}, "client_call"), text="Now yours.")
        return route.calls(("define", {"word": "w"}, "server_call"), ("client_tool", {"x": 1}, "client_call"))

    return ScriptedModel(default=reply)


async def test_a_mixed_turn_gives_the_client_only_its_own_calls_under_both_sdks() -> None:
    model = mixed_model(Route("messages"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([define])])
    client_tool = {"name": "client_tool", "description": "mine", "input_schema": {"type": "object"}}
    reply = await anthropic_client(app).messages.create(
        model="m",
        max_tokens=5,
        messages=[{"role": "user", "content": "go"}],
        tools=[client_tool],  # type: ignore[list-item]
    )
    assert reply.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "name", None)) for b in reply.content] == [("text", None), ("tool_use", "client_tool")]
    # The rerun answered every call of the turn it carried: the client's call was left out of it.
    rerun = model.requests[1].body["messages"]
    assert [b["name"] for b in rerun[1]["content"] if b["type"] == "tool_use"] == ["define"]
    assert [r["tool_use_id"] for r in rerun[2]["content"]] == ["server_call"]

    model = mixed_model(Route("chat"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([define])])
    completion = await openai_client(app).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "go"}],
        tools=[{"type": "function", "function": {"name": "client_tool", "parameters": {"type": "object"}}}],
    )
    calls = completion.choices[0].message.tool_calls or []
    assert [call.function.name for call in calls] == ["client_tool"]  # type: ignore[union-attr]
    rerun = model.requests[1].body["messages"]
    assert [c["id"] for c in rerun[1]["tool_calls"]] == ["server_call"]
    assert rerun[2]["tool_call_id"] == "server_call"


async def test_the_final_response_holds_no_trace_unless_asked(route: Route) -> None:
    def script() -> ScriptedModel:
        return ScriptedModel(
            route.calls(("define", {"word": "a"})), route.calls(("add", {"a": 1, "b": 2})), route.text("done")
        )

    async with http_client(AgenticLoopMiddleware(script(), hooks=[ServerTools([define, add])])) as client:
        plain = (await post(client, route, route.request())).json()
    hook = ServerTools([define, add], keep_trace=True)
    async with http_client(AgenticLoopMiddleware(script(), hooks=[hook])) as client:
        traced = (await post(client, route, route.request())).json()

    assert "server_tool_calls" not in plain and "define" not in json.dumps(plain)
    assert traced["server_tool_calls"] == [
        {"name": "define", "input": {"word": "a"}, "is_error": False},
        {"name": "add", "input": {"a": 1, "b": 2}, "is_error": False},
    ]


def test_native_must_map_to_a_served_tool() -> None:
    with pytest.raises(ConfigurationError, match="not served"):
        ServerTools([define], native={"web_search": "search"})


async def test_a_plain_function_is_served_as_server_tool_would_declare_it(route: Route) -> None:
    def lookup(word: str) -> str:
        """Look a word up."""
        return f"{word}: a word"

    tools = ServerTools([lookup, define])
    assert tools.by_name["lookup"] == server_tool(lookup)

    model = ScriptedModel(route.calls(("lookup", {"word": "flow"}, "id_1")), route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[tools])) as client:
        response = await post(client, route, route.request())

    assert route.final_text(response.json()) == "done"
    assert "flow: a word" in json.dumps(model.requests[1].body["messages"][-1])


@pytest.mark.parametrize(
    ("tools", "error"),
    [
        (["lookup"], "ServerTools takes functions or tools declared with @server_tool, got str"),
        ([define, define], "two server tools are named 'define'"),
    ],
)
def test_what_is_not_a_tool_is_refused_when_the_hook_is_built(tools: list[Any], error: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(error)):
        ServerTools(tools)


async def test_a_tool_may_keep_per_request_state_in_logging_obj(route: Route) -> None:
    seen: list[Any] = []

    @server_tool
    def remember(key: str, logging_obj: Any) -> str:
        seen.append(logging_obj.litellm_call_id)
        logging_obj.model_call_details.setdefault("keys", []).append(key)
        return ",".join(logging_obj.model_call_details["keys"])

    assert "logging_obj" not in remember.input_schema["properties"]
    model = ScriptedModel(
        route.calls(("remember", {"key": "a"})), route.calls(("remember", {"key": "b"})), route.text("ok")
    )
    async with http_client(AgenticLoopMiddleware(model, hooks=[ServerTools([remember])])) as client:
        await post(client, route, route.request())
    assert len(set(seen)) == 1
    assert "a,b" in json.dumps(model.requests[2].body["messages"][-1])


@server_tool
def odd(kind: str) -> Any:
    """Return a value that strict JSON cannot hold."""
    if kind == "cycle":
        looped: dict[str, Any] = {"name": "loop"}
        looped["self"] = looped
        return looped
    if kind == "unwritable":
        return {"value": Unwritable()}
    return {
        "big": {"n": 2**70},
        "keys": {1: "a"},
        "surrogate": "a\ud800b",
        "non_finite": {"ratio": float("inf"), "mean": float("nan"), "none": None},
    }[kind]


class Unwritable:
    """An object whose `str` raises: its tool's result cannot be written at all."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this object")


ODD_KINDS = ["big", "keys", "cycle", "surrogate", "non_finite", "unwritable"]


def odd_results(wire: str, body: dict[str, Any]) -> list[str]:
    """The tool results a rerun carries, in call order."""
    if wire == "messages":
        return [block["content"] for block in body["messages"][-1]["content"]]
    if wire == "chat":
        return [item["content"] for item in body["messages"] if item["role"] == "tool"]
    return [item["output"] for item in body["input"] if item.get("type") == "function_call_output"]


def odd_model(wire: str) -> ScriptedModel:
    """Calls `odd` once per kind, then answers; streams when asked to, in the route's own events."""
    if wire == "messages":
        calls, answer = message(*(tool_use("odd", {"kind": kind}) for kind in ODD_KINDS)), message("ok")
    elif wire == "chat":
        calls = chat_completion(tool_calls=[tool_call("odd", {"kind": kind}) for kind in ODD_KINDS])
        answer = chat_completion("ok")
    else:
        calls, answer = response(*(function_call("odd", {"kind": kind}) for kind in ODD_KINDS)), response("ok")

    def replying(body: dict[str, Any]) -> Any:
        def reply(request: RecordedRequest) -> Any:
            if not request.body.get("stream"):
                return body
            if wire == "messages":
                return event_stream(list(sse.messages_events(body)))
            if wire == "chat":
                return event_stream(list(sse.chat_chunks(body, include_usage=False)))
            return event_stream(list(sse.responses_events(body)))

        return reply

    return ScriptedModel(replying(calls), replying(answer))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("wire", ["messages", "chat", "responses"])
async def test_results_strict_json_cannot_hold_reach_the_model_as_text_never_a_failed_request(
    wire: str, stream: bool
) -> None:
    model = odd_model(wire)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([odd])])
    question = [{"role": "user", "content": "go"}]
    if wire == "messages":
        client = anthropic_client(app)
        if stream:
            async with client.messages.stream(model="m", max_tokens=9, messages=question) as events:  # type: ignore[arg-type]
                text = (await events.get_final_message()).content[0].text  # type: ignore[union-attr]
        else:
            text = (await client.messages.create(model="m", max_tokens=9, messages=question)).content[0].text  # type: ignore[arg-type,union-attr]
    elif wire == "chat":
        if stream:
            async with openai_client(app).chat.completions.stream(model="m", messages=question) as chunks:  # type: ignore[arg-type]
                text = (await chunks.get_final_completion()).choices[0].message.content
        else:
            completion = await openai_client(app).chat.completions.create(model="m", messages=question)  # type: ignore[arg-type]
            text = completion.choices[0].message.content
    elif stream:
        async with openai_client(app).responses.stream(model="m", input="go") as events:
            text = (await events.get_final_response()).output_text
    else:
        text = (await openai_client(app).responses.create(model="m", input="go")).output_text

    assert text == "ok"
    big, keys, cycle, surrogate, non_finite, unwritable = odd_results(wire, model.requests[1].body)
    assert big.endswith('{"n":1180591620717411303424}')  # exact, as Python's json writes it
    assert keys.endswith('{"1":"a"}')
    assert "odd failed: its result cannot be written as JSON (Circular reference detected)" in cycle
    assert surrogate.endswith("a\ufffdb")
    assert non_finite.endswith('{"ratio":Infinity,"mean":NaN,"none":null}')  # as Python's json writes them, not null
    assert "odd failed: its result cannot be written as JSON (RuntimeError: no text for this object)" in unwritable


# A 1x1 PNG in base64.
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
WORD = "pineapple"
QUESTION = [{"role": "user", "content": "go"}]
# Each wire's path, request, reply calling `snap`, and answer after it.
WIRES: dict[str, tuple[str, dict[str, Any], Any, Any]] = {
    "messages": (
        "/v1/messages",
        {"model": "m", "max_tokens": 9, "messages": QUESTION},
        message(tool_use("snap", {}, "c1")),
        message("done"),
    ),
    "chat": (
        "/v1/chat/completions",
        {"model": "m", "messages": QUESTION},
        chat_completion(tool_calls=[tool_call("snap", {}, "c1")]),
        chat_completion("done"),
    ),
    "responses": (
        "/v1/responses",
        {"model": "m", "input": QUESTION},
        response(function_call("snap", {}, "c1")),
        response("done"),
    ),
}


async def snapped(wire: str, image: Image) -> Any:
    """The result the model reads in the rerun after the tool `snap` gave `image` with a text, on `wire`."""

    @server_tool
    def snap() -> ToolResult:
        """Takes a picture."""
        return ToolResult("a picture", images=(image,))

    path, body, calls, answer = WIRES[wire]
    model = ScriptedModel(calls, answer)
    async with http_client(AgenticLoopMiddleware(model, hooks=[ServerTools([snap])])) as client:
        got = await client.post(path, json=body)
    assert got.status_code == 200
    rerun = model.requests[1].body
    if wire == "messages":
        (result,) = rerun["messages"][-1]["content"]
        return result["content"], result.get("is_error", False)
    if wire == "chat":
        return rerun["messages"][-1]["content"]
    return next(item["output"] for item in rerun["input"] if item.get("type") == "function_call_output")


async def test_a_tools_image_reaches_the_app_as_an_image_its_media_type_lower_cased() -> None:
    image = Image("IMAGE/PNG", PIXEL)
    content, is_error = await snapped("messages", image)
    assert not is_error
    assert content == [
        {"type": "text", "text": "a picture"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
    ]
    assert await snapped("responses", image) == [
        {"type": "input_text", "text": "a picture"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PIXEL}"},
    ]
    assert (
        await snapped("chat", image)
        == "a picture\n[image image/png: not shown, this API takes text only in tool results]"
    )


NOT_IMAGES = {
    "a media type of words": (Image(f"the {WORD} is here", PIXEL), "media type"),
    "a media type whose subtype is a word": (Image(f"image/{WORD}", PIXEL), "media type"),
    "a media type the APIs do not take": (Image(f"image/svg+xml;{WORD}", PIXEL), "media type"),
    "data of words": (Image("image/png", f"the {WORD} is here"), "data"),
    "data of words after a PNG's head": (Image("image/png", f"{PIXEL[:16]} {WORD}"), "data"),
    "data with a line break": (Image("image/png", f"{PIXEL[:8]}\n{PIXEL[8:]}"), "data"),
    "data of base64 that is no image": (Image("image/png", "AAAA" + PIXEL), "data"),
    "data that is a data URL": (Image("image/png", f"data:image/png;base64,{PIXEL}"), "data"),
}


@pytest.mark.parametrize("wire", list(WIRES))
@pytest.mark.parametrize("case", list(NOT_IMAGES))
async def test_a_tools_image_that_is_none_is_an_error_result_without_its_words(case: str, wire: str) -> None:
    image, fault = NOT_IMAGES[case]
    said = {
        "media type": "snap failed: its image's media type is not one of image/png, image/jpeg, image/gif, image/webp",
        "data": "snap failed: its image's data is not base64 of a PNG, JPEG, GIF or WebP image",
    }[fault]
    got = await snapped(wire, image)
    assert got == ((said, True) if wire == "messages" else f"Error: {said}")  # no image, the tool's words not repeated
