"""The tools the model app runs, judged alike on every route (review policy F3, F4, F5, F7).

Typed and hosted tools are judged by one name per family whatever their version or route (`policy_forms.family`);
hosted MCP by the server it connects to, bound to its label by the operator (`ToolPolicy(hosted_mcp=...)`), never by
the client's label alone; a Responses stored `prompt` is refused under a policy that judges names. Bob may not use the
app's web search, web fetch or code execution, nor the `db` server's tools; he may use the hosted `docs` server at its
own URL. Each test fails on the code before, which judged Chat's typed tools and dated types by their raw `type`, and
hosted MCP by the client's label.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from conftest import http_client
from starlette.types import Scope
from test_policy import Model, lookup

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, ServerTools, ToolPolicy
from agentic_middleware.mcp import MCPTools

DOCS_URL, DB_URL = "https://docs.example/mcp", "https://db.internal/mcp"
BOB = ToolPolicy(denied_tools=["web_search", "web_fetch", "code_execution", "db_*"], hosted_mcp={"docs": DOCS_URL})
POLICIES: dict[str, ToolPolicy | None] = {"alice": None, "bob": BOB, "dora": ToolPolicy(denied_tools=["db_*"])}
ROUTES = {
    "messages": ("/v1/messages", {"messages": [{"role": "user", "content": "go"}], "max_tokens": 9}),
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "go"}]}),
    "responses": ("/v1/responses", {"input": "go"}),
}


def by_key(scope: Scope) -> ToolPolicy | None:
    return POLICIES[dict(scope["headers"])[b"x-api-key"].decode()]


async def sent(route: str, key: str, stream: bool = False, **extra: Any) -> dict[str, Any]:
    """What the app is sent of one request of `key`'s on `route` (a JSON request, or a stream the loop passes by)."""
    model = Model()
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], tool_policy=by_key, streaming=not stream)
    body = {"model": "m", **ROUTES[route][1], **extra, **({"stream": True} if stream else {})}
    async with http_client(app) as client:
        reply = await client.post(ROUTES[route][0], json=body, headers={"x-api-key": key})
    assert reply.status_code == 200, reply.text
    return model.requests[0].body


def mcp(label: str, url: str, *tools: str) -> dict[str, Any]:
    return {"type": "mcp", "server_label": label, "server_url": url, "allowed_tools": list(tools)}


TYPED = {  # what reached the app for Bob before, judged by its raw type on Chat and for dated types
    "chat": [
        {"type": "web_search_20250305", "name": "web_search"},  # LiteLLM's way to Anthropic's search over Chat
        {"type": "web_search_preview"},
        {"type": "web_search_preview_2025_03_11"},
        {"type": "web_fetch_20250910", "name": "web_fetch"},
        {"type": "code_execution_20250825", "name": "code_execution"},
        mcp("db", DB_URL, "drop"),
    ],
    "responses": [
        {"type": "web_fetch_20250910", "name": "web_fetch"},
        {"type": "code_execution_20250825", "name": "code_execution"},
        {"type": "web_search_preview_2025_03_11"},
    ],
    "messages": [
        {"type": "web_fetch_20250910", "name": "web_fetch"},
        {"type": "code_execution_20250825", "name": "code_execution"},
        {"type": "web_search_20250305", "name": "searcher"},  # by another name: judged as a search too
    ],
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "passed_by_stream"])
@pytest.mark.parametrize("route", list(ROUTES))
async def test_typed_and_hosted_tools_are_judged_by_one_name_per_family_on_every_route(
    route: str, stream: bool
) -> None:
    """None of the denied families reaches the app for Bob, in any version, on any route, looped or passed by;
    Alice's request carries them all."""
    bob = await sent(route, "bob", stream, tools=TYPED[route])
    assert [tool for tool in bob.get("tools") or [] if tool in TYPED[route]] == []
    alice = await sent(route, "alice", stream, tools=TYPED[route])
    assert [tool for tool in alice["tools"] if tool in TYPED[route]] == TYPED[route]


HOSTED = {  # each route's hosted MCP form, as (label, url, tool): a tool Bob may use on the docs server
    "chat": lambda label, url, tool: {"tools": [mcp(label, url, tool)]},
    "responses": lambda label, url, tool: {"tools": [mcp(label, url, tool)]},
    "messages": lambda label, url, tool: {
        "mcp_servers": [
            {"type": "url", "url": url, "name": label, "tool_configuration": {"allowed_tools": [tool]}},
        ]
    },
}


def hosted_of(route: str, body: dict[str, Any]) -> list[Any]:
    if route == "messages":
        return body.get("mcp_servers") or []
    return [tool for tool in body.get("tools") or [] if tool.get("type") == "mcp"]


@pytest.mark.parametrize("route", list(ROUTES))
async def test_hosted_mcp_is_judged_by_the_server_it_connects_to_not_the_clients_label(route: str) -> None:
    """The denied `db` server, reached under another label (`x`, `d` with tool `b_drop`) or under the allowed label
    `docs`, is not declared; `docs` at its own URL is; a policy that binds no server declares none."""
    form = HOSTED[route]
    for label, url, tool in [("x", DB_URL, "drop"), ("d", DB_URL, "b_drop"), ("docs", DB_URL, "define")]:
        assert hosted_of(route, await sent(route, "bob", **form(label, url, tool))) == [], (label, url)
    kept = form("docs", DOCS_URL, "define")
    assert hosted_of(route, await sent(route, "bob", **kept)) == hosted_of(route, kept)
    assert hosted_of(route, await sent(route, "dora", **kept)) == []  # judges names, binds no server
    assert hosted_of(route, await sent(route, "alice", **form("x", DB_URL, "drop"))) != []


async def test_hosted_mcp_binds_a_connector_id_too_and_is_checked() -> None:
    connector = {"type": "mcp", "server_label": "drive", "connector_id": "connector_googledrive"}
    connector["allowed_tools"] = ["search"]
    POLICIES["erin"] = ToolPolicy(hosted_mcp={"drive": "connector_googledrive"})
    try:
        assert (await sent("responses", "erin", tools=[connector]))["tools"][0] == connector
        assert hosted_of("responses", await sent("responses", "erin", tools=[{**connector, "server_label": "x"}])) == []
    finally:
        del POLICIES["erin"]
    for wrong in ({"docs": 1}, ["docs"], {"": DOCS_URL}):
        with pytest.raises(ConfigurationError, match="hosted_mcp"):
            ToolPolicy(hosted_mcp=wrong)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "passed_by_stream"])
async def test_a_stored_prompt_is_refused_under_a_policy_that_judges_names(stream: bool) -> None:
    """A Responses `prompt` (a stored template, which may carry tools) cannot be judged: 403 in the route's shape for
    Bob, before the app is called; Alice's request carries it."""
    model = Model()
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], tool_policy=by_key, streaming=not stream)
    body = {"model": "m", "input": "go", "prompt": {"id": "pmpt_1"}, "stream": stream}
    async with http_client(app) as client:
        reply = await client.post("/v1/responses", json=body, headers={"x-api-key": "bob"})
        assert reply.status_code == 403, reply.text
        assert reply.json()["error"]["param"] == "prompt" and model.requests == []
        reply = await client.post("/v1/responses", json=body, headers={"x-api-key": "alice"})
    assert reply.status_code == 200 and model.requests[0].body["prompt"] == {"id": "pmpt_1"}


def test_nested_mcp_prefixes_are_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    """`docs_*` would match the `docs_admin` server's tools too: the operator is told at construction."""
    servers = [
        MCPTools(["python", "-m", "none"], prefix="docs"),
        MCPTools(["python", "-m", "none"], prefix="docs_admin"),
    ]
    with caplog.at_level(logging.WARNING, "agentic_middleware"):
        AgenticLoopMiddleware(Model(), hooks=servers)
    assert "MCP prefixes 'docs' and 'docs_admin' nest" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, "agentic_middleware"):
        AgenticLoopMiddleware(
            Model(), hooks=[MCPTools(["python", "-m", "none"], prefix="docs"), MCPTools(["python"], prefix="db")]
        )
    assert "nest" not in caplog.text
