"""Guardrails are given what a client writes in media parts, Chat tool calls and audio, and the opaque values of
known parts, when it is not what the API puts there (guardrail_opaque.py).

The walk left image, image_url, input_image and input_audio parts out whole (their `cache_control`, `file_id`,
`detail`, `format` and fields made up), a Chat tool call's own id, type and made-up fields (given only among the
`tool_calls`, which a guardrail judging texts and arguments does not read there), a Chat message's `audio` (the
model's transcript too, carried into the rerun), made-up keys in an annotation, a citation's `encrypted_index`,
a base64 source's `data` and `media_type` and a file's `file_data`, whatever they held: a word a client wrote
there reached the app unjudged. Now each is left out only while it holds what the API puts there (an image, a
URL, base64, a MIME type, one of the API's words, one token), and given otherwise, its mask written where the word
was; an ordinary request's images, ids, bytes and settings are still no texts. A real LiteLLM `CustomGuardrail`
each; the client is httpx on the middleware, the app a scripted model.
"""

from __future__ import annotations

import copy
from typing import Any

import media_kit
import orjson
import pytest
from conftest import http_client
from guardrail_kit import SAID, WORD, Masking, WordBlock, masked
from test_guardrail_coverage import ANSWERS, messages_body, refusal, responses_body, turns
from test_guardrail_fields import Given

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.testing import (
    ScriptedModel,
    chat_completion,
    function_call,
    message,
    response,
    tool_call,
)

PNG, PDF, WAV = media_kit.PNG, media_kit.PDF, media_kit.WAV
TEXT = {"type": "text", "text": "hi"}
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
DOCUMENT = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}}
CITED = {"type": "web_search_result_location", "url": "https://a.test", "title": "t", "cited_text": "c"}
AUDIO_PART = {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}
FUNCTION = {"name": "f", "arguments": "{}"}
CALL = {"id": "call_1", "type": "function", "function": FUNCTION}
ANNOTATION = {"type": "url_citation", "url": "https://a.test", "title": "t", "start_index": 0, "end_index": 1}


def user_blocks(blocks: list[Any]) -> dict[str, Any]:
    return {"model": "c", "max_tokens": 9, "messages": [{"role": "user", "content": copy.deepcopy(blocks)}]}


def chat_body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "g", "messages": [{"role": "user", "content": "hi"}, *copy.deepcopy(messages)]}


def chat_parts(*parts: dict[str, Any]) -> dict[str, Any]:
    return chat_body({"role": "user", "content": list(parts)})


def chat_calls(call: dict[str, Any], **fields: Any) -> dict[str, Any]:
    turn = {"role": "assistant", "content": None, "tool_calls": [call]} if call else {"role": "assistant"}
    return chat_body(turn | fields, {"role": "tool", "tool_call_id": "call_1", "content": "ok"})


def input_parts(*parts: dict[str, Any]) -> dict[str, Any]:
    return responses_body({"role": "user", "content": list(parts)})


def assistant_text(**fields: Any) -> dict[str, Any]:
    text = {"type": "output_text", "text": "x", "annotations": [ANNOTATION | fields]}
    return responses_body({"type": "message", "id": "msg_1", "role": "assistant", "content": [text]})


# Each case: (route, body), WORD only in a field the walk left out whatever it held.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "messages: an image's cache_control of free text": ("/v1/messages", user_blocks([IMAGE | {"cache_control": SAID}])),
    "messages: an image's cache_control with a made-up key": (
        "/v1/messages",
        user_blocks([IMAGE | {"cache_control": {"type": "ephemeral", "note": SAID}}, TEXT]),
    ),
    "messages: an image's made-up field": ("/v1/messages", user_blocks([IMAGE | {"caption": SAID}, TEXT])),
    "messages: an image's data of words": (
        "/v1/messages",
        user_blocks([{"type": "image", "source": IMAGE["source"] | {"data": SAID}}]),
    ),
    "messages: an image's URL source of words": (
        "/v1/messages",
        user_blocks([{"type": "image", "source": {"type": "url", "url": SAID}}]),
    ),
    "messages: an image's text source": (
        "/v1/messages",
        user_blocks([{"type": "image", "source": {"type": "text", "media_type": "text/plain", "data": SAID}}]),
    ),
    "messages: an image source's made-up key": (
        "/v1/messages",
        user_blocks([{"type": "image", "source": IMAGE["source"] | {WORD: 1}}]),
    ),
    "messages: a citation's encrypted_index of free text": (
        "/v1/messages",
        messages_body([{"type": "text", "text": "x", "citations": [CITED | {"encrypted_index": SAID}]}]),
    ),
    "messages: a base64 document's data of words": (
        "/v1/messages",
        user_blocks([{"type": "document", "source": DOCUMENT["source"] | {"data": SAID}}, TEXT]),
    ),
    "chat: an image_url part's made-up field": (
        "/v1/chat/completions",
        chat_parts({"type": "image_url", "image_url": {"url": "https://a.test/x.png"}, "caption": SAID}),
    ),
    "chat: an image_url's detail of free text": (
        "/v1/chat/completions",
        chat_parts({"type": "image_url", "image_url": {"url": "https://a.test/x.png", "detail": SAID}}),
    ),
    "chat: an image_url of words": ("/v1/chat/completions", chat_parts({"type": "image_url", "image_url": SAID})),
    "chat: an input_audio's format of free text": (
        "/v1/chat/completions",
        chat_parts({"type": "input_audio", "input_audio": {"data": WAV, "format": SAID}}),
    ),
    "chat: an input_audio's data of words": (
        "/v1/chat/completions",
        chat_parts({"type": "input_audio", "input_audio": {"data": SAID, "format": "wav"}}),
    ),
    "chat: an input_audio's data of one word, not base64 of whole bytes": (
        "/v1/chat/completions",
        chat_parts({"type": "input_audio", "input_audio": {"data": WORD, "format": "wav"}}),
    ),
    "chat: a file's file_data of words": (
        "/v1/chat/completions",
        chat_parts({"type": "file", "file": {"filename": "a.pdf", "file_data": SAID}}),
    ),
    "chat: a file that is a string": ("/v1/chat/completions", chat_parts({"type": "file", "file": SAID})),
    "chat: a tool call's id of free text": ("/v1/chat/completions", chat_calls(CALL | {"id": SAID})),
    "chat: a tool call's type of free text": ("/v1/chat/completions", chat_calls(CALL | {"type": SAID})),
    "chat: a tool call's made-up key": ("/v1/chat/completions", chat_calls(CALL | {"note": SAID})),
    "chat: a tool call's function's made-up key": (
        "/v1/chat/completions",
        chat_calls(CALL | {"function": FUNCTION | {WORD: 1}}),
    ),
    "chat: a legacy function_call's made-up key": (
        "/v1/chat/completions",
        chat_calls({}, content=None, function_call=FUNCTION | {"note": SAID}),
    ),
    "chat: an audio's id of free text": ("/v1/chat/completions", chat_calls({}, content=None, audio={"id": SAID})),
    "chat: an audio's transcript": (
        "/v1/chat/completions",
        chat_calls({}, content=None, audio={"id": "audio_1", "transcript": SAID}),
    ),
    "chat: an audio's made-up key": (
        "/v1/chat/completions",
        chat_calls({}, content=None, audio={"id": "audio_1", "note": SAID}),
    ),
    "responses: an input_image's file_id of free text": (
        "/v1/responses",
        input_parts({"type": "input_image", "file_id": SAID, "detail": "auto"}),
    ),
    "responses: an input_image's detail of free text": (
        "/v1/responses",
        input_parts({"type": "input_image", "image_url": "https://a.test/x.png", "detail": SAID}),
    ),
    "responses: an input_image's made-up field": (
        "/v1/responses",
        input_parts({"type": "input_image", "image_url": "https://a.test/x.png", "caption": SAID}),
    ),
    "responses: an input_image's URL of words": (
        "/v1/responses",
        input_parts({"type": "input_image", "image_url": SAID}),
    ),
    "responses: an input_audio's made-up field": ("/v1/responses", input_parts(AUDIO_PART | {"caption": SAID})),
    "responses: an input_file's file_data of words": (
        "/v1/responses",
        input_parts({"type": "input_file", "filename": "a.pdf", "file_data": SAID}),
    ),
    "responses: an annotation's made-up key": ("/v1/responses", assistant_text(**{WORD: 1})),
}


@pytest.mark.parametrize("where", list(CASES))
async def test_a_blocked_word_in_a_media_part_call_or_opaque_value_is_refused(where: str) -> None:
    route, body = CASES[where]
    error = await refusal(route, body)
    assert error["error"]["message"] == f"blocked: {WORD}"
    if route == "/v1/messages":
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"


async def masked_request(route: str, body: dict[str, Any]) -> Any:
    """The body the app got for `body` on `route` under a guardrail masking texts and tool call arguments (as
    LiteLLM's content filter reads a call), after asserting no WORD reached it."""
    model = ScriptedModel(default=ANSWERS[route]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[Masking("arguments")])) as http:
        got = await http.post(route, json=body)
    assert got.status_code == 200, got.text
    assert WORD not in model.requests[0].raw.decode()
    return model.requests[0].body


@pytest.mark.parametrize("where", list(CASES))
async def test_a_mask_in_a_media_part_call_or_opaque_value_is_written_where_the_word_was(where: str) -> None:
    route, body = CASES[where]
    sent = await masked_request(route, body)
    assert orjson.dumps(sent[turns(route)]) == orjson.dumps(masked(body[turns(route)]))  # in place: keys in order


async def test_a_mask_of_a_chat_calls_id_holds_when_the_guardrail_also_masks_its_arguments() -> None:
    """A guardrail masking texts and arguments returns the call it was given, its arguments masked: written back,
    it keeps the mask of the call's id and made-up key among the texts (the call is not written over them)."""
    call = CALL | {"id": SAID, "function": {"name": "f", "arguments": orjson.dumps({"q": SAID}).decode()}, WORD: 1}
    body = chat_calls(call)
    sent = await masked_request("/v1/chat/completions", body)
    assert orjson.dumps(sent["messages"]) == orjson.dumps(masked(body["messages"]))


@server_tool
def define(term: str) -> str:
    """Defines a term."""
    return "a fruit"


async def rounds(route: str, first: dict[str, Any]) -> tuple[int, int]:
    """The status of a turn whose model answers `first` (it calls `define`), and how many requests the app got:
    two when the answer is carried into the rerun, one when a guardrail refused the rerun."""
    done = chat_completion("done") if route == "/v1/chat/completions" else response("done")
    model = ScriptedModel(first, done)
    app = AgenticLoopMiddleware(model, hooks=[WordBlock("all"), ServerTools([define])])
    body = {
        "model": "g",
        "messages" if route == "/v1/chat/completions" else "input": [{"role": "user", "content": "hi"}],
    }
    async with http_client(app) as http:
        got = await http.post(route, json=body)
    assert got.status_code == 200 or got.json()["error"]["message"] == f"blocked: {WORD}"
    return got.status_code, len(model.requests)


async def test_the_models_own_audio_transcript_and_annotation_keys_are_judged_before_the_rerun() -> None:
    """The loop carries the model's audio answer (its transcript, words it said) and its text's annotations into the
    rerun: a word a guardrail blocks there ends the turn, as in any output the round added."""
    answer = chat_completion(tool_calls=[tool_call("define", {"term": "fruit"})])
    answer["choices"][0]["message"]["audio"] = {"id": "audio_1", "data": WAV, "expires_at": 1, "transcript": SAID}
    assert await rounds("/v1/chat/completions", answer) == (400, 1)
    text = {"type": "output_text", "text": "x", "annotations": [ANNOTATION | {WORD: 1}]}
    said = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [text]}
    assert await rounds("/v1/responses", response(said, function_call("define", {"term": "x"}))) == (400, 1)
    answer["choices"][0]["message"]["audio"]["transcript"] = "a fruit"  # no blocked word: the rerun is sent
    assert await rounds("/v1/chat/completions", answer) == (200, 2)


# Requests of the APIs' real shapes: images, URLs, bytes, media types, details, formats, ids and indexes as the
# APIs and LiteLLM write them. Their texts are their words only, and they reach the app as they were sent.
CACHED = {"cache_control": {"type": "ephemeral", "ttl": "5m"}}
ORDINARY: dict[str, dict[str, Any]] = {
    "/v1/messages": {
        "model": "c",
        "max_tokens": 9,
        "messages": [
            {
                "role": "user",
                "content": [
                    IMAGE | CACHED,
                    {"type": "image", "source": {"type": "url", "url": "https://a.test/cat.png?w=64&h=64"}},
                    {"type": "image", "source": {"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}},
                    DOCUMENT | CACHED,
                    {"type": "text", "text": "one"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "two", "citations": [CITED | {"encrypted_index": "Eo8BCioIAhgB+/="}]}
                ],
            },
            {"role": "user", "content": "three"},
        ],
    },
    "/v1/chat/completions": {
        "model": "g",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "one"},
                    {"type": "image_url", "image_url": {"url": "https://a.test/cat.png", "detail": "high"}},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "format": "image/png"}},
                    AUDIO_PART,
                    {"type": "file", "file": {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}},
                    {"type": "file", "file": {"file_id": "file-6F2ksmvXxt4VdoqmHRw6kL"}},
                ],
            },
            {"role": "assistant", "content": None, "tool_calls": [CALL | {"id": "call_9f1c2e7a", "index": 0}]},
            {"role": "tool", "tool_call_id": "call_9f1c2e7a", "content": "two"},
            {"role": "assistant", "content": None, "function_call": FUNCTION},
            {"role": "assistant", "content": "three", "audio": {"id": "audio_6797e8d4b2a0819098a4cf6c4e1b0f4a"}},
        ],
    },
    "/v1/responses": {
        "model": "g",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "one"},
                    {"type": "input_image", "image_url": "https://a.test/cat.png", "detail": "auto"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "low"},
                    {"type": "input_image", "file_id": "file-6F2ksmvXxt4VdoqmHRw6kL", "detail": "original"},
                    AUDIO_PART | {"input_audio": {"data": WAV, "format": "mp3"}},
                    {"type": "input_file", "filename": "a.pdf", "file_data": f"data:application/pdf;base64,{PDF}"},
                    {"type": "input_file", "file_id": "file-6F2ksmvXxt4VdoqmHRw6kL", "detail": "high"},
                ],
            },
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed"}
            | {"content": [{"type": "output_text", "text": "two", "annotations": [ANNOTATION]}]},
            {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed"}
            | {"content": [{"type": "output_text", "text": "three", "annotations": []}]},
        ],
    },
}
GIVEN = {
    "/v1/messages": ["one", "two", "c", "t", "https://a.test", "three"],
    "/v1/chat/completions": ["one", "a.pdf", "two", "three"],  # a file's name is words
    "/v1/responses": ["one", "a.pdf", "two", "https://a.test", "t", "three"],
}


@pytest.mark.parametrize("route", list(ORDINARY))
async def test_real_images_bytes_ids_and_settings_of_media_parts_are_not_given(route: str) -> None:
    guard = Given("given", "pre_call")
    model = ScriptedModel(default=response("ok") if route == "/v1/responses" else message("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post(route, json=ORDINARY[route])
    assert got.status_code == 200, got.text
    assert guard.texts == GIVEN[route]
    assert model.requests[0].body[turns(route)] == ORDINARY[route][turns(route)]
    assert len(guard.images[0]) == 2  # each image of a URL or bytes given as an image
