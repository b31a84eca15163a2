"""Every form a tool can be declared in is judged by the tool policy, or not declared under it (policy_forms.py).

Through the official SDKs and the middleware, as callers of tests/test_policy.py's gateway: Gina may use `lookup` and
the tools of the MCP server `docs` (`docs_*`) only; Bob may not use `delete_*`; Alice has no policy. Each test fails on
the code before this change, which judged function tools of plain dicts only and passed every other form on unjudged.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from conftest import http_client
from pydantic import BaseModel, Field
from support import ToolHook
from test_policy import KEYS, POLICIES, RAN, Model, ask, gateway

from agentic_middleware import AgenticLoopMiddleware, ServerTools, ToolPolicy
from agentic_middleware.testing import ScriptedModel


@pytest.fixture(autouse=True)
def callers() -> None:
    RAN.clear()
    POLICIES["gina"] = ToolPolicy(allowed_tools=["lookup", "docs_*"], hosted_mcp=HOSTED)
    KEYS["gina-key"] = "gina"


HOSTED = {"docs": "https://docs.example/mcp"}  # the hosted MCP server Gina's requests may name, by its URL


def first_tools(model: Model) -> Any:
    return model.requests[0].body.get("tools")


# What a hook declares, in a form that is not a plain dict: read as the app is sent it.


class Renamed(BaseModel):
    """A hook's own pydantic declaration whose attribute `name` is not the name it is written with: the app is sent
    the field `spelled` under its alias, `name` (`model_dump(by_alias=True)`), `delete_everything`."""

    type: str = "function"
    spelled: str = Field(alias="name")
    parameters: dict[str, Any] = {"type": "object"}

    @property
    def name(self) -> str:
        return "lookup"


class ChatRenamed(BaseModel):
    """As `Renamed`, in Chat's shape: the attribute `function` names `lookup`, the `function` written another tool."""

    type: str = "function"
    spelled: dict[str, Any] = Field(alias="function")

    @property
    def function(self) -> dict[str, Any]:
        return {"name": "lookup"}


def objects(route: str) -> list[Any]:
    """A denied tool declared as objects that are not dicts, in the route's shape: a `MappingProxyType`, and a pydantic
    model whose attributes name an allowed tool (the old code passed the first on unjudged, and judged the second
    by its attribute)."""
    if route == "chat":
        spelled = {"type": "function", "function": {"name": "delete_everything", "parameters": {"type": "object"}}}
        return [MappingProxyType(spelled), ChatRenamed(function=spelled["function"])]
    if route == "responses":
        spelled = {"type": "function", "name": "delete_everything", "parameters": {"type": "object"}}
        return [MappingProxyType(spelled), Renamed(name="delete_everything")]
    spelled = {"name": "delete_everything", "input_schema": {"type": "object"}}
    return [MappingProxyType(spelled), Renamed(name="delete_everything", type="custom")]


class DeclaringObjects(ToolHook):
    """A LiteLLM-style hook that declares its tool as objects (a `MappingProxyType`, a pydantic model)."""

    def __init__(self, route: str) -> None:
        super().__init__("delete_everything")
        self.route = route

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        return {**request, "tools": [*(request.get("tools") or []), *objects(self.route)]}


@pytest.mark.parametrize("route", ["messages", "chat", "responses"])
async def test_a_hooks_tool_that_is_not_a_dict_is_judged_by_the_name_the_app_reads(route: str) -> None:
    """Bob's model was shown `delete_everything` by the old code; Alice's still is, each declaration written."""
    model = Model()
    await ask(route, gateway(model, DeclaringObjects(route)), "bob-key", False)
    assert first_tools(model) is None
    model.requests.clear()
    await ask(route, gateway(model, DeclaringObjects(route)), "alice-key", False)
    assert [tool.get("name") or tool["function"]["name"] for tool in first_tools(model)] == ["delete_everything"] * 2


# What a client declares that the model app runs, on the operator's account: judged though the client sent it.

DOCS_MCP = {
    "type": "mcp",
    "server_label": "docs",
    "server_url": "https://docs.example/mcp",
    "allowed_tools": ["define"],
}
DOCS_MCP_FILTER = {**DOCS_MCP, "allowed_tools": {"tool_names": ["define"], "read_only": True}}
UNTYPED = {"name": "my_untyped_tool", "parameters": {"type": "object"}}  # no Responses client tool: may be the app's
OWN = {"type": "function", "name": "my_tool", "parameters": {"type": "object"}}
CHAT_SHAPED_OWN = {"type": "function", "function": {"name": "my_chat_shaped_tool"}}
RESPONSES_DROPPED = [
    {"type": "web_search"},  # no web search hook mounted: the app's own search
    {"type": "web_search_preview"},
    {"type": "web_search_2025_08_26"},
    {**DOCS_MCP, "server_label": "db", "allowed_tools": ["drop"]},  # db_drop
    {key: value for key, value in DOCS_MCP.items() if key != "allowed_tools"},  # all of its tools: none named
    {**DOCS_MCP, "allowed_tools": {"read_only": True}},  # a filter that names none
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "image_generation"},
    UNTYPED,
]
RESPONSES_KEPT = [DOCS_MCP, DOCS_MCP_FILTER, OWN, CHAT_SHAPED_OWN]
RESPONSES_WRITTEN = [DOCS_MCP, DOCS_MCP, OWN, CHAT_SHAPED_OWN]  # the filter as the plain list of its names


@pytest.mark.parametrize("hook", ["server_tools", "litellm"], ids=["server_tools", "no_request_hook"])
async def test_responses_hosted_tools_are_judged_by_their_type_web_search_and_mcp_tools(hook: str) -> None:
    """Hosted tools by type (`file_search`), every web search as `web_search`, an `mcp` tool by each of its
    `allowed_tools` behind its label (`docs_define`), or not declared where it lists none; the client's own function
    and custom tools stay, an untyped tool does not. Also with no request hook, which sends the client's bytes to the
    first call as they are."""
    model = Model()
    hooks = [ServerTools([])] if hook == "server_tools" else [ToolHook("lookup")]
    tools = [*RESPONSES_DROPPED[:4], *RESPONSES_KEPT, *RESPONSES_DROPPED[4:]]
    await ask("responses", gateway(model, *hooks), "gina-key", False, tools=tools)
    assert first_tools(model) == RESPONSES_WRITTEN
    model.requests.clear()
    await ask("responses", gateway(model, *hooks), "alice-key", False, tools=tools)
    assert first_tools(model) == tools


async def test_responses_a_denied_mcp_server_is_not_declared_on_any_call() -> None:
    """The only tool goes, and `tool_choice` with it; the reruns send neither."""
    model = Model(("lookup", {"key": "k"}))
    mcp = {**DOCS_MCP, "server_label": "db"}
    await ask("responses", gateway(model), "gina-key", False, tools=[mcp], tool_choice="auto")
    assert RAN == {"lookup": 1}
    for request in model.requests:
        assert [tool["name"] for tool in request.body["tools"]] == ["lookup"]


async def test_chat_legacy_functions_and_web_search_options_are_judged() -> None:
    """The client's own legacy function stays; a hook's legacy function of a denied tool goes; the app's web search
    (`web_search_options`) goes for a caller who may not use `web_search`, as its native form would."""

    class LegacyHook(ToolHook):
        async def async_pre_agentic_loop_request_hook(
            self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
        ) -> dict[str, Any]:
            return {**request, "functions": [*(request.get("functions") or []), {"name": "delete_everything"}]}

    own = {"name": "my_function", "parameters": {"type": "object"}}
    options: Any = {"functions": [own], "function_call": "auto", "web_search_options": {}}
    model = Model()
    await ask("chat", gateway(model, LegacyHook("delete_everything")), "gina-key", False, **options)
    sent = model.requests[0].body
    assert (sent["functions"], sent["function_call"], "web_search_options" in sent) == ([own], "auto", False)

    model.requests.clear()
    await ask("chat", gateway(model, LegacyHook("delete_everything")), "gina-key", False, function_call="auto")
    assert not {"functions", "function_call"} & set(model.requests[0].body)  # none left: `function_call` goes too

    model.requests.clear()
    await ask("chat", gateway(model, LegacyHook("delete_everything")), "alice-key", False, **options)
    assert len(model.requests[0].body["functions"]) == 2
    assert "web_search_options" in model.requests[0].body


MESSAGES_SERVERS_KEPT = [
    {
        "type": "url",
        "url": "https://docs.example/mcp",
        "name": "docs",
        "tool_configuration": {"allowed_tools": ["define"]},
    },
    {"type": "url", "url": "https://docs.example/mcp", "name": "docs", "tool_configuration": {"enabled": False}},
]
MESSAGES_SERVERS_DROPPED = [
    {"type": "url", "url": "https://db.example/mcp", "name": "db", "tool_configuration": {"enabled": False}},  # unbound
    {"type": "url", "url": "https://db.example/mcp", "name": "db"},  # all of its tools: none named
    {"type": "url", "url": "https://db.example/mcp", "name": "db", "tool_configuration": {"allowed_tools": ["drop"]}},
]


async def test_messages_mcp_servers_and_the_apps_server_tools_are_judged() -> None:
    """Anthropic's MCP connector by each allowed tool behind the server's name; Anthropic's own server tools (its web
    search, with no web search hook mounted) by their name, though the client declared them."""
    own = {"name": "my_tool", "input_schema": {"type": "object"}}
    search = {"type": "web_search_20250305", "name": "web_search"}
    servers = [MESSAGES_SERVERS_DROPPED[0], *MESSAGES_SERVERS_KEPT, MESSAGES_SERVERS_DROPPED[1]]
    model = Model()
    extra = {"mcp_servers": servers}
    await ask("messages", gateway(model), "gina-key", False, tools=[search, own], extra_body=extra)
    sent = model.requests[0].body
    assert sent["mcp_servers"] == MESSAGES_SERVERS_KEPT
    assert [tool["name"] for tool in sent["tools"]] == ["my_tool", "lookup"]

    model.requests.clear()
    await ask("messages", gateway(model), "gina-key", False, extra_body={"mcp_servers": MESSAGES_SERVERS_DROPPED})
    assert "mcp_servers" not in model.requests[0].body

    model.requests.clear()
    await ask("messages", gateway(model), "alice-key", False, tools=[search, own], extra_body=extra)
    assert model.requests[0].body["mcp_servers"] == servers


async def test_a_token_count_is_judged_as_the_request_it_counts() -> None:
    """The count the client asks for is of the request the model app would be sent: without the denied MCP server
    and the app's web search."""
    model = ScriptedModel(default={"input_tokens": 1})
    policy = ToolPolicy(allowed_tools=["lookup", "docs_*"], hosted_mcp=HOSTED)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([])], tool_policy=lambda scope: policy)
    search = {"type": "web_search_20250305", "name": "web_search"}
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [search]}
    body["mcp_servers"] = [MESSAGES_SERVERS_DROPPED[0], MESSAGES_SERVERS_KEPT[0]]
    async with http_client(app) as client:
        reply = await client.post("/v1/messages/count_tokens", json=body)
    assert reply.status_code == 200, reply.text
    sent = model.requests[0].body
    assert (sent.get("tools"), sent["mcp_servers"]) == (None, [MESSAGES_SERVERS_KEPT[0]])
