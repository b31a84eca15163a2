"""The third wire format, OpenAI Responses (`POST /v1/responses`), driven by the official openai SDK."""

from __future__ import annotations

import json
from typing import Any

import openai
import orjson
import pytest
from conftest import http_client, openai_client
from starlette.responses import JSONResponse

from agentic_middleware import AgenticLoopMiddleware, AgenticLoopPlan, AgenticLoopRequestPatch, CustomLogger
from agentic_middleware.testing import RecordedRequest, ScriptedModel, function_call, response
from agentic_middleware.tools import ServerTools, server_tool


@server_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@server_tool
async def web_search(query: str) -> str:
    """Search the web."""
    return f"[1] results for {query}"


def tools_hook(**options: Any) -> ServerTools:
    return ServerTools([lookup, web_search], **options)


def usage(input_tokens: int, output_tokens: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def reasoning(text: str = "thinking") -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{text}",
        "summary": [{"type": "summary_text", "text": text}],
        "encrypted_content": f"ENC({text})",
    }


async def test_a_server_tool_runs_inside_one_sdk_call_and_the_rerun_replays_the_items() -> None:
    call = function_call("lookup", {"key": "k1"}, call_id="call_1")
    model = ScriptedModel(
        response(reasoning("r1"), call, usage=usage(10, 3, cached=4, reasoning=2)),
        response("The value is v1.", usage=usage(20, 5, cached=8, reasoning=1)),
    )
    client = openai_client(AgenticLoopMiddleware(model, hooks=[tools_hook()]))

    result = await client.responses.create(
        model="gpt-test", input="What is k1?", tool_choice="required", max_output_tokens=300
    )

    assert result.output_text == "The value is v1."
    assert [item.type for item in result.output] == ["message"]
    assert result.usage is not None
    got = result.usage.model_dump(exclude_none=True)
    calls = got.pop("iterations")  # every call's own usage: the bill is their sum (accounting.md)
    assert got == {  # the last call's, the context a client such as Codex sizes from it
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 8},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 25,
    }
    assert [call["input_tokens"] for call in calls] == [10, 20]
    assert sum(call["total_tokens"] for call in calls) == 38
    first, rerun = (request.body for request in model.requests)
    assert first["input"] == "What is k1?"
    assert first["tool_choice"] == "required"
    assert [tool["name"] for tool in first["tools"]] == ["lookup", "web_search"]
    assert first["tools"][0] == {
        "type": "function",
        "name": "lookup",
        "description": "Look a key up.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        "strict": False,
    }
    assert "tool_choice" not in rerun
    assert rerun["max_output_tokens"] == 300
    assert rerun["input"] == [
        {"role": "user", "content": "What is k1?"},
        reasoning("r1"),
        call,
        {"type": "function_call_output", "call_id": "call_1", "output": "value of k1"},
    ]
    assert all(request.path == "/v1/responses" for request in model.requests)


async def test_the_client_keeps_its_own_function_tools_across_mixed_turns() -> None:
    client_tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": False}
    model = ScriptedModel(
        # One turn with a server call and a client call: only the server's is answered and replayed.
        response(function_call("lookup", {"key": "city"}, "call_s"), function_call("get_weather", {}, "call_c0")),
        response("Checking.", function_call("get_weather", {"city": "Paris"}, "call_c1")),
        response("Sunny in Paris."),
    )
    app = AgenticLoopMiddleware(model, hooks=[tools_hook()])
    client = openai_client(app)

    turn = await client.responses.create(model="m", input="Weather where I live?", tools=[client_tool])

    calls = [item for item in turn.output if item.type == "function_call"]
    assert [(call.name, call.call_id) for call in calls] == [("get_weather", "call_c1")]
    assert turn.output_text == "Checking."
    rerun = model.requests[1].body
    assert [item.get("call_id") for item in rerun["input"][1:]] == ["call_s", "call_s"]
    assert [tool["name"] for tool in rerun["tools"]] == ["get_weather", "lookup", "web_search"]

    history = [
        {"role": "user", "content": "Weather where I live?"},
        *[item.model_dump(exclude_none=True) for item in turn.output],
        {"type": "function_call_output", "call_id": "call_c1", "output": "sunny"},
    ]
    final = await client.responses.create(model="m", input=history, tools=[client_tool])

    assert final.output_text == "Sunny in Paris."
    assert model.requests[2].body["input"][-1] == {
        "type": "function_call_output",
        "call_id": "call_c1",
        "output": "sunny",
    }


async def test_at_the_cap_the_claimed_calls_and_their_reasoning_leave_the_output() -> None:
    model = ScriptedModel(
        default=lambda request: response(
            reasoning("again"), function_call("lookup", {"key": str(len(request.body["input"]))}), "Still looking."
        )
    )
    client = openai_client(AgenticLoopMiddleware(model, hooks=[tools_hook()], max_agentic_loops=2))

    result = await client.responses.create(model="m", input="loop")

    assert len(model.requests) == 4  # the first call, 2 reruns, the closing call (tools off, ignored by this model)
    assert model.requests[-1].body["tool_choice"] == "none"
    assert [item.type for item in result.output] == ["message"]
    assert result.output_text == "Still looking."
    assert result.usage is not None and result.usage.input_tokens == 10  # the last call's
    assert sum(call["input_tokens"] for call in result.usage.model_extra["iterations"]) == 40  # type: ignore[index]


async def test_repeated_calls_end_the_loop_without_the_claimed_call() -> None:
    model = ScriptedModel(default=lambda request: response(function_call("lookup", {"key": "same"})))
    raw = await openai_client(AgenticLoopMiddleware(model, hooks=[tools_hook()])).responses.with_raw_response.create(
        model="m", input="loop"
    )

    assert len(model.requests) == 3  # the closing call answers the repeat with its earlier result
    assert "value of same" in model.requests[-1].body["input"][-1]["output"]
    assert raw.headers["x-agentic-loop-ended-by"] == "repeated_tool_calls"
    assert raw.parse().output_text  # the claimed call gone, and never an empty answer


async def test_errors_come_in_openai_shape_with_their_status() -> None:
    model = ScriptedModel(
        response(function_call("lookup", {"key": "k"})),
        JSONResponse({"error": {"message": "overloaded", "type": "server_error", "code": None}}, 503),
    )
    client = http_client(AgenticLoopMiddleware(model, hooks=[tools_hook()], rerun_retries=0))  # the 503 itself

    reply = await client.post("/v1/responses", json={"model": "m", "input": "x"})
    bad = await client.post("/v1/responses", json={"model": "m", "input": {"not": "items"}})

    assert reply.status_code == 503
    assert reply.json()["error"]["message"] == "overloaded"
    assert bad.status_code == 400
    assert set(bad.json()["error"]) == {"message", "type", "param", "code"}
    assert "input must be a string or an array" in bad.json()["error"]["message"]
    assert bad.json()["error"]["param"] == "input"


async def test_previous_response_id_and_store_are_kept_and_unstored_items_lose_their_ids() -> None:
    call = function_call("lookup", {"key": "k"}, call_id="call_9")
    model = ScriptedModel(response(reasoning(), call), response("done", id="resp_final"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[tools_hook()]))

    result = await client.responses.create(model="m", input="x", previous_response_id="resp_client", store=False)

    assert result.id == "resp_final"
    rerun = model.requests[1].body
    assert rerun["previous_response_id"] == "resp_client"
    assert rerun["store"] is False
    replayed = rerun["input"][1:3]
    assert replayed == [
        {k: v for k, v in reasoning().items() if k != "id"},
        {k: v for k, v in call.items() if k != "id"},
    ]
    assert replayed[0]["encrypted_content"] == "ENC(thinking)"


async def test_stored_items_keep_their_ids() -> None:
    call = function_call("lookup", {"key": "k"})
    model = ScriptedModel(response(reasoning(), call), response("done"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[tools_hook()]))

    await client.responses.create(model="m", input="x", previous_response_id="resp_client")

    assert model.requests[1].body["input"][1:3] == [reasoning(), call]
    assert model.requests[1].body["previous_response_id"] == "resp_client"


@pytest.mark.parametrize("native", ["web_search", "web_search_preview"])
async def test_native_web_search_is_served_and_other_tool_types_pass_through(native: str) -> None:
    model = ScriptedModel(response(function_call("web_search", {"query": "q"})), response("found"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[tools_hook(native={"web_search": "web_search"})]))
    custom = {"type": "custom", "name": "apply_patch", "description": "Patch files."}

    result = await client.responses.create(
        model="m", input="search?", tools=[{"type": native}, custom, {"type": "local_shell"}]
    )

    assert result.output_text == "found"
    sent = model.requests[0].body["tools"]
    assert sent[:2] == [custom, {"type": "local_shell"}]
    assert [tool.get("name") for tool in sent[2:]] == ["lookup", "web_search"]
    assert model.requests[1].body["input"][-1]["output"] == "[1] results for q"


class ResponsesHook(CustomLogger):
    """Written as LiteLLM's web-search hook writes its Responses path: its own gate and plan builder."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    async def async_should_run_agentic_loop(self, **arguments: Any) -> Any:
        self.seen.append(("shared gate", arguments))
        return False, {}

    async def async_should_run_responses_agentic_loop(
        self, response: Any, model: Any, messages: Any, tools: Any, stream: Any, custom_llm_provider: Any, kwargs: Any
    ) -> Any:
        self.seen.append(
            ("gate", {"messages": messages, "tools": tools, "provider": custom_llm_provider, "kwargs": kwargs})
        )
        calls = [
            {"id": item.call_id, "call_id": item.call_id, "name": item.name, "input": json.loads(item.arguments)}
            for item in response.output
            if item.type == "function_call" and item.name == "litellm_web_search"
        ]
        return (True, {"tool_calls": calls, "response_format": "responses"}) if calls else (False, {})

    async def async_build_agentic_loop_plan(self, **arguments: Any) -> Any:
        raise AssertionError("the Responses-specific builder is preferred")

    async def async_build_responses_agentic_loop_plan(
        self, tools: Any, model: Any, messages: Any, response: Any, optional_params: Any, logging_obj: Any, stream: Any,
        kwargs: Any,
    ) -> Any:  # fmt: skip
        self.seen.append(("plan", {"messages": messages, "optional_params": optional_params, "model": model}))
        follow_up = [
            item
            for call in tools["tool_calls"]
            for item in (
                {"type": "function_call", "call_id": call["call_id"], "name": call["name"], "arguments": "{}"},
                {"type": "function_call_output", "call_id": call["call_id"], "output": f"found {call['input']}"},
            )
        ]
        clean = {k: v for k, v in optional_params.items() if k not in {"tools", "tool_choice", "stream"}}
        return AgenticLoopPlan(
            run_agentic_loop=True,
            request_patch=AgenticLoopRequestPatch(
                model=model, messages=[*messages, *follow_up], optional_params=clean, kwargs=dict(kwargs)
            ),
        )


async def test_a_litellm_style_hook_gets_litellms_arguments_on_this_surface() -> None:
    hook = ResponsesHook()
    model = ScriptedModel(
        response(function_call("litellm_web_search", {"query": "q"}, call_id="call_w")), response("answer")
    )
    client = openai_client(AgenticLoopMiddleware(model, hooks=[hook]))

    result = await client.responses.create(
        model="m", input="Find q", instructions="Be brief.", temperature=0.5, tool_choice="auto"
    )

    assert result.output_text == "answer"
    kinds = [kind for kind, _ in hook.seen]
    assert kinds == ["gate", "plan", "gate", "shared gate"]
    gate = hook.seen[0][1]
    assert gate["messages"] == [{"role": "user", "content": "Find q"}]
    assert gate["provider"] == "openai"
    assert gate["kwargs"]["_agentic_loop_api_surface"] == "responses"
    assert gate["kwargs"]["custom_llm_provider"] == "openai"
    plan = hook.seen[1][1]
    assert plan["optional_params"] == {"instructions": "Be brief.", "temperature": 0.5, "tool_choice": "auto"}
    rerun = model.requests[1].body
    assert rerun["input"][0] == {"role": "user", "content": "Find q"}
    assert rerun["input"][2] == {"type": "function_call_output", "call_id": "call_w", "output": "found {'query': 'q'}"}
    assert rerun["instructions"] == "Be brief."
    assert "tool_choice" not in rerun


class SharedOnlyHook(CustomLogger):
    """A hook with only the shared methods: they serve this route too, with the request's other parameters."""

    def __init__(self) -> None:
        self.params: list[dict[str, Any]] = []

    async def async_should_run_agentic_loop(self, response: Any, kwargs: Any, **_: Any) -> Any:
        if kwargs["_agentic_loop_api_surface"] != "responses":
            return False, {}
        calls = [item for item in response.output if item.type == "function_call"]
        return (True, {"tool_calls": calls}) if calls else (False, {})

    async def async_build_agentic_loop_plan(
        self, tools: Any, messages: Any, anthropic_messages_optional_request_params: Any, **_: Any
    ) -> Any:
        self.params.append(anthropic_messages_optional_request_params)
        outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": "ok"} for c in tools["tool_calls"]]
        patch = AgenticLoopRequestPatch(messages=[*messages, *tools["tool_calls"], *outputs], max_tokens=64)
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=patch)


async def test_the_shared_gate_and_builder_serve_this_route_with_its_input_items() -> None:
    hook = SharedOnlyHook()
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    model = ScriptedModel(response(function_call("any", {})), response("ok"))
    client = openai_client(AgenticLoopMiddleware(model, hooks=[hook]))

    await client.responses.create(model="m", input=items, store=True)  # type: ignore[arg-type]

    assert hook.params == [{"store": True}]
    rerun = model.requests[1].body
    assert rerun["input"][0] == items[0]
    assert rerun["input"][2]["type"] == "function_call_output"
    assert rerun["max_output_tokens"] == 64 and "max_tokens" not in rerun


def scripted_codex(request: RecordedRequest) -> dict[str, Any]:
    """A Responses model as Codex meets it: reasoning before each call, a custom tool, a server tool."""
    body = request.body
    items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
    done = {item["call_id"] for item in items if item.get("type", "").endswith("_output")}
    if "call_patch" in done:
        return response("Patched.")
    if "call_ws" not in done:
        return response(reasoning("search first"), function_call("web_search", {"query": "ruff"}, "call_ws"))
    patch = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_patch", "name": "apply_patch"}
    return response(reasoning("now patch"), {**patch, "input": "*** Begin Patch", "status": "completed"})


async def test_a_codex_shaped_request() -> None:
    model = ScriptedModel(default=scripted_codex)
    client = http_client(AgenticLoopMiddleware(model, hooks=[tools_hook()]))
    request: dict[str, Any] = {
        "model": "gpt-5-codex",
        "instructions": "You are Codex.",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it"}]}],
        "tools": [{"type": "custom", "name": "apply_patch", "format": {"type": "text"}}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "session-1",
    }

    first = (await client.post("/v1/responses", json=request)).json()

    assert [item["type"] for item in first["output"]] == ["reasoning", "custom_tool_call"]
    assert first["output"][0]["encrypted_content"] == "ENC(now patch)"
    rerun = model.requests[1].body
    assert rerun["include"] == ["reasoning.encrypted_content"] and rerun["store"] is False
    assert rerun["tools"][0] == request["tools"][0]
    replayed = ["message", "reasoning", "function_call", "function_call_output"]
    assert [item.get("type") for item in rerun["input"]] == replayed
    assert all("id" not in item for item in rerun["input"][1:])

    # Codex replays the reasoning and its call whole (ids dropped, as it does with store false), with the output.
    replay = [{k: v for k, v in item.items() if k != "id"} for item in first["output"]]
    output = {"type": "custom_tool_call_output", "call_id": "call_patch", "output": "Done!"}
    second = await client.post("/v1/responses", json={**request, "input": [*request["input"], *replay, output]})

    assert second.json()["output"][0]["content"][0]["text"] == "Patched."
    assert len(model.requests) == 3
    last = model.requests[-1].body
    assert last["input"][-3:] == [*replay, output]


async def test_a_response_override_and_post_hook_see_the_responses_shape() -> None:
    class Override(CustomLogger):
        async def async_should_run_agentic_loop(self, response: Any, **_: Any) -> Any:
            return True, {"tool_calls": []}

        async def async_build_agentic_loop_plan(self, response: Any, **_: Any) -> Any:
            return AgenticLoopPlan(response_override={**response, "output": [], "overridden": True})

    model = ScriptedModel(response("no"))
    reply = await http_client(AgenticLoopMiddleware(model, hooks=[Override()])).post(
        "/v1/responses", json={"model": "m", "input": "x"}
    )

    assert orjson.loads(reply.content)["overridden"] is True


def events_of(raw: bytes) -> list[dict[str, Any]]:
    """The `data` of each SSE event, checking that its `event:` name matches its `type`."""
    events = []
    for block in raw.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if "data" in lines:
            data = json.loads(lines["data"])
            assert lines.get("event") == data["type"]
            events.append(data)
    return events


async def test_a_stream_is_one_lifecycle_that_the_sdk_helper_rebuilds() -> None:
    long_text = "word " * 120
    script = (
        response(reasoning("r"), function_call("lookup", {"key": "k"}), usage=usage(10, 2)),
        response(
            reasoning("final"),
            long_text,
            function_call("get_weather", {"city": "Paris"}, "call_c"),
            usage=usage(20, 4),
        ),
    )
    client_tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": False}
    json_result = await openai_client(
        AgenticLoopMiddleware(ScriptedModel(*script), hooks=[tools_hook()])
    ).responses.create(model="m", input="x", tools=[client_tool])
    model = ScriptedModel(*script)
    client = openai_client(AgenticLoopMiddleware(model, hooks=[tools_hook()]))

    async with client.responses.stream(model="m", input="x", tools=[client_tool]) as stream:  # type: ignore[list-item]
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()

    assert model.requests[0].body["stream"] is True  # live; the app answered JSON, so the stream is written after
    assert final.output_text == long_text == json_result.output_text
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert final.model_dump(exclude_none=True) == json_result.model_dump(exclude_none=True)
    assert final.usage is not None and final.usage.total_tokens == 24  # the last call's
    assert sum(call["total_tokens"] for call in final.usage.model_extra["iterations"]) == 36  # type: ignore[index]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") > 1
    assert kinds.count("response.created") == 1 and kinds.count("response.completed") == 1


async def test_stream_events_are_numbered_and_end_without_done() -> None:
    model = ScriptedModel(response(function_call("lookup", {"key": "k"})), response("fine"))
    client = http_client(AgenticLoopMiddleware(model, hooks=[tools_hook()]))

    reply = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})

    assert reply.headers["content-type"].startswith("text/event-stream")
    assert b"[DONE]" not in reply.content
    events = events_of(reply.content)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "fine"
    assert events[-1]["response"]["usage"]["total_tokens"] == 15  # the last call's; each call's in `iterations`
    assert [call["total_tokens"] for call in events[-1]["response"]["usage"]["iterations"]] == [15, 15]


async def test_a_failed_loop_in_a_stream_is_a_failed_response() -> None:
    model = ScriptedModel(
        response(function_call("lookup", {"key": "k"})),
        JSONResponse({"error": {"message": "model down", "type": "server_error", "code": None}}, 503),
    )
    client = openai_client(AgenticLoopMiddleware(model, hooks=[tools_hook()], rerun_retries=0))  # the 503 itself

    events = []
    with pytest.raises(openai.APIError, match="model down"):  # the `error` event after `response.failed`
        async for event in await client.responses.create(model="m", input="x", stream=True):
            events.append(event)

    assert [event.type for event in events] == ["response.created", "response.failed"]
    failed = events[1]
    assert failed.type == "response.failed"
    assert failed.response.error is not None and failed.response.error.message == "model down"
    assert failed.response.id == events[0].response.id  # type: ignore[union-attr]


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_agents_sdk_default_model_with_a_client_function_tool(streamed: bool) -> None:
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    ran: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return f"sunny in {city}"

    def script(request: RecordedRequest) -> dict[str, Any]:
        items = request.body["input"]
        outputs = {item["call_id"]: item["output"] for item in items if item.get("type") == "function_call_output"}
        if "call_weather" in outputs:
            return response(f"It is {outputs['call_weather']}.")
        if "call_lookup" in outputs:
            city = outputs["call_lookup"].removeprefix("value of ")
            return response(function_call("get_weather", {"city": city}, "call_weather"))
        return response(function_call("lookup", {"key": "home"}, "call_lookup"))

    model = ScriptedModel(default=script)
    client = openai_client(AgenticLoopMiddleware(model, hooks=[tools_hook()]))
    agent = agents.Agent(
        name="weather",
        instructions="Answer about the weather.",
        tools=[get_weather],
        model=agents.OpenAIResponsesModel(model="gpt-test", openai_client=client),
    )

    if streamed:
        result = agents.Runner.run_streamed(agent, "What is the weather at home?")
        kinds = [event.type async for event in result.stream_events()]
        assert "raw_response_event" in kinds
    else:
        result = await agents.Runner.run(agent, "What is the weather at home?")

    assert result.final_output == "It is sunny in home."
    assert ran == ["home"]
    assert len(model.requests) == 3
    second_turn = model.requests[2].body
    assert [item.get("type") for item in second_turn["input"]][-2:] == ["function_call", "function_call_output"]
    assert [tool["name"] for tool in second_turn["tools"]] == ["get_weather", "lookup", "web_search"]
