"""What each rerun sends: the patched body, whole and exact, however its bytes were put together."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from conftest import http_client
from support import Route

from agentic_middleware import AgenticLoopMiddleware, AgenticLoopPlan, AgenticLoopRequestPatch, CustomLogger
from agentic_middleware.testing import ScriptedModel


class Scripted(CustomLogger):
    """Reruns with `change(messages, depth)` as the new messages, and optional params by depth."""

    def __init__(self, change: Any, params: Any = None) -> None:
        self.change = change
        self.params = params or (lambda depth: {})

    async def async_should_run_agentic_loop(self, **_: Any) -> tuple[bool, dict[str, Any]]:
        return True, {}

    async def async_build_agentic_loop_plan(self, messages: Any, kwargs: Any, **_: Any) -> AgenticLoopPlan:
        depth = kwargs["_agentic_loop_depth"]
        patch = AgenticLoopRequestPatch(messages=self.change(messages, depth), optional_params=self.params(depth))
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=patch)

    async_build_chat_completion_agentic_loop_plan = async_build_agentic_loop_plan


async def looped(raw: bytes, hook: CustomLogger) -> list[Any]:
    """The bodies the model app received for one client body, each parsed from the exact bytes it got."""
    route = Route("messages")
    model = ScriptedModel(*(route.text(f"answer {n}") for n in range(4)))
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        await client.post(route.path, content=raw, headers={"content-type": "application/json"})
    for request in model.requests:
        assert int(request.headers["content-length"]) == len(request.raw)
    return [orjson.loads(request.raw) for request in model.requests]


def appended(messages: list[Any], depth: int) -> list[Any]:
    return [*messages, {"role": "assistant", "content": f"turn {depth}"}, {"role": "user", "content": "go on"}]


LAST = b'{"model": "m", "max_tokens": 9, "messages": [ {"role": "user", "content": "hi \\u00e9"} ] }\n'
FIRST = b'{"messages":[{"role":"user","content":"hi"}],"model":"m","max_tokens":9}'
EMPTY = b'{"model":"m","max_tokens":9,"messages":[]}'


@pytest.mark.parametrize("raw", [LAST, FIRST, EMPTY], ids=["messages last, spaced", "messages first", "no messages"])
async def test_every_rerun_sends_exactly_the_patched_body(raw: bytes) -> None:
    bodies = await looped(raw, Scripted(appended))

    expected = orjson.loads(raw)
    assert bodies[0] == expected
    for depth, body in enumerate(bodies[1:]):
        expected = {**expected, "messages": appended(expected["messages"], depth)}
        assert body == expected


async def test_a_replaced_earlier_message_is_sent_as_replaced() -> None:
    def redact_first(messages: list[Any], depth: int) -> list[Any]:
        return [{"role": "user", "content": f"redacted at {depth}"}, *appended(messages, depth)[1:]]

    bodies = await looped(LAST, Scripted(redact_first))
    assert [body["messages"][0]["content"] for body in bodies] == [
        "hi é",
        "redacted at 0",
        "redacted at 1",
        "redacted at 2",
    ]
    assert [len(body["messages"]) for body in bodies] == [1, 3, 5, 7]


async def test_other_fields_changed_by_a_patch_are_sent() -> None:
    bodies = await looped(LAST, Scripted(appended, params=lambda depth: {"temperature": depth / 10}))
    assert [body.get("temperature") for body in bodies] == [None, 0.0, 0.1, 0.2]
    assert [len(body["messages"]) for body in bodies] == [1, 3, 5, 7]


async def test_a_rerun_with_the_same_messages_sends_the_same_body() -> None:
    bodies = await looped(LAST, Scripted(lambda messages, depth: messages))
    assert bodies[1] == bodies[2] == bodies[3] == orjson.loads(LAST)


async def test_a_hook_that_appends_in_place_sends_what_it_appended() -> None:
    def append_in_place(messages: list[Any], depth: int) -> list[Any]:
        messages.append({"role": "user", "content": f"more {depth}"})
        return messages

    bodies = await looped(LAST, Scripted(append_in_place))
    assert [len(body["messages"]) for body in bodies] == [1, 2, 3, 4]
    assert bodies[-1]["messages"][-1] == {"role": "user", "content": "more 2"}


async def test_other_fields_edited_in_place_are_sent() -> None:
    class DropsATool(Scripted):
        async def async_build_agentic_loop_plan(self, messages: Any, kwargs: Any, **arguments: Any) -> Any:
            arguments["anthropic_messages_optional_request_params"]["tools"].pop()  # the request's own list
            return await super().async_build_agentic_loop_plan(messages=messages, kwargs=kwargs, **arguments)

    raw = b'{"model":"m","max_tokens":9,"tools":[{"name":"a"},{"name":"b"},{"name":"c"},{"name":"d"}],"messages":[]}'
    bodies = await looped(raw, DropsATool(appended))
    assert [len(body["tools"]) for body in bodies] == [4, 3, 2, 1]


async def test_a_client_body_with_a_repeated_key_still_gets_valid_reruns() -> None:
    raw = (
        b'{"model":"m","max_tokens":9,"stop_sequences":["x"],'
        b'"messages":[{"role":"user","content":"hi"}],"stop_sequences":[]}'
    )
    bodies = await looped(raw, Scripted(appended))
    assert [len(body["messages"]) for body in bodies] == [1, 3, 5, 7]
    assert all(body["stop_sequences"] == [] for body in bodies)
