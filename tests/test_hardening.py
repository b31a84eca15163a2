"""Bad input, limits, faults of the app and hooks, client disconnects, and a property test over all of it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest
from conftest import http_client, http_scope
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from support import Route, ToolHook, post

from agentic_middleware import (
    AgenticLoopMiddleware,
    AgenticLoopPlan,
    AgenticLoopRequestPatch,
    ServerTool,
    ServerTools,
    server_tool,
)
from agentic_middleware.testing import RecordedRequest, ScriptedModel


@pytest.fixture(params=["messages", "chat"])
def route(request: pytest.FixtureRequest) -> Route:
    return Route(request.param)


class Client:
    """A raw ASGI client: sends a body, records what comes back, and can hang up."""

    def __init__(self, body: bytes, chunks: int = 1) -> None:
        size = max(1, -(-len(body) // chunks))
        parts = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
        self.incoming = [
            {"type": "http.request", "body": part, "more_body": i < len(parts) - 1} for i, part in enumerate(parts)
        ]
        self.gone = asyncio.Event()
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if self.incoming:
            return self.incoming.pop(0)
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        assert not self.gone.is_set(), "written to a closed connection"
        self.sent.append(message)

    @property
    def starts(self) -> list[dict[str, Any]]:
        return [m for m in self.sent if m["type"] == "http.response.start"]

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


# Bad client input: what the app judges goes to the app; what the hooks rely on is checked here.


@pytest.mark.parametrize(
    ("raw", "reaches_app"),
    [(b"", True), (b"{not json", False), (b"[1, 2]", True), (b'"text"', True), (b'{"unknown_field": 1}', True)],
)
async def test_bodies_the_middleware_does_not_need_go_to_the_app_unchanged_and_invalid_json_is_refused(
    route: Route, raw: bytes, reaches_app: bool
) -> None:
    model = ScriptedModel(JSONResponse({"type": "error", "error": {"type": "invalid_request_error"}}, 400))
    hook = ToolHook()
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        response = await client.post(route.path, content=raw)
    assert response.status_code == 400
    assert [request.raw for request in model.requests] == ([raw] if reaches_app else [])
    assert hook.gates == []


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("messages", "hello", "messages must be an array, got str"),
        ("tools", {"name": "x"}, "tools must be an array, got dict"),
        ("stream", "yes", "stream must be a boolean, got str"),
        ("model", 7, "model must be a string, got int"),
    ],
)
async def test_fields_the_hooks_rely_on_get_a_400_in_the_routes_shape(
    route: Route, field: str, value: Any, expected: str
) -> None:
    model = ScriptedModel(route.text("never"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()])) as client:
        response = await post(client, route, route.request(**{field: value}))
    assert response.status_code == 400
    kind, message = route.error(response.json())
    assert kind == "invalid_request_error" and message == expected
    assert model.requests == []


async def test_a_request_over_the_limit_passes_through_whole_without_hooks(
    route: Route, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedModel(route.calls(("lookup", {"n": 1})))
    hook = ToolHook()
    app = AgenticLoopMiddleware(model, hooks=[hook], max_body_bytes=1000)
    raw = orjson.dumps(route.request("x" * 5000))
    client = Client(raw, chunks=7)
    await app(http_scope(route.path, raw), client.receive, client.send)

    assert model.requests[0].raw == raw  # never truncated
    assert route.tool_names(orjson.loads(client.body)) == ["lookup"]  # the app's answer, untouched
    assert hook.gates == []
    assert "over max_body_bytes=1000" in caplog.text


async def test_an_answer_over_the_limit_passes_through_whole_without_hooks(
    route: Route, caplog: pytest.LogCaptureFixture
) -> None:
    big = route.calls(("lookup", {"blob": "y" * 5000}))
    hook = ToolHook()
    async with http_client(AgenticLoopMiddleware(ScriptedModel(big), hooks=[hook], max_body_bytes=1000)) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 200 and response.json() == big
    assert hook.gates == []
    assert "over max_body_bytes=1000" in caplog.text


# Faults of the model app, on the first call and on a rerun.


def hang(seconds: float = 30) -> Any:
    async def reply(request: RecordedRequest) -> Any:
        await asyncio.sleep(seconds)
        return {}

    return reply


def crash(request: RecordedRequest) -> Any:
    raise RuntimeError("model app crashed")


@pytest.mark.parametrize("on_rerun", [False, True], ids=["first call", "rerun"])
@pytest.mark.parametrize(
    ("fault", "status", "check"),
    [
        (lambda: crash, 500, "the model app failed: RuntimeError"),
        (lambda: JSONResponse({"error": "internal"}, 500), 500, '{"error":"internal"}'),
        (lambda: Response(b"{broken", media_type="application/json"), 200, "{broken"),
        (
            lambda: StreamingResponse(iter([b"data: 1\n\n"]), media_type="text/event-stream"),
            500,
            "the model app answered a call that did not stream with an event stream",
        ),
        (hang, 504, "did not answer within app_timeout=0.1 s"),
    ],
    ids=["raises", "answers 500", "invalid json", "streams", "hangs"],
)
async def test_faults_of_the_app_get_one_clear_answer_and_leave_nothing_behind(
    route: Route, fault: Any, status: int, check: str, on_rerun: bool
) -> None:
    script = [route.calls(("lookup", {"n": 1})), fault()] if on_rerun else [fault()]
    model = ScriptedModel(*script, route.text("the next request works"))
    hook = ToolHook()
    # No retries: the fault itself is judged here (a rerun's retries are in tests/test_rerun_retries.py).
    app = AgenticLoopMiddleware(model, hooks=[hook], app_timeout=0.1, rerun_retries=0)
    async with http_client(app) as client:
        response = await post(client, route, route.request())
        assert response.status_code == status
        assert check in response.text
        if status == 504 and route.name == "messages":
            assert response.json()["error"]["type"] == "timeout_error"
        assert len(hook.cleanups) == int(on_rerun)
        after = await post(client, route, route.request())
    assert route.final_text(after.json()) == "the next request works"


# Faults of hooks.


async def test_a_hanging_hook_times_out_with_a_500_and_its_tools_stop(route: Route) -> None:
    cancelled = asyncio.Event()

    @server_tool
    async def stuck() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    await assert_times_out_once(route, stuck)
    assert cancelled.is_set()


async def test_a_tool_that_swallows_its_cancellation_still_times_out_with_a_500(route: Route) -> None:
    # A round's one call is awaited in the request's own task (no task of its own): a tool that catches the
    # timeout's cancellation and returns must not make the round go on as if nothing was cancelled.
    @server_tool
    async def stubborn() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "swallowed"
        return "never"

    await assert_times_out_once(route, stubborn)


async def assert_times_out_once(route: Route, tool: ServerTool) -> None:
    """The model calls `tool` in its first round: the request ends in the route's 500 at `hook_timeout`, not rerun."""
    model = ScriptedModel(route.calls((tool.name, {})), route.text("never"))
    hooks = [ServerTools([tool], timeout=60)]
    async with http_client(AgenticLoopMiddleware(model, hooks=hooks, hook_timeout=0.1)) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 500
    assert "timed out after hook_timeout=0.1 s" in route.error(response.json())[1]
    assert len(model.requests) == 1


async def test_the_whole_loop_has_a_time_limit_and_cleanup_still_runs(route: Route) -> None:
    def slow_then_call(request: RecordedRequest) -> Any:
        async def reply() -> Any:
            await asyncio.sleep(0.06)
            return route.calls(("lookup", {"n": len(request.raw)}))

        return reply()

    hook = ToolHook()
    model = ScriptedModel(default=slow_then_call)
    app = AgenticLoopMiddleware(model, hooks=[hook], loop_timeout=0.15, max_agentic_loops=10)
    async with http_client(app) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 504
    assert "loop_timeout=0.15 s" in route.error(response.json())[1]
    assert response.headers["x-agentic-loop-ended-by"] == "timeout"
    assert 1 <= len(hook.cleanups) == len(hook.plans) < 10


async def test_a_hook_that_mutates_the_response_it_was_given_changes_nothing_sent(route: Route) -> None:
    class Vandal(ToolHook):
        async def async_should_run_agentic_loop(self, response: Any, **arguments: Any) -> Any:
            response.clear()
            return False, {}

    answer = route.text("intact")
    async with http_client(AgenticLoopMiddleware(ScriptedModel(answer), hooks=[Vandal()])) as client:
        response = await post(client, route, route.request())
    assert response.json() == answer


# The client going away.


async def test_a_client_that_disconnects_mid_rerun_stops_the_loop_at_once(route: Route) -> None:
    rerun_started, rerun_cancelled = asyncio.Event(), asyncio.Event()

    async def slow_rerun(request: RecordedRequest) -> Any:
        rerun_started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            rerun_cancelled.set()
            raise
        return route.text("never")

    hook = ToolHook()
    model = ScriptedModel(route.calls(("lookup", {"n": 1})), slow_rerun, route.text("never asked"))
    app = AgenticLoopMiddleware(model, hooks=[hook])
    raw = orjson.dumps(route.request())
    client = Client(raw)
    task = asyncio.create_task(app(http_scope(route.path, raw), client.receive, client.send))
    await asyncio.wait_for(rerun_started.wait(), 5)
    client.gone.set()
    await asyncio.wait_for(task, 5)

    assert rerun_cancelled.is_set()
    assert len(model.requests) == 2  # no further call
    assert len(hook.cleanups) == 1
    assert client.sent == []  # nothing written to the closed connection


async def test_a_client_that_disconnects_while_tools_run_cancels_them(route: Route) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    @server_tool
    async def slow_search(query: str) -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    records: list[Any] = []
    model = ScriptedModel(route.calls(("slow_search", {"query": "q"})), route.text("never"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([slow_search])], on_round=records.append)
    raw = orjson.dumps(route.request())
    client = Client(raw)
    task = asyncio.create_task(app(http_scope(route.path, raw), client.receive, client.send))
    await asyncio.wait_for(started.wait(), 5)
    client.gone.set()
    await asyncio.wait_for(task, 5)

    assert cancelled.is_set()
    assert len(model.requests) == 1
    assert client.sent == []
    assert records[-1].outcome == "client_disconnect"
    assert not [t for t in asyncio.all_tasks() if "wait_for_disconnect" in repr(t.get_coro())]


# Security: what a client may not do.


async def test_client_headers_and_fields_cannot_raise_the_limit_or_reach_hook_kwargs(route: Route) -> None:
    hook = ToolHook()
    model = ScriptedModel(*(route.calls(("lookup", {"n": n})) for n in range(10)))
    body = route.request(kwargs={"max_agentic_loops": 9}, litellm_call_id="client-chosen", max_agentic_loops=9)
    headers = {"x-agentic-loop-reruns": "0", "x-max-agentic-loops": "9", "x-agentic-internal": "1"}
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        await post(client, route, body, headers=headers)

    assert len(model.requests) == 5  # the first call, 3 reruns, the closing call
    assert all(gate["kwargs"]["max_agentic_loops"] == 3 for gate in hook.gates)
    assert all(gate["kwargs"]["litellm_call_id"] != "client-chosen" for gate in hook.gates)
    assert "kwargs" not in hook.gates[0]["kwargs"]


async def test_reruns_carry_exactly_the_clients_credentials(route: Route) -> None:
    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("a"), route.calls(("lookup", {"n": 1})))
    model.script.append(route.text("b"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ToolHook()])) as client:
        await post(client, route, route.request(), headers={"authorization": "Bearer alice"})
        await post(client, route, route.request())
    assert [r.headers.get("authorization") for r in model.requests] == ["Bearer alice"] * 2 + [None] * 2


async def test_operators_can_hide_error_details_from_clients(route: Route, caplog: pytest.LogCaptureFixture) -> None:
    class Leaky(ToolHook):
        async def async_build_agentic_loop_plan(self, **_: Any) -> Any:
            raise ConnectionError("db at 10.0.0.5:5432 refused")

        async_build_chat_completion_agentic_loop_plan = async_build_agentic_loop_plan

    model = ScriptedModel(route.calls(("lookup", {"n": 1})))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Leaky()], error_details=False)) as client:
        response = await post(client, route, route.request())
    assert response.status_code == 500
    message = route.error(response.json())[1]
    assert message.startswith("an agentic hook failed (call id ")
    assert "10.0.0.5" not in response.text and "Leaky" not in response.text
    assert "10.0.0.5" in caplog.text  # the operator still sees it


# Properties: whatever the app and the hooks do, one well-formed response.

app_bodies = st.one_of(
    st.builds(lambda text: orjson.dumps({"content": [{"type": "text", "text": text}]}), st.text(max_size=20)),
    st.builds(
        lambda name, n: orjson.dumps(
            {
                "content": [{"type": "tool_use", "id": f"t{n}", "name": name, "input": {"n": n}}],
                "choices": [
                    {"message": {"tool_calls": [{"id": f"c{n}", "function": {"name": name, "arguments": "{}"}}]}}
                ],
            }
        ),
        st.sampled_from(["lookup", "other"]),
        st.integers(0, 3),
    ),
    st.binary(max_size=30),
    st.just(b"[1, 2, 3]"),
)
app_answers = st.tuples(
    st.sampled_from([200, 201, 400, 429, 500]),
    st.sampled_from(["application/json", "text/plain", "text/event-stream", "application/problem+json"]),
    app_bodies,
    st.integers(1, 3),
)
plans = st.sampled_from(
    [
        "rerun",
        "override",
        "terminate",
        "pass",
        "raise",
        "garbage",
        "rerun-without-messages",
        "override-garbage",
    ]
)


class RandomHook:
    def __init__(self, plans: list[str]) -> None:
        self.plans = plans

    async def async_should_run_agentic_loop(self, response: Any, **_: Any) -> Any:
        return bool(self.plans), {"tool_calls": []}

    async def async_build_agentic_loop_plan(self, messages: Any, **_: Any) -> Any:
        plan = self.plans.pop(0) if self.plans else "pass"
        if plan == "raise":
            raise ValueError("boom")
        return {
            "rerun": AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=messages)),
            "override": AgenticLoopPlan(response_override={"content": []}),
            "terminate": AgenticLoopPlan(terminate=True),
            "pass": AgenticLoopPlan(),
            "garbage": 42,
            "rerun-without-messages": AgenticLoopPlan(run_agentic_loop=True),
            "override-garbage": AgenticLoopPlan(response_override={"x": object()}),
        }[plan]

    async_build_chat_completion_agentic_loop_plan = async_build_agentic_loop_plan


def streamed(status: int, media_type: str, body: bytes, parts: int) -> Response:
    size = max(1, -(-len(body) // parts))
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    return StreamingResponse(iter(chunks), status_code=status, media_type=media_type)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    route_name=st.sampled_from(["messages", "chat"]),
    request_body=st.one_of(
        st.builds(
            lambda text: orjson.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}), st.text()
        ),
        st.binary(max_size=40),
        st.just(b'{"model": "m", "messages": [], "stream": true}'),
        st.just(b'{"model": 1}'),
    ),
    answers=st.lists(app_answers, min_size=1, max_size=4),
    hook_plans=st.lists(plans, max_size=4),
    request_chunks=st.integers(1, 3),
    buffered=st.booleans(),
)
def test_any_exchange_gets_exactly_one_well_formed_response(
    route_name: str,
    request_body: bytes,
    answers: list[tuple[int, str, bytes, int]],
    hook_plans: list[str],
    request_chunks: int,
    buffered: bool,
) -> None:
    route = Route(route_name)
    replies = [
        streamed(*answer) if not buffered else Response(answer[2], answer[0], media_type=answer[1])
        for answer in answers
    ]
    model = ScriptedModel(*replies, default=PlainTextResponse("script over"))
    app = AgenticLoopMiddleware(model, hooks=[RandomHook(hook_plans)], max_agentic_loops=3)
    client = Client(request_body, chunks=request_chunks)
    logging.disable(logging.CRITICAL)
    try:
        asyncio.run(app(http_scope(route.path, request_body), client.receive, client.send))
    finally:
        logging.disable(logging.NOTSET)

    assert len(client.starts) == 1
    lengths = [value for name, value in client.starts[0]["headers"] if name == b"content-length"]
    assert len(lengths) <= 1
    if lengths:
        assert int(lengths[0]) == len(client.body)
    assert client.sent[-1]["type"] == "http.response.body" and not client.sent[-1].get("more_body", False)


def half_then(error: Exception) -> Any:
    """A model app that begins a 503 answer, then raises `error` (its upstream reset it, or timed out)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"overloaded, part 1", "more_body": True})
        raise error

    return app


async def test_an_app_that_fails_mid_answer_gives_the_client_one_response_start(route: Route) -> None:
    raw = orjson.dumps(route.request())
    client = Client(raw)
    with pytest.raises(RuntimeError, match="connection reset"):  # re-raised for the server to log and close
        await AgenticLoopMiddleware(half_then(RuntimeError("connection reset")), hooks=[ToolHook()])(
            http_scope(route.path, raw), client.receive, client.send
        )
    assert [start["status"] for start in client.starts] == [503]


@pytest.mark.parametrize("loop_timeout", [None, 30.0], ids=["no-loop-timeout", "loop-timeout"])
async def test_an_app_that_times_out_on_its_own_mid_answer_is_re_raised_as_it_is_not_as_a_loop_timeout(
    route: Route, loop_timeout: float | None
) -> None:
    """A `TimeoutError` of the app's own (its upstream's) after its answer began reaching the client reaches the
    server as it is, as any other exception then: not read as `loop_timeout`'s, which did not expire (without one,
    reading it so was a TypeError of its own)."""

    raw = orjson.dumps(route.request())
    client = Client(raw)
    app = AgenticLoopMiddleware(
        half_then(TimeoutError("the upstream did not answer")), hooks=[ToolHook()], loop_timeout=loop_timeout
    )
    with pytest.raises(TimeoutError, match="the upstream did not answer"):
        await app(http_scope(route.path, raw), client.receive, client.send)
    assert [start["status"] for start in client.starts] == [503]


async def test_the_loop_timeout_does_not_cut_an_answer_already_going_to_the_client(route: Route) -> None:
    async def lines() -> Any:  # neither JSON nor events: it goes on as it comes
        yield b"part 1\n"
        await asyncio.sleep(0.2)
        yield b"part 2\n"

    model = ScriptedModel(lambda request: StreamingResponse(lines(), media_type="text/plain"))
    raw = orjson.dumps(route.request())
    client = Client(raw)
    app = AgenticLoopMiddleware(model, hooks=[ToolHook()], loop_timeout=0.05, app_timeout=0.05)
    await app(http_scope(route.path, raw), client.receive, client.send)
    assert len(client.starts) == 1
    assert client.body == b"part 1\npart 2\n"


async def test_a_gates_scribbles_on_the_final_answer_are_not_sent_after_reruns(route: Route) -> None:
    class Scribbler(ToolHook):
        async def async_should_run_agentic_loop(self, response: Any, **arguments: Any) -> Any:
            verdict = await super().async_should_run_agentic_loop(response=response, **arguments)
            response["scribbled"] = True
            return verdict

    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("final answer"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Scribbler()])) as client:
        response = await post(client, route, route.request())
    assert route.final_text(response.json()) == "final answer"
    assert "scribbled" not in response.json()


async def test_cleanup_hooks_run_to_the_end_even_if_the_client_leaves_meanwhile(route: Route) -> None:
    steps: list[str] = []

    class SlowCleanup(ToolHook):
        async def async_agentic_loop_cleanup_hook(self, plan: Any, kwargs: Any) -> None:
            steps.append("started")
            await asyncio.sleep(0.1)
            steps.append("finished")

    model = ScriptedModel(route.calls(("lookup", {"n": 1})), route.text("done"))
    raw = orjson.dumps(route.request())
    client = Client(raw)
    task = asyncio.create_task(
        AgenticLoopMiddleware(model, hooks=[SlowCleanup()])(http_scope(route.path, raw), client.receive, client.send)
    )
    while not steps:
        await asyncio.sleep(0.01)
    client.gone.set()
    await asyncio.wait_for(task, 5)
    assert steps == ["started", "finished"]


async def test_a_client_that_disconnects_during_the_first_call_gets_no_further_call(route: Route) -> None:
    first_started, first_may_end = asyncio.Event(), asyncio.Event()

    async def slow_first(request: RecordedRequest) -> Any:
        first_started.set()
        await first_may_end.wait()  # an app that does not listen for the disconnect itself
        return route.calls(("lookup", {"n": 1}))

    records: list[Any] = []
    hook = ToolHook()
    model = ScriptedModel(slow_first, route.text("never asked"), route.text("never asked"))
    app = AgenticLoopMiddleware(model, hooks=[hook], on_round=records.append)
    raw = orjson.dumps(route.request())
    client = Client(raw)
    task = asyncio.create_task(app(http_scope(route.path, raw), client.receive, client.send))
    await asyncio.wait_for(first_started.wait(), 5)
    client.gone.set()
    await asyncio.sleep(0.01)  # the disconnect is there to read before the first call ends
    first_may_end.set()
    await asyncio.wait_for(task, 5)

    assert len(model.requests) == 1  # no rerun started
    assert hook.plans == []  # no plan built either
    assert client.sent == []
    assert records[-1].outcome == "client_disconnect"
