"""Only a tool in its route's client-tool shape is the client's own; a namespace is judged by the tools in it; a hosted
MCP server is declared only with the tools the caller may use, as a plain list (review policy F1, F2, F6).

Bob may not use the app's web search, code execution or web fetch, nor `db_*`; Carol may use `lookup` only; Dave may
use `lookup` and the `docs` server's `define` (and `wiki`'s `search`); Alice has no policy. Each test fails on the code
before, which took any untyped tool, and any function beside another key, for the client's own; judged a namespace
by its own name; and kept a bound server's empty list, or its filter form, which LiteLLM's proxy reads as all its
tools.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import http_client
from starlette.types import Scope
from support import ToolHook
from test_policy import Model, lookup

from agentic_middleware import AgenticLoopMiddleware, ServerTools, ToolPolicy

DOCS, WIKI = "https://docs.example/mcp", "https://wiki.example/mcp"
POLICIES: dict[str, ToolPolicy | None] = {
    "alice": None,
    "bob": ToolPolicy(denied_tools=["web_search", "code_execution", "web_fetch", "db_*"]),
    "carol": ToolPolicy(allowed_tools=["lookup"]),
    "dave": ToolPolicy(allowed_tools=["lookup", "docs_define", "wiki_search"], hosted_mcp={"docs": DOCS, "wiki": WIKI}),
}
ROUTES = {
    "messages": ("/v1/messages", {"messages": [{"role": "user", "content": "go"}], "max_tokens": 9}),
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "go"}]}),
    "responses": ("/v1/responses", {"input": "go"}),
}
MODES = ["loop", "passed_by_stream", "no_hooks"]


def by_key(scope: Scope) -> ToolPolicy | None:
    return POLICIES[dict(scope["headers"])[b"x-api-key"].decode()]


async def sent(route: str, key: str, mode: str = "loop", **extra: Any) -> dict[str, Any]:
    """What the app is sent of one request of `key`'s on `route`: JSON through the loop (`ServerTools` serving
    `lookup`), a stream the loop passes by (`streaming=False`), or JSON to a middleware with no hook."""
    model = Model()
    hooks = [] if mode == "no_hooks" else [ServerTools([lookup])]
    stream = mode == "passed_by_stream"
    app = AgenticLoopMiddleware(model, hooks=hooks, tool_policy=by_key, streaming=not stream)
    body = {"model": "m", **ROUTES[route][1], **extra, **({"stream": True} if stream else {})}
    async with http_client(app) as client:
        reply = await client.post(ROUTES[route][0], json=body, headers={"x-api-key": key})
    assert reply.status_code == 200, reply.text
    return model.requests[0].body


def reaching(body: dict[str, Any], tools: list[Any], field: str = "tools") -> list[Any]:
    """Those of `tools` the app was sent as they are, in `field`."""
    return [tool for tool in body.get(field) or [] if tool in tools]


# F1: a tool is the client's own only in its route's client-tool shape.

FUNCTION = {"name": "f", "parameters": {"type": "object"}}
NOT_THE_CLIENTS = {  # tools the app (LiteLLM) runs as a provider's own, on the operator's account, in no client shape
    "chat": [
        {"googleSearch": {}},  # Gemini's Google Search grounding, by LiteLLM's Gemini mapping
        {"codeExecution": {}},
        {"urlContext": {}},
        {"type": "function", "enterpriseWebSearch": {}},  # LiteLLM drops the `type` before it reads the tool
        {"type": "function", "function": FUNCTION, "systemTool": {"name": "nova_grounding"}},  # Bedrock's search
        {"type": "function", "function": FUNCTION, "googleSearch": {}},  # a function beside a key not a client's
        {"type": "image_generation", "googleSearch": {}},  # a typed tool holding a provider's: not read here
        {"name": "my_untyped_tool", "parameters": {"type": "object"}},  # untyped: no Chat client tool
        {"type": ["function"], "function": FUNCTION},  # a type no shape has
    ],
    "messages": [
        {"googleSearch": {}},  # LiteLLM's /v1/messages adapter passes a one-key tool on verbatim
        {"codeExecution": {}},
        {"type": "function", "function": FUNCTION},  # passed on as a Chat function, with whatever it holds
        {"name": "my_tool"},  # no input_schema: no Anthropic client tool
        {"type": "bash_20250124", "name": "bash", "systemTool": {"name": "nova_grounding"}},
    ],
    "responses": [
        {"googleSearch": {}},  # passed on verbatim by LiteLLM's Responses-to-Chat bridge
        {"name": "my_untyped_tool", "parameters": {"type": "object"}},
    ],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("route", list(ROUTES))
async def test_a_tool_out_of_its_routes_client_shape_is_not_the_clients_own(route: str, mode: str) -> None:
    """None reaches the app for Bob (a deny-list) nor Carol (an allow-list), looped, passed by or with no hook;
    Alice's request carries them all."""
    tools = NOT_THE_CLIENTS[route]
    for key in ("bob", "carol"):
        assert reaching(await sent(route, key, mode, tools=tools), tools) == [], key
    assert reaching(await sent(route, "alice", mode, tools=tools), tools) == tools


@pytest.mark.parametrize("mode", ["loop", "no_hooks"])
async def test_a_legacy_function_out_of_a_functions_shape_is_not_declared(mode: str) -> None:
    """Chat's legacy `functions` is read as `tools` is: `{"googleSearch": {}}` there is Gemini's search to LiteLLM."""
    hosted = [{"googleSearch": {}}, {"name": "f", "googleSearch": {}}]
    own = {"name": "my_function", "description": "mine", "parameters": {"type": "object"}}
    carol = await sent("chat", "carol", mode, functions=[*hosted, own], function_call="auto")
    assert (carol["functions"], carol["function_call"]) == ([own], "auto")
    carol = await sent("chat", "carol", mode, functions=hosted, function_call="auto")
    assert not {"functions", "function_call"} & set(carol)
    assert (await sent("chat", "alice", mode, functions=hosted))["functions"] == hosted


CLIENTS_OWN = {  # declarations shaped as Claude Code 2.1.332 and Codex CLI 0.171.0 send them, with each mark
    "messages": [
        {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}},
        {"name": "Read", "description": "Read", "input_schema": {"type": "object"}, "defer_loading": True},
        {"name": "Edit", "input_schema": {"type": "object"}, "input_examples": [{}], "strict": True},
        {"name": "Write", "input_schema": {"type": "object"}, "eager_input_streaming": True},
        {"type": "custom", "name": "Glob", "input_schema": {"type": "object"}, "allowed_callers": ["direct"]},
        {"name": "Grep", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
    ],
    "responses": [
        {"type": "function", "name": "exec_command", "description": "x", "parameters": {"type": "object"}},
        {"type": "function", "name": "view_image", "parameters": {"type": "object"}, "strict": False},
        {"type": "custom", "name": "apply_patch", "description": "x", "format": {"type": "grammar", "syntax": "lark"}},
        {
            "type": "namespace",
            "name": "multi_agent_v1",
            "description": "agents",
            "tools": [
                {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}, "strict": False},
                {"type": "function", "name": "wait_agent", "description": "x", "parameters": {"type": "object"}},
            ],
        },
    ],
    "chat": [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}, "strict": True}},
        {"type": "function", "function": {"name": "cached"}, "cache_control": {"type": "ephemeral"}},
        {"type": "custom", "custom": {"name": "freeform", "format": {"type": "text"}}},
    ],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("route", list(ROUTES))
async def test_real_clients_tools_stay_the_clients_own(route: str, mode: str) -> None:
    """Claude Code's and Codex's tools, with the marks they carry, stay declared for an allow-list that names none of
    them; the server's `lookup` is declared beside them where the loop takes part."""
    tools = CLIENTS_OWN[route]
    for key in ("carol", "bob"):
        body = await sent(route, key, mode, tools=tools)
        assert reaching(body, tools) == tools, key
        assert len(body["tools"]) == len(tools) + (mode == "loop")  # the server's `lookup`, where the loop declares it


def every_key(kind: Any, **values: Any) -> dict[str, Any]:
    """A declaration holding every key the official SDK's type of it declares: `values` where given, else a mark."""
    keys = kind.__required_keys__ | kind.__optional_keys__
    return {key: values.get(key, False) for key in sorted(keys)}


def sdk_declarations() -> dict[str, list[dict[str, Any]]]:
    """The client-tool types of the anthropic and openai SDKs installed, each with every key they declare: a field a
    new SDK adds to a client's own tool must keep it the client's own, not drop it silently."""
    from anthropic.types import ToolParam
    from openai.types.chat import ChatCompletionCustomToolParam, ChatCompletionFunctionToolParam
    from openai.types.responses import CustomToolParam, FunctionToolParam
    from openai.types.shared_params import FunctionDefinition

    schema = {"type": "object"}
    return {
        "messages": [every_key(ToolParam, type="custom", name="sdk_tool", input_schema=schema, description="x")],
        "responses": [
            every_key(FunctionToolParam, type="function", name="sdk_fn", parameters=schema, output_schema=schema),
            every_key(CustomToolParam, type="custom", name="sdk_custom", format={"type": "text"}, description="x"),
        ],
        "chat": [
            every_key(
                ChatCompletionFunctionToolParam,
                type="function",
                function=every_key(FunctionDefinition, name="sdk_fn", parameters=schema, description="x"),
            ),
            every_key(ChatCompletionCustomToolParam, type="custom", custom={"name": "sdk_custom"}),
        ],
    }


@pytest.mark.parametrize("route", list(ROUTES))
async def test_every_key_the_sdks_declare_keeps_a_tool_the_clients_own(route: str) -> None:
    """Responses' `output_schema` (and `async`) once dropped a client's function under any policy judging names."""
    tools = sdk_declarations()[route]
    for key in ("carol", "bob"):
        assert reaching(await sent(route, key, tools=tools), tools) == tools, key


# F6: a namespace is judged by every tool nested in it.

NESTED = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}


def namespace(*tools: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "namespace", "name": "ns", "description": "grouped", "tools": list(tools), **extra}


NAMESPACES_DROPPED = [
    namespace({"type": "web_search_20250305", "name": "web_search", "input_schema": {}}, NESTED),
    namespace({"type": "code_execution_20250825", "name": "code_execution"}),
    namespace({"googleSearch": {}}),  # lifted out as Gemini's search: untyped, not read
    namespace(namespace(NESTED)),  # a namespace in a namespace: not read
    namespace({"type": "mcp", "server_label": "docs", "server_url": DOCS, "allowed_tools": ["define"]}),
    namespace(NESTED, systemTool={"name": "nova_grounding"}),  # a key beyond a namespace's
    {"type": "namespace", "name": "ns", "tools": {"spawn_agent": NESTED}},  # no list of tools
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("route", ["chat", "responses"])
async def test_a_namespace_is_judged_by_every_tool_in_it(route: str, mode: str) -> None:
    """Bob's namespaces holding a hosted search or code execution (which LiteLLM lifts into the request's own tools),
    or a form nothing reads, are not declared; a namespace of the client's own functions stays, for Carol too."""
    own = namespace(NESTED)
    for key in ("bob", "dave"):
        body = await sent(route, key, mode, tools=[*NAMESPACES_DROPPED, own])
        assert reaching(body, [*NAMESPACES_DROPPED, own]) == [own], key
    assert reaching(await sent(route, "carol", mode, tools=[own]), [own]) == [own]
    assert (
        reaching(await sent(route, "alice", mode, tools=NAMESPACES_DROPPED), NAMESPACES_DROPPED) == NAMESPACES_DROPPED
    )


class DeclaringNamespace(ToolHook):
    """A LiteLLM-style hook that declares its tools in a namespace, one of them `db_drop`."""

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        nested = [{**NESTED, "name": name} for name in ("lookup", "db_drop")]
        return {**request, "tools": [*(request.get("tools") or []), namespace(*nested)]}


async def test_a_hooks_namespace_is_judged_by_the_names_of_its_tools() -> None:
    """Not the client's: each nested tool by its name, so Bob's model is not shown `db_drop` in it; Alice's is."""
    model = Model()
    app = AgenticLoopMiddleware(model, hooks=[DeclaringNamespace("db_drop")], tool_policy=by_key)
    body = {"model": "m", "input": "go"}
    async with http_client(app) as client:
        for key in ("bob", "alice"):
            reply = await client.post("/v1/responses", json=body, headers={"x-api-key": key})
            assert reply.status_code == 200, reply.text
    bob, alice = (request.body.get("tools") for request in model.requests)
    assert bob is None and [tool["type"] for tool in alice] == ["namespace"]


# F2: a hosted MCP server is declared only with the tools the caller may use, listed plainly.


def mcp(label: str, url: str, tools: Any) -> dict[str, Any]:
    return {
        "type": "mcp",
        "server_label": label,
        "server_url": url,
        "allowed_tools": tools,
        "require_approval": "never",
    }


def server(label: str, url: str, tools: Any) -> dict[str, Any]:
    return {"type": "url", "url": url, "name": label, "tool_configuration": {"allowed_tools": tools}}


MCP_CASES = [  # (what Dave declares, what the app is sent): `docs` and `wiki` are bound; Dave may use define, search
    ([], None),  # no tool named: all of them, to LiteLLM's proxy
    ({"tool_names": []}, None),
    ({"tool_names": ["define"]}, ["define"]),  # LiteLLM's proxy ignores the filter form: written as a list
    ({"tool_names": ["define"], "read_only": True}, ["define"]),
    (["define", "drop"], ["define"]),  # narrowed to what the policy allows
    (["drop"], None),
    (["define"], ["define"]),
]


@pytest.mark.parametrize("mode", ["loop", "no_hooks"])
@pytest.mark.parametrize("route", ["chat", "responses"])
async def test_a_hosted_mcp_tool_lists_only_the_tools_the_caller_may_use(route: str, mode: str) -> None:
    for declared, written in MCP_CASES:
        body = await sent(route, "dave", mode, tools=[mcp("docs", DOCS, declared)])
        expected = [] if written is None else [mcp("docs", DOCS, written)]
        assert [tool for tool in body.get("tools") or [] if tool["type"] == "mcp"] == expected, declared
    dated = {**mcp("docs", DOCS, {"tool_names": ["define"]}), "type": "mcp_2025_06_18"}  # no list written: not read
    assert reaching(await sent(route, "dave", mode, tools=[dated]), [dated]) == []
    alice = await sent(route, "alice", mode, tools=[mcp("docs", DOCS, [])])
    assert alice["tools"][0] == mcp("docs", DOCS, [])


@pytest.mark.parametrize("mode", ["loop", "no_hooks"])
async def test_a_messages_mcp_server_lists_only_the_tools_the_caller_may_use(mode: str) -> None:
    for declared, written in [case for case in MCP_CASES if isinstance(case[0], list)]:
        body = await sent("messages", "dave", mode, mcp_servers=[server("docs", DOCS, declared)])
        assert body.get("mcp_servers") == (None if written is None else [server("docs", DOCS, written)]), declared
    off = {"type": "url", "url": DOCS, "name": "docs", "tool_configuration": {"enabled": False}}
    assert (await sent("messages", "dave", mode, mcp_servers=[off]))["mcp_servers"] == [off]


@pytest.mark.parametrize("route", ["chat", "responses", "messages"])
async def test_several_hosted_mcp_servers_list_only_names_allowed_on_every_one(route: str) -> None:
    """LiteLLM's proxy applies the names of all of a request's `mcp` tools to each of its servers: Dave's `docs`
    listing `define` and `wiki` listing `search` would give him `docs`'s `search` and `wiki`'s `define`, which he may
    not use. So a name stays only where the caller may use it on every server of the request: `wiki`'s `search`
    (`docs_search` is allowed once Dave may use it), not `docs`'s `define` (`wiki_define` is not)."""
    dave = POLICIES["dave"]
    POLICIES["dave"] = ToolPolicy(
        allowed_tools=["docs_define", "docs_search", "wiki_search"], hosted_mcp=dave.hosted_mcp
    )
    try:
        if route == "messages":
            servers = [server("docs", DOCS, ["define"]), server("wiki", WIKI, ["search"])]
            assert (await sent(route, "dave", mcp_servers=servers))["mcp_servers"] == [servers[1]]
            tools = [mcp("docs", DOCS, ["define"])]  # an `mcp` tool beside a server entry: one request's servers
            body = await sent(route, "dave", tools=tools, mcp_servers=servers[1:])
            assert (body["mcp_servers"], reaching(body, tools)) == (servers[1:], [])
        else:
            tools = [mcp("docs", DOCS, ["define", "search"]), mcp("wiki", WIKI, ["search"])]
            body = await sent(route, "dave", tools=tools)
            assert [tool for tool in body["tools"] if tool["type"] == "mcp"] == [
                mcp("docs", DOCS, ["search"]),
                tools[1],
            ]
            alone = await sent(route, "dave", tools=tools[:1])  # alone, `docs` keeps both
            assert [tool for tool in alone["tools"] if tool["type"] == "mcp"] == tools[:1]
    finally:
        POLICIES["dave"] = dave
