"""What real apps, clients and an audit found (issue 12): body limits, pydantic bodies, calls without ids, a limit
of zero, config mistakes, and chat answers with several choices."""

from __future__ import annotations

import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest
from conftest import anthropic_client, http_client, http_scope, openai_client
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from support import Route, ToolHook, post

from agentic_middleware import (
    AgenticLoopMiddleware,
    AgenticLoopPlan,
    ConfigurationError,
    ServerTools,
    load_config,
    server_tool,
)
from agentic_middleware.testing import ScriptedModel, chat_completion, message, tool_call, tool_use


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


class SetState:
    """An outer middleware standing in for trusted server code that sets `request.state`."""

    def __init__(self, app: ASGIApp, **state: Any) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault("state", {}).update(self.state)
        await self.app(scope, receive, send)


# 1. max_body_bytes holds however the body arrives


@pytest.mark.parametrize("chunks", [[5085], [1500, 3585]], ids=["one message", "last chunk crosses"])
async def test_a_body_over_max_body_bytes_passes_through_however_it_arrives(chunks: list[int]) -> None:
    route = Route("messages")
    body = orjson.dumps(route.request("x" * 5006))
    assert len(body) == sum(chunks)
    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("never reached"))
    hook = ToolHook()
    app = AgenticLoopMiddleware(model, hooks=[hook], max_body_bytes=2000)

    pieces, start = [], 0
    for size in chunks:
        pieces.append(body[start : start + size])
        start += size
    messages = [
        {"type": "http.request", "body": piece, "more_body": n < len(pieces) - 1} for n, piece in enumerate(pieces)
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(http_scope(route.path, body), receive, send)

    assert len(model.requests) == 1 and model.requests[0].raw == body  # the app got it whole, byte for byte
    assert hook.gates == []  # no hook saw it
    assert route.tool_names(orjson.loads(sent[1]["body"])) == ["lookup"]  # the app's answer as it was


# 2. A pydantic final body: usage summed, written as the SDK would send it


class SdkPostHook(ToolHook):
    """Its post hook returns the final answer as the official SDK's own object."""

    async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: dict[str, Any]) -> Any:
        if "content" in response:
            return anthropic.types.Message.model_validate(dict(response.model_dump()))
        return openai.types.chat.ChatCompletion.model_validate(dict(response.model_dump()))


async def test_usage_is_summed_when_a_post_hook_returns_an_sdk_object(route: Route) -> None:
    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("done"))
    app = AgenticLoopMiddleware(model, hooks=[SdkPostHook()], sum_usage=True)  # summed on every route
    async with http_client(app) as client:
        response = await post(client, route, route.request())

    body = response.json()
    usage = body["usage"]
    if route.name == "messages":
        assert (usage["input_tokens"], usage["output_tokens"]) == (20, 10)
    else:
        assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (20, 10, 30)
    assert b"null" not in response.content.replace(b'"stop_sequence":null', b"").replace(b'"content":null', b"")
    assert "citations" not in response.text and "logprobs" not in response.text


async def test_usage_is_summed_for_a_pydantic_response_override() -> None:
    class Overriding(ToolHook):
        async def async_build_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            self.plans.append(arguments)
            if len(self.plans) == 1:
                return await super().async_build_agentic_loop_plan(tools, **arguments)
            final = anthropic.types.Message.model_validate(message("overridden"))
            return AgenticLoopPlan(response_override=final)

    route = Route("messages")
    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.calls(("lookup", {"n": 2})))
    reply = await anthropic_client(AgenticLoopMiddleware(model, hooks=[Overriding()])).messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}]
    )
    assert [block.text for block in reply.content if block.type == "text"] == ["overridden"]
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (20, 10)


# 4. A tool call without an id is served


@server_tool
def lookup(q: str) -> str:
    """Look it up."""
    return f"found {q}"


async def test_a_server_tool_call_without_an_id_is_served_with_one() -> None:
    call = tool_use("lookup", {"q": "a"})
    del call["id"]
    function_call = tool_call("lookup", {"q": "b"})
    del function_call["id"]
    model = ScriptedModel(message(call), message("the answer"), chat_completion(tool_calls=[function_call]))
    model.script.append(chat_completion("the chat answer"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])

    reply = await anthropic_client(app).messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}]
    )
    completion = await openai_client(app).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "go"}]
    )

    assert reply.content[0].type == "text" and reply.content[0].text == "the answer"
    assert completion.choices[0].message.content == "the chat answer"
    assistant, results = model.requests[1].body["messages"][-2:]
    used = assistant["content"][0]["id"]
    assert used and results["content"][0]["tool_use_id"] == used
    assert results["content"][0]["content"] == "found a"
    assistant, result = model.requests[3].body["messages"][-2:]
    used = assistant["tool_calls"][0]["id"]
    assert used and result == {"role": "tool", "tool_call_id": used, "content": "found b"}


# 7. A limit of zero: no reruns


async def test_a_request_state_limit_of_zero_means_no_reruns(route: Route) -> None:
    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("never reached"))
    hook = ToolHook()
    async with http_client(SetState(AgenticLoopMiddleware(model, hooks=[hook]), max_agentic_loops=0)) as client:
        response = await post(client, route, route.request())

    assert response.status_code == 200
    assert len(model.requests) == 1
    assert route.tool_names(response.json()) == ["lookup"]  # the app's own answer, unchanged
    assert hook.gates == []


async def test_a_limit_of_zero_set_by_the_app_during_its_first_call_means_no_reruns(route: Route) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        scope["state"]["max_agentic_loops"] = 0  # a dependency of the model app, as for a tenant without tools
        await model(scope, receive, send)

    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("never reached"))
    async with http_client(AgenticLoopMiddleware(app, hooks=[ToolHook()])) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 200 and len(model.requests) == 1


async def test_a_configured_limit_of_zero_means_no_reruns(route: Route, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("agentic_middleware: {max_agentic_loops: 0}\n")
    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("never reached"))
    hook = ToolHook()
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook], config=config)) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 200 and len(model.requests) == 1
    assert route.tool_names(response.json()) == ["lookup"]


# 10. Configuration mistakes name what is wrong


async def test_a_bad_limit_in_a_patch_names_the_key(route: Route) -> None:
    class Bad(ToolHook):
        async def async_build_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            plan = await super().async_build_agentic_loop_plan(tools, **arguments)
            plan.request_patch.kwargs = {"max_agentic_loops": "many"}
            return plan

        async def async_build_chat_completion_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
            plan = await super().async_build_chat_completion_agentic_loop_plan(tools, **arguments)
            plan.request_patch.kwargs = {"max_agentic_loops": "many"}
            return plan

    model = ScriptedModel(route.calls(("lookup", {"n": 1})))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Bad()])) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 500
    assert 'request_patch.kwargs["max_agentic_loops"]' in route.error(response.json())[1]


def write(folder: Path, text: str) -> Path:
    path = folder / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_wrong_value_from_the_environment_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUDIT_LOOPS", "many")
    config = write(tmp_path, "agentic_middleware: {max_agentic_loops: os.environ/AUDIT_LOOPS}\n")
    with pytest.raises(ConfigurationError, match="AUDIT_LOOPS") as error:
        load_config(config)
    assert "max_agentic_loops" in str(error.value)


def test_a_quoted_number_in_yaml_is_a_string_and_refused(tmp_path: Path) -> None:
    config = write(tmp_path, 'agentic_middleware: {max_agentic_loops: "3", tracing: "true"}\n')
    with pytest.raises(ConfigurationError, match="max_agentic_loops must be an integer"):
        load_config(config)


def test_a_number_from_the_environment_is_still_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUDIT_LOOPS", "5")
    config = write(tmp_path, "agentic_middleware: {max_agentic_loops: os.environ/AUDIT_LOOPS}\n")
    assert load_config(config).max_agentic_loops == 5


def test_hooks_and_callbacks_both_take_one_bare_dotted_path(tmp_path: Path) -> None:
    (tmp_path / "audit_bare_hooks.py").write_text(
        "from support import ToolHook\nfirst = ToolHook()\nsecond = ToolHook()\n"
    )
    config = write(
        tmp_path,
        """
        litellm_settings: {callbacks: audit_bare_hooks.first}
        agentic_middleware: {hooks: audit_bare_hooks.second}
        """,
    )
    hooks = load_config(config).hooks
    assert [type(hook).__name__ for hook in hooks] == ["ToolHook", "ToolHook"] and hooks[0] is not hooks[1]


@pytest.mark.parametrize("interval", [1e-9, 0.001])
def test_a_keepalive_below_ten_milliseconds_is_refused(interval: float) -> None:
    with pytest.raises(ConfigurationError, match="stream_keepalive"):
        AgenticLoopMiddleware(ScriptedModel(), hooks=[ToolHook()], stream_keepalive=interval)


# 11. Several choices: one conversation goes on


async def test_with_two_choices_the_rerun_continues_one_choice() -> None:
    first = chat_completion(tool_calls=[tool_call("lookup", {"q": "a"})])
    second = chat_completion(tool_calls=[tool_call("lookup", {"q": "b"})])["choices"][0]
    first["choices"].append({**second, "index": 1})
    model = ScriptedModel(first, chat_completion("done"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    completion = await openai_client(app).chat.completions.create(
        model="m", n=2, messages=[{"role": "user", "content": "go"}]
    )

    assert completion.choices[0].message.content == "done"
    history = model.requests[1].body["messages"]
    assistants = [m for m in history if m["role"] == "assistant"]
    assert len(assistants) == 1 and len(assistants[0]["tool_calls"]) == 1
    tool_messages = [m for m in history if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == [assistants[0]["tool_calls"][0]["id"]]


# 12. Operator headers on internal calls


async def test_operator_headers_go_on_every_internal_call_and_the_clients_own_do_not_pass(route: Route) -> None:
    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.calls(("lookup", {"n": 2})), route.text("done"))
    records: list[Any] = []
    app = AgenticLoopMiddleware(
        model,
        hooks=[ToolHook()],
        on_round=records.append,
        internal_headers={"X-Trace-Id": "agentic-{call_id}", "x-litellm-tags": "agentic"},
    )
    headers = {"x-trace-id": "client-chosen", "x-litellm-tags": "free-tier", "x-other": "kept"}
    if route.name == "messages":
        client = anthropic_client(app, default_headers=headers)
        await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}])
    else:
        await openai_client(app, default_headers=headers).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}]
        )

    assert len(model.requests) == 3
    call_id = records[0].litellm_call_id
    for request in model.requests:
        assert request.headers["x-trace-id"] == f"agentic-{call_id}"  # the same on the first call and each rerun
        assert request.headers["x-litellm-tags"] == "agentic"
        assert request.headers["x-other"] == "kept"
        assert "client-chosen" not in request.headers.values() and "free-tier" not in request.headers.values()


def test_operator_headers_are_checked_at_start() -> None:
    with pytest.raises(ConfigurationError, match="internal_headers"):
        AgenticLoopMiddleware(ScriptedModel(), internal_headers={"bad name": "x"})
    with pytest.raises(ConfigurationError, match="internal_headers"):
        AgenticLoopMiddleware(ScriptedModel(), internal_headers={"x-ok": 3})  # type: ignore[dict-item]


# 13. LiteLLM running the same hooks itself


async def test_hooks_that_litellm_also_runs_are_reported_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """LiteLLM's proxy loads `litellm_settings.callbacks` into `litellm.callbacks` at its start-up, which comes
    after the middleware is built: the first looped request finds them there."""
    hook, other = ToolHook(), ToolHook()
    litellm = types.ModuleType("litellm")
    litellm.callbacks = []  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "litellm", litellm)
    route = Route("messages")
    model = ScriptedModel(route.text("a"), route.text("b"))
    app = AgenticLoopMiddleware(model, hooks=[hook, other])
    assert "litellm.callbacks" not in caplog.text

    litellm.callbacks.append(hook)  # type: ignore[attr-defined]
    async with http_client(app) as client:
        await post(client, route, route.request())
        await post(client, route, route.request())
    warnings = [r for r in caplog.records if "litellm.callbacks" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING"
    assert "agentic_middleware.hooks" in warnings[0].getMessage()


def test_no_warning_when_litellm_runs_other_callbacks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    litellm = types.ModuleType("litellm")
    litellm.callbacks = [ToolHook()]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "litellm", litellm)
    AgenticLoopMiddleware(ScriptedModel(), hooks=[ToolHook()])
    assert "litellm.callbacks" not in caplog.text


# 9. In-place edits of history already sent reach the app


class Stubbing(ToolHook):
    """From its second plan on, stubs every earlier tool result in place, as LiteLLM's compression hooks edit."""

    def stub(self, messages: list[Any]) -> None:
        for turn in messages:
            if turn["role"] == "tool":
                turn["content"] = "[stubbed]"
            elif isinstance(turn["content"], list):
                for block in turn["content"]:
                    if block.get("type") == "tool_result":
                        block["content"] = "[stubbed]"

    async def async_build_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
        if self.plans:
            self.stub(arguments["messages"])
        return await super().async_build_agentic_loop_plan(tools, **arguments)

    async def async_build_chat_completion_agentic_loop_plan(self, tools: dict[str, Any], **arguments: Any) -> Any:
        if self.plans:
            self.stub(arguments["messages"])
        return await super().async_build_chat_completion_agentic_loop_plan(tools, **arguments)


async def test_an_in_place_edit_of_history_already_sent_reaches_the_app(route: Route) -> None:
    model = ScriptedModel(
        route.calls(("lookup", {"n": 1})),
        route.calls(("lookup", {"n": 2})),
        route.calls(("lookup", {"n": 3})),
        route.text("done"),
    )
    async with http_client(AgenticLoopMiddleware(model, hooks=[Stubbing()])) as client:
        await post(client, route, route.request())

    assert len(model.requests) == 4
    first_result = 'lookup result for {"n": 1}'
    assert first_result in model.requests[1].body["messages"].__repr__()
    for request in model.requests[2:]:  # the stub, from the rerun after it was made; bytes exact each time
        history = request.body["messages"]
        assert first_result not in repr(history) and "[stubbed]" in repr(history)
        assert orjson.loads(request.raw) == request.body
    assert 'lookup result for {"n": 3}' in repr(model.requests[3].body["messages"])  # the newest, not yet stubbed


async def test_hooks_in_the_real_litellm_callbacks_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    litellm = pytest.importorskip("litellm")
    hook = ToolHook()
    litellm.callbacks.append(hook)
    try:
        route = Route("chat")
        app = AgenticLoopMiddleware(ScriptedModel(route.text("a")), hooks=[hook])
        async with http_client(app) as client:
            await post(client, route, route.request())
    finally:
        litellm.callbacks.remove(hook)
    assert "also in litellm.callbacks" in caplog.text


HOOK_FILES = {
    "own_class": """
        from agentic_middleware import CustomLogger

        class Mine(CustomLogger):
            async def async_should_run_agentic_loop(self, response, **_):
                return False, {}

        hook = Mine()
    """,
    "server_tools": """
        from agentic_middleware import ServerTools, server_tool

        @server_tool
        async def lookup(q: str) -> str:
            return "r"

        hook = ServerTools([lookup])
    """,
}


@pytest.mark.parametrize("kind", list(HOOK_FILES))
async def test_a_hook_litellm_loads_from_the_same_config_file_is_reported(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """LiteLLM's own loader runs the config folder's module anew: its hook is another object, the same hook."""
    litellm = pytest.importorskip("litellm")
    get_instance_fn = pytest.importorskip("litellm.proxy.types_utils.utils").get_instance_fn
    module = f"samefile_{kind}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(HOOK_FILES[kind]))
    config = tmp_path / "config.yaml"
    config.write_text(f'litellm_settings:\n  callbacks: ["{module}.hook"]\n')
    route = Route("chat")
    app = AgenticLoopMiddleware(ScriptedModel(route.text("a"), route.text("b")), config=str(config))
    theirs = get_instance_fn(value=f"{module}.hook", config_file_path=str(config))
    litellm.callbacks.append(theirs)
    try:
        async with http_client(app) as client:
            await post(client, route, route.request())
    finally:
        litellm.callbacks.remove(theirs)
        sys.modules.pop(module, None)
    assert "also in litellm.callbacks" in caplog.text


async def test_another_hook_of_the_same_class_in_litellm_callbacks_is_not_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    litellm = pytest.importorskip("litellm")

    @server_tool
    def first(q: str) -> str:
        return q

    @server_tool
    def second(q: str) -> str:
        return q

    theirs = ServerTools([second])
    litellm.callbacks.append(theirs)
    try:
        route = Route("chat")
        app = AgenticLoopMiddleware(ScriptedModel(route.text("a")), hooks=[ServerTools([first])])
        async with http_client(app) as client:
            await post(client, route, route.request())
    finally:
        litellm.callbacks.remove(theirs)
    assert "also in litellm.callbacks" not in caplog.text
