"""A looped turn's `usage` fits both the bill and the client's context window (docs/accounting.md).

Two model calls of 110,000 prompt tokens each, as the issue measured them: summed into the top-level counters they
read as 220,000, over a 200k window. By default Messages sums them (as Anthropic does for its own server tools) and
lists every call in `usage.iterations`, whose last `message` entry is what Claude Code sizes its context from; Chat
and Responses report the last call's counters (what Codex reads as the context) with the same `iterations` list for
the bill. `sum_usage=True` / `False` picks one rule for every route. JSON and streams say the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import anthropic_client, openai_client
from streams import event_stream

from agentic_middleware import (
    AgenticLoopMiddleware,
    ConfigurationError,
    ServerTools,
    Settings,
    load_config,
    server_tool,
    sse,
)
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

USER: Any = [{"role": "user", "content": "go"}]

# What each of the two calls used; the second call's prompt holds the first's, plus the tool's result.
MESSAGES_USAGE = [
    {
        "input_tokens": 10_000,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 100_000,
        "output_tokens": 200,
    },
    {"input_tokens": 500, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 110_000, "output_tokens": 800},
]
CHAT_USAGE = [
    {
        "prompt_tokens": 110_000,
        "completion_tokens": 200,
        "total_tokens": 110_200,
        "prompt_tokens_details": {"cached_tokens": 100_000},
        "completion_tokens_details": {"reasoning_tokens": 50},
    },
    {
        "prompt_tokens": 110_800,
        "completion_tokens": 800,
        "total_tokens": 111_600,
        "prompt_tokens_details": {"cached_tokens": 110_000},
        "completion_tokens_details": {"reasoning_tokens": 300},
    },
]
RESPONSES_USAGE = [
    {
        "input_tokens": 110_000,
        "input_tokens_details": {"cached_tokens": 100_000},
        "output_tokens": 200,
        "output_tokens_details": {"reasoning_tokens": 50},
        "total_tokens": 110_200,
    },
    {
        "input_tokens": 110_800,
        "input_tokens_details": {"cached_tokens": 110_000},
        "output_tokens": 800,
        "output_tokens_details": {"reasoning_tokens": 300},
        "total_tokens": 111_600,
    },
]


@server_tool
async def lookup(key: str) -> str:
    """Looks a key up."""
    return f"value of {key}"


def streamed(route: str, body: dict[str, Any]) -> Any:
    """A script step: the body as JSON, or as the route's stream when the call asks for one."""

    def step(request: RecordedRequest) -> Any:
        if not request.body.get("stream"):
            return body
        if route == "messages":
            return event_stream(sse.messages_events(body))
        if route == "chat":
            return event_stream(sse.chat_chunks(body, include_usage=True))
        return event_stream(sse.responses_events(body))

    return step


def model(route: str) -> ScriptedModel:
    if route == "messages":
        first = message(tool_use("lookup", {"key": "k"}), usage=MESSAGES_USAGE[0])
        last = message("done", usage=MESSAGES_USAGE[1])
    elif route == "chat":
        first = chat_completion(tool_calls=[tool_call("lookup", {"key": "k"})], usage=CHAT_USAGE[0])
        last = chat_completion("done", usage=CHAT_USAGE[1])
    else:
        first = response(function_call("lookup", {"key": "k"}), usage=RESPONSES_USAGE[0])
        last = response("done", usage=RESPONSES_USAGE[1])
    return ScriptedModel(streamed(route, first), streamed(route, last))


def gateway(route: str, **options: Any) -> AgenticLoopMiddleware:
    return AgenticLoopMiddleware(model(route), hooks=[ServerTools([lookup])], **options)


async def messages_usage(app: Any, how: str) -> dict[str, Any]:
    """The usage the anthropic SDK gives: `create`, the stream helper, or the beta stream helper (which, like
    Claude Code, keeps `usage.iterations` of the `message_delta`)."""
    client = anthropic_client(app)
    if how == "json":
        reply: Any = await client.messages.create(model="m", max_tokens=50, messages=USER)
    elif how == "stream":
        async with client.messages.stream(model="m", max_tokens=50, messages=USER) as events:
            reply = await events.get_final_message()
    else:
        async with client.beta.messages.stream(model="m", max_tokens=50, messages=USER) as beta:
            reply = await beta.get_final_message()
    return dict(reply.usage.model_dump(mode="json", exclude_none=True))


async def openai_usage(app: Any, route: str, stream: bool) -> dict[str, Any]:
    """The usage the openai SDK gives, from JSON or from its stream helper (chat asks for usage)."""
    client = openai_client(app)
    if route == "chat" and not stream:
        reply: Any = await client.chat.completions.create(model="m", messages=USER)
    elif route == "chat":
        async with client.chat.completions.stream(
            model="m", messages=USER, stream_options={"include_usage": True}
        ) as chunks:
            reply = await chunks.get_final_completion()
    elif not stream:
        reply = await client.responses.create(model="m", input="go")
    else:
        async with client.responses.stream(model="m", input="go") as events:
            reply = await events.get_final_response()
    assert reply.usage is not None
    return dict(reply.usage.model_dump(mode="json", exclude_none=True))


def claude_code_context(usage: dict[str, Any]) -> int:
    """The context size Claude Code 2.1.332 reads from an answer's usage: the last `message` entry of
    `iterations` when there is one with all four token counts, else the top-level counts (docs/accounting.md)."""
    fields = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    entries = [entry for entry in usage.get("iterations") or [] if entry.get("type") not in ("compaction",)]
    source = entries[-1] if entries and all(isinstance(entries[-1].get(key), int) for key in fields) else usage
    return sum(source.get(key) or 0 for key in fields)


def sums(entries: list[dict[str, Any]], key: str) -> int:
    return sum(entry[key] for entry in entries)


@pytest.mark.parametrize("how", ["json", "stream", "beta_stream"])
async def test_messages_bill_the_sum_and_size_the_context_from_the_last_call(how: str) -> None:
    usage = await messages_usage(gateway("messages"), how)

    # The bill: every call's tokens, as Anthropic sums the iterations of its own server tools.
    assert (usage["input_tokens"], usage["output_tokens"]) == (10_500, 1_000)
    assert (usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]) == (300, 210_000)
    if how == "stream":
        return  # the SDK's non-beta stream helper drops `iterations` (its Usage has no such field)
    entries = usage["iterations"]
    assert entries == [{"type": "message", **MESSAGES_USAGE[0]}, {"type": "message", **MESSAGES_USAGE[1]}]
    for key in MESSAGES_USAGE[0]:  # the entries add up to the top-level counts (Claude Code's cost check)
        assert sums(entries, key) == usage[key]
    # The context: the last call's prompt and answer, under a 200k window (the top-level sum is 221,800).
    assert claude_code_context(usage) == 111_600


@pytest.mark.parametrize("route", ["chat", "responses"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_openai_routes_report_the_last_call_with_every_call_listed(route: str, stream: bool) -> None:
    usage = await openai_usage(gateway(route), route, stream)

    calls = CHAT_USAGE if route == "chat" else RESPONSES_USAGE
    entries = usage.pop("iterations")
    # The context, as Codex reads it (`total_tokens` of the last response): the last call's counters, details too.
    assert usage == calls[1]
    # The bill: every call's own usage, in order.
    assert entries == [{"type": "message", **calls[0]}, {"type": "message", **calls[1]}]


@pytest.mark.parametrize("route", ["chat", "responses"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_sum_usage_true_sums_on_the_openai_routes(route: str, stream: bool) -> None:
    usage = await openai_usage(gateway(route, sum_usage=True), route, stream)

    if route == "chat":
        assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (220_800, 1_000, 221_800)
        assert usage["prompt_tokens_details"]["cached_tokens"] == 210_000
        assert usage["completion_tokens_details"]["reasoning_tokens"] == 350
    else:
        assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (220_800, 1_000, 221_800)
        assert usage["input_tokens_details"]["cached_tokens"] == 210_000
        assert usage["output_tokens_details"]["reasoning_tokens"] == 350
    assert len(usage["iterations"]) == 2


@pytest.mark.parametrize("how", ["json", "beta_stream"])
async def test_sum_usage_false_reports_the_last_call_on_messages(how: str) -> None:
    usage = await messages_usage(gateway("messages", sum_usage=False), how)

    entries = usage.pop("iterations")
    assert usage == MESSAGES_USAGE[1]
    assert entries == [{"type": "message", **MESSAGES_USAGE[0]}, {"type": "message", **MESSAGES_USAGE[1]}]


async def test_a_calls_own_iterations_are_listed_as_the_app_reported_them() -> None:
    """An upstream that ran its own server tools (or compaction) lists them: they stand for that call."""
    compaction = {
        "type": "compaction",
        "input_tokens": 180_000,
        "output_tokens": 3_500,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    own = [compaction, {"type": "message", **MESSAGES_USAGE[1]}]
    scripted = ScriptedModel(
        message(tool_use("lookup", {"key": "k"}), usage={"input_tokens": 7, "output_tokens": 3}),
        message("done", usage={**MESSAGES_USAGE[1], "iterations": own}),
    )
    app = AgenticLoopMiddleware(scripted, hooks=[ServerTools([lookup])])

    usage = await messages_usage(app, "json")

    assert usage["iterations"] == [
        {
            "type": "message",
            "input_tokens": 7,
            "output_tokens": 3,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
        *own,
    ]
    assert usage["input_tokens"] == 507  # the top-level counts of the calls, which leave compaction out
    assert claude_code_context(usage) == 111_600


async def test_a_request_no_hook_acted_on_keeps_the_apps_usage() -> None:
    scripted = ScriptedModel(message("plain", usage=MESSAGES_USAGE[0]))
    app = AgenticLoopMiddleware(scripted, hooks=[ServerTools([lookup])])

    usage = await messages_usage(app, "json")

    assert usage == MESSAGES_USAGE[0]


@pytest.mark.parametrize(("text", "expected"), [("true", True), ("false", False), ("null", None)])
def test_sum_usage_in_yaml_is_true_false_or_null(tmp_path: Any, text: str, expected: bool | None) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(f"agentic_middleware:\n  sum_usage: {text}\n")

    assert load_config(config).sum_usage is expected


def test_sum_usage_that_is_not_a_flag_stops_the_gateway_at_start() -> None:
    with pytest.raises(ConfigurationError, match="sum_usage must be true, false or null"):
        Settings(sum_usage="yes")  # type: ignore[arg-type]
