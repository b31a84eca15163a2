"""Guardrails are given what a client writes in the fields taken for ids and fixed words, when it is not what the
API puts there (guardrail_values.fixed).

The walk left out a record's or part's `type`, ids, `role`, `status`, `signature`, `cache_control` and `caller`
whatever they held, and an `encrypted_stdout` on a code execution result block itself, a Responses compaction's
or reasoning's `encrypted_content` and a code interpreter image output's `url` too: a word a client wrote there
(free text in an id or a status, an object of its own in `cache_control`) reached the app unjudged, though a
lenient app may show the model a record or part whole. Now such a field is left out only while it holds what the
API puts there (an id, a type, a signature or an encrypted content of one token; a status or role of the APIs'
words; cache settings and a caller of the API's keys; an image), and given otherwise, its mask written where the
word was; an ordinary request's ids, signatures and settings are still no texts. And a guardrail's mask that
merges two keys of an `mcp_approval_request`'s `arguments` is refused as a tool call's is. A real LiteLLM
`CustomGuardrail` each; the client is httpx on the middleware, the app a scripted model.
"""

from __future__ import annotations

from typing import Any

import media_kit
import orjson
import pytest
from guardrail_kit import SAID, WORD, Masking, masked
from test_guardrail_coverage import CODE, masked_request, messages_body, refusal, responses_body, result, turns
from test_guardrail_fields import MERGED, given_texts

MCP_USE = {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "read", "server_name": "s", "input": {}}
TEXT = {"type": "text", "text": "hi"}
TOOL_USE = {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "f", "input": {}}
INTERPRETER = {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "container_id": "c1"}


def chat_tool_turn(call_id: str) -> dict[str, Any]:
    return {
        "model": "g",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"} | FUNCTION]},
            {"role": "tool", "tool_call_id": call_id, "content": "ok"},
        ],
    }


FUNCTION = {"function": {"name": "f", "arguments": "{}"}}

# Each case: (route, body), WORD only in a field taken for an id or a fixed word, holding what the API never puts.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "messages: a record's id of free text": ("/v1/messages", messages_body([MCP_USE | {"id": SAID}])),
    "messages: a record's signature of free text": ("/v1/messages", messages_body([MCP_USE | {"signature": SAID}])),
    "messages: a record's own tool_use_id of free text": (
        "/v1/messages",
        messages_body([result("code_execution_tool_result", CODE) | {"tool_use_id": SAID}]),
    ),
    "messages: an encrypted_stdout on a code execution result itself": (
        "/v1/messages",
        messages_body([result("code_execution_tool_result", CODE) | {"encrypted_stdout": SAID}]),
    ),
    "messages: a record's cache_control object of its own": (
        "/v1/messages",
        messages_body([MCP_USE | {"cache_control": {"type": "ephemeral", "note": SAID}}]),
    ),
    "messages: a text block's cache_control with a made-up key": (
        "/v1/messages",
        messages_body([TEXT | {"cache_control": {"type": "ephemeral", WORD: "1h"}}]),
    ),
    "messages: a text block's cache_control of free text": (
        "/v1/messages",
        messages_body([TEXT | {"cache_control": SAID}]),
    ),
    "messages: a tool_use's caller object of its own": (
        "/v1/messages",
        messages_body([TOOL_USE | {"caller": {"type": "direct", "said": [SAID]}}]),
    ),
    "messages: a tool_use's caller with a type of free text": (
        "/v1/messages",
        messages_body([TOOL_USE | {"caller": {"type": SAID}}]),
    ),
    "chat: a tool message's tool_call_id of free text": ("/v1/chat/completions", chat_tool_turn(SAID)),
    "responses: a record's status of free text": (
        "/v1/responses",
        responses_body({"type": "file_search_call", "id": "fs_1", "status": SAID, "queries": ["q"]}),
    ),
    "responses: a message's status of free text": (
        "/v1/responses",
        responses_body({"type": "message", "role": "assistant", "status": SAID, "content": "x"}),
    ),
    "responses: a function_call_output's call_id that is an object": (
        "/v1/responses",
        responses_body({"type": "function_call_output", "call_id": {"said": SAID}, "output": "x"}),
    ),
    "responses: an unknown item's id of free text": ("/v1/responses", responses_body({"type": "x_item", "id": SAID})),
    "responses: a compaction's encrypted_content of free text": (
        "/v1/responses",
        responses_body({"type": "compaction", "id": "cmp_1", "encrypted_content": SAID}),
    ),
    "responses: a reasoning's encrypted_content of free text": (
        "/v1/responses",
        responses_body({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": SAID}),
    ),
    "responses: a code interpreter image output's URL of words": (
        "/v1/responses",
        responses_body(INTERPRETER | {"outputs": [{"type": "image", "url": f"https://a.test/{WORD}.png"}]}),
    ),
}


@pytest.mark.parametrize("where", list(CASES))
async def test_a_blocked_word_in_an_id_or_fixed_word_that_is_none_is_refused(where: str) -> None:
    route, body = CASES[where]
    error = await refusal(route, body)
    assert error["error"]["message"] == f"blocked: {WORD}"
    if route == "/v1/messages":
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("where", list(CASES))
async def test_a_mask_in_an_id_or_fixed_word_that_is_none_is_written_where_the_word_was(where: str) -> None:
    route, body = CASES[where]
    sent = await masked_request(route, body)
    assert orjson.dumps(sent[turns(route)]) == orjson.dumps(masked(body[turns(route)]))  # in place: keys in order


THOUGHT = "CiQBjz1rX6Zl+/Vb0w=="  # a base64 thought signature, as LiteLLM carries Gemini's in a tool call's id
SIGNATURE = "EqQBCkYIBRgCIkDdSz+/w8xK0KmBrL9Zq1y3nXvS0YfVQyq6Qf0AjEC9x0A1wJwJ3rX/Y2hdI4sK1A8fLt4nkWOM9dZ5FPqvn5Sg=="

# Requests as the APIs and LiteLLM write them, ids, signatures, statuses and settings of the real shapes: their
# texts are their words only.
ORDINARY: dict[str, dict[str, Any]] = {
    "/v1/messages": messages_body(
        [
            TEXT | {"cache_control": {"type": "ephemeral", "ttl": "1h"}},
            TOOL_USE | {"caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_01ABCxyz"}},
            MCP_USE | {"id": "mcptoolu_014Qx8vXh7", "signature": SIGNATURE},
            result("code_execution_tool_result", CODE) | {"tool_use_id": "srvtoolu_01A-b_C"},
        ]
    ),
    "/v1/chat/completions": chat_tool_turn(f"call_9f1c2e7a-1b2c-4d5e-8f90-a1b2c3d4e5f6__thought__{THOUGHT}"),
    "/v1/responses": {
        "model": "g",
        "input": [
            {"type": "message", "id": "msg_67ccd2bf17f0819081ff3bb2cf6508e6", "role": "user", "status": "completed"}
            | {"content": [{"type": "input_text", "text": "one"}]},
            {"type": "function_call", "id": "fc_67ca09c5efe0819096d0511c92b8c890", "call_id": "call_abc"}
            | {"name": "f", "arguments": "{}", "status": "in_progress"},
            {"type": "function_call_output", "call_id": "functions.f:0", "output": "two", "status": "incomplete"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAABo_x-Yz0=="},
            {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAABpQ2hT-aB_c=="},
            {"type": "file_search_call", "id": "fs_1", "status": "searching", "queries": ["three"]},
            INTERPRETER | {"outputs": [{"type": "image", "url": f"data:image/png;base64,{media_kit.PNG}"}]},
        ],
    },
}
GIVEN = {
    "/v1/messages": ["hi", "hi", "read", "s", "code_execution_result", "", "", "and then?"],
    "/v1/chat/completions": ["hi", "ok"],
    "/v1/responses": ["one", "two", "three"],
}


@pytest.mark.parametrize("route", list(ORDINARY))
async def test_real_ids_signatures_statuses_and_settings_are_not_given(route: str) -> None:
    assert await given_texts(route, ORDINARY[route]) == GIVEN[route]


async def test_a_mask_merging_two_keys_of_an_mcp_approval_requests_arguments_is_refused() -> None:
    """Its `arguments` is a JSON string, as a call's are, and given among the texts: a mask naming a key twice
    would reach the app, which parses it into one key, as an edit of a tool call's arguments is refused for."""
    request = {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "s", "name": "f"}
    body = responses_body(request | {"arguments": orjson.dumps({"path": MERGED}).decode()})
    error = await refusal("/v1/responses", body, Masking("all"))
    assert error["error"]["message"] == "a guardrail's edit would merge two keys of an object (onto 'masked')"
    unmerged = responses_body(request | {"arguments": orjson.dumps({WORD: 1, "other": f"a {WORD}"}).decode()})
    assert (await masked_request("/v1/responses", unmerged))["input"] == masked(unmerged["input"])
