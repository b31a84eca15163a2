"""Hooks get the client's history as LiteLLM gives it, plain `dict`s and `list`s, in every round, and each rerun body
is written whole from it as it then is: hooks written with exact type checks, rebuilds through `type(o)`, calls on
the class and orjson's subclass options work as on LiteLLM, and any edit is sent (docs/loop.md, point 3)."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from conftest import http_client
from test_encoder_nested import REDACTED, SECRET, Keeper, Step, edit, history, keep, sent

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.testing import ScriptedModel, chat_completion, message, tool_call, tool_use


def exact(value: Any) -> bool:
    """Every container in `value` is a plain `dict` or `list`, by exact type."""
    if type(value) is dict:
        return all(exact(item) for item in value.values())
    if type(value) is list:
        return all(exact(item) for item in value)
    return type(value) in (str, int, float, bool, type(None))


async def test_the_history_is_plain_dicts_and_lists_by_exact_type_in_every_hook_and_round() -> None:
    seen: list[Any] = []

    class Checks(Keeper):
        async def async_pre_agentic_loop_request_hook(self, request, **rest):  # type: ignore[no-untyped-def]
            seen.append(("request", exact(request["messages"])))
            return None

    def check(hook: Keeper, messages: list[Any]) -> None:  # the client's messages (the calls added are the app's)
        seen.append((hook.rounds, type(messages) is list and exact(messages[:3]), type(messages[0]).__name__))

    await sent(Checks({1: check, 2: check, 3: check}), rounds=3)
    assert seen == [("request", True), (1, True, "dict"), (2, True, "dict"), (3, True, "dict")]


def scrub(value: Any) -> Any:
    """A redaction written with exact type checks, as plain JSON allows."""
    if type(value) is dict:
        return {key: scrub(item) for key, item in value.items()}
    if type(value) is list:
        return [scrub(item) for item in value]
    return REDACTED if value == SECRET else value


async def test_a_redaction_hook_with_exact_type_checks_redacts_the_first_call_and_every_rerun() -> None:
    class Scrub(Keeper):
        async def async_pre_agentic_loop_request_hook(self, request, **rest):  # type: ignore[no-untyped-def]
            request["messages"] = scrub(request["messages"])
            return request

    bodies = await sent(Scrub({}), rounds=3)
    assert all(SECRET.encode() not in body and REDACTED.encode() in body for body in bodies)


def rebuilt(value: Any) -> Any:
    """A generic walker that rebuilds each container through its own type."""
    if isinstance(value, dict):
        return type(value)((key, rebuilt(item)) for key, item in value.items())
    if isinstance(value, list):
        return type(value)(rebuilt(item) for item in value)
    return REDACTED if value == SECRET else value


def refilled(value: Any) -> Any:
    """A walker in the style of boltons' `remap`: an empty container of the same type, then filled."""
    if isinstance(value, dict):
        new = type(value)()
        new.update({key: refilled(item) for key, item in value.items()})
        return new
    if isinstance(value, list):
        made = type(value)()
        made.extend(refilled(item) for item in value)
        return made
    return REDACTED if value == SECRET else value


@dataclasses.dataclass
class Note:
    block: Any


def asdict_redacted(messages: list[Any]) -> None:
    block = dataclasses.asdict(Note(messages[0]["content"][0]))["block"]
    block["text"] = REDACTED
    messages[0]["content"][0] = block


REBUILDS: dict[str, Step] = {
    "type(o)(...) of a message's content": lambda hook, m: m[0].__setitem__("content", rebuilt(m[0]["content"])),
    "type(o)(...) of every message": lambda hook, m: m.__setitem__(slice(None), [rebuilt(turn) for turn in m]),
    "type(o)() then update/extend": lambda hook, m: m.__setitem__(slice(None), [refilled(turn) for turn in m]),
    "type(block).fromkeys": lambda hook, m: m[0]["content"].__setitem__(
        0, {**type(m[0]["content"][0]).fromkeys(["type", "text"], REDACTED), "type": "text"}
    ),
    "dataclasses.asdict": lambda hook, m: asdict_redacted(m),
}


@pytest.mark.parametrize("case", list(REBUILDS))
@pytest.mark.parametrize("round_", [1, 2])
async def test_containers_rebuilt_through_their_own_type_work_and_are_sent(case: str, round_: int) -> None:
    bodies = await sent(Keeper({round_: REBUILDS[case]}), rounds=3)
    for body in bodies[round_:]:
        assert orjson.loads(body)["messages"][0]["content"][0]["text"] == REDACTED, case
    assert SECRET.encode() in bodies[round_ - 1]


CLASS_CALLS: dict[str, tuple[Any, Any]] = {
    # (what the hook keeps in round 1, how it edits it in round 2), each call made on the class
    "dict.__setitem__": (lambda m: m[0]["content"][0], lambda b: dict.__setitem__(b, "text", REDACTED)),
    "dict.update": (lambda m: m[0]["content"][0], lambda b: dict.update(b, text=REDACTED)),
    "dict.get, then an edit": (
        lambda m: dict.get(m[1]["content"][0], "input"),
        lambda i: i["notes"][0].__setitem__(1, REDACTED),
    ),
    "dict.__getitem__, then an edit": (
        lambda m: dict.__getitem__(m[0], "content"),
        lambda c: c[0].__setitem__("text", REDACTED),
    ),
    "list.__setitem__": (
        lambda m: m[2]["content"][0]["content"],
        lambda items: list.__setitem__(items, 0, {"type": "text", "text": REDACTED}),
    ),
    "list.clear and list.append": (
        lambda m: m[2]["content"][0]["content"],
        lambda items: (list.clear(items), list.append(items, {"type": "text", "text": REDACTED})),
    ),
}


@pytest.mark.parametrize("case", list(CLASS_CALLS))
async def test_an_edit_made_through_the_class_reaches_every_rerun_after_it(case: str) -> None:
    take, change = CLASS_CALLS[case]
    bodies = await sent(Keeper({1: keep(take), 2: edit(change)}), rounds=3)
    assert SECRET.encode() in bodies[1] and REDACTED.encode() not in bodies[1]
    assert all(REDACTED.encode() in body for body in bodies[2:]), case


async def test_orjson_passthrough_subclass_writes_the_history_in_every_round() -> None:
    """`OPT_PASSTHROUGH_SUBCLASS` hands subclasses of dict and list to `default`: the client's history has none (the
    calls the hook adds from the app's answers are `JSONObject`s, as hooks.md says)."""
    written: list[bytes] = []

    def refuse(value: Any) -> Any:
        raise TypeError(f"a subclass: {type(value)!r}")

    def dump(hook: Keeper, messages: list[Any]) -> None:
        written.append(orjson.dumps(messages[:3], option=orjson.OPT_PASSTHROUGH_SUBCLASS, default=refuse))

    await sent(Keeper({1: dump, 2: dump, 3: dump}), rounds=3)
    assert len(written) == 3 and all(orjson.loads(raw) == history() for raw in written)


# Too deep to write: orjson reads 1024 levels and writes 254 (a client's body past that is refused when it arrives:
# tests/test_request_depth.py).


@server_tool
async def echo(text: str) -> str:
    """Echoes."""
    return text


def deep_messages(depth: int) -> bytes:
    """A history whose one block holds lists `depth` deep: the body is `depth` + 5 levels deep."""
    nested = "[" * depth + "]" * depth
    return b'[{"role":"user","content":[{"type":"text","text":"hi","x":%s}]}]' % nested.encode()


async def test_a_message_nested_too_deep_by_a_hook_is_the_hooks_error() -> None:
    """The rerun body is written whole: a message a hook adds that nests past what orjson writes is its 500, named."""

    class Deepens(Keeper):
        async def async_build_agentic_loop_plan(self, tools, messages, **rest):  # type: ignore[no-untyped-def]
            nested: list[Any] = []
            for _ in range(300):
                nested = [nested]
            plan = await super().async_build_agentic_loop_plan(tools, messages, **rest)
            turn = {"role": "user", "content": [{"type": "text", "text": "x", "x": nested}]}
            plan.request_patch.messages.append(turn)
            return plan

    model = ScriptedModel(message(tool_use("t", {})), message("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Deepens({})])) as client:
        reply = await client.post("/v1/messages", json={"model": "m", "max_tokens": 5, "messages": history()})
    assert reply.status_code == 500, reply.text
    assert "Deepens" in reply.text and "not JSON" in reply.text
    assert len(model.requests) == 1


@pytest.mark.parametrize("stream", [True, False])
async def test_a_chat_history_nested_too_deep_is_a_400_in_the_chat_shape(stream: bool) -> None:
    """A live Chat stream's body is written before the first call (`stream_options` asks for usage): the error must
    not escape the middleware, and the client gets the route's JSON error, not the server's plain text."""
    call = chat_completion(None, tool_calls=[tool_call("echo", {"text": "x"})])
    model = ScriptedModel(call, chat_completion("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[ServerTools([echo])])) as client:
        raw = b'{"model":"m","stream":%s,"messages":%s}' % (b"true" if stream else b"false", deep_messages(300))
        reply = await client.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and "254 levels" in error["message"]
    assert "echo" not in reply.text and model.requests == []
