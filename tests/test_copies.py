"""Hooks copy what they are given (`copy.deepcopy(messages)` before editing, as compression hooks do): the history
the loop already sent, and parts of the app's answer that a rerun sent, copy (and pickle) as plain JSON values."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import anthropic
import orjson
import pytest
from conftest import http_client

from agentic_middleware import AgenticLoopMiddleware, AgenticLoopPlan, AgenticLoopRequestPatch, CustomLogger
from agentic_middleware.payload import JSONObject
from agentic_middleware.testing import RecordedRequest, ScriptedModel, message, tool_use


def plain(value: Any) -> None:
    """Nothing in `value` is a container of any other type: only dicts, JSONObjects and lists."""
    assert type(value) in (dict, JSONObject, list, str, int, float, bool, type(None)), type(value)
    for child in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        plain(child)


class Copier(CustomLogger):
    """Copies everything it is given, in the gate and in the plan, and reruns with a deep copy of the history."""

    def __init__(self) -> None:
        self.copies: list[Any] = []

    def copied(self, value: Any) -> Any:
        for made in (copy.deepcopy(value), copy.copy(value), pickle.loads(pickle.dumps(value))):
            assert made == value
            assert made is not value
            self.copies.append(made)
        deep = copy.deepcopy(value)
        plain(deep)
        return deep

    async def async_should_run_agentic_loop(
        self, response, model, messages, tools, stream, custom_llm_provider, kwargs
    ):  # type: ignore[no-untyped-def]
        self.copied(messages)
        self.copied(response)
        for turn in messages:
            self.copied(turn)
            for block in turn["content"] if isinstance(turn["content"], list) else ():
                self.copied(block)
        calls = [block for block in response["content"] if block["type"] == "tool_use"]
        return bool(calls), {"tool_calls": calls}

    async def async_build_agentic_loop_plan(
        self,
        tools,
        model,
        messages,
        response,
        anthropic_messages_provider_config,
        anthropic_messages_optional_request_params,
        logging_obj,
        stream,
        kwargs,
    ):  # type: ignore[no-untyped-def]
        history = self.copied(messages)
        for turn in messages:
            self.copied(turn)
            for block in turn["content"] if isinstance(turn["content"], list) else ():
                self.copied(block)
        call = next(block for block in response["content"] if block["type"] == "tool_use")
        history += [
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}]},
        ]
        return AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=history))


async def test_deep_copies_and_pickles_of_sent_history_and_answer_blocks_are_plain_and_equal() -> None:
    model = ScriptedModel(
        message(tool_use("t", {"q": 1}, id="a")), message(tool_use("t", {"q": 2}, id="b")), message("done")
    )
    hook = Copier()
    app = AgenticLoopMiddleware(model, hooks=[hook])
    async with http_client(app) as client:
        reply = await client.post(
            "/v1/messages", json={"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        )
    assert reply.status_code == 200, reply.text
    assert reply.json()["content"] == [{"type": "text", "text": "done"}]
    sent = [orjson.loads(request.raw)["messages"] for request in model.requests]
    assert len(sent) == 3
    assert [turn["content"][0].get("tool_use_id") for turn in sent[2][2::2]] == ["a", "b"]
    assert hook.copies


async def test_a_copy_written_to_does_not_change_the_sent_history() -> None:
    """Editing a deep copy leaves the history the next body is written from as it was sent."""

    class Editor(Copier):
        async def async_build_agentic_loop_plan(self, tools, model, messages, response, **rest):  # type: ignore[no-untyped-def]
            stub = copy.deepcopy(messages)
            stub[0]["content"] = "edited copy"
            return await super().async_build_agentic_loop_plan(tools, model, messages, response, **rest)

    requests = await looped(Editor(), rounds=2)
    assert all(orjson.loads(request.raw)["messages"][0]["content"] == "hi" for request in requests)


async def test_a_deep_copy_of_the_history_edited_in_place_a_round_later_is_sent_as_edited() -> None:
    """A copy equal to the history already sent is not that history: its edit must reach the app. A hook deep-copies
    its history in one round (docs/hooks.md: "a hook may copy the history and edit the copy freely") and stubs the
    copy's first message in place in the next, as a compression or redaction hook does."""

    class CopyThenStub(CustomLogger):
        def __init__(self) -> None:
            self.rounds = 0

        async def async_should_run_agentic_loop(self, response, **rest):  # type: ignore[no-untyped-def]
            calls = [block for block in response["content"] if block["type"] == "tool_use"]
            return bool(calls), {"tool_calls": calls}

        async def async_build_agentic_loop_plan(self, tools, messages, **rest):  # type: ignore[no-untyped-def]
            self.rounds += 1
            history = copy.deepcopy(messages) if self.rounds == 2 else messages
            if self.rounds == 3:
                history[0]["content"] = "stubbed"
            call = tools["tool_calls"][0]
            history = [
                *history,
                {"role": "assistant", "content": [call]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}]},
            ]
            return AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=history))

    requests = await looped(CopyThenStub(), rounds=3, text="a text")
    firsts = [orjson.loads(request.raw)["messages"][0]["content"] for request in requests]
    assert firsts == ["a text", "a text", "a text", "stubbed"]


@pytest.mark.parametrize("where", ["message", "block"])
async def test_an_sdk_object_in_the_history_edited_in_place_a_round_later_is_sent_as_edited(where: str) -> None:
    """A hook may put the SDKs' own objects in the history (an `anthropic.types.Message`, a `TextBlock` in a message
    it builds); they are pydantic models, written through their `model_dump`. Edited in place in a later round (a
    compression hook stubbing a text), the edit must reach the app, not bytes written before."""

    class SdkHistory(CustomLogger):
        def __init__(self) -> None:
            self.rounds = 0
            self.text: Any = None

        async def async_should_run_agentic_loop(self, response, **rest):  # type: ignore[no-untyped-def]
            calls = [block for block in response["content"] if block["type"] == "tool_use"]
            return bool(calls), {"tool_calls": calls}

        async def async_build_agentic_loop_plan(self, tools, messages, **rest):  # type: ignore[no-untyped-def]
            self.rounds += 1
            if self.rounds == 1:
                self.text = anthropic.types.TextBlock(type="text", text="as first said")
                said: Any = {"role": "assistant", "content": [self.text]}
                if where == "message":
                    said = anthropic.types.Message(
                        id="msg_1", type="message", role="assistant", model="m", content=[self.text],
                        stop_reason="end_turn", usage=anthropic.types.Usage(input_tokens=1, output_tokens=1),
                    )  # fmt: skip
                messages = [*messages, said, {"role": "user", "content": "go on"}]
            else:
                self.text.text = "stubbed"
            call = tools["tool_calls"][0]
            history = [
                *messages,
                {"role": "assistant", "content": [call]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}]},
            ]
            return AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=history))

    requests = await looped(SdkHistory(), rounds=2)
    said = [orjson.loads(request.raw)["messages"][1:2] for request in requests]
    assert said[1][0]["content"][0]["text"] == "as first said"
    assert said[2][0]["content"][0]["text"] == "stubbed"


async def test_a_message_equal_to_the_one_sent_but_not_the_same_is_sent_as_it_is_now() -> None:
    """Python's equality is not JSON's: `True == 1`, so a hook that puts `true` where `1` was sent gets `true` sent."""

    class Retyping(CustomLogger):
        async def async_should_run_agentic_loop(self, response, **rest):  # type: ignore[no-untyped-def]
            calls = [block for block in response["content"] if block["type"] == "tool_use"]
            return bool(calls), {"tool_calls": calls}

        async def async_build_agentic_loop_plan(self, tools, messages, **rest):  # type: ignore[no-untyped-def]
            history = [{**turn, "n": True} if "n" in turn else dict(turn) for turn in messages]
            call = tools["tool_calls"][0]
            history += [
                {"role": "assistant", "content": [call], "n": 1},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}]},
            ]
            return AgenticLoopPlan(run_agentic_loop=True, request_patch=AgenticLoopRequestPatch(messages=history))

    requests = await looped(Retyping(), rounds=2)
    assert orjson.loads(requests[2].raw)["messages"][1]["n"] is True


async def looped(hook: CustomLogger, rounds: int, text: str = "hi") -> list[RecordedRequest]:
    """What the model app was sent when it called the tool `t` `rounds` times, then answered; the client got a 200."""
    model = ScriptedModel(*(message(tool_use("t", {"q": n})) for n in range(rounds)), message("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[hook])) as client:
        request = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": text}]}
        reply = await client.post("/v1/messages", json=request)
    assert reply.status_code == 200, reply.text
    return model.requests
