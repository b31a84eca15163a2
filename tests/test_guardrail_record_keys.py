"""Guardrails are given the names a client makes up in the tool records of a request's history (guardrail_records).

A record (a code execution result, an MCP call, a file search, a shell's output...) was walked for its string
values only, its keys left out as the API's: a word a client wrote only in a made-up key of a record, at its own
level (`{"type": "code_execution_tool_result", ..., "<word>": 1}`) or deeper (in its `content`, a search result,
a shell's `outcome`, a code interpreter's image output), reached the app unjudged, while the same key on a part no
reader names (test_guardrail_fields.py) or on a block no reader knows was blocked or masked. A lenient app may show
the model the record, keys and all. Now every key of a record but the APIs' own names of its fields is given, its
mask written back as a rename in place; an ordinary record's texts are its words only. A real LiteLLM
`CustomGuardrail` each; the client is httpx on the middleware, the app a scripted model.
"""

from __future__ import annotations

from typing import Any

import media_kit
import orjson
import pytest
from guardrail_kit import WORD, masked
from test_guardrail_coverage import CODE, masked_request, messages_body, refusal, responses_body, result, turns
from test_guardrail_fields import given_texts

MCP_USE = {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "read", "server_name": "s", "input": {}}
FILE_SEARCH = {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"]}
SHELL_OUTPUT = {"type": "shell_call_output", "call_id": "sh_1"}
OUTCOME = {"type": "exit", "exit_code": 0}
INTERPRETER = {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "container_id": "c1"}
INTERPRETER |= {"code": "print(1)"}
PNG = f"data:image/png;base64,{media_kit.PNG}"  # an image output URL that is the image: left out

# Each case: (route, body), WORD only in the name of a key a client made up in a record.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "messages: a code execution result's own key": (
        "/v1/messages",
        messages_body([result("code_execution_tool_result", CODE) | {WORD: 1}]),
    ),
    "messages: a key in a code execution result's content": (
        "/v1/messages",
        messages_body([result("code_execution_tool_result", {**CODE, WORD: None})]),
    ),
    "messages: a key of a file in a code execution result": (
        "/v1/messages",
        messages_body([result("code_execution_tool_result", {**CODE, "content": [{"file_id": "f", WORD: True}]})]),
    ),
    "messages: an mcp_tool_use's own key": ("/v1/messages", messages_body([MCP_USE | {WORD: {"n": 1}}])),
    "responses: a file_search_call's own key": ("/v1/responses", responses_body(FILE_SEARCH | {WORD: 0})),
    "responses: a key of a file search result": (
        "/v1/responses",
        responses_body(FILE_SEARCH | {"results": [{"file_id": "f1", "text": "x", WORD: 1}]}),
    ),
    "responses: a key in a shell output's outcome": (
        "/v1/responses",
        responses_body(SHELL_OUTPUT | {"output": [{"stdout": "", "stderr": "", "outcome": OUTCOME | {WORD: 1}}]}),
    ),
    "responses: a key of a code interpreter's image output": (
        "/v1/responses",
        responses_body(INTERPRETER | {"outputs": [{"type": "image", "url": "https://a.test/i.png", WORD: 1}]}),
    ),
    "responses: a key of an mcp_call's error": (
        "/v1/responses",
        responses_body(
            {"type": "mcp_call", "id": "m1", "server_label": "s", "name": "f", "arguments": "{}", "error": {WORD: 1}}
        ),
    ),
}


@pytest.mark.parametrize("where", list(CASES))
async def test_a_blocked_word_only_in_a_made_up_key_of_a_record_is_refused(where: str) -> None:
    route, body = CASES[where]
    error = (await refusal(route, body))["error"]
    assert error["message"] == f"blocked: {WORD}"


@pytest.mark.parametrize("where", list(CASES))
async def test_a_mask_of_a_made_up_key_of_a_record_renames_it_in_place(where: str) -> None:
    route, body = CASES[where]
    sent = await masked_request(route, body)
    assert sent[turns(route)] == masked(body[turns(route)])
    assert orjson.dumps(sent[turns(route)]) == orjson.dumps(masked(body[turns(route)]))  # in place: keys in order


ORDINARY = {  # records as the APIs write them, every key the API's: their texts are their words only
    "/v1/messages": messages_body(
        [
            MCP_USE | {"input": {"q": "one"}},
            result("code_execution_tool_result", {**CODE, "stdout": "two", "content": [{"type": "o", "file_id": "f"}]}),
            result(
                "text_editor_code_execution_tool_result",
                {"type": "text_editor_code_execution_view_result", "file_type": "text", "content": "three"}
                | {"num_lines": 1, "start_line": 1, "total_lines": 1},
            ),
        ]
    ),
    "/v1/responses": {
        "model": "g",
        "input": [
            FILE_SEARCH | {"results": [{"file_id": "f1", "filename": "four", "score": 0.5, "text": "five"}]},
            SHELL_OUTPUT | {"output": [{"stdout": "six", "stderr": "", "outcome": OUTCOME}], "max_output_length": 9},
            INTERPRETER | {"outputs": [{"type": "logs", "logs": "seven"}, {"type": "image", "url": PNG}]},
        ],
    },
}


@pytest.mark.parametrize("route", list(ORDINARY))
async def test_the_apis_own_names_of_a_records_fields_are_not_given(route: str) -> None:
    assert await given_texts(route, ORDINARY[route]) == GIVEN[route]


GIVEN = {  # every string value (deeper than a record's own level, its types and ids too), no key
    "/v1/messages": [
        *("hi", "read", "s", "one", "q", "code_execution_result", "two", "", "o", "f"),
        *("text_editor_code_execution_view_result", "text", "three", "and then?"),
    ],
    "/v1/responses": ["q", "f1", "four", "five", "six", "", "exit", "print(1)", "seven"],
}
