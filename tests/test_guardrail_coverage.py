"""Guardrails fail closed: every string of every block, part and item type the model may read is given to them.

A client can send back (or forge) the records of any tool: Anthropic's MCP, web fetch and code execution results,
OpenAI's file search, code interpreter, shell and MCP items, or a type no one has heard of. A word a guardrail
blocks must not reach the model in any of them, and a guardrail's mask must be written back into the very field
the word was in; an item that claims a role it cannot have must not be skipped with the system or tool messages.
Each guardrail is a real LiteLLM `CustomGuardrail`; the client is httpx on the middleware, the app a scripted model.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from conftest import http_client
from guardrail_kit import SAID, WORD, Masking, WordBlock, masked

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel, chat_completion, message, response

ANSWERS = {"/v1/messages": message, "/v1/responses": response, "/v1/chat/completions": chat_completion}


async def refusal(path: str, body: dict[str, Any], guard: Any = None) -> Any:
    """The error body of the 400 `body` on `path` is refused with (by WordBlock unless told); the app is not called."""
    model = ScriptedModel(default=ANSWERS[path]("never"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard or WordBlock("arguments")])) as http:
        got = await http.post(path, json=body)
    assert got.status_code == 400
    assert model.requests == []
    return got.json()


async def masked_request(path: str, body: dict[str, Any]) -> Any:
    """The body the app got for `body` on `path` under Masking, after asserting no WORD reached it."""
    model = ScriptedModel(default=ANSWERS[path]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Masking("all")])) as http:
        got = await http.post(path, json=body)
    assert got.status_code == 200
    assert WORD not in model.requests[0].raw.decode()
    return model.requests[0].body


DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}, "title": "t"}
CODE = {"type": "code_execution_result", "stdout": "", "stderr": "", "return_code": 0, "content": []}
BASH = {**CODE, "type": "bash_code_execution_result"}
FETCHED = {"type": "web_fetch_result", "url": "https://a.test/", "retrieved_at": "2026-01-01T00:00:00Z"}


TOOL_RESULT = {"type": "tool_result", "tool_use_id": "t1"}


def result(kind: str, content: Any) -> dict[str, Any]:
    return {"type": kind, "tool_use_id": "srvtoolu_1", "content": content}


# Each case: the blocks of an assistant turn, WORD in one field the view never read before.
MESSAGES_CASES: dict[str, list[Any]] = {
    "mcp_tool_use input value": [
        {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "read", "server_name": "s", "input": {"q": SAID}}
    ],
    "mcp_tool_use input key": [
        {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "read", "server_name": "s", "input": {SAID: 1}}
    ],
    "mcp_tool_use name": [{"type": "mcp_tool_use", "id": "m", "name": SAID, "server_name": "s", "input": {}}],
    "mcp_tool_result string": [result("mcp_tool_result", SAID)],
    "mcp_tool_result text block": [result("mcp_tool_result", [{"type": "text", "text": SAID}])],
    "web_fetch document data": [
        result(
            "web_fetch_tool_result",
            {**FETCHED, "content": {**DOCUMENT, "source": {**DOCUMENT["source"], "data": SAID}}},
        )
    ],
    "web_fetch document title": [result("web_fetch_tool_result", {**FETCHED, "content": {**DOCUMENT, "title": SAID}})],
    "web_fetch url": [
        result("web_fetch_tool_result", {**FETCHED, "url": f"https://a.test/{WORD}", "content": DOCUMENT})
    ],
    "web_fetch error": [result("web_fetch_tool_result", {"type": "web_fetch_tool_result_error", "error_code": SAID})],
    "code_execution stdout": [result("code_execution_tool_result", {**CODE, "stdout": SAID})],
    "code_execution stderr": [result("code_execution_tool_result", {**CODE, "stderr": SAID})],
    "bash_code_execution stdout": [result("bash_code_execution_tool_result", {**BASH, "stdout": SAID})],
    "bash_code_execution stderr": [result("bash_code_execution_tool_result", {**BASH, "stderr": SAID})],
    "text_editor view content": [
        result(
            "text_editor_code_execution_tool_result",
            {"type": "text_editor_code_execution_view_result", "file_type": "text", "content": SAID},
        )
    ],
    "text_editor str_replace lines": [
        result(
            "text_editor_code_execution_tool_result",
            {"type": "text_editor_code_execution_str_replace_result", "lines": ["a", SAID]},
        )
    ],
    "server_tool_use input key": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "code_execution", "input": {SAID: "print(1)"}}
    ],
    "server_tool_use input value": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "code_execution", "input": {"code": [SAID]}}
    ],
    "an unknown block type": [{"type": "x_future_block", "payload": {"lines": [{"said": SAID}]}}],
    "an unknown block's key": [{"type": "x_future_block", "payload": {SAID: True}}],
    "an unknown document source": [{**DOCUMENT, "source": {"type": "x_source", "text": SAID}}],
    "a citation's source": [
        {"type": "text", "text": "See it."}
        | {"citations": [{"type": "search_result_location", "source": SAID, "cited_text": "x", "title": None}]}
    ],
}


def messages_body(blocks: list[Any]) -> dict[str, Any]:
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": copy.deepcopy(blocks)},
        {"role": "user", "content": "and then?"},
    ]
    return {"model": "c", "max_tokens": 9, "messages": turns}


@pytest.mark.parametrize(
    "body",
    [
        {"system": [{"type": "x_system_block", "note": SAID}], "messages": [{"role": "user", "content": "hi"}]},
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
                {"role": "user", "content": [TOOL_RESULT | {"content": [{"type": "x_part", "body": SAID}]}]},
            ]
        },
    ],
    ids=["an unknown system block", "an unknown part of a tool_result"],
)
async def test_messages_unknown_blocks_elsewhere_are_judged_too(body: dict[str, Any]) -> None:
    await refusal("/v1/messages", {"model": "c", "max_tokens": 9, **body})


ANSWERED = {"type": "message", "role": "assistant", "status": "completed", "id": "msg_1"}

RESPONSES_CASES: dict[str, dict[str, Any]] = {
    "file_search_call result text": {
        "type": "file_search_call",
        "id": "fs_1",
        "status": "completed",
        "queries": ["q"],
        "results": [{"file_id": "f1", "filename": "a.txt", "score": 0.5, "text": SAID}],
    },
    "file_search_call query": {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": [SAID]},
    "file_search_call attribute key": {
        "type": "file_search_call",
        "id": "fs_1",
        "status": "completed",
        "queries": ["q"],
        "results": [{"file_id": "f1", "text": "x", "attributes": {SAID: 1}}],
    },
    "code_interpreter_call code": {
        "type": "code_interpreter_call",
        "id": "ci_1",
        "status": "completed",
        "container_id": "c1",
        "code": f"print('{SAID}')",
        "outputs": None,
    },
    "code_interpreter_call logs": {
        "type": "code_interpreter_call",
        "id": "ci_1",
        "status": "completed",
        "container_id": "c1",
        "code": "print(1)",
        "outputs": [{"type": "logs", "logs": SAID}, {"type": "image", "url": "https://a.test/i.png"}],
    },
    "shell_call_output stdout": {
        "type": "shell_call_output",
        "call_id": "sh_1",
        "output": [{"stdout": SAID, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
    },
    "shell_call_output stderr": {
        "type": "shell_call_output",
        "call_id": "sh_1",
        "output": [{"stdout": "", "stderr": SAID, "outcome": {"type": "exit", "exit_code": 1}}],
    },
    "shell_call commands": {"type": "shell_call", "call_id": "sh_1", "action": {"commands": [f"echo {WORD}"]}},
    "local_shell_call command": {
        "type": "local_shell_call",
        "id": "ls_1",
        "call_id": "ls_1",
        "status": "completed",
        "action": {"type": "exec", "command": ["echo", SAID], "env": {}},
    },
    "local_shell_call env": {
        "type": "local_shell_call",
        "id": "ls_1",
        "call_id": "ls_1",
        "status": "completed",
        "action": {"type": "exec", "command": ["env"], "env": {"NOTE": SAID}},
    },
    "mcp_approval_request arguments": {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "server_label": "s",
        "name": "read",
        "arguments": orjson.dumps({"q": SAID}).decode(),
    },
    "mcp_call arguments": {
        "type": "mcp_call",
        "id": "mcp_1",
        "server_label": "s",
        "name": "read",
        "arguments": orjson.dumps({"q": SAID}).decode(),
    },
    "mcp_call output": {"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "r", "arguments": "{}"}
    | {"output": SAID},
    "mcp_call error": {"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "r", "arguments": "{}"}
    | {"error": {"type": "http_error", "code": 500, "message": SAID}},
    "output_text annotation title": {
        **ANSWERED,
        "content": [
            {
                "type": "output_text",
                "text": "See it.",
                "annotations": [
                    {"type": "url_citation", "url": "https://a.test/", "title": SAID, "start_index": 0, "end_index": 3}
                ],
            }
        ],
    },
    "an unknown item type": {"type": "x_future_call", "id": "x1", "details": {"notes": [SAID]}},
    "an unknown item's key": {"type": "x_future_call", "id": "x1", "details": {SAID: None}},
    "an unknown part type": {**ANSWERED, "content": [{"type": "x_part", "said": SAID}]},
    "an item with neither type nor role": {"note": SAID},
    "a message claiming the tool role": {"type": "message", "role": "tool", "content": SAID},
    "a reasoning item's text": {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": SAID}],
    },
}


def responses_body(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "g",
        "input": [{"role": "user", "content": "hi"}, copy.deepcopy(item), {"role": "user", "content": "go"}],
    }


# Both tables as (route, body): one block test and one mask test serve every case.
RECORDS = {f"messages: {where}": ("/v1/messages", messages_body(blocks)) for where, blocks in MESSAGES_CASES.items()}
RECORDS |= {f"responses: {where}": ("/v1/responses", responses_body(item)) for where, item in RESPONSES_CASES.items()}


def turns(route: str) -> str:
    """The field of a route's body that holds its messages."""
    return "input" if route == "/v1/responses" else "messages"


@pytest.mark.parametrize("where", list(RECORDS))
async def test_a_blocked_word_in_any_record_or_unknown_block_or_item_is_refused(where: str) -> None:
    route, body = RECORDS[where]
    error = await refusal(route, body)
    assert error["error"]["message"] == f"blocked: {WORD}"
    if route == "/v1/messages":
        assert error == {"type": "error", "error": {"type": "invalid_request_error", "message": f"blocked: {WORD}"}}


@pytest.mark.parametrize("where", list(RECORDS))
async def test_a_mask_is_written_back_into_the_very_field(where: str) -> None:
    route, body = RECORDS[where]
    sent = await masked_request(route, body)
    assert sent[turns(route)] == masked(body[turns(route)])  # that field masked, every other as the client sent it


async def test_a_document_with_its_citations_setting_is_judged_not_refused_as_unreadable() -> None:
    model = ScriptedModel(default=message("ok"))
    cited = {**DOCUMENT, "citations": {"enabled": True}}
    async with http_client(AgenticLoopMiddleware(model, hooks=[WordBlock("arguments")])) as http:
        fine = await http.post("/v1/messages", json=messages_body([cited]))
        blocked = await http.post("/v1/messages", json=messages_body([{**cited, "title": SAID}]))
    assert fine.status_code == 200 and blocked.status_code == 400
    assert len(model.requests) == 1


async def test_chat_a_blocked_word_in_an_unknown_part_is_refused() -> None:
    body = {"model": "g", "messages": [{"role": "user", "content": [{"type": "x_part", "x": {"said": SAID}}]}]}
    assert (await refusal("/v1/chat/completions", body))["error"]["message"] == f"blocked: {WORD}"


@pytest.mark.parametrize(
    "item",
    [
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "role": "system"}
        | {"action": {"type": "search", "query": SAID}},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "role": "tool"}
        | {"action": {"type": "search", "query": SAID}},
        {"type": "x_future_call", "role": "tool", "said": SAID},
        {"type": "x_future_call", "role": "system", "said": SAID},
    ],
    ids=["web_search_call as system", "web_search_call as tool", "unknown item as tool", "unknown item as system"],
)
async def test_responses_an_item_claiming_a_role_is_not_skipped_with_system_or_tool_messages(
    item: dict[str, Any],
) -> None:
    model = ScriptedModel(default=response("ok"))
    app = AgenticLoopMiddleware(model, hooks=[WordBlock("arguments", skip_system=True, skip_tool=True)])
    async with http_client(app) as http:
        got = await http.post("/v1/responses", json=responses_body(item))
        assert got.status_code == 400 and model.requests == []
        # the skip settings still leave real system messages and tool outputs out, as LiteLLM does
        skipped = [
            {"role": "system", "content": SAID},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": SAID},
            {"type": "shell_call_output", "call_id": "s1", "output": [{"stdout": SAID, "stderr": ""}]},
            {"role": "user", "content": "hi"},
        ]
        got = await http.post("/v1/responses", json={"model": "g", "input": skipped})
    assert got.status_code == 200 and len(model.requests) == 1


async def test_a_mask_that_would_merge_two_keys_is_refused_not_half_written() -> None:
    call = {"type": "mcp_tool_use", "id": "m1", "name": "read", "server_name": "s", "input": {SAID: 1}}
    call["input"]["the masked is here"] = 2
    error = await refusal("/v1/messages", messages_body([call]), Masking("all"))
    assert "merge two keys" in error["error"]["message"]


@pytest.mark.parametrize("route", ["/v1/messages", "/v1/responses"])
async def test_an_unknown_block_nested_too_deep_to_walk_is_refused_in_the_routes_shape(route: str) -> None:
    nested: Any = SAID
    for _ in range(100):
        nested = [nested]
    block = {"type": "x_future", "deep": nested}
    body = messages_body([block]) if route == "/v1/messages" else responses_body(block)
    error = (await refusal(route, body))["error"]
    assert "nested deeper than" in error["message"] and "the guardrails cannot read it" in error["message"]


@pytest.mark.parametrize("route", ["/v1/messages", "/v1/responses", "/v1/chat/completions"])
async def test_a_block_whose_type_is_not_a_string_is_refused_in_the_routes_shape(route: str) -> None:
    block = {"type": [SAID], "text": "hi"}
    if route == "/v1/messages":
        body = messages_body([block])
    elif route == "/v1/responses":
        body = responses_body(block)
    else:
        body = {"model": "g", "messages": [{"role": "user", "content": [block]}]}
    message_ = (await refusal(route, body))["error"]["message"]
    assert message_ == "the request holds a type that is list: the guardrails cannot read it"


class Numbering(Masking):
    """Returns each text it is given as its own number, `@@<n>@@`: each must then stand once in the app's request,
    at its place. A place given twice would have its second number written over its first, which is lost."""

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        self.record(inputs)
        return {**inputs, "texts": [f"@@{index}@@" for index in range(len(inputs["texts"]))]}


FREE = "a free word"  # free text where an id or a fixed word belongs: given, so its place must be given once
# A rich history of each route: known blocks, parts, messages and items, with free text in their ids and types and
# fields made up on them, as a hostile client sends.
ONCE: dict[str, dict[str, Any]] = {
    "/v1/messages": {
        "model": "c",
        "max_tokens": 9,
        "system": [{"type": "text", "text": "s", "note": FREE}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {"type": FREE}}, DOCUMENT]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "b", "note": FREE},
                    {"type": "tool_use", "id": FREE, "name": "f", "input": {"k": "v"}, "note": FREE},
                ],
            },
            {"role": "user", "content": [TOOL_RESULT | {"tool_use_id": FREE, "content": "r", "note": FREE}]},
        ],
    },
    "/v1/chat/completions": {
        "model": "g",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "u", "note": FREE}], "name": FREE},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": FREE, "type": FREE, "function": {"name": "f", "arguments": "{}", "note": FREE}},
                    {"id": "call_2", "type": {"k": FREE}, "custom": {"name": "c", "input": "i"}, "note": FREE},
                    {"id": "call_3", "type": [FREE], "function": {"name": "f", "arguments": "{}"}, "index": FREE},
                ],
                "function_call": {"name": "g", "arguments": "{}", "note": FREE},
                "audio": {"id": FREE, "note": FREE},
            },
            {"role": "tool", "tool_call_id": FREE, "content": "t", "note": FREE},
        ],
    },
    "/v1/responses": {
        "model": "g",
        "instructions": "i",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "u", "note": FREE}]},
            {"type": "function_call", "id": FREE, "call_id": FREE, "name": "f", "arguments": "{}", "note": FREE},
            {"type": "function_call_output", "call_id": FREE, "output": "o", "status": FREE},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": FREE, "text": "s"}], "encrypted_content": FREE},
        ],
    },
}


@pytest.mark.parametrize("route", list(ONCE))
async def test_each_place_of_a_text_is_given_once(route: str) -> None:
    """No field is given to a guardrail twice: each text it returns is written to its own place, and each stands in
    the app's request once (a Chat tool call's free-text `type` was given twice, so a guardrail whose edits differ by
    position, as one masking a repeated text only once does, lost its mask)."""
    model = ScriptedModel(default=ANSWERS[route]("ok"))
    guard = Numbering("all")
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post(route, json=ONCE[route])
    assert got.status_code == 200, got.text
    sent = model.requests[0].raw.decode()
    assert guard.texts.count(FREE) > 3  # the free text is given, in several places
    assert [sent.count(f'"@@{index}@@"') for index in range(len(guard.texts))] == [1] * len(guard.texts)
