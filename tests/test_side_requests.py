"""Side requests get no server tools; token counts count the ones a turn would get (issue 23, item 5).

The shapes are the ones Claude Code 2.1 and Codex CLI 0.171 were seen sending (docs/server-tools.md#side-requests):
Claude Code's session title (`output_config.format` with a JSON schema, `tools: []`, streamed), its counting fallback
(`max_tokens: 1`), its `/context` counts (`count_tokens`), Codex's compaction (`tools: []`, labelled `request_kind:
"compaction"` in `x-codex-turn-metadata`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest
from conftest import anthropic_client, openai_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, ServerTools, Settings, server_tool
from agentic_middleware.compression import CompressionHook
from agentic_middleware.gateway import Upstream, create_app, serving
from agentic_middleware.mcp import from_config
from agentic_middleware.testing import RecordedRequest, ScriptedModel, chat_completion, message, response, tool_use

TITLE_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}},
    "required": ["title"],
    "additionalProperties": False,
}
CODEX_COMPACTION = json.dumps({"request_kind": "compaction", "compaction": {"trigger": "auto", "phase": "pre_turn"}})
USER = [{"role": "user", "content": "what is 2+2"}]


@server_tool(description="Search the web.")
async def web_search(query: str) -> str:
    return f"results for {query}"


def names(request: RecordedRequest) -> list[str]:
    """The names of the tools a request of any route declares."""
    tools = request.body.get("tools") or []
    return [tool.get("name") or tool.get("function", {}).get("name") for tool in tools]


def middleware(model: Any, **options: Any) -> AgenticLoopMiddleware:
    return AgenticLoopMiddleware(model, hooks=[ServerTools([web_search], **options)])


async def test_claude_codes_title_request_gets_no_server_tools_and_its_turn_does() -> None:
    model = ScriptedModel(message('{"title": "Sums"}'), message("4"))
    claude = anthropic_client(middleware(model))
    title = await claude.messages.create(
        model="m",
        max_tokens=4096,
        messages=USER,
        tools=[],
        output_config={"format": {"type": "json_schema", "schema": TITLE_SCHEMA}},
    )
    await claude.messages.create(model="m", max_tokens=4096, messages=USER, output_config={"effort": "high"})
    assert title.content[0].text == '{"title": "Sums"}'
    assert [names(request) for request in model.requests] == [[], ["web_search"]]


async def test_the_beta_output_format_and_a_streamed_title_request_get_none_either() -> None:
    model = ScriptedModel(default=message("{}"))
    claude = anthropic_client(middleware(model))
    schema = {"type": "json_schema", "schema": TITLE_SCHEMA}
    await claude.messages.create(model="m", max_tokens=100, messages=USER, extra_body={"output_format": schema})
    async with claude.messages.stream(
        model="m", max_tokens=100, messages=USER, tools=[], output_config={"format": schema}
    ) as stream:
        await stream.get_final_message()
    assert [names(request) for request in model.requests] == [[], []]


async def test_a_one_token_probe_gets_no_server_tools_on_any_route() -> None:
    model = ScriptedModel(message("4"), chat_completion("4"), chat_completion("4"), response("4"), message("4"))
    app = middleware(model)
    claude, gpt = anthropic_client(app), openai_client(app)
    await claude.messages.create(model="m", max_tokens=1, messages=USER)  # Claude Code's counting fallback
    await gpt.chat.completions.create(model="m", messages=USER, max_tokens=1)
    await gpt.chat.completions.create(model="m", messages=USER, max_completion_tokens=1)
    await gpt.responses.create(model="m", input="hi", max_output_tokens=1)
    await claude.messages.create(model="m", max_tokens=2, messages=USER)  # two tokens: an ordinary (short) turn
    assert [names(request) for request in model.requests] == [[], [], [], [], ["web_search"]]


async def test_tool_choice_none_gets_no_server_tools_on_each_route_in_its_own_spelling() -> None:
    model = ScriptedModel(message("4"), chat_completion("4"), response("4"), message("4"), chat_completion("4"))
    app = middleware(model)
    claude, gpt = anthropic_client(app), openai_client(app)
    await claude.messages.create(model="m", max_tokens=100, messages=USER, tool_choice={"type": "none"})
    await gpt.chat.completions.create(model="m", messages=USER, tool_choice="none")
    await gpt.responses.create(model="m", input="hi", tool_choice="none")
    await claude.messages.create(model="m", max_tokens=100, messages=USER, tool_choice={"type": "auto"})
    await gpt.chat.completions.create(model="m", messages=USER, tool_choice="auto")
    assert [names(request) for request in model.requests] == [[], [], [], ["web_search"], ["web_search"]]


async def test_a_structured_output_gets_no_server_tools_on_chat_and_responses() -> None:
    model = ScriptedModel(
        *(chat_completion("{}"), chat_completion("{}"), response("{}"), response("{}")),
        *(chat_completion("ok"), response("ok")),
    )
    gpt = openai_client(middleware(model))
    schema = {"name": "title", "schema": TITLE_SCHEMA, "strict": True}
    await gpt.chat.completions.create(
        model="m",
        messages=USER,
        response_format={"type": "json_schema", "json_schema": schema},
    )
    await gpt.chat.completions.create(model="m", messages=USER, response_format={"type": "json_object"})
    await gpt.responses.create(model="m", input="hi", text={"format": {"type": "json_schema", **schema}})
    await gpt.responses.create(model="m", input="hi", text={"format": {"type": "json_object"}})
    await gpt.chat.completions.create(model="m", messages=USER, response_format={"type": "text"})
    await gpt.responses.create(model="m", input="hi", text={"format": {"type": "text"}})
    assert [names(request) for request in model.requests] == [[], [], [], [], ["web_search"], ["web_search"]]


async def test_codexs_compaction_gets_no_server_tools_and_an_empty_tool_list_alone_does() -> None:
    model = ScriptedModel(default=response("ok"))
    gpt = openai_client(middleware(model))
    turn = json.dumps({"request_kind": "turn"})
    compaction: dict[str, Any] = {"tools": [], "tool_choice": "auto", "parallel_tool_calls": False}
    labelled = {"x-codex-turn-metadata": CODEX_COMPACTION}
    await gpt.responses.create(model="m", input="hi", **compaction, extra_headers=labelled)
    await gpt.responses.create(model="m", input="hi", **compaction, extra_body={"client_metadata": labelled})
    await gpt.responses.create(model="m", input="hi", tools=[], extra_headers={"x-codex-turn-metadata": turn})
    await gpt.responses.create(model="m", input="hi", tools=[])  # the Agents SDK's turn for an agent without tools
    assert [names(request) for request in model.requests] == [[], [], ["web_search"], ["web_search"]]


async def test_a_side_request_keeps_the_server_tools_the_client_itself_declared() -> None:
    model = ScriptedModel(default=message("{}"))
    hook = ServerTools([web_search, server_tool(lambda: "other", name="other", description="Other.")])
    claude = anthropic_client(AgenticLoopMiddleware(model, hooks=[hook]))
    mine = {"name": "web_search", "description": "mine", "input_schema": {"type": "object"}}
    await claude.messages.create(model="m", max_tokens=1, messages=USER, tools=[mine])
    assert names(model.requests[0]) == ["web_search"]
    assert model.requests[0].body["tools"][0]["description"] == "Search the web."  # ours, as on a turn


async def test_declare_in_side_requests_declares_them_there_too() -> None:
    model = ScriptedModel(default=message("{}"))
    claude = anthropic_client(middleware(model, declare_in_side_requests=True))
    await claude.messages.create(model="m", max_tokens=1, messages=USER, tool_choice={"type": "none"})
    assert names(model.requests[0]) == ["web_search"]


def test_mcp_servers_take_the_option_from_yaml() -> None:
    (hook,) = from_config([{"url": "http://127.0.0.1:1/mcp", "declare_in_side_requests": True}], "mcp_servers")
    assert hook.declare_in_side_requests is True
    (default,) = from_config([{"url": "http://127.0.0.1:1/mcp"}], "mcp_servers")
    assert default.declare_in_side_requests is False
    with pytest.raises(ConfigurationError, match="declare_in_side_requests must be true or false"):
        from_config([{"url": "http://127.0.0.1:1/mcp", "declare_in_side_requests": "no"}], "mcp_servers")


async def test_compression_stubs_nothing_in_a_side_request() -> None:
    model = ScriptedModel(default=message("{}"))
    claude = anthropic_client(AgenticLoopMiddleware(model, hooks=[CompressionHook(threshold=100, preview=10)]))
    history = [{"role": "user", "content": "x" * 500}, {"role": "assistant", "content": "ok"}, *USER]
    await claude.messages.create(model="m", max_tokens=1, messages=history)
    await claude.messages.create(model="m", max_tokens=100, messages=history)
    side, turn = model.requests
    assert side.body["messages"][0]["content"] == "x" * 500 and names(side) == []
    assert turn.body["messages"][0]["content"] != "x" * 500 and names(turn) == ["retrieve"]


def counting(per_tool: int = 100) -> Callable[[RecordedRequest], dict[str, Any]]:
    """A count endpoint's answer: 10 tokens, and `per_tool` for each declared tool."""

    def answer(request: RecordedRequest) -> dict[str, Any]:
        tokens = 10 + per_tool * len(request.body.get("tools") or [])
        extra = {"object": "response.input_tokens"} if request.path.endswith("input_tokens") else {}
        return {"input_tokens": tokens, **extra}

    return answer


async def test_count_tokens_counts_the_server_tools_a_turn_would_get() -> None:
    model = ScriptedModel(default=counting())
    claude = anthropic_client(middleware(model))
    mine = {"name": "mine", "description": "mine", "input_schema": {"type": "object"}}
    plain = await claude.messages.count_tokens(model="m", messages=USER)
    with_mine = await claude.messages.count_tokens(model="m", messages=USER, tools=[mine])
    none = await claude.messages.count_tokens(model="m", messages=USER, tool_choice={"type": "none"})
    assert (plain.input_tokens, with_mine.input_tokens, none.input_tokens) == (110, 210, 10)
    assert [request.path for request in model.requests] == ["/v1/messages/count_tokens"] * 3
    assert names(model.requests[1]) == ["mine", "web_search"]


async def test_responses_input_tokens_counts_the_server_tools_a_turn_would_get() -> None:
    model = ScriptedModel(default=counting())
    gpt = openai_client(middleware(model))
    plain = await gpt.responses.input_tokens.count(model="m", input="hi")
    structured = await gpt.responses.input_tokens.count(
        model="m", input="hi", text={"format": {"type": "json_schema", "name": "t", "schema": TITLE_SCHEMA}}
    )
    assert (plain.input_tokens, structured.input_tokens) == (110, 10)
    assert [request.path for request in model.requests] == ["/v1/responses/input_tokens"] * 2


async def test_a_malformed_native_tool_in_a_count_is_the_routes_400() -> None:
    model = ScriptedModel(default=counting())
    hook = ServerTools([web_search], native={"web_search": "web_search"})
    gpt = openai_client(AgenticLoopMiddleware(model, hooks=[hook]))
    with pytest.raises(openai.BadRequestError) as refused:
        await gpt.responses.input_tokens.count(
            model="m",
            input="hi",
            tools=[{"type": "web_search", "filters": {"allowed_domains": "example.com"}}],  # a string, not a list
        )
    assert refused.value.status_code == 400 and not model.requests


def upstream() -> Starlette:
    """A model server's two counting endpoints: 10 tokens, and 100 for each declared tool."""

    async def count(request: Request) -> JSONResponse:
        body = await request.json()
        tokens = 10 + 100 * len(body.get("tools") or [])
        extra = {"object": "response.input_tokens"} if request.url.path.endswith("input_tokens") else {}
        return JSONResponse({"input_tokens": tokens, **extra})

    paths = ["/v1/messages/count_tokens", "/v1/responses/input_tokens"]
    return Starlette(routes=[Route(path, count, methods=["POST"]) for path in paths])


async def test_the_gateway_forwards_both_counts_with_the_server_tools_declared() -> None:
    settings = Settings(hooks=(ServerTools([web_search]),))
    async with serving(upstream()) as up, serving(create_app(settings, Upstream(up))) as url:
        import anthropic

        async with anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0) as claude:
            counted = await claude.messages.count_tokens(model="m", messages=USER)
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as gpt:
            tokens = await gpt.responses.input_tokens.count(model="m", input="hi")
    assert (counted.input_tokens, tokens.input_tokens) == (110, 110)


async def test_a_server_tool_called_in_a_side_request_still_runs_on_the_server_unseen() -> None:
    model = ScriptedModel(message(tool_use("web_search", {"query": "x"})), message("done"))
    claude = anthropic_client(middleware(model))
    answer = await claude.messages.create(model="m", max_tokens=100, messages=USER, tool_choice={"type": "none"})
    assert [block.type for block in answer.content] == ["text"] and names(model.requests[0]) == []
    assert model.requests[1].body["messages"][-1]["content"][0]["content"] == "results for x"


async def test_a_count_carries_no_internal_field_of_the_client() -> None:
    model = ScriptedModel(default=counting())
    claude = anthropic_client(middleware(model))
    await claude.messages.count_tokens(
        model="m", messages=USER, extra_body={"max_agentic_loops": 99, "_agentic_loop_depth": 3}
    )
    assert set(model.requests[0].body) == {"model", "messages", "tools"}
