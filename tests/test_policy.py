"""Per-caller tool policy (`tool_policy=`, `ToolPolicy`), through the official SDKs on every route, JSON and streams.

One gateway, one set of hooks, two callers told apart by the gateway's own auth (`request.state.agentic_caller`):
what the model is shown, what runs, what the model reads back and what the client gets differ by caller.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from asgi_lifespan import LifespanManager
from conftest import anthropic_client, openai_client
from servers import serving
from starlette.types import ASGIApp, Receive, Scope, Send
from streams import event_stream
from support import ToolHook
from test_mcp import PATIENT, MCPHTTPServer, mcp_http

from agentic_middleware import (
    AgenticLoopMiddleware,
    AgenticLoopPlan,
    ConfigurationError,
    RequestRefused,
    ServerTools,
    Settings,
    ToolPolicy,
    load_config,
    sse,
)
from agentic_middleware import server_tool as tool
from agentic_middleware.callers import identify, key_hash
from agentic_middleware.compression import CompressionHook
from agentic_middleware.gateway import Upstream, create_app
from agentic_middleware.gateway.access import RequireKey
from agentic_middleware.mcp import MCPTools
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
from agentic_middleware.websearch import CorpusSearch, websearch_hook

__all__ = ["mcp_http"]  # the fixture, used by name

RAN: Counter[str] = Counter()  # the server tools' runs, by tool and caller
KEYS = {"alice-key": "alice", "bob-key": "bob"}
POLICIES = {"alice": None, "bob": ToolPolicy(denied_tools=["delete_*"])}


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    RAN["lookup"] += 1
    return f"value of {key}"


@tool
async def delete_everything(what: str) -> str:
    """Delete things."""
    RAN["delete_everything"] += 1
    return f"deleted {what}"


class Auth:
    """A gateway's auth, in front of the middleware: it knows the caller by its key and says so in the state."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            key = headers.get(b"x-api-key") or headers.get(b"authorization", b"").removeprefix(b"Bearer ")
            scope.setdefault("state", {})["agentic_caller"] = KEYS[key.decode()]
        await self.app(scope, receive, send)


def policy_by_caller(scope: Scope) -> ToolPolicy | None:
    """The tool policy of the caller the gateway's auth named."""
    return POLICIES[scope["state"]["agentic_caller"]]


async def async_policy_by_caller(scope: Scope) -> ToolPolicy | None:
    return policy_by_caller(scope)


# The model, on each route: it calls the tools a test names until it has results, then says what it read.


def results_of(body: dict[str, Any]) -> list[str]:
    """The tool results in a request, in order, as text."""
    found = []
    for item in body.get("messages") or body.get("input") or []:
        if not isinstance(item, dict):
            continue
        if item.get("role") == "tool":
            found.append(item["content"])
        elif item.get("type") == "function_call_output":
            found.append(item["output"])
        elif isinstance(item.get("content"), list):
            for block in item["content"]:
                if block.get("type") == "tool_result":
                    content = block["content"]
                    found.append(content if isinstance(content, str) else "".join(b["text"] for b in content))
    return found


def declared(body: dict[str, Any]) -> list[str]:
    """The names of the tools a request declares, on any route."""
    names = []
    for declaration in body.get("tools") or []:
        function = declaration.get("function")
        names.append(function["name"] if function else declaration.get("name") or declaration["type"])
    return names


def answer(route: str, calls: list[tuple[str, dict[str, Any]]], text: str | None = None) -> dict[str, Any]:
    if route == "messages":
        return message(*([text] if text else []), *(tool_use(name, arguments) for name, arguments in calls))
    if route == "chat":
        return chat_completion(content=text, tool_calls=[tool_call(name, arguments) for name, arguments in calls])
    return response(*([text] if text else []), *(function_call(name, arguments) for name, arguments in calls))


def streamed(body: dict[str, Any]) -> Any:
    if "choices" in body:
        return event_stream(list(sse.chat_chunks(body, include_usage=True, chunk_size=7)))
    if "output" in body:
        return event_stream(list(sse.responses_events(body, chunk_size=7)))
    return event_stream(list(sse.messages_events(body, chunk_size=7)))


class Model(ScriptedModel):
    """Calls `calls` on the route of each request until its request holds results, then answers with them;
    `keep_calling`: calls `lookup` with a new key in every answer, as long as tools are on."""

    def __init__(self, *calls: tuple[str, dict[str, Any]], keep_calling: bool = False) -> None:
        super().__init__(default=self.step)
        self.calls = list(calls)
        self.keep_calling = keep_calling

    def step(self, request: RecordedRequest) -> Any:
        body = request.body
        route = {"/v1/messages": "messages", "/v1/chat/completions": "chat"}.get(request.path, "responses")
        results = results_of(body)
        tools_off = body.get("tool_choice") in ("none", {"type": "none"})
        if self.keep_calling and not tools_off:
            reply = answer(route, [("lookup", {"key": f"k{len(results)}"})])
        elif results:
            reply = answer(route, [], "read: " + " | ".join(results))
        else:
            reply = answer(route, self.calls)
        return streamed(reply) if body.get("stream") else reply


ROUTES = ["messages", "chat", "responses"]


async def ask(route: str, app: Any, key: str, stream: bool, **extra: Any) -> tuple[str, list[str]]:
    """One request with the route's official SDK as the caller of `key`: its final text and the tool calls it got."""
    if route == "messages":
        client = anthropic_client(app, api_key=key)
        request: Any = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "go"}], **extra}
        if stream:
            async with client.messages.stream(**request) as events:
                final = await events.get_final_message()
        else:
            final = await client.messages.create(**request)
        text = "".join(block.text for block in final.content if block.type == "text")
        return text, [block.name for block in final.content if block.type == "tool_use"]
    client_ = openai_client(app, api_key=key)
    if route == "chat":
        messages: Any = [{"role": "user", "content": "go"}]
        if not stream:
            completion = await client_.chat.completions.create(model="m", messages=messages, **extra)
            reply = completion.choices[0].message
            return reply.content or "", [call.function.name for call in reply.tool_calls or []]  # type: ignore[union-attr]
        text, names = "", []
        async for chunk in await client_.chat.completions.create(model="m", messages=messages, stream=True, **extra):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                names += [c.function.name for c in choice.delta.tool_calls or [] if c.function and c.function.name]
        return text, names
    if stream:
        async with client_.responses.stream(model="m", input="go", **extra) as events:
            done = await events.get_final_response()
    else:
        done = await client_.responses.create(model="m", input="go", **extra)
    return done.output_text, [item.name for item in done.output if item.type == "function_call"]


def gateway(model: ScriptedModel, *hooks: object, **options: Any) -> Auth:
    options.setdefault("tool_policy", policy_by_caller)
    return Auth(
        AgenticLoopMiddleware(model, hooks=list(hooks) or [ServerTools([lookup, delete_everything])], **options)
    )


@pytest.fixture(autouse=True)
def no_runs_yet() -> None:
    RAN.clear()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ROUTES)
async def test_two_callers_one_may_use_a_tool_the_other_may_not(route: str, stream: bool) -> None:
    model = Model(("delete_everything", {"what": "the files"}))
    app = gateway(model)

    assert await ask(route, app, "alice-key", stream) == ("read: deleted the files", [])
    assert RAN == {"delete_everything": 1}
    assert declared(model.requests[0].body) == ["lookup", "delete_everything"]

    # Bob's model is not shown the tool; it calls it anyway: nothing runs, the model reads why, the client gets no call.
    model.requests.clear()
    text, calls = await ask(route, app, "bob-key", stream)
    assert text.endswith("Not run: this caller may not use the tool 'delete_everything'. Go on without it.")
    assert calls == []
    assert RAN == {"delete_everything": 1}  # Alice's run alone
    first, rerun = (request.body for request in model.requests)
    assert declared(first) == declared(rerun) == ["lookup"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ROUTES)
async def test_a_policy_lowers_the_loop_limit(route: str, stream: bool) -> None:
    """Alice's limit is the middleware's (3); Bob's policy caps it at 1, which a plan's patch cannot raise."""
    model = Model(keep_calling=True)
    POLICIES["carol"] = ToolPolicy(max_agentic_loops=1)
    KEYS["carol-key"] = "carol"
    app = gateway(model, max_agentic_loops=3)

    await ask(route, app, "alice-key", stream)
    assert RAN == {"lookup": 3}
    assert len(model.requests) == 5  # 3 reruns and the closing call
    model.requests.clear()
    RAN.clear()
    await ask(route, app, "carol-key", stream)
    assert RAN == {"lookup": 1}
    assert len(model.requests) == 3  # 1 rerun and the closing call
    assert "max_agentic_loops=1" in results_of(model.requests[-1].body)[-1]


class RaisingLimit(ServerTools):
    """Asks for 10 reruns in every plan's patch, as a hook may."""

    async def _plan(self, *arguments: Any) -> AgenticLoopPlan:
        plan = await super()._plan(*arguments)
        plan.request_patch.kwargs = {"max_agentic_loops": 10}
        return plan


async def test_nothing_raises_the_limit_past_the_policys_cap() -> None:
    """`request.state.max_agentic_loops` set by the gateway and a plan's patch both ask for more: the cap holds."""
    POLICIES["carol"] = ToolPolicy(max_agentic_loops=1)
    KEYS["carol-key"] = "carol"
    model = Model(keep_calling=True)
    middleware = AgenticLoopMiddleware(model, hooks=[RaisingLimit([lookup])], tool_policy=policy_by_caller)

    async def generous(scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault("state", {})["max_agentic_loops"] = 5
        await middleware(scope, receive, send)

    await ask("messages", Auth(generous), "carol-key", False)
    assert RAN == {"lookup": 1}
    RAN.clear()
    await ask("messages", Auth(generous), "alice-key", False)  # no cap: the patch's 10
    assert RAN == {"lookup": 10}


@pytest.mark.parametrize("route", ROUTES)
async def test_a_turn_calling_an_allowed_and_a_denied_tool_runs_neither(route: str) -> None:
    """The hook's plan runs its claim whole or not at all: both calls are answered with why, the model calls the
    allowed one again on its own."""
    model = Model(("lookup", {"key": "k"}), ("delete_everything", {"what": "all"}))
    text, calls = await ask(route, gateway(model), "bob-key", False)
    assert RAN == {}
    assert calls == []
    assert "Not run: this turn also called 'delete_everything', which this caller may not use" in text
    assert "Not run: this caller may not use the tool 'delete_everything'" in text


@pytest.mark.parametrize("route", ["messages", "chat"])
async def test_a_plain_litellm_hooks_call_is_judged_by_name_and_never_reaches_the_client(route: str) -> None:
    """A hook that is not a ServerTools (LiteLLM's API): its declaration is its own, its claim names the call."""
    hook = ToolHook("delete_everything")
    model = Model(("delete_everything", {"what": "all"}))
    text, calls = await ask(route, gateway(model, hook), "bob-key", False)
    assert hook.plans == []  # its plan never ran
    assert calls == []
    assert text.endswith("Not run: this caller may not use the tool 'delete_everything'. Go on without it.")
    assert len(model.requests) == 2

    text, calls = await ask(route, gateway(Model(("delete_everything", {"what": "all"})), hook), "alice-key", False)
    assert len(hook.plans) == 1
    assert text.startswith("read: delete_everything result for")


NATIVE = {
    "messages": [{"type": "web_search_20250305", "name": "web_search"}],
    "responses": [{"type": "web_search"}],
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ["messages", "responses"])
async def test_a_native_web_search_is_neither_declared_nor_run_for_a_caller_denied_it(route: str, stream: bool) -> None:
    POLICIES["dave"] = ToolPolicy(allowed_tools=["lookup"])
    KEYS["dave-key"] = "dave"
    model = Model(("web_search", {"query": "python asyncio"}))
    app = gateway(model, websearch_hook(CorpusSearch()), ServerTools([lookup]))

    text, calls = await ask(route, app, "dave-key", stream, tools=NATIVE[route])
    assert text.endswith("Not run: this caller may not use the tool 'web_search'. Go on without it.")
    assert calls == []
    first = model.requests[0].body
    assert declared(first) == ["lookup"]  # neither the client's native declaration nor ours

    model.requests.clear()
    text, _ = await ask(route, app, "alice-key", stream, tools=NATIVE[route])
    assert declared(model.requests[0].body) == ["web_search", "lookup"]
    assert "python" in text.lower()


@pytest.mark.parametrize("route", ROUTES)
async def test_a_cap_of_0_declares_no_server_tool(route: str) -> None:
    POLICIES["frank"] = ToolPolicy(max_agentic_loops=0)
    KEYS["frank-key"] = "frank"
    model = Model(("lookup", {"key": "k"}))
    text, calls = await ask(route, gateway(model), "frank-key", False)
    assert [declared(request.body) for request in model.requests] == [[]]
    assert RAN == {}
    assert calls == []  # a call the model makes anyway is removed, as a limit of 0 set mid-request removes it
    assert text == "I stopped here: the server's tools could not run again for this request."


async def test_an_mcp_servers_tools_are_judged_by_the_names_the_model_sees(mcp_http: MCPHTTPServer) -> None:
    """Names after the MCP `prefix`: `docs_*` denies the server's tools as the model knows them."""
    POLICIES["erin"] = ToolPolicy(denied_tools="docs_*")
    KEYS["erin-key"] = "erin"
    model = Model(("docs_define", {"word": "policy"}))
    middleware = AgenticLoopMiddleware(
        model, hooks=[MCPTools(mcp_http.url, prefix="docs"), ServerTools([lookup])], tool_policy=policy_by_caller
    )
    async with LifespanManager(middleware, **PATIENT):  # type: ignore[arg-type]
        for route in ROUTES:
            model.requests.clear()
            text, calls = await ask(route, Auth(middleware), "erin-key", route == "chat")
            assert text.endswith("Not run: this caller may not use the tool 'docs_define'. Go on without it.")
            assert calls == []
            assert declared(model.requests[0].body) == ["lookup"]
            model.requests.clear()
            text, _ = await ask(route, Auth(middleware), "alice-key", False)
            assert "docs_define" in declared(model.requests[0].body)
            assert text.startswith("read: ") and "Not run" not in text


async def test_the_clients_own_tools_are_the_clients() -> None:
    """`allowed_tools` scopes the server's tools: a tool the client declares and runs itself stays declared."""
    POLICIES["dave"] = ToolPolicy(allowed_tools=["lookup"])
    KEYS["dave-key"] = "dave"
    model = Model(("my_own_tool", {}))
    own = {"name": "my_own_tool", "description": "mine", "input_schema": {"type": "object"}}
    _text, calls = await ask("messages", gateway(model), "dave-key", False, tools=[own])
    assert calls == ["my_own_tool"]
    assert declared(model.requests[0].body) == ["my_own_tool", "lookup"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("function", [policy_by_caller, async_policy_by_caller], ids=["sync", "async"])
async def test_a_policy_function_sync_or_async(route: str, function: Any) -> None:
    model = Model(("delete_everything", {"what": "x"}))
    text, _ = await ask(route, gateway(model, tool_policy=function), "bob-key", False)
    assert "may not use the tool 'delete_everything'" in text


def failing(scope: Scope) -> ToolPolicy:
    raise RuntimeError("the policy database is down")


def wrong_type(scope: Scope) -> Any:
    return {"denied_tools": ["delete_*"]}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("function", [failing, wrong_type], ids=["raises", "wrong_type"])
async def test_a_policy_that_fails_refuses_the_request_in_the_routes_shape(
    route: str, stream: bool, function: Any
) -> None:
    model = Model(("delete_everything", {"what": "x"}))
    with pytest.raises((anthropic.APIStatusError, openai.APIStatusError)) as raised:
        await ask(route, gateway(model, tool_policy=function), "bob-key", stream)
    assert raised.value.status_code == 503
    body: Any = raised.value.body
    error = body["error"] if route == "messages" else body
    assert "the tool policy could not be read" in error["message"]
    assert model.requests == []  # never run unchecked
    assert RAN == {}


async def hanging(scope: Scope) -> ToolPolicy:
    await asyncio.Event().wait()  # a policy database that never answers
    raise AssertionError("never reached")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ROUTES)
async def test_a_policy_that_hangs_is_refused_within_hook_timeout(route: str, stream: bool) -> None:
    """The policy function is server code asked per request, bounded as a hook call is: past `hook_timeout` the
    request is refused (503, fail closed), never left hanging with the client waiting."""
    model = Model(("delete_everything", {"what": "x"}))
    app = gateway(model, tool_policy=hanging, hook_timeout=0.2)
    with pytest.raises((anthropic.APIStatusError, openai.APIStatusError)) as raised:
        await asyncio.wait_for(ask(route, app, "bob-key", stream), 10)  # on the old code: TimeoutError here
    assert raised.value.status_code == 503
    body: Any = raised.value.body
    error = body["error"] if route == "messages" else body
    assert "the tool policy could not be read" in error["message"]
    assert "timed out after hook_timeout=0.2 s" in error["message"]
    assert model.requests == []
    assert RAN == {}


async def test_a_policy_may_refuse_a_caller_with_its_own_status() -> None:
    def refusing(scope: Scope) -> ToolPolicy:
        raise RequestRefused("no tools for you", status=403)

    model = Model(("delete_everything", {"what": "x"}))
    with pytest.raises(anthropic.PermissionDeniedError) as raised:
        await ask("messages", gateway(model, tool_policy=refusing), "bob-key", False)
    assert "no tools for you" in str(raised.value)
    assert model.requests == []


async def test_a_claim_that_names_no_call_fails_closed_under_a_policy(caplog: pytest.LogCaptureFixture) -> None:
    class Unnamed(ToolHook):
        async def async_should_run_agentic_loop(self, response: Any, **arguments: Any) -> tuple[bool, dict[str, Any]]:
            should, _claim = await super().async_should_run_agentic_loop(response, **arguments)
            return should, {"which": "mine"}

    hook = Unnamed("delete_everything")
    model = Model(("delete_everything", {"what": "x"}))
    with caplog.at_level(logging.ERROR), pytest.raises(anthropic.InternalServerError) as raised:
        await ask("messages", gateway(model, hook), "bob-key", False)
    assert "the tool policy cannot judge them" in str(raised.value)
    assert hook.plans == []


def test_tool_policy_arguments_are_checked() -> None:
    assert ToolPolicy("lookup").allowed_tools == ("lookup",)  # one string is one name
    assert ToolPolicy(denied_tools=[]).allows("anything")
    assert not ToolPolicy(allowed_tools=[]).allows("lookup")
    assert ToolPolicy(allowed_tools=["get_*"]).allows("get_user")
    assert not ToolPolicy(allowed_tools=["get_*"]).allows("Get_user")  # case counts, as in MCP's allow lists
    for bad in ({"allowed_tools": 3}, {"denied_tools": [""]}, {"max_agentic_loops": -1}, {"max_agentic_loops": True}):
        with pytest.raises(ConfigurationError):
            ToolPolicy(**bad)


def test_the_policy_function_by_dotted_path_in_yaml(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("agentic_middleware:\n  tool_policy: test_policy.policy_by_caller\n")
    assert load_config(config).tool_policy is policy_by_caller
    config.write_text("agentic_middleware:\n  tool_policy: test_policy.no_such_function\n")
    with pytest.raises(ConfigurationError, match="no_such_function"):
        load_config(config)


async def test_the_yaml_policy_holds_on_a_request(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("agentic_middleware:\n  tool_policy: test_policy.async_policy_by_caller\n")
    model = Model(("delete_everything", {"what": "x"}))
    app = Auth(AgenticLoopMiddleware(model, hooks=[ServerTools([lookup, delete_everything])], config=config))
    text, _ = await ask("chat", app, "bob-key", False)
    assert "may not use the tool 'delete_everything'" in text
    assert RAN == {}


BY_KEY = {hashlib.sha256(b"intern-key").hexdigest(): ToolPolicy(denied_tools=["delete_*"])}


async def policy_by_key(scope: Scope) -> ToolPolicy | None:
    """A deny list by key hash, as security.md says to key it behind agentic-gateway: other keys get everything."""
    return BY_KEY.get(await identify(scope, key_hash) or "")


@pytest.mark.parametrize(
    ("route", "made_up"),
    [("messages", "x-litellm-api-key"), ("chat", "x-litellm-api-key"), ("chat", "authorization")],
)
async def test_behind_the_gateway_the_caller_is_the_key_it_was_admitted_with(route: str, made_up: str) -> None:
    """A client holding one gateway key sends a made-up key beside it, in a header `key_hash` reads first: the
    policy still judges the key the gateway admitted the request with, so the intern is nobody else."""
    model = Model(("delete_everything", {"what": "all"}))
    async with serving("uvicorn", model) as upstream:
        app = create_app(
            Settings(hooks=(ServerTools([lookup, delete_everything]),), tool_policy=policy_by_key),
            Upstream(f"http://127.0.0.1:{upstream.port}"),
        )
        app.add_middleware(RequireKey, keys=(b"intern-key", b"staff-key"))

        async def as_holder_of(key: str) -> str:
            if route == "messages":
                client = anthropic_client(app, api_key=key, default_headers={made_up: "made-up"})
                request: Any = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "go"}]}
                reply = await client.messages.create(**request)
                return "".join(block.text for block in reply.content if block.type == "text")
            if made_up == "authorization":  # the SDK's own key header made up, the gateway key in another
                chat = openai_client(app, api_key="made-up", default_headers={"x-api-key": key})
            else:
                chat = openai_client(app, api_key=key, default_headers={made_up: "made-up"})
            completion = await chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
            return completion.choices[0].message.content or ""

        async with LifespanManager(app):
            text = await as_holder_of("intern-key")
            assert text.endswith("Not run: this caller may not use the tool 'delete_everything'. Go on without it.")
            assert RAN == {}
            assert (await as_holder_of("staff-key")).endswith("deleted all")  # a key not on the list: everything
    assert RAN == {"delete_everything": 1}


LONG = "The launch code is 0451. " + "Background. " * 400


@pytest.mark.parametrize("route", ROUTES)
async def test_a_caller_who_may_not_retrieve_gets_the_history_uncompressed(route: str) -> None:
    """The compression hook stubs long texts for a `retrieve` the model calls to get them back: for a caller whose
    policy denies `retrieve`, a stub would lose the text for good, so nothing is stubbed."""
    POLICIES["dave"] = ToolPolicy(allowed_tools=["lookup"])
    KEYS["dave-key"] = "dave"
    model = Model()
    app = gateway(model, CompressionHook(threshold=1000, preview=50), ServerTools([lookup]))
    history: Any = [
        {"role": "user", "content": LONG},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "What is the launch code?"},
    ]
    extra = {"input": history} if route == "responses" else {"messages": history}
    for key, stubbed in (("alice-key", True), ("dave-key", False)):
        model.requests.clear()
        if route == "messages":
            await anthropic_client(app, api_key=key).messages.create(model="m", max_tokens=100, **extra)
        elif route == "chat":
            await openai_client(app, api_key=key).chat.completions.create(model="m", **extra)
        else:
            await openai_client(app, api_key=key).responses.create(model="m", store=False, **extra)
        sent = str(model.requests[0].body)
        assert ("[compressed: " in sent) is stubbed, key
        assert (LONG in sent) is not stubbed, key
        assert ("retrieve" in declared(model.requests[0].body)) is stubbed, key


class Counting(ScriptedModel):
    """Answers a token count with the tool names its body declares, on both counting routes."""

    def __init__(self) -> None:
        super().__init__(
            default=lambda request: {"input_tokens": len(declared(request.body)), "object": "response.input_tokens"}
        )


async def test_a_token_count_counts_only_the_tools_the_caller_may_use() -> None:
    """A count holds the tools the caller's turn would get: not those its policy denies, none under a cap of 0."""
    POLICIES["frank"] = ToolPolicy(max_agentic_loops=0)
    KEYS["frank-key"] = "frank"
    model = Counting()
    app = gateway(model)
    counted = {}
    for key in ("alice-key", "bob-key", "frank-key"):
        model.requests.clear()
        await anthropic_client(app, api_key=key).messages.count_tokens(
            model="m", messages=[{"role": "user", "content": "go"}]
        )
        await openai_client(app, api_key=key).responses.input_tokens.count(model="m", input="go")
        counted[key] = [declared(request.body) for request in model.requests]
    assert counted == {
        "alice-key": [["lookup", "delete_everything"]] * 2,
        "bob-key": [["lookup"]] * 2,
        "frank-key": [[], []],
    }
