"""A hook that keeps a reference to something nested in the history (a content block, a tool result's list, a list
deep in a call's input, a list of its own it put there) and edits it in place a round later: the next rerun must
send the edit. Were a rerun to reuse the bytes of history already sent, an edit it did not notice would reach the
model as the old text, the very thing a redaction hook removed; each is written whole (docs/loop.md, point 3)."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from conftest import http_client

from agentic_middleware import AgenticLoopMiddleware, AgenticLoopPlan, AgenticLoopRequestPatch, CustomLogger
from agentic_middleware.testing import ScriptedModel, message, tool_use

SECRET = "the secret"
REDACTED = "[redacted]"


def history() -> list[dict[str, Any]]:
    """The client's history: a text block, a call whose input nests lists, and its result's list of blocks."""
    return [
        {"role": "user", "content": [{"type": "text", "text": SECRET}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_old", "name": "t", "input": {"notes": [["x", SECRET]]}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_old", "content": [{"type": "text", "text": SECRET}]}
            ],
        },
    ]


Step = Callable[["Keeper", list[Any]], None]


class Keeper(CustomLogger):
    """Reruns on each call of `t` with the history it is given plus the call and its result; in its plan of round
    `n` (1-based) it runs `steps[n]`, which may keep references (on `self.kept`) or edit what it kept."""

    def __init__(self, steps: dict[int, Step]) -> None:
        self.steps = steps
        self.rounds = 0
        self.kept: Any = None
        self.own: Any = None

    async def async_should_run_agentic_loop(self, response, **rest):  # type: ignore[no-untyped-def]
        calls = [block for block in response["content"] if block["type"] == "tool_use"]
        return bool(calls), {"tool_calls": calls}

    async def async_build_agentic_loop_plan(self, tools, messages, **rest):  # type: ignore[no-untyped-def]
        self.rounds += 1
        step = self.steps.get(self.rounds)
        if step is not None:
            step(self, messages)
        call = tools["tool_calls"][0]
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": [{"type": "text", "text": "ok"}]}
        if self.rounds == 1:
            self.own = result  # a block of its own, kept
        history = [*messages, {"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=history))


async def sent(hook: Keeper, rounds: int) -> list[bytes]:
    """The bodies the model app received when it called `t` `rounds` times, then answered."""
    model = ScriptedModel(*(message(tool_use("t", {"q": n})) for n in range(rounds)), message("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        request = {"model": "m", "max_tokens": 10, "messages": history()}
        reply = await client.post("/v1/messages", json=request)
    assert reply.status_code == 200, reply.text
    assert len(model.requests) == rounds + 1
    return [request.raw for request in model.requests]


def keep(take: Callable[[list[Any]], Any]) -> Step:
    def step(hook: Keeper, messages: list[Any]) -> None:
        hook.kept = take(messages)

    return step


def edit(change: Callable[[Any], None]) -> Step:
    def step(hook: Keeper, messages: list[Any]) -> None:
        change(hook.kept)

    return step


def set_text(block: Any) -> None:
    block["text"] = REDACTED


def set_item(items: Any) -> None:
    items[0] = {"type": "text", "text": REDACTED}


def set_deep(items: Any) -> None:
    items[1] = REDACTED


def clear_then_append(items: Any) -> None:
    items.clear()
    items.append({"type": "text", "text": REDACTED})


def delete_then_extend(items: Any) -> None:
    del items[0]
    items.extend([{"type": "text", "text": REDACTED}])


def pop_then_insert(items: Any) -> None:
    items.pop()
    items.insert(0, {"type": "text", "text": REDACTED})


def add_in_place(items: Any) -> None:
    items.remove(items[0])
    items += [{"type": "text", "text": REDACTED}]


def update(block: Any) -> None:
    block.update(text=REDACTED)


def merge_in_place(block: Any) -> None:
    block |= {"text": REDACTED}


def pop_key_then_setdefault(block: Any) -> None:
    block.pop("text")
    block.setdefault("text", REDACTED)


def replace_content(turn: Any) -> None:
    turn["content"] = REDACTED


CASES: dict[str, tuple[Callable[[list[Any]], Any], Callable[[Any], None]]] = {
    # (what the hook keeps in round 1, how it edits it in round 2)
    "text block, key set": (lambda m: m[0]["content"][0], set_text),
    "text block, update": (lambda m: m[0]["content"][0], update),
    "text block, |=": (lambda m: m[0]["content"][0], merge_in_place),
    "text block, pop and setdefault": (lambda m: m[0]["content"][0], pop_key_then_setdefault),
    "tool result's list, item set": (lambda m: m[2]["content"][0]["content"], set_item),
    "tool result's list, clear and append": (lambda m: m[2]["content"][0]["content"], clear_then_append),
    "tool result's list, del and extend": (lambda m: m[2]["content"][0]["content"], delete_then_extend),
    "tool result's list, pop and insert": (lambda m: m[2]["content"][0]["content"], pop_then_insert),
    "tool result's list, remove and +=": (lambda m: m[2]["content"][0]["content"], add_in_place),
    "string in a deep list": (lambda m: m[1]["content"][0]["input"]["notes"][0], set_deep),
    "a whole message": (lambda m: m[0], replace_content),
    # References taken by operations that hand out what they hold
    "block from list + []": (lambda m: (m[0]["content"] + [])[0], set_text),
    "block from [] + list": (lambda m: ([] + m[0]["content"])[0], set_text),
    "block from list * 1": (lambda m: (m[0]["content"] * 1)[0], set_text),
    "block from 1 * list": (lambda m: (1 * m[0]["content"])[0], set_text),
    "block from a slice": (lambda m: m[0]["content"][:][0], set_text),
    "block from list()": (lambda m: list(m[0]["content"])[0], set_text),  # noqa: RUF015 (the copy is the point)
    "block from unpacking": (lambda m: [*m[0]["content"]][0], set_text),  # noqa: RUF015 (the copy is the point)
    "block from reversed": (lambda m: next(reversed(m[0]["content"])), set_text),
    "block from copy.copy": (lambda m: copy.copy(m[0]["content"])[0], set_text),
    "list from dict.values": (lambda m: list(m[2]["content"][0].values())[2], set_item),
    "list from dict.items": (lambda m: dict(m[2]["content"][0].items())["content"], set_item),
    "list from {**block}": (lambda m: {**m[2]["content"][0]}["content"], set_item),
    "list from block | {}": (lambda m: (m[2]["content"][0] | {})["content"], set_item),
    "list from {} | block": (lambda m: ({} | m[2]["content"][0])["content"], set_item),
    "list from dict(block)": (lambda m: dict(m[2]["content"][0])["content"], set_item),
    "list from block.copy()": (lambda m: m[2]["content"][0].copy()["content"], set_item),
    "list from block.get": (lambda m: m[2]["content"][0].get("content"), set_item),
    "list from copy.copy(block)": (lambda m: copy.copy(m[2]["content"][0])["content"], set_item),
    "block from messages.pop": (lambda m: m.pop(0) and m[0]["content"][0], set_text),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_nested_reference_kept_from_round_one_and_edited_in_round_two_reaches_the_app(case: str) -> None:
    take, change = CASES[case]
    bodies = await sent(Keeper({1: keep(take), 2: edit(change)}), rounds=3)
    assert SECRET.encode() in bodies[1]
    assert REDACTED.encode() not in bodies[1]
    for body in bodies[2:]:  # the edit, from the rerun after it was made: in the bytes, and as JSON
        assert REDACTED.encode() in body, case
        assert REDACTED in repr(orjson.loads(body)["messages"])


async def test_a_block_of_the_hooks_own_kept_and_edited_a_round_later_reaches_the_app() -> None:
    """The tool result it built in round 1, edited in round 2 through its own reference."""

    def redact_own(hook: Keeper, messages: list[Any]) -> None:
        hook.own["content"][0]["text"] = REDACTED

    bodies = await sent(Keeper({2: redact_own}), rounds=3)
    assert REDACTED.encode() not in bodies[1]
    assert all(REDACTED.encode() in body for body in bodies[2:])


async def test_a_foreign_list_put_in_the_history_then_edited_a_round_later_reaches_the_app() -> None:
    """Round 2 puts a list of its own in place of a message's content (sent whole: a write), round 3 edits that list
    through its reference: the rerun after must send the edit, not the bytes round 2's rerun wrote."""

    def replace(hook: Keeper, messages: list[Any]) -> None:
        hook.kept = [{"type": "text", "text": "a new secret"}]
        messages[0]["content"] = hook.kept

    def redact(hook: Keeper, messages: list[Any]) -> None:
        hook.kept[0]["text"] = REDACTED

    bodies = await sent(Keeper({2: replace, 3: redact}), rounds=3)
    assert b"a new secret" in bodies[2]
    assert b"a new secret" not in bodies[3] and REDACTED.encode() in bodies[3]


async def test_a_block_of_the_history_moved_into_a_new_message_then_edited_reaches_the_app() -> None:
    """A block of the client's history moved into a message the hook builds, the history it came from dropped: its
    edit a round later still reaches the app."""

    def move(hook: Keeper, messages: list[Any]) -> None:
        hook.kept = messages[0]["content"][0]
        messages[:] = [{"role": "user", "content": [hook.kept]}]

    bodies = await sent(Keeper({1: move, 2: edit(set_text)}), rounds=3)
    assert SECRET.encode() in bodies[1]
    assert all(REDACTED.encode() in body and SECRET.encode() not in body for body in bodies[2:])


async def test_a_reference_kept_by_the_request_hook_and_edited_by_a_plan_reaches_the_app() -> None:
    """The request hook sees the body before the first call; what it keeps of the history is edited two rounds later."""

    class Early(Keeper):
        async def async_pre_agentic_loop_request_hook(self, request, **rest):  # type: ignore[no-untyped-def]
            self.kept = request["messages"][2]["content"][0]["content"][0]
            return None

    bodies = await sent(Early({2: edit(set_text)}), rounds=3)
    assert SECRET.encode() in bodies[1]
    assert all(REDACTED.encode() in body for body in bodies[2:])


async def test_a_pydantic_model_holding_a_list_of_the_history_edited_a_round_later_reaches_the_app() -> None:
    """pydantic reads a list's items in C, without the list's methods: a `list[Any]` field holds the very blocks of
    the history. A hook that validates a message into its own model in round 1 and edits the model's block in
    round 2 edits the history."""
    import pydantic

    class Turn(pydantic.BaseModel):
        role: str
        content: list[Any]

    def take(hook: Keeper, messages: list[Any]) -> None:
        hook.kept = Turn.model_validate(messages[2])

    def redact(hook: Keeper, messages: list[Any]) -> None:
        hook.kept.content[0]["content"][0]["text"] = REDACTED

    bodies = await sent(Keeper({1: take, 2: redact}), rounds=3)
    assert REDACTED.encode() not in bodies[1]
    assert all(REDACTED.encode() in body for body in bodies[2:])


async def test_the_history_hooks_get_still_reads_copies_and_compares_as_plain_json() -> None:
    """The history is a list of dicts to a hook: `isinstance`, `==`, `json` and orjson, copies and
    pickles (which are plain) behave as on what the client sent, in every round."""
    seen: list[int] = []

    def check(hook: Keeper, messages: list[Any]) -> None:
        plain = orjson.loads(orjson.dumps(messages))
        assert plain[:3] == history()
        assert isinstance(messages, list) and all(isinstance(turn, dict) for turn in messages)
        assert isinstance(messages[0]["content"], list) and isinstance(messages[0]["content"][0], dict)
        assert messages == plain and plain == messages and messages[0] == plain[0]
        assert json.loads(json.dumps(messages)) == plain
        mine: list[Any] = []
        assert messages[0].pop("absent", mine) is mine and messages[0].get("absent", mine) is mine
        assert (messages[0]["content"] + []) == plain[0]["content"] and type(messages[0]["content"] + []) is list
        assert type(messages[0] | {}) is dict and type({} | messages[0]) is dict and messages[0] | {} == plain[0]
        for made in (copy.deepcopy(messages), pickle.loads(pickle.dumps(messages))):
            assert made == plain and type(made) is list and type(made[0]) is dict
            assert type(made[0]["content"]) is list and type(made[0]["content"][0]) is dict
        seen.append(hook.rounds)

    bodies = await sent(Keeper({1: check, 2: check, 3: check}), rounds=3)
    assert seen == [1, 2, 3]
    assert orjson.loads(bodies[3])["messages"][:3] == history()
