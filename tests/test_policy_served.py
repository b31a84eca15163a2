"""What a model app or a hook serves under a name the client did not send (review policy F3, F4).

A stored prompt of LiteLLM's (`prompt_id` and its companions) is a template whose tools replace the ones the policy
judged: refused on every route under a policy that judges names, as OpenAI's Responses `prompt` is. A web search a
hook serves by a name of its own (`ServerTools(native={"web_search": "find"})`, LiteLLM's `litellm_web_search`) is
judged as `web_search` as well as by that name. Each test fails on the code before, which refused `prompt` on
Responses alone and judged a served search by its served name alone.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from conftest import http_client
from servers import serving
from starlette.types import Scope
from test_litellm_hooks import NATIVE_SEARCH, QUESTION, Search, bodies, searching_model, tool_names
from test_litellm_hooks import search as search  # the fixture, used by name
from test_policy import ROUTES, Model, ask, declared

from agentic_middleware import AgenticLoopMiddleware, ServerTools, ToolPolicy, server_tool

RUN: list[str] = []
POLICIES: dict[str, ToolPolicy | None] = {
    "alice": None,
    "bob": ToolPolicy(denied_tools=["web_search"]),
    "carol": ToolPolicy(allowed_tools=["find"]),  # the served name alone: not the family it serves
    "dora": ToolPolicy(allowed_tools=["find", "web_search"]),
    "erin": ToolPolicy(max_agentic_loops=1),  # judges no name
}
PATHS = {"messages": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}
BODIES = {
    "messages": {"messages": [{"role": "user", "content": "go"}], "max_tokens": 9},
    "chat": {"messages": [{"role": "user", "content": "go"}]},
    "responses": {"input": "go"},
}
NATIVE = {
    "messages": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}],
    "chat": [],  # Chat has no native declaration ServerTools maps: `find` is declared as the server's tool
    "responses": [{"type": "web_search"}],
}


@pytest.fixture(autouse=True)
def nothing_run_yet() -> None:
    RUN.clear()


def by_key(scope: Scope) -> ToolPolicy | None:
    headers = dict(scope["headers"])
    key = headers.get(b"x-api-key") or headers.get(b"authorization", b"").removeprefix(b"Bearer ")
    return POLICIES[key.decode()]


@server_tool
async def find(query: str) -> str:
    """Search the web."""
    RUN.append(query)
    return "Title: Asyncio\nURL: https://docs.python.org/3/library/asyncio.html\nasyncio runs coroutines."


PROMPT_FIELDS = {
    "prompt_id": "searcher",
    "prompt_variables": {"q": "x"},
    "prompt_version": 2,
    "prompt_label": "production",
    "prompt_environment": "prod",
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("field", PROMPT_FIELDS)
@pytest.mark.parametrize("route", ROUTES)
async def test_litellms_stored_prompt_is_refused_on_every_route_under_a_policy_that_judges_names(
    route: str, field: str, stream: bool
) -> None:
    """LiteLLM's proxy merges a `prompt_id` template's parameters, tools included, over the request's: nothing here
    can read them, so Bob gets 403 `tool_policy_refused` in the route's shape (param: the field) before the app is
    called, looped or passed by; a caller whose policy is None or judges no name has it reach the app."""
    model = Model()
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([find])], tool_policy=by_key, streaming=not stream)
    body = {"model": "m", **BODIES[route], field: PROMPT_FIELDS[field], **({"stream": True} if stream else {})}
    async with http_client(app) as client:
        reply = await client.post(PATHS[route], json=body, headers={"x-api-key": "bob"})
        assert reply.status_code == 403, reply.text
        error = reply.json()["error"]
        assert field in error["message"] and model.requests == []
        if route == "messages":
            assert reply.json()["type"] == "error" and error["type"] == "permission_error"
        else:
            assert (error["code"], error["param"]) == ("tool_policy_refused", field)
        for key in ("alice", "erin"):
            reply = await client.post(PATHS[route], json=body, headers={"x-api-key": key})
            assert reply.status_code == 200, reply.text
            assert model.requests.pop().body[field] == PROMPT_FIELDS[field]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ROUTES)
async def test_a_web_search_served_under_another_name_is_judged_as_web_search_too(route: str, stream: bool) -> None:
    """`ServerTools(native={"web_search": "find"})` serves every web search as `find`: Bob, denied `web_search`, and
    Carol, who may use `find` but not `web_search`, neither see nor run it, whether the client declared a native
    search or not; Dora, who may use both, does."""
    model = Model(("find", {"query": "python asyncio"}))
    app = AgenticLoopMiddleware(
        model, hooks=[ServerTools([find], native={"web_search": "find"})], tool_policy=by_key, streaming=True
    )
    for key in ("bob", "carol"):
        for tools in (NATIVE[route], []):
            model.requests.clear()
            extra = {"tools": tools} if tools else {}
            text, calls = await ask(route, app, key, stream, **extra)
            assert text.endswith("Not run: this caller may not use the tool 'find'. Go on without it.")
            assert calls == [] and RUN == []
            assert declared(model.requests[0].body) == []  # neither the client's native search nor `find`
    model.requests.clear()
    text, calls = await ask(route, app, "dora", stream, **({"tools": NATIVE[route]} if NATIVE[route] else {}))
    assert RUN == ["python asyncio"] and declared(model.requests[0].body) == ["find"]
    assert "asyncio runs coroutines" in text


def test_litellms_web_search_name_is_judged_as_web_search() -> None:
    """`litellm_web_search` (LiteLLM's `WebSearchInterceptionLogger`, in the middleware or in LiteLLM's proxy
    behind it) is a web search: a policy denying `web_search` denies it, and allowing it needs both names."""
    assert not ToolPolicy(denied_tools=["web_search"]).allows("litellm_web_search")
    assert not ToolPolicy(allowed_tools=["litellm_web_search"]).allows("litellm_web_search")
    assert ToolPolicy(allowed_tools=["litellm_web_search", "web_search"]).allows("litellm_web_search")
    assert ToolPolicy(denied_tools=["web_search"]) == ToolPolicy(denied_tools=["web_search"]).serving({"f": "x"})


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_litellms_web_search_hook_runs_no_search_for_a_caller_denied_web_search(
    search: Search, stream: bool
) -> None:
    """LiteLLM's `WebSearchInterceptionLogger` in the middleware, under uvicorn, driven by the Anthropic SDK: it
    turns Bob's native search into its function `litellm_web_search` and claims the model's call to it. Bob, denied
    `web_search`, is not declared it, the Perplexity stand-in gets no query, and his client no search blocks;
    Alice's search runs."""
    from litellm.integrations.websearch_interception.handler import WebSearchInterceptionLogger

    hook = WebSearchInterceptionLogger(enabled_providers=["anthropic"])
    results: dict[str, Any] = {}
    for key in ("bob", "alice"):
        model = searching_model()
        app = AgenticLoopMiddleware(model, hooks=[hook], tool_policy=by_key)
        async with serving("uvicorn", app) as server:
            client = anthropic.AsyncAnthropic(base_url=f"http://127.0.0.1:{server.port}", api_key=key, max_retries=0)
            request: Any = {"model": "m", "max_tokens": 100, "messages": QUESTION, "tools": [NATIVE_SEARCH]}
            if stream:
                async with client.messages.stream(**request) as events:
                    reply = await events.get_final_message()
            else:
                reply = await client.messages.create(**request)
        results[key] = ([block.type for block in reply.content], [tool_names(body) for body in bodies(model)])
    assert results["bob"][0] == ["text"]
    assert results["bob"][1][0] == []  # the hook's `litellm_web_search` was not declared to Bob
    assert search.queries == ["Paris weather"]  # Alice's alone
    assert results["alice"] == (["server_tool_use", "web_search_tool_result", "text"], [["litellm_web_search"]] * 2)
