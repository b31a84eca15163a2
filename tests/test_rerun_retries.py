"""A rerun (or closing call) the app answers with a transient error is retried inside the loop, reusing the results
of the tools already run: the client gets the answer, and no tool runs twice (issue 23, item 2)."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai
import pytest
from conftest import anthropic_client, openai_client
from starlette.responses import JSONResponse
from streams import USER, event_stream

from agentic_middleware import AgenticLoopMiddleware, ConfigurationError, RoundRecord, ServerTools, server_tool, sse
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

RUNS: list[str] = []


@server_tool
async def lookup(key: str) -> str:
    RUNS.append(key)
    return f"value of {key}"


@pytest.fixture(autouse=True)
def _fresh_runs() -> None:
    RUNS.clear()


def overloaded(status: int = 529, **headers: str) -> JSONResponse:
    return JSONResponse(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, status, headers=headers
    )


def first(route: str, stream: bool) -> Any:
    """The first answer: a call of `lookup`, streamed when the client streams (the app is asked to)."""
    if route == "messages":
        body = message(tool_use("lookup", {"key": "k"}))
        return event_stream(list(sse.messages_events(body))) if stream else body
    if route == "chat":
        body = chat_completion(tool_calls=[tool_call("lookup", {"key": "k"})])
        return event_stream(list(sse.chat_chunks(body, include_usage=False))) if stream else body
    body = response(function_call("lookup", {"key": "k"}))
    return event_stream(list(sse.responses_events(body))) if stream else body


def final(route: str, stream: bool, text: str = "The value is v.") -> Any:
    body = {"messages": message(text), "chat": chat_completion(content=text), "responses": response(text)}[route]
    if not stream:
        return body
    events = {
        "messages": sse.messages_events,
        "chat": lambda body: sse.chat_chunks(body, include_usage=False),
        "responses": sse.responses_events,
    }[route]
    return event_stream(list(events(body)))


async def ask(app: Any, route: str, stream: bool) -> tuple[str, dict[str, str]]:
    """The client's text, and its response headers where it has them (not on a stream)."""
    if route == "messages":
        claude = anthropic_client(app)
        if stream:
            async with claude.messages.stream(model="m", max_tokens=64, messages=USER) as events:
                done = await events.get_final_message()
            return "".join(block.text for block in done.content if block.type == "text"), {}
        raw = await claude.messages.with_raw_response.create(model="m", max_tokens=64, messages=USER)
        return "".join(block.text for block in (await raw.parse()).content if block.type == "text"), dict(raw.headers)
    gpt = openai_client(app)
    if route == "chat":
        if stream:
            async with gpt.chat.completions.stream(model="m", messages=USER) as chunks:
                completion = await chunks.get_final_completion()
            return completion.choices[0].message.content or "", {}
        raw_chat = await gpt.chat.completions.with_raw_response.create(model="m", messages=USER)
        return raw_chat.parse().choices[0].message.content or "", dict(raw_chat.headers)
    if stream:
        async with gpt.responses.stream(model="m", input="go") as events:
            done_response = await events.get_final_response()
        return done_response.output_text, {}
    raw_response = await gpt.responses.with_raw_response.create(model="m", input="go")
    return raw_response.parse().output_text, dict(raw_response.headers)


CASES = [(route, stream) for route in ("messages", "chat", "responses") for stream in (False, True)]


@pytest.mark.parametrize(("route", "stream"), CASES, ids=[f"{r}-{'stream' if s else 'json'}" for r, s in CASES])
async def test_a_rerun_answered_529_is_retried_and_its_tool_runs_once(route: str, stream: bool) -> None:
    records: list[RoundRecord] = []
    model = ScriptedModel(first(route, stream), overloaded(**{"retry-after-ms": "1"}), final(route, stream))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], on_round=records.append)
    text, headers = await ask(app, route, stream)
    assert text.endswith("The value is v.")
    assert RUNS == ["k"]  # the tool ran once: the retry sent the rerun already built
    assert len(model.requests) == 3 and model.requests[2].raw == model.requests[1].raw
    assert [(record.depth, record.retries) for record in records] == [(0, 0), (1, 1)]
    if not stream:
        assert headers["x-agentic-loop-retries"] == "1" and headers["x-agentic-loop-reruns"] == "1"


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
async def test_each_transient_status_of_a_rerun_is_retried(status: int) -> None:
    model = ScriptedModel(first("messages", True), overloaded(status, **{"retry-after": "0"}), final("messages", True))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    text, _ = await ask(app, "messages", True)
    assert text == "The value is v." and RUNS == ["k"] and len(model.requests) == 3


async def test_a_rerun_answered_400_is_not_retried() -> None:
    bad = JSONResponse({"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}, 400)
    model = ScriptedModel(first("messages", False), bad, default=final("messages", False))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    with pytest.raises(anthropic.BadRequestError):
        await ask(app, "messages", False)
    assert len(model.requests) == 2


async def test_a_rerun_retried_then_answered_400_tells_the_client_of_its_retry() -> None:
    """The answer that goes to the client as the app sent it after a retry carries the retry in its headers, as
    every response that can still carry headers does (docs/accounting.md)."""
    records: list[RoundRecord] = []
    bad = JSONResponse({"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}, 400)
    model = ScriptedModel(first("messages", False), overloaded(**{"retry-after-ms": "1"}), bad)
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], on_round=records.append)
    with pytest.raises(anthropic.BadRequestError) as raised:
        await ask(app, "messages", False)
    assert len(model.requests) == 3 and records[-1].retries == 1
    headers = raised.value.response.headers
    assert headers["x-agentic-loop-retries"] == "1" and headers["x-agentic-loop-ended-by"] == "app_answer"


async def test_retries_used_up_give_the_client_the_last_error_with_its_status() -> None:
    records: list[RoundRecord] = []
    model = ScriptedModel(first("chat", False), default=overloaded(**{"retry-after-ms": "1"}))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], on_round=records.append)
    with pytest.raises(openai.APIStatusError) as raised:
        await ask(app, "chat", False)
    assert raised.value.status_code == 529
    assert raised.value.response.headers["x-agentic-loop-retries"] == "2"
    assert len(model.requests) == 4 and RUNS == ["k"]  # the rerun and its two retries
    assert records[-1].retries == 2


async def test_retries_used_up_on_a_stream_end_it_with_the_error_event() -> None:
    model = ScriptedModel(first("messages", True), default=overloaded(**{"retry-after-ms": "1"}))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], rerun_retries=1)
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        await ask(app, "messages", True)
    assert len(model.requests) == 3 and RUNS == ["k"]


async def test_rerun_retries_0_sends_the_first_failure_on() -> None:
    model = ScriptedModel(first("messages", False), overloaded(), default=final("messages", False))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], rerun_retries=0)
    with pytest.raises(anthropic.APIStatusError) as raised:
        await ask(app, "messages", False)
    assert raised.value.status_code == 529 and len(model.requests) == 2


async def test_the_first_calls_529_reaches_the_client_unretried() -> None:
    model = ScriptedModel(overloaded(), default=final("messages", False))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    with pytest.raises(anthropic.APIStatusError) as raised:
        await ask(app, "messages", False)
    assert raised.value.status_code == 529 and len(model.requests) == 1  # the client's own retries handle it


async def test_the_retry_waits_the_retry_after_ms_the_app_asked_for() -> None:
    seen: list[float] = []

    def timed(reply: Any) -> Any:
        def answer(request: RecordedRequest) -> Any:
            seen.append(asyncio.get_running_loop().time())
            return reply

        return answer

    model = ScriptedModel(
        first("messages", False),
        timed(overloaded(**{"retry-after-ms": "300", "retry-after": "0"})),
        timed(final("messages", False)),
    )
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    text, _ = await ask(app, "messages", False)
    assert text == "The value is v."
    assert seen[1] - seen[0] >= 0.3  # the app saw the retry no sooner than it asked (retry-after-ms wins)


async def test_a_retry_after_past_the_loop_timeout_is_not_waited_for() -> None:
    refusal = overloaded(**{"retry-after": "30"})
    model = ScriptedModel(first("messages", False), refusal, default=final("messages", False))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], loop_timeout=10)
    with pytest.raises(anthropic.APIStatusError) as raised:
        await ask(app, "messages", False)
    assert raised.value.status_code == 529  # the error as it is, at once, not a loop timeout 10 s later
    assert len(model.requests) == 2


async def test_a_retry_after_over_a_minute_is_not_waited_for() -> None:
    refusal = overloaded(**{"retry-after": "61"})
    model = ScriptedModel(first("messages", False), refusal, default=final("messages", False))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    with pytest.raises(anthropic.APIStatusError):
        await ask(app, "messages", False)
    assert len(model.requests) == 2


@pytest.mark.parametrize("route", ["messages", "chat", "responses"])
async def test_a_rerun_stream_that_breaks_before_its_first_event_is_retried(route: str) -> None:
    async def broken() -> Any:
        yield b""
        raise ConnectionResetError("upstream went away")

    model = ScriptedModel(first(route, True), lambda request: event_stream(broken()), final(route, True))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    text, _ = await ask(app, route, True)
    assert text.endswith("The value is v.") and RUNS == ["k"] and len(model.requests) == 3


async def test_a_rerun_stream_whose_first_event_is_an_overload_error_is_retried() -> None:
    error = sse.messages_error("overloaded_error", "Overloaded")
    model = ScriptedModel(first("messages", True), event_stream([error]), final("messages", True))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    text, _ = await ask(app, "messages", True)
    assert text == "The value is v." and len(model.requests) == 3


def cut_after(events: list[bytes]) -> Any:
    """A stream of these events that then breaks off, as an upstream connection reset mid-stream."""

    async def cut() -> Any:
        for event in events:
            yield event
        raise ConnectionResetError("upstream went away")

    return lambda request: event_stream(cut())


NEVER_SENT = {
    "messages-overload-after-message_start": (
        "messages",
        lambda: event_stream(
            [
                *list(sse.messages_events(message("never sent")))[:1],
                sse.messages_ping(),
                sse.messages_error("overloaded_error", "Overloaded"),
            ]
        ),
    ),
    "messages-cut-in-a-held-tool-call": (
        "messages",
        lambda: cut_after(list(sse.messages_events(message(tool_use("lookup", {"key": "again"}))))[:3]),
    ),
    "responses-cut-after-in_progress": (
        "responses",
        lambda: cut_after(list(sse.responses_events(response("never sent")))[:2]),
    ),
}


@pytest.mark.parametrize("case", list(NEVER_SENT))
async def test_a_rerun_stream_that_fails_after_events_the_client_never_gets_is_retried(case: str) -> None:
    """A rerun's own lifecycle start never reaches the client (it has the first round's), nor does a tool call
    held until its round ends: a stream that fails after only those has sent nothing, so it is retried like one
    that fails before its first event, and the client's stream reads as if the failure never happened."""
    route, failure = NEVER_SENT[case]
    records: list[RoundRecord] = []
    model = ScriptedModel(first(route, True), failure(), final(route, True))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], on_round=records.append)
    text, _ = await ask(app, route, True)
    assert text == "The value is v." and RUNS == ["k"] and len(model.requests) == 3
    assert records[-1].retries == 1


async def test_a_rerun_stream_that_breaks_after_an_event_is_not_retried() -> None:
    events = list(sse.messages_events(message("Half of it")))

    async def broken() -> Any:
        for event in events[:3]:
            yield event
        raise ConnectionResetError("upstream went away")

    model = ScriptedModel(first("messages", True), lambda request: event_stream(broken()), final("messages", True))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    with pytest.raises(anthropic.APIStatusError):
        await ask(app, "messages", True)
    assert len(model.requests) == 2  # part of that round reached the client: a retry would send it twice


async def test_a_rerun_past_app_timeout_is_retried_and_its_tool_runs_once() -> None:
    """The loop's own 504 for a rerun that did not answer within `app_timeout` is a transient failure like the
    app's 504: the hung call was cancelled, so the same request is sent again (else the client's SDK retries the
    504 with the whole turn, its tools included)."""

    async def hung(request: RecordedRequest) -> Any:
        await asyncio.sleep(30)

    records: list[RoundRecord] = []
    model = ScriptedModel(first("messages", False), hung, final("messages", False))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], app_timeout=0.2, on_round=records.append)
    text, headers = await ask(app, "messages", False)
    assert text == "The value is v." and RUNS == ["k"] and len(model.requests) == 3
    assert records[-1].retries == 1 and headers["x-agentic-loop-retries"] == "1"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_rerun_whose_app_raises_its_own_timeout_error_is_retried_as_any_failure_it_raises(stream: bool) -> None:
    """A `TimeoutError` the app raises itself (its own upstream's timeout: aiohttp's is one), with no `app_timeout`
    of ours, is a failure of the app like any other it raises: the rerun is tried again (docs/errors.md), not
    ended with a 500 while a `RuntimeError` would have been retried."""

    def timed_out(request: RecordedRequest) -> Any:
        raise TimeoutError("the upstream did not answer")

    records: list[RoundRecord] = []
    model = ScriptedModel(first("messages", stream), timed_out, final("messages", stream))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])], on_round=records.append)
    text, headers = await ask(app, "messages", stream)
    assert text == "The value is v." and RUNS == ["k"] and len(model.requests) == 3
    assert records[-1].retries == 1
    if not stream:
        assert headers["x-agentic-loop-retries"] == "1"


async def test_the_first_calls_own_timeout_error_reaches_the_client_as_the_apps_failure() -> None:
    def timed_out(request: RecordedRequest) -> Any:
        raise TimeoutError("the upstream did not answer")

    model = ScriptedModel(timed_out, default=final("messages", False))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    with pytest.raises(anthropic.InternalServerError) as raised:
        await ask(app, "messages", False)
    assert raised.value.status_code == 500 and len(model.requests) == 1  # the first call is never retried
    assert raised.value.body["error"]["message"] == "the model app failed: TimeoutError"  # type: ignore[index]


def test_rerun_retries_must_be_a_whole_number(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="rerun_retries"):
        AgenticLoopMiddleware(ScriptedModel(), rerun_retries=-1)
    config = tmp_path / "agentic.yaml"
    config.write_text("agentic_middleware:\n  rerun_retries: 5\n")
    assert AgenticLoopMiddleware(ScriptedModel(), config=str(config)).settings.rerun_retries == 5


def test_rerun_retries_null_in_yaml_is_the_default_as_none_is_in_code(tmp_path: Any) -> None:
    config = tmp_path / "agentic.yaml"
    config.write_text("agentic_middleware:\n  rerun_retries: null\n  max_agentic_loops: null\n")
    from_yaml = AgenticLoopMiddleware(ScriptedModel(), config=str(config)).settings
    in_code = AgenticLoopMiddleware(ScriptedModel(), rerun_retries=None, max_agentic_loops=None).settings
    assert from_yaml.rerun_retries == in_code.rerun_retries == 2
    assert from_yaml.max_agentic_loops == in_code.max_agentic_loops


def _responses_failure(code: str, message: str, event: str) -> bytes:
    """A Responses stream that fails at once: `response.created`, then `response.failed` or the `error` event."""
    created = {"id": "resp_x", "object": "response", "created_at": 1, "status": "in_progress", "output": []}
    opening = sse.named_event(
        "response.created", {"type": "response.created", "sequence_number": 0, "response": created}
    )
    if event == "failed":
        failed = {**created, "status": "failed", "error": {"code": code, "message": message}}
        return opening + sse.named_event(
            "response.failed", {"type": "response.failed", "sequence_number": 1, "response": failed}
        )
    return opening + sse.named_event(
        "error", {"type": "error", "sequence_number": 1, "code": code, "message": message, "param": None}
    )


ERROR_EVENTS = {
    "messages invalid_request_error": ("messages", sse.messages_error("invalid_request_error", "prompt is too long")),
    "messages authentication_error": ("messages", sse.messages_error("authentication_error", "invalid x-api-key")),
    "messages permission_error": ("messages", sse.messages_error("permission_error", "not allowed")),
    "messages not_found_error": ("messages", sse.messages_error("not_found_error", "no such model")),
    "messages request_too_large": ("messages", sse.messages_error("request_too_large", "too large")),
    "chat invalid_prompt": ("chat", sse.chat_error("flagged prompt", "invalid_request_error", "invalid_prompt")),
    "responses failed invalid_prompt": ("responses", _responses_failure("invalid_prompt", "flagged prompt", "failed")),
    "responses error invalid_request_error": (
        "responses",
        _responses_failure("invalid_request_error", "bad input", "error"),
    ),
}


@pytest.mark.parametrize("case", ERROR_EVENTS)
async def test_a_rerun_stream_failing_with_a_lasting_error_type_is_not_retried_and_keeps_its_type(case: str) -> None:
    route, error = ERROR_EVENTS[case]
    kind = case.split()[-1]
    model = ScriptedModel(first(route, True), event_stream([error]), default=final(route, True))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    if route == "messages":
        with pytest.raises(anthropic.APIStatusError) as claude_raised:
            await ask(app, route, True)
        assert isinstance(claude_raised.value.body, dict)
        assert claude_raised.value.body["error"]["type"] == kind  # not api_error
    else:
        with pytest.raises(openai.APIError) as gpt_raised:
            await ask(app, route, True)
        assert gpt_raised.value.code == kind
        assert gpt_raised.value.type == "invalid_request_error"  # not server_error
    assert len(model.requests) == 2 and RUNS == ["k"]  # the rerun, not retried


@pytest.mark.parametrize("stream", [False, True])
async def test_a_rerun_stream_failing_with_a_transient_error_type_is_retried(stream: bool) -> None:
    error = sse.chat_error("Rate limit reached", "requests", "rate_limit_exceeded")
    model = ScriptedModel(first("chat", stream), event_stream([error]), default=final("chat", stream))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    text, _ = await ask(app, "chat", stream)
    assert text == "The value is v." and len(model.requests) == 3 and RUNS == ["k"]


async def test_a_rerun_answered_with_an_error_stream_gives_a_json_client_its_status_and_type() -> None:
    error = sse.messages_error("permission_error", "not allowed")
    model = ScriptedModel(first("messages", False), event_stream([error]), default=final("messages", False))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([lookup])])
    with pytest.raises(anthropic.PermissionDeniedError) as raised:
        await ask(app, "messages", False)
    assert raised.value.status_code == 403 and len(model.requests) == 2
