"""A declaration LiteLLM's web search interception takes for a search is judged as `web_search`, whoever sent it
and in whichever shape (review today2 F1).

LiteLLM's `WebSearchInterceptionLogger`, in LiteLLM's proxy behind the middleware, rewrites such a tool as
`litellm_web_search` and runs the model's calls to it on the operator's search account: the client does not run it,
though it may come in a client tool's shape. Bob may not use `web_search`; Erin may use anything but `db_*`. Each
declaration below reached the app for Bob on the code before, which took it for the client's own.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_policy_shapes import MODES, POLICIES, reaching, sent

from agentic_middleware import ToolPolicy

SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}}
SEARCHES = {  # what LiteLLM's detectors (`is_web_search_tool` and its Chat and Responses twins) call a web search
    "messages": [
        {"name": "litellm_web_search", "input_schema": SCHEMA},
        {"name": "WebSearch"},  # LiteLLM's legacy interception marker: no input_schema
        {"name": "web_search", "type": "custom", "input_schema": SCHEMA},  # Claude Code's web_search, by its type
    ],
    "chat": [
        {"type": "function", "function": {"name": "litellm_web_search", "parameters": SCHEMA}},
        {"type": "function", "function": {"name": "litellm_web_search", "parameters": SCHEMA}, "strict": True},
        {"name": "litellm_web_search", "input_schema": SCHEMA},
    ],
    "responses": [
        {"type": "function", "name": "litellm_web_search", "parameters": SCHEMA},
        {"type": "function", "name": "WebSearch", "parameters": SCHEMA},
        {"type": "custom", "name": "web_search"},
    ],
}
OWN = {  # the client's own tools LiteLLM leaves alone, which stay declared for Bob
    "messages": [{"name": "WebSearch", "input_schema": SCHEMA}, {"name": "web_search", "input_schema": SCHEMA}],
    "chat": [{"type": "function", "function": {"name": "web_search", "parameters": SCHEMA}}],
    "responses": [{"type": "function", "name": "WebSearch_2", "parameters": SCHEMA}],
}


@pytest.fixture(autouse=True)
def erin() -> Any:
    POLICIES["erin"] = ToolPolicy(denied_tools=["db_*"])
    yield
    del POLICIES["erin"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("route", list(SEARCHES))
async def test_a_litellm_search_declaration_is_judged_as_web_search(route: str, mode: str) -> None:
    tools = SEARCHES[route] + OWN[route]
    assert reaching(await sent(route, "bob", mode, tools=tools), tools) == OWN[route]
    assert reaching(await sent(route, "erin", mode, tools=tools), tools) == tools
    assert reaching(await sent(route, "alice", mode, tools=tools), tools) == tools


@pytest.mark.parametrize("route", list(SEARCHES))
async def test_a_denied_search_alone_takes_tools_and_tool_choice_with_it(route: str) -> None:
    body = await sent(route, "bob", "no_hooks", tools=SEARCHES[route][:1], tool_choice="auto")
    assert "tools" not in body and "tool_choice" not in body


def test_the_declarations_are_litellms_searches() -> None:
    """Guards the table against LiteLLM's own detectors, so it stays what LiteLLM's proxy would serve."""
    tools = pytest.importorskip("litellm.integrations.websearch_interception.tools")
    assert all(map(tools.is_web_search_tool, SEARCHES["messages"]))
    assert all(map(tools.is_chat_completion_request_web_search_tool, SEARCHES["chat"]))
    assert all(map(tools.is_web_search_tool, SEARCHES["responses"]))
    assert not any(map(tools.is_web_search_tool, OWN["messages"] + OWN["chat"] + OWN["responses"]))
