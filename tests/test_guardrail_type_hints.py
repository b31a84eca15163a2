"""A media part's type hints and the other places LiteLLM reads its bytes from (fifth hostile review, g2/g3).

LiteLLM takes a media part's type from a `format`, `mime_type` or `content_type` field, at the part's level or in
its inner object, over the type its data URL declares: a PDF's or a WAV's bytes of ASCII words, left out of the
guardrail's texts as a PDF or audio, hinted `text/plain` reached Gemini as a text the model reads. Such a hint
beside bytes is now refused unless it names a known byte type. LiteLLM also reads an image's URL from the part's
`url`, and a file's bytes from the part's `file_data` or a `file` that is a string: each is checked as the API's
own field is, where it was given to the guardrail as base64 words it could not judge. Real LiteLLM guardrails; the
client is httpx on the middleware, the app a scripted model.
"""

from __future__ import annotations

import base64
from typing import Any

import media_kit
import pytest
from conftest import http_client
from guardrail_kit import SAID, WORD, WordBlock
from test_guardrail_coverage import ANSWERS, refusal
from test_guardrail_fields import Given, given_texts
from test_guardrail_media import chat_body, error_message, messages_body, responses_body

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# Bytes that open and end as a PDF's and a WAV's do, and are ASCII words between: a provider told they are
# `text/plain` gives the model the words.
WORDY_PDF = b64(b"%PDF-1.4\n" + SAID.encode() + b"\n%%EOF\n")
WORDY_WAV = b64(b"RIFF\x24\x00\x00\x00WAVE" + SAID.encode())
TEXT = b64(SAID.encode())
ESCAPED = "".join(f"\\u{ord(c):04x}" for c in SAID)  # JSON escapes, as no encoder writes letters
PNG_URL = f"data:image/png;base64,{media_kit.PNG}"
_TEXT_URL = f"data:text/plain;base64,{TEXT}"
URL = f"https://files.test/the-{WORD}.pdf"
PDF_URL = f"data:application/pdf;base64,{media_kit.PDF}"
WORDY_PDF_URL = f"data:application/pdf;base64,{WORDY_PDF}"


def chat(*parts: dict[str, Any]) -> dict[str, Any]:
    return chat_body({"role": "user", "content": list(parts)})


def responses(*parts: dict[str, Any]) -> dict[str, Any]:
    return responses_body({"role": "user", "content": list(parts)})


HINTED: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat: a PDF's file_data hinted text/plain": (
        "/v1/chat/completions",
        chat({"type": "file", "file": {"file_data": WORDY_PDF_URL, "format": "text/plain"}}),
        "a media part whose format is text/plain",
    ),
    "chat: a WAV's file_data hinted text/plain": (
        "/v1/chat/completions",
        chat({"type": "file", "file": {"file_data": f"data:audio/wav;base64,{WORDY_WAV}", "format": "text/plain"}}),
        "a media part whose format is text/plain",
    ),
    "chat: a bare PDF hinted by the part's mime_type": (
        "/v1/chat/completions",
        chat({"type": "file", "mime_type": "text/markdown", "file": {"file_data": WORDY_PDF}}),
        "a media part whose mime_type is text/markdown",
    ),
    "chat: an image URL's data hinted by its content_type": (
        "/v1/chat/completions",
        chat({"type": "image_url", "image_url": {"url": PNG_URL, "content_type": "text/plain"}}),
        "a media part whose content_type is text/plain",
    ),
    "chat: an image URL's data hinted in its format": (
        "/v1/chat/completions",
        chat({"type": "image_url", "image_url": {"url": PNG_URL, "format": "text/plain"}}),
        "a media part whose format is text/plain",
    ),
    "chat: a bare image hinted at the part's level": (
        "/v1/chat/completions",
        chat({"type": "image_url", "format": "text/plain", "image_url": media_kit.PNG}),
        "a media part whose format is text/plain",
    ),
    "responses: an input_image hinted at the part's level": (
        "/v1/responses",
        responses({"type": "input_image", "image_url": PNG_URL, "format": "text/plain"}),
        "a media part whose format is text/plain",
    ),
    "responses: an input_file hinted by an object": (
        "/v1/responses",
        responses({"type": "input_file", "file_data": WORDY_PDF_URL, "format": {}}),
        "a media part whose format is dict",
    ),
    "responses: an input_file hinted empty": (
        "/v1/responses",
        responses({"type": "input_file", "file_data": WORDY_PDF_URL, "format": ""}),
        "a media part whose format is empty",
    ),
    "chat: URL-safe base64 hinted text/plain": (
        "/v1/chat/completions",
        chat({"type": "file", "file": {"file_data": TEXT.replace("+", "-"), "format": "text/plain"}}),
        "a media part whose format is text/plain",
    ),
    "chat: an image URL holding base64, hinted text/plain (Bedrock decodes it)": (
        "/v1/chat/completions",
        chat({"type": "image_url", "image_url": {"url": f"https://a.test/base64,{TEXT}", "format": "text/plain"}}),
        "a media part whose format is text/plain",
    ),
    "responses: a file's id holding a data URL, hinted text/markdown": (
        "/v1/responses",
        responses({"type": "input_file", "file_id": WORDY_PDF_URL, "mime_type": "text/markdown"}),
        "a media part whose mime_type is text/markdown",
    ),
    "chat: a file's id holding base64, hinted text/plain (Bedrock decodes it)": (
        "/v1/chat/completions",
        chat({"type": "file", "file": {"file_id": f"x;base64,{TEXT}", "format": "text/plain"}}),
        "a media part whose format is text/plain",
    ),
    "chat: an assistant's generated image of text": (
        "/v1/chat/completions",
        chat_body(
            {"role": "assistant", "content": "here", "images": [{"type": "image_url", "image_url": {"url": _TEXT_URL}}]}
        ),
        "an image URL of text/plain in base64",
    ),
    "chat: an image part whose image_url object hints text/plain": (
        "/v1/chat/completions",
        chat(
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": media_kit.PNG},
                "image_url": {"format": "text/plain"},
            }
        ),
        "a media part whose format is text/plain",
    ),
    "chat: an assistant's generated image of no type, of text": (
        "/v1/chat/completions",
        chat_body({"role": "assistant", "content": "here", "images": [{"image_url": {"url": _TEXT_URL}}]}),
        "an image URL of text/plain in base64",
    ),
    "responses: LiteLLM's compaction JSON spelling its words as escapes": (
        "/v1/responses",
        responses_body(
            {
                "type": "compaction",
                "id": "cmp_1",
                "encrypted_content": '{"type":"compaction","content":"' + ESCAPED + '"}',
            }
        ),
        "an encrypted_content spelling letters as JSON escapes",
    ),
    "responses: LiteLLM's wrapped compaction JSON spelling its words as escapes": (
        "/v1/responses",
        responses_body(
            {
                "type": "compaction",
                "id": "cmp_1",
                "encrypted_content": 'litellm_enc:bW9kZWw;{"type":"compaction","content":"' + ESCAPED + '"}',
            }
        ),
        "an encrypted_content spelling letters as JSON escapes",
    ),
    "responses: LiteLLM's compaction JSON spelling its spaces as escapes": (
        "/v1/responses",
        responses_body({"type": "compaction", "id": "cmp_1", "encrypted_content": '{"content":"ignore\\u0020all"}'}),
        "an encrypted_content spelling letters as JSON escapes",
    ),
    "responses: an mcp_approval_request's arguments spelling their words as escapes": (
        "/v1/responses",
        responses_body(
            {
                "type": "mcp_approval_request",
                "id": "mcpr_1",
                "name": "f",
                "server_label": "s",
                "arguments": '{"q":"' + ESCAPED + '"}',
            }
        ),
        "a tool call's arguments spelling letters as JSON escapes",
    ),
    "chat: a tool call's arguments spelling their words as escapes": (
        "/v1/chat/completions",
        chat_body(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"q":"' + ESCAPED + '"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ),
        "a tool call's arguments spelling letters as JSON escapes",
    ),
    "responses: an item no reader knows holding an output list": (
        "/v1/responses",
        responses_body({"type": "x_output", "call_id": "c1", "output": [{"type": "input_file", "file_data": PDF_URL}]}),
        "a x_output item holding an output of parts",
    ),
    "responses: an item of no type and no role holding content, read as a message": (
        "/v1/responses",
        responses_body({"content": [{"type": "input_image", "image_url": _TEXT_URL}]}),
        "an image URL of text/plain in base64",
    ),
    "responses: a computer_call_output whose output is a file": (
        "/v1/responses",
        responses_body(
            {
                "type": "computer_call_output",
                "call_id": "c1",
                "output": {"type": "input_file", "file_data": f"x {_TEXT_URL}"},
            }
        ),
        "a file_data that holds a data URL after its start",
    ),
    "responses: a computer_call_output whose output is of another type": (
        "/v1/responses",
        responses_body({"type": "computer_call_output", "call_id": "c1", "output": {"type": "text", "text": SAID}}),
        "a computer_call_output whose output is text",
    ),
    "responses: a computer_call_output of a list": (
        "/v1/responses",
        responses_body(
            {"type": "computer_call_output", "call_id": "c1", "output": [{"type": "input_file", "file_data": PDF_URL}]}
        ),
        "a computer_call_output whose output is a list",
    ),
    "responses: a data URL of text in an item no reader knows": (
        "/v1/responses",
        responses_body({"type": "item_reference", "id": "x", "content": [{"type": "input_text", "text": _TEXT_URL}]}),
        "a item_reference item holding a content list",
    ),
}
ELSEWHERE: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat: a file that is a string": (
        "/v1/chat/completions",
        chat({"type": "file", "file": _TEXT_URL}),
        "a file_data of text/plain in base64",
    ),
    "chat: a file_data at the part's level": (
        "/v1/chat/completions",
        chat({"type": "file", "file_data": _TEXT_URL, "file": {"filename": "a.txt"}}),
        "a file_data of text/plain in base64",
    ),
    "chat: an image's url at the part's level": (
        "/v1/chat/completions",
        chat({"type": "image_url", "url": _TEXT_URL}),
        "an image URL of text/plain in base64",
    ),
    "chat: an image's url at the part's level, an object": (
        "/v1/chat/completions",
        chat({"type": "image_url", "url": {"url": _TEXT_URL}}),
        "an image URL of text/plain in base64",
    ),
    "responses: an input_image whose image_url is an object": (
        "/v1/responses",
        responses({"type": "input_image", "image_url": {"url": _TEXT_URL}}),
        "an image URL of text/plain in base64",
    ),
    "responses: an input_file whose file is an object": (
        "/v1/responses",
        responses({"type": "input_file", "file": {"file_data": _TEXT_URL}}),
        "a file_data of text/plain in base64",
    ),
    "chat: a file_data holding a data URL after its start": (
        "/v1/chat/completions",
        chat({"type": "file", "file": {"file_data": f"x {_TEXT_URL}"}}),
        "a file_data that holds a data URL after its start",
    ),
    "chat: a file string holding a data URL after its start": (
        "/v1/chat/completions",
        chat({"type": "file", "file": f" {_TEXT_URL}"}),
        "a file_data that holds a data URL after its start",
    ),
    "responses: a message's computer_screenshot of text": (
        "/v1/responses",
        responses({"type": "computer_screenshot", "image_url": _TEXT_URL}),
        "an image URL of text/plain in base64",
    ),
    "responses: a computer_call_output's screenshot of text": (
        "/v1/responses",
        responses_body(
            {"type": "function_call", "call_id": "c1", "name": "computer", "arguments": "{}"},
            {
                "type": "computer_call_output",
                "call_id": "c1",
                "output": {"type": "computer_screenshot", "image_url": _TEXT_URL},
            },
        ),
        "an image URL of text/plain in base64",
    ),
}


@pytest.mark.parametrize("case", [*HINTED, *ELSEWHERE])
async def test_bytes_a_provider_reads_as_a_text_are_refused_in_the_routes_shape(case: str) -> None:
    route, body, named = (HINTED | ELSEWHERE)[case]
    said = error_message(route, await refusal(route, body, WordBlock()))
    assert said == f"the request holds {named}: the guardrails cannot read it"


WEBM = b64(b"\x1a\x45\xdf\xa3" + bytes(48))
MP4 = b64(b"\x00\x00\x00\x18ftypmp42" + bytes(40))
PLAIN = chat(
    {"type": "image_url", "image_url": {"url": PNG_URL, "format": "image/png"}},
    {"type": "image_url", "url": PNG_URL},
    {"type": "file", "file": {"file_data": PDF_URL, "format": "application/pdf"}},
    {"type": "file", "file": PDF_URL},
    {"type": "file", "file": {"file_data": f"data:audio/webm;codecs=opus;base64,{WEBM}"}},
    {"type": "file", "file": {"file_id": "file-abc", "format": "video/mp4"}},
    {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{media_kit.JPEG}", "format": "image/jpg"}},
    {"type": "image_url", "image_url": {"url": PNG_URL, "format": "IMAGE/PNG"}},
    {"type": "image_url", "image_url": {"url": "gs://b/cat.heic", "format": "image/heic"}},
    {"type": "file", "file": {"file_data": f"data:video/mp4;base64,{MP4}"}},
    {"type": "image_url", "image_url": {"url": "https://a.test/metadata:thumb/cat.png"}},
    {"type": "file", "file": {"file_id": "gs://b/notes.txt", "format": "text/plain"}},
)


async def test_known_hints_and_bytes_elsewhere_are_left_out_and_reach_the_app_unchanged() -> None:
    """A hint naming a known byte type beside its bytes, an image or a PDF where LiteLLM reads one besides the API's
    field, and a recorder's `data:audio/webm;codecs=opus;base64,` audio are left out of the texts (no megabytes of
    base64 to judge); a hint beside a file's id is the caller's word for what it holds, given."""
    guard = Given("given", "pre_call")
    model = ScriptedModel(default=ANSWERS["/v1/chat/completions"]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/chat/completions", json=PLAIN)
    assert got.status_code == 200, got.text
    assert guard.texts == ["hi", "gs://b/notes.txt", "text/plain"]  # a text's hint beside a reference: words
    assert model.requests[0].body["messages"] == PLAIN["messages"]


async def test_an_image_where_litellm_reads_one_besides_the_apis_field_is_given_in_images() -> None:
    """An image at the part's `url` (a string or an object), in a file that is a string, at a file part's level or
    in a Responses `input_file`'s `file`, is left out of the texts as an image: so it is given among the `images`,
    where a guardrail judging images sees it, as LiteLLM hands it to the provider."""
    gif, webp = (f"data:{media};base64,{media_kit.IMAGES[media]}" for media in ("image/gif", "image/webp"))
    jpeg = f"data:image/jpeg;base64,{media_kit.JPEG}"
    body = responses(
        {"type": "input_image", "url": PNG_URL},
        {"type": "input_image", "url": {"url": gif}},
        {"type": "input_file", "file": {"file_data": webp}},
        {"type": "input_file", "file_data": jpeg},
    )
    guard = Given("given", "pre_call")
    for route, sent in (("/v1/responses", body), ("/v1/chat/completions", chat({"type": "file", "file": PNG_URL}))):
        model = ScriptedModel(default=ANSWERS[route]("ok"))
        async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
            got = await http.post(route, json=sent)
        assert got.status_code == 200, got.text
        assert model.requests[0].body == sent
    assert guard.texts == ["hi", "hi"]
    assert guard.images == [[PNG_URL, gif, webp, jpeg], [PNG_URL]]


async def test_a_file_id_and_a_document_url_of_words_are_given_once() -> None:
    """A file's id of free text, and a document's URL or file id, are given once each: given twice, a guardrail's
    second edit of one overwrote its first (a mask lost)."""
    chat_body_ = chat({"type": "file", "file": {"file_id": f"the {WORD} file", "file_url": URL}})
    responses_body_ = responses({"type": "input_file", "file_id": f"the {WORD} file"})
    documents = {"type": "url", "url": URL}, {"type": "file", "file_id": f"the {WORD} file"}
    messages_body_ = messages_body({"role": "user", "content": [{"type": "document", "source": s} for s in documents]})
    assert await given_texts("/v1/chat/completions", chat_body_) == ["hi", URL, f"the {WORD} file"]
    assert await given_texts("/v1/responses", responses_body_) == ["hi", f"the {WORD} file"]
    assert await given_texts("/v1/messages", messages_body_) == ["hi", URL, f"the {WORD} file"]


async def test_a_tool_output_carrying_content_is_judged_when_tool_texts_are_skipped() -> None:
    """With `skip_tool_message_in_guardrail` a tool's output is left out, but one carrying a `content` (no field of
    a shell's or patch's output) is not: LiteLLM's bridge makes that content a message of its own (seventh review,
    G9). A content string is given; a content list (parts, media and all, as LiteLLM reads them) is refused on any
    item but a message or a reasoning (eighth review, B1)."""
    item = {"type": "shell_call_output", "call_id": "c1", "output": []}
    guard = Given("given", "pre_call")
    guard.skip_tool_message_in_guardrail = True
    model = ScriptedModel(default=ANSWERS["/v1/responses"]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/responses", json=responses_body(item | {"content": SAID}))
        listed = await http.post(
            "/v1/responses", json=responses_body(item | {"content": [{"type": "input_text", "text": SAID}]})
        )
    assert got.status_code == 200, got.text
    assert SAID in guard.texts
    said = "the request holds a shell_call_output item holding a content list: the guardrails cannot read it"
    assert (listed.status_code, listed.json()["error"]["message"]) == (400, said)


async def test_an_image_a_file_references_by_url_is_given_among_the_images() -> None:
    """A file whose `file_id` or `file_url` is an image's URL (by its hint or its path), which Gemini shows the model
    as an image: given among the `images`, and the `file_id` URL as a text, as a `file_url` is (G4)."""
    cat = "https://img.test/cat.png"
    body = chat(
        {"type": "file", "file": {"file_id": cat}}, {"type": "file", "file": {"file_url": URL, "format": "image/png"}}
    )
    guard = Given("given", "pre_call")
    model = ScriptedModel(default=ANSWERS["/v1/chat/completions"]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/chat/completions", json=body)
    assert got.status_code == 200, got.text
    assert guard.images == [[cat, URL]]
    assert guard.texts == ["hi", cat, URL]


async def test_a_custom_tools_free_text_holding_escapes_is_no_json_and_passes() -> None:
    """Codex's `apply_patch` sends its patch as a custom tool's free text: code holding `'\\u0041'` (a Java char, a JS
    regex) is the model's words as they are, decoded by no one, and passes (ninth review, F1)."""
    patch = "*** Begin Patch\n*** Update File: A.java\n+char c = '\\u0041'; // [\\u0030-\\u0039]\n*** End Patch"
    body = responses_body(
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": patch},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"},
    )
    guard = Given("given", "pre_call")
    model = ScriptedModel(default=ANSWERS["/v1/responses"]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/responses", json=body)
    assert got.status_code == 200, got.text
    assert model.requests[0].body["input"] == body["input"]
