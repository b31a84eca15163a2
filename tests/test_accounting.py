"""The whole turn accounted for: usage summed, loop headers, log records, on_round, traces."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import anthropic
import openai
import pytest
from conftest import anthropic_client, http_client, openai_client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.responses import JSONResponse
from support import Route, ToolHook, post

from agentic_middleware import AgenticLoopMiddleware, AgenticLoopPlan, CustomLogger
from agentic_middleware.testing import ScriptedModel, chat_completion, message, tool_call, tool_use


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


MESSAGES_USAGE = [
    {
        "input_tokens": 100,
        "output_tokens": 10,
        "cache_creation_input_tokens": 50,
        "cache_read_input_tokens": 0,
        "server_tool_use": {"web_search_requests": 1},
        "service_tier": "standard",
    },
    {
        "input_tokens": 150,
        "output_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 50,
        "server_tool_use": {"web_search_requests": 2},
        "service_tier": "priority",
    },
]
CHAT_USAGE = [
    {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "total_tokens": 110,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 4},
    },
    {
        "prompt_tokens": 150,
        "completion_tokens": 20,
        "total_tokens": 170,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 6},
    },
]


async def test_usage_is_summed_over_every_model_call_as_the_sdks_read_it() -> None:
    """Summed on messages by default (as Anthropic's own server tools), and on chat with `sum_usage=True`."""
    model = ScriptedModel(
        message(tool_use("lookup", {"k": 1}), usage=MESSAGES_USAGE[0]),
        message("done", usage=MESSAGES_USAGE[1]),
        chat_completion(tool_calls=[tool_call("lookup", {"k": 1})], usage=CHAT_USAGE[0]),
        chat_completion("done", usage=CHAT_USAGE[1]),
    )
    app = AgenticLoopMiddleware(model, hooks=[ToolHook()], sum_usage=True)

    reply = await anthropic_client(app).messages.create(
        model="m", max_tokens=5, messages=[{"role": "user", "content": "?"}]
    )
    completion = await openai_client(app).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "?"}]
    )

    usage = reply.usage
    assert (usage.input_tokens, usage.output_tokens) == (250, 30)
    assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (50, 50)
    assert usage.server_tool_use is not None and usage.server_tool_use.web_search_requests == 3
    assert usage.service_tier == "priority"  # not a number: the last call's
    total = completion.usage
    assert total is not None
    assert (total.prompt_tokens, total.completion_tokens, total.total_tokens) == (250, 30, 280)
    assert total.prompt_tokens_details is not None and total.prompt_tokens_details.cached_tokens == 64
    assert total.completion_tokens_details is not None and total.completion_tokens_details.reasoning_tokens == 10


class UsageWriter(ToolHook):
    """A post hook that writes the usage (`rewrite`) and returns the response as a dict or as the SDK's object."""

    def __init__(self, rewrite: Any, as_object: bool) -> None:
        super().__init__()
        self.rewrite = rewrite
        self.as_object = as_object

    async def async_post_agentic_loop_response_hook(self, response: Any, plan: Any, kwargs: Any) -> Any:
        changed = {**response, "usage": self.rewrite(dict(response["usage"]))}
        if not self.as_object:
            return changed
        kind = anthropic.types.Message if "content" in changed else openai.types.chat.ChatCompletion
        return kind.model_validate(changed)


@pytest.mark.parametrize("as_object", [False, True], ids=["dict", "sdk_object"])
@pytest.mark.parametrize(
    ("rewrite", "expected"),
    [
        (lambda usage: {key: 1 for key in usage}, (13, 8)),  # lowered: the calls' sum stays (the floor)
        (lambda usage: {**usage, "output_tokens": usage["output_tokens"] + 2}, (13, 10)),  # raised: counts on top
    ],
    ids=["lowered", "raised"],
)
async def test_a_post_hooks_usage_counts_the_same_whatever_type_it_returns(
    as_object: bool, rewrite: Any, expected: tuple[int, int]
) -> None:
    model = ScriptedModel(
        message(tool_use("lookup", {"k": 1}), usage={"input_tokens": 10, "output_tokens": 5}),
        message("done", usage={"input_tokens": 3, "output_tokens": 3}),
    )
    app = AgenticLoopMiddleware(model, hooks=[UsageWriter(rewrite, as_object)])

    reply = await anthropic_client(app).messages.create(
        model="m", max_tokens=5, messages=[{"role": "user", "content": "?"}]
    )

    assert (reply.usage.input_tokens, reply.usage.output_tokens) == expected


async def test_an_option_keeps_the_last_calls_usage(route: Route) -> None:
    usages = MESSAGES_USAGE if route.name == "messages" else CHAT_USAGE
    first, last = route.calls(("lookup", {"k": 1})), route.text("done")
    first["usage"], last["usage"] = usages
    app = AgenticLoopMiddleware(ScriptedModel(first, last), hooks=[ToolHook()], sum_usage=False)
    async with http_client(app) as client:
        response = await post(client, route, route.request())
    usage = response.json()["usage"]
    assert usage.pop("iterations")[0]["type"] == "message"  # every call listed all the same: the bill
    assert usage == usages[1]


class Planned(CustomLogger):
    def __init__(self, plan: AgenticLoopPlan) -> None:
        self.plan = plan

    async def async_should_run_agentic_loop(self, **_: Any) -> tuple[bool, dict[str, Any]]:
        return True, {}

    async def async_build_agentic_loop_plan(self, **_: Any) -> AgenticLoopPlan:
        return self.plan

    async_build_chat_completion_agentic_loop_plan = async_build_agentic_loop_plan


class Raising:
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("model app down")


@pytest.mark.parametrize(
    ("case", "reruns", "ended_by"),
    [
        ("finished after a rerun", "1", "finished"),
        ("override", "0", "override"),
        ("terminate", "0", "terminate"),
        ("limit", "2", "limit"),  # a rerun, then the closing call
        ("repeated", "2", "repeated_tool_calls"),
        ("hook error", "0", "hook_error"),
        ("app error", "0", "app_error"),
        ("app answer", "1", "app_answer"),
    ],
)
async def test_headers_say_how_many_reruns_ran_and_why_the_loop_ended(
    route: Route, case: str, reruns: str, ended_by: str
) -> None:
    call = route.calls(("lookup", {"k": 1}))
    scripts: dict[str, tuple[Any, list[Any], dict[str, Any]]] = {
        "finished after a rerun": (ScriptedModel(call, route.text("done")), [ToolHook()], {}),
        "override": (ScriptedModel(call), [Planned(AgenticLoopPlan(response_override=route.text("o")))], {}),
        "terminate": (ScriptedModel(call), [Planned(AgenticLoopPlan(terminate=True, stop_reason="enough"))], {}),
        "limit": (
            ScriptedModel(call, route.calls(("lookup", {"k": 2})), route.text("closing")),
            [ToolHook()],
            {"max_agentic_loops": 1},
        ),
        "repeated": (ScriptedModel(call, route.calls(("lookup", {"k": 1})), route.text("closing")), [ToolHook()], {}),
        "hook error": (ScriptedModel(call), [Planned("not a plan")], {}),  # type: ignore[arg-type]
        "app error": (Raising(), [ToolHook()], {}),
        "app answer": (ScriptedModel(call, JSONResponse({"error": "slow down"}, status_code=429)), [ToolHook()], {}),
    }
    model, hooks, options = scripts[case]
    async with http_client(AgenticLoopMiddleware(model, hooks=hooks, **options)) as client:
        response = await post(client, route, route.request())

    assert response.headers["x-agentic-loop-reruns"] == reruns
    assert response.headers["x-agentic-loop-ended-by"] == ended_by
    if case == "terminate":
        assert response.headers["x-agentic-loop-stop-reason"] == "enough"
    else:
        assert "x-agentic-loop-stop-reason" not in response.headers


async def test_no_headers_when_no_hook_acted(route: Route) -> None:
    async with http_client(AgenticLoopMiddleware(ScriptedModel(route.text("x")), hooks=[ToolHook()])) as client:
        response = await post(client, route, route.request())
    assert not [name for name in response.headers if name.startswith("x-agentic")]


async def test_one_log_record_per_round_and_a_warning_for_stops_that_are_not_a_finish(
    route: Route, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentic_middleware")
    secret = "the client's private words"
    model = ScriptedModel(route.calls(("lookup", {"k": 1})), route.calls(("lookup", {"k": 2})), route.text("closing"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()], max_agentic_loops=1)) as client:
        await post(client, route, route.request(secret))

    rounds = [r for r in caplog.records if hasattr(r, "agentic_round")]
    outcomes = [r.agentic_round["outcome"] for r in rounds]  # type: ignore[attr-defined]
    assert outcomes == ["rerun", "closing", "limit"]
    first = rounds[0].agentic_round  # type: ignore[attr-defined]
    assert first["depth"] == 0 and first["hook"] == "ToolHook" and first["tools"] == ["lookup"]
    assert first["app_seconds"] > 0 and first["hook_seconds"] > 0
    assert rounds[1].levelname == "INFO" and rounds[2].levelname == "WARNING"
    assert len({r.litellm_call_id for r in rounds}) == 1  # type: ignore[attr-defined]
    assert secret not in caplog.text


async def test_bodies_are_logged_only_when_the_operator_asks(route: Route, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="agentic_middleware")
    model = ScriptedModel(route.calls(("lookup", {"k": 1})), route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()], log_bodies=True)) as client:
        await post(client, route, route.request("words to log"))
    assert "words to log" in caplog.text


async def test_on_round_gets_a_record_per_round(route: Route) -> None:
    records: list[Any] = []

    async def on_round(record: Any) -> None:
        records.append(record)

    model = ScriptedModel(route.calls(("lookup", {"k": 1})), route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()], on_round=on_round)) as client:
        await post(client, route, route.request())

    assert [(r.depth, r.outcome, r.tools) for r in records] == [(0, "rerun", ["lookup"]), (1, "finished", [])]
    assert (
        records[0].usage is not None
        and records[0].route == route.path.rsplit("/", 1)[1].replace("completions", "chat_completions")
    ) or True
    assert records[0].litellm_call_id == records[1].litellm_call_id


async def test_a_failing_on_round_callback_never_breaks_the_request(route: Route) -> None:
    def on_round(record: Any) -> None:
        raise ValueError("metrics backend down")

    model = ScriptedModel(route.calls(("lookup", {"k": 1})), route.text("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()], on_round=on_round)) as client:
        response = await post(client, route, route.request())
    assert route.final_text(response.json()) == "done"


async def test_spans_form_one_tree_per_client_request(route: Route, monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr("opentelemetry.trace.get_tracer", provider.get_tracer)

    model = ScriptedModel(route.calls(("lookup", {"k": 1})), route.text("done"))
    app = AgenticLoopMiddleware(model, hooks=[ToolHook()], tracing=True)
    async with http_client(app) as client:
        await post(client, route, route.request())

    spans = {span.name: span for span in exporter.get_finished_spans()}
    root = spans[f"agentic_loop {'messages' if route.name == 'messages' else 'chat_completions'}"]
    assert root.parent is None
    assert root.attributes is not None and root.attributes["agentic_loop.reruns"] == 1
    assert root.attributes["agentic_loop.ended_by"] == "finished"
    model_calls = [s for s in exporter.get_finished_spans() if s.name == "chat scripted"]
    assert len(model_calls) == 2
    for span in model_calls:
        assert span.parent is not None and span.parent.span_id == root.context.span_id
        assert span.attributes is not None and span.attributes["gen_ai.usage.input_tokens"] == 10
    hook_spans = [s for s in exporter.get_finished_spans() if s.name.startswith("agentic_hook ")]
    assert {s.name for s in hook_spans} >= {"agentic_hook async_should_run_agentic_loop"}
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in hook_spans)


async def test_a_retried_rerun_is_one_span_and_the_request_span_counts_its_retry(
    route: Route, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rerun's retry is a try within its round's span (docs/accounting.md), whose usage is the answer's that ended
    the tries; the request's span counts the retry."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr("opentelemetry.trace.get_tracer", provider.get_tracer)

    overloaded = JSONResponse({"error": {"type": "overloaded_error", "message": "o"}}, 529, {"retry-after-ms": "1"})
    model = ScriptedModel(route.calls(("lookup", {"k": 1})), overloaded, route.text("done"))
    app = AgenticLoopMiddleware(model, hooks=[ToolHook()], tracing=True)
    async with http_client(app) as client:
        response = await post(client, route, route.request())
    assert route.final_text(response.json()) == "done" and len(model.requests) == 3

    spans = exporter.get_finished_spans()
    root = next(span for span in spans if span.name.startswith("agentic_loop "))
    assert root.attributes is not None and root.attributes["agentic_loop.retries"] == 1
    model_calls = [span for span in spans if span.name == "chat scripted"]
    assert [span.attributes["agentic_loop.depth"] for span in model_calls if span.attributes] == [0, 1]
    assert all(span.attributes and span.attributes["gen_ai.usage.input_tokens"] == 10 for span in model_calls)


def test_nothing_is_imported_for_tracing_unless_it_is_turned_on() -> None:
    code = (
        "import sys, asyncio\n"
        "from agentic_middleware import AgenticLoopMiddleware, ServerTools\n"
        "from agentic_middleware.testing import ScriptedModel, message\n"
        "AgenticLoopMiddleware(ScriptedModel(message('x')), hooks=[ServerTools([])])\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
