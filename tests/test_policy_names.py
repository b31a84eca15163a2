"""A tool's or a call's name, read one way by the tool policy and by whatever runs the call (`surfaces.tool_name`).

A Chat call may carry a legacy `name` beside `function.name`, a tool definition too; were the policy to read one and
the runner the other, a caller denied a tool would have it run under an allowed name. Each case here goes through
the official SDKs and the middleware, as the caller Bob of tests/test_policy.py, who may not use `delete_*`.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from support import ToolHook
from test_policy import RAN, Model, ask, gateway, results_of

from agentic_middleware.surfaces import tool_name
from agentic_middleware.testing import RecordedRequest, ScriptedModel, chat_completion, message, tool_call, tool_use


@pytest.fixture(autouse=True)
def no_runs_yet() -> None:
    RAN.clear()


def two_named(route: str) -> dict[str, Any]:
    """An answer calling `delete_everything` by the name every SDK reads, and `lookup` by the other name a call of its
    route may carry (Chat's legacy `name`; a `function` a Messages block does not have)."""
    if route == "chat":
        call = {**tool_call("delete_everything", {"what": "all"}, "call_1"), "name": "lookup"}
        return chat_completion(tool_calls=[call])
    function = {"name": "delete_everything", "arguments": '{"what": "all"}'}
    block = {**tool_use("lookup", {"what": "all"}, "toolu_1"), "function": function}
    return message(block)


class TwoNames(ScriptedModel):
    """Makes the two-named call until its request holds a result, then says what it read."""

    def __init__(self, route: str) -> None:
        super().__init__(default=self.step)
        self.route = route

    def step(self, request: RecordedRequest) -> Any:
        results = results_of(request.body)
        if results:
            reply = chat_completion(content="read: " + " | ".join(results)) if self.route == "chat" else message("read")
        else:
            reply = two_named(self.route)
        return reply


async def test_a_chat_call_whose_two_names_disagree_runs_no_server_tool() -> None:
    """The model calls `delete_everything` in `function.name` and `lookup` in the legacy `name`: on the old code the
    policy judged `lookup` and the server ran `delete_everything`. Now the call has no one name: no server tool runs
    it, whatever its names, and it goes to the client as the model made it."""
    model = TwoNames("chat")
    text, calls = await ask("chat", gateway(model), "bob-key", False)
    assert RAN == {}
    assert (text, calls) == ("", ["delete_everything"])  # the client's SDK reads `function.name`
    assert len(model.requests) == 1


@pytest.mark.parametrize("route", ["messages", "chat"])
async def test_a_litellm_hooks_claim_of_a_call_with_two_names_fails_closed(route: str) -> None:
    """A hook that is not a ServerTools reads the call its own way (here `function.name` first, as the `ToolHook` of
    the tests does) and claims it; the policy cannot tell which name runs, so the round fails and its plan never
    runs (the old code judged the call by `name`, `lookup`, and ran the hook's `delete_everything`)."""
    hook = ToolHook("delete_everything")
    with pytest.raises((anthropic.InternalServerError, openai.InternalServerError)) as raised:
        await ask(route, gateway(TwoNames(route), hook), "bob-key", False)
    assert "the tool policy cannot judge them" in str(raised.value)
    assert hook.plans == []


class Declaring(ToolHook):
    """A LiteLLM-style hook that declares its tool as it likes, and records nothing else."""

    def __init__(self, declaration: dict[str, Any]) -> None:
        super().__init__("delete_everything")
        self.declaration = declaration

    async def async_pre_agentic_loop_request_hook(
        self, request: dict[str, Any], logging_obj: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        return {**request, "tools": [*(request.get("tools") or []), self.declaration]}


CHAT_TWO_NAMES = {
    "type": "function",
    "name": "delete_everything",
    "function": {"name": "lookup", "parameters": {"type": "object"}},
}
RESPONSES_TWO_NAMES = {"type": "function", "name": "lookup", "function": {"name": "delete_everything"}}
CHAT_SHAPED_ON_RESPONSES = {"type": "function", "function": {"name": "delete_everything"}}


@pytest.mark.parametrize(
    ("route", "declaration"),
    [("chat", CHAT_TWO_NAMES), ("responses", RESPONSES_TWO_NAMES)],
    ids=["chat", "responses"],
)
async def test_a_declaration_whose_two_names_disagree_is_not_declared_to_a_caller_who_is_judged(
    route: str, declaration: dict[str, Any]
) -> None:
    """A hook's declaration naming `delete_everything` in one place and `lookup` in another: the old code judged it
    by the allowed name and declared it to Bob's model. Its name cannot be told, so Bob's model is not shown it; Alice,
    whose policy judges no name, still is."""
    model = Model()
    await ask(route, gateway(model, Declaring(declaration)), "bob-key", False)
    assert model.requests[0].body.get("tools") is None
    model.requests.clear()
    await ask(route, gateway(model, Declaring(declaration)), "alice-key", False)
    assert model.requests[0].body["tools"] == [declaration]


async def test_a_chat_shaped_declaration_on_responses_is_judged_by_its_name() -> None:
    """`function.name` is a name too on /v1/responses: a hook's chat-shaped declaration of a denied tool, which the
    old code did not judge (it read the top-level `name` only), is not declared to Bob's model."""
    model = Model()
    app = gateway(model, Declaring(CHAT_SHAPED_ON_RESPONSES))
    await ask("responses", app, "bob-key", False)
    assert model.requests[0].body.get("tools") is None


class OneNameTwice(ScriptedModel):
    """Calls `lookup` with its name in `function.name` and in the legacy `name`, then says what it read."""

    def __init__(self) -> None:
        super().__init__(default=self.step)

    def step(self, request: RecordedRequest) -> Any:
        results = results_of(request.body)
        if results:
            return chat_completion(content="read: " + " | ".join(results))
        return chat_completion(tool_calls=[{**tool_call("lookup", {"key": "k"}), "name": "lookup"}])


async def test_a_chat_call_with_one_name_in_both_places_still_runs() -> None:
    """A legacy `name` equal to `function.name` is one name: the call is judged and runs as before."""
    text, calls = await ask("chat", gateway(OneNameTwice()), "bob-key", False)
    assert (text, calls) == ("read: value of k", [])
    assert RAN == {"lookup": 1}


def test_tool_name_reads_every_place_a_name_stands() -> None:
    assert tool_name({"name": "a"}) == "a"
    assert tool_name({"function": {"name": "a"}}) == tool_name({"custom": {"name": "a"}}) == "a"
    assert tool_name({"name": "a", "function": {"name": "a"}}) == "a"
    assert tool_name({"name": None, "function": {"name": "a"}}) == "a"  # null is no name
    for unclear in (
        {"name": "a", "function": {"name": "b"}},
        {"name": "", "function": {"name": "b"}},  # an empty name is one the old `or` skipped, another reader not
        {"function": {"name": "a"}, "custom": {"name": "b"}},
        {"name": 3},
        {},
        None,
        "a",
    ):
        assert tool_name(unclear) is None, unclear
