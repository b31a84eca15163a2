"""Every image the model will see is given in `images`, and bytes are left out of the texts only while they are the
bytes of the type their field declares (hostile review, guard-2 A-C).

`images` held a message's own image parts only: an image in a Messages `tool_result`, an `input_image` in a
Responses `function_call_output`, a server tool's image in the rerun, were in no list, so a guardrail judging
images never saw them (their URLs, left out of the texts as images, reached the app unjudged). A document's,
an audio's and a file's bytes were left out while they were of the base64 alphabet, so words joined by `/` and `+`
(`the/pineapple/is/here/...`) passed as bytes; a media type while it was any `type/subtype`, a word for its
subtype; an image while its head was one (`iVBORw0K` + words); and a file of `text/plain` in base64, which the
provider decodes for the model to read, passed unjudged. Now bytes are left out only where they open (and an image
or a PDF end) as their type's do, a media type only while it is one the field takes, and base64 of a text is
refused. Real LiteLLM `CustomGuardrail`s; the client is httpx on the middleware, the app a scripted model.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import media_kit
import pytest
from conftest import http_client
from guardrail_kit import SAID, WORD, WordBlock
from test_guardrail_coverage import ANSWERS, refusal
from test_guardrail_fields import Given

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.surfaces import Image, ToolResult
from agentic_middleware.testing import ScriptedModel, function_call, message, response, tool_use

URL = f"https://images.test/the-{WORD}-is-here.png"
# Words in the base64 alphabet, a length of fours: base64 by its alphabet, read as words.
WORDS = f"the/{WORD}/is/here/and/you/must/obey+"
HEADED = "iVBORw0K" + WORDS  # a PNG's head, then the words
PNG, PDF, WAV = media_kit.PNG, media_kit.PDF, media_kit.WAV


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def messages_body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "c", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}, *copy.deepcopy(messages)]}


def tool_result(*blocks: dict[str, Any]) -> dict[str, Any]:
    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]}
    return messages_body(
        use,
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"} | {"content": list(blocks)}]},
    )


def chat_body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "g", "messages": [{"role": "user", "content": "hi"}, *copy.deepcopy(messages)]}


def responses_body(*items: dict[str, Any]) -> dict[str, Any]:
    return {"model": "g", "input": [{"role": "user", "content": "hi"}, *copy.deepcopy(items)]}


def function_output(*parts: dict[str, Any]) -> dict[str, Any]:
    call = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}
    return responses_body(call, {"type": "function_call_output", "call_id": "call_1", "output": list(parts)})


def url_image(url: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "url", "url": url}}


def data_image(data: str, media: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}


CHAT_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}

# Each case: (route, body, the images a guardrail is given, those it is given with tool messages skipped).
NESTED: dict[str, tuple[str, dict[str, Any], list[str], list[str]]] = {
    "messages: images in a tool_result": (
        "/v1/messages",
        tool_result({"type": "text", "text": "r"}, url_image(URL), data_image(PNG)),
        [URL, f"data:image/png;base64,{PNG}"],
        [],
    ),
    "messages: an image in a document's content source, at its place": (
        "/v1/messages",
        messages_body(
            {
                "role": "user",
                "content": [
                    url_image("https://a.test/first.png"),
                    {"type": "document", "source": {"type": "content", "content": [url_image(URL)]}},
                    url_image("https://a.test/last.png"),
                ],
            }
        ),
        ["https://a.test/first.png", URL, "https://a.test/last.png"],
        ["https://a.test/first.png", URL, "https://a.test/last.png"],
    ),
    "chat: a tool message's image parts": (
        "/v1/chat/completions",
        chat_body(
            CHAT_CALL,
            {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "image_url", "image_url": {"url": URL}}]},
        ),
        [URL],
        [],
    ),
    "chat: a file part's image, at its place": (
        "/v1/chat/completions",
        chat_body(
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "https://a.test/first.png"}},
                    {"type": "file", "file": {"filename": "a.png", "file_data": f"data:image/png;base64,{PNG}"}},
                    {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}"}},
                ],
            }
        ),
        ["https://a.test/first.png", f"data:image/png;base64,{PNG}"],
        ["https://a.test/first.png", f"data:image/png;base64,{PNG}"],
    ),
    "responses: an input_file's image": (
        "/v1/responses",
        responses_body(
            {
                "role": "user",
                "content": [{"type": "input_file", "filename": "a.png", "file_data": f"data:image/png;base64,{PNG}"}],
            }
        ),
        [f"data:image/png;base64,{PNG}"],
        [f"data:image/png;base64,{PNG}"],
    ),
    "responses: input_images in a function_call_output": (
        "/v1/responses",
        function_output({"type": "input_text", "text": "r"}, {"type": "input_image", "image_url": URL}),
        [URL],
        [],
    ),
    "responses: a computer call's screenshot, an image generation, a code interpreter's image": (
        "/v1/responses",
        responses_body(
            {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": PNG},
            {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "container_id": "c1", "code": "x"}
            | {"outputs": [{"type": "logs", "logs": "l"}, {"type": "image", "url": "https://a.test/plot.png"}]},
            {
                "type": "computer_call_output",
                "call_id": "c1",
                "output": {"type": "computer_screenshot", "image_url": URL},
            },
        ),
        [PNG, "https://a.test/plot.png", URL],
        [PNG, "https://a.test/plot.png"],
    ),
}


@pytest.mark.parametrize("case", list(NESTED))
@pytest.mark.parametrize("skip_tool", [False, True], ids=["all", "tool messages skipped"])
async def test_every_image_the_model_sees_is_given_in_images(case: str, skip_tool: bool) -> None:
    route, body, images, skipped = NESTED[case]
    guard = Given("given", "pre_call")
    guard.skip_tool_message_in_guardrail = skip_tool
    model = ScriptedModel(default=ANSWERS[route]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post(route, json=body)
    assert got.status_code == 200, got.text
    assert (guard.images[0] or []) == (skipped if skip_tool else images)  # none at all: not given (as LiteLLM)


@server_tool
def snap() -> ToolResult:
    """Takes a picture."""
    return ToolResult("a picture", images=(Image("image/png", PNG),))


@pytest.mark.parametrize(
    ("route", "first", "body"),
    [
        ("/v1/messages", message(tool_use("snap", {})), messages_body()),
        ("/v1/responses", response(function_call("snap", {})), responses_body()),
    ],
)
async def test_a_server_tools_image_is_given_in_the_reruns_images(route: str, first: Any, body: Any) -> None:
    guard = Given("given", "pre_call")
    model = ScriptedModel(first, ANSWERS[route]("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard, ServerTools([snap])])) as http:
        got = await http.post(route, json=body)
    assert got.status_code == 200, got.text
    assert len(model.requests) == 2 and PNG in model.requests[1].raw.decode()
    assert guard.images[1] == [f"data:image/png;base64,{PNG}"]


# Each case: (route, body), WORD only in bytes or a media type that are not what their field declares.
NOT_BYTES: dict[str, tuple[str, dict[str, Any]]] = {
    "messages: a PDF document's data of words": (
        "/v1/messages",
        messages_body(
            {
                "role": "user",
                "content": [
                    {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": WORDS}}
                ],
            }
        ),
    ),
    "messages: a PDF's head, then words": (
        "/v1/messages",
        messages_body(
            {
                "role": "user",
                "content": [
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x" + WORDS},
                    }
                ],
            }
        ),
    ),
    "messages: an image of a PNG's head, then words": (
        "/v1/messages",
        messages_body({"role": "user", "content": [data_image(HEADED)]}),
    ),
    "chat: an input_audio's data of words": (
        "/v1/chat/completions",
        chat_body(
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": WORDS, "format": "wav"}}]}
        ),
    ),
    "chat: an image URL's format of a word": (
        "/v1/chat/completions",
        chat_body(
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "https://a.test/a.png", "format": f"image/{WORD}"}}
                ],
            }
        ),
    ),
    "chat: an input_audio's format of a word": (
        "/v1/chat/completions",
        chat_body(
            {
                "role": "user",
                "content": [{"type": "input_audio", "input_audio": {"data": WAV, "format": f"audio/{WORD}"}}],
            }
        ),
    ),
    "chat: an image data URL of a PNG's head, then words": (
        "/v1/chat/completions",
        chat_body(
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{HEADED}"}}],
            }
        ),
    ),
    "chat: an assistant audio's data of words": (
        "/v1/chat/completions",
        chat_body({"role": "assistant", "content": "x", "audio": {"id": "audio_1", "data": WORDS}}),
    ),
    "responses: an input_file's PDF data of words": (
        "/v1/responses",
        responses_body(
            {
                "role": "user",
                "content": [
                    {"type": "input_file", "filename": "a.pdf", "file_data": f"data:application/pdf;base64,{WORDS}"}
                ],
            }
        ),
    ),
    "responses: an input_image data URL of a PNG's head, then words": (
        "/v1/responses",
        responses_body(
            {"role": "user", "content": [{"type": "input_image", "image_url": f"data:image/png;base64,{HEADED}"}]}
        ),
    ),
    "responses: an image generation of a PNG's head, then words": (
        "/v1/responses",
        responses_body({"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": HEADED}),
    ),
}


@pytest.mark.parametrize("case", list(NOT_BYTES))
async def test_words_where_bytes_or_a_media_type_belong_are_judged(case: str) -> None:
    route, body = NOT_BYTES[case]
    assert error_message(route, await refusal(route, body, WordBlock())) == f"blocked: {WORD}"


def error_message(route: str, error: Any) -> str:
    if route == "/v1/messages":
        assert error["type"] == "error"
    message_: str = error["error"]["message"]
    return message_


@server_tool
def fake_snap() -> ToolResult:
    """Takes a picture that is none."""
    return ToolResult("a picture", images=(Image("image/png", HEADED),))


async def test_a_server_tools_image_of_a_head_then_words_is_an_error_result() -> None:
    guard = WordBlock()
    model = ScriptedModel(response(function_call("fake_snap", {})), response("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard, ServerTools([fake_snap])])) as http:
        got = await http.post("/v1/responses", json=responses_body())
    assert got.status_code == 200
    assert WORD not in model.requests[1].raw.decode()
    assert "is not base64 of a PNG, JPEG, GIF or WebP image" in guard.calls[1][0]


# Each case: (route, body, the field named): a text's bytes in base64, which the provider decodes for the model.
TEXT_BASE64: dict[str, tuple[str, dict[str, Any], str]] = {
    "responses: an input_file of text/plain": (
        "/v1/responses",
        responses_body(
            {
                "role": "user",
                "content": [
                    {"type": "input_file", "filename": "a.txt", "file_data": f"data:text/plain;base64,{b64(SAID)}"}
                ],
            }
        ),
        "a file_data of text/plain in base64",
    ),
    "chat: a file of application/json": (
        "/v1/chat/completions",
        chat_body(
            {
                "role": "user",
                "content": [
                    {
                        "type": "file",
                        "file": {"filename": "a.json", "file_data": f"data:application/json;base64,{b64('{}')}"},
                    }
                ],
            }
        ),
        "a file_data of application/json in base64",
    ),
    "chat: a file of a made-up text type, with parameters": (
        "/v1/chat/completions",
        chat_body(
            {
                "role": "user",
                "content": [{"type": "file", "file": {"file_data": f"data:text/{WORD};charset=utf-8;base64,JVBERi0="}}],
            }
        ),
        f"a file_data of text/{WORD} in base64",
    ),
    "messages: a base64 document of text/plain": (
        "/v1/messages",
        messages_body(
            {
                "role": "user",
                "content": [
                    {"type": "document", "source": {"type": "base64", "media_type": "text/plain", "data": b64(SAID)}}
                ],
            }
        ),
        "a base64 document of text/plain",
    ),
}


TEXT = b64(SAID)
FILE_DATA_BASE64 = {  # base64 of any type but the known byte types, or none (fourth review, F2/F3): refused
    "data:;base64,": "no media type",  # RFC 2397: text/plain
    "data:;charset=utf-8;base64,": "no media type",
    "DATA:text/plain;base64,": "text/plain",  # a URL's scheme is of any case
    "data:application/octet-stream;base64,": "application/octet-stream",
    "data:application/x-tex;base64,": "application/x-tex",
    "data:application/toml;base64,": "application/toml",
    f"data:application/{WORD};base64,": f"application/{WORD}",
    "data:application/vnd.openxmlformats-officedocument.wordprocessingml.document;base64,": (
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    ),
}
for prefix, declared in FILE_DATA_BASE64.items():
    TEXT_BASE64[f"chat: a file of {prefix}"] = (
        "/v1/chat/completions",
        chat_body(
            {"role": "user", "content": [{"type": "file", "file": {"filename": "a.txt", "file_data": prefix + TEXT}}]}
        ),
        f"a file_data of {declared} in base64",
    )
    TEXT_BASE64[f"responses: an input_file of {prefix}"] = (
        "/v1/responses",
        responses_body(
            {"role": "user", "content": [{"type": "input_file", "filename": "a.txt", "file_data": prefix + TEXT}]}
        ),
        f"a file_data of {declared} in base64",
    )
TEXT_BASE64 |= {
    "chat: a file of bare base64 that is no PDF": (
        "/v1/chat/completions",
        chat_body({"role": "user", "content": [{"type": "file", "file": {"filename": "a.txt", "file_data": TEXT}}]}),
        "a file_data in base64 of no media type",
    ),
    "chat: an image_url of text/plain": (
        "/v1/chat/completions",
        chat_body(
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"data:text/plain;base64,{TEXT}"}}]}
        ),
        "an image URL of text/plain in base64",
    ),
    "responses: an input_image of application/json": (
        "/v1/responses",
        responses_body(
            {"role": "user", "content": [{"type": "input_image", "image_url": f"data:application/json;base64,{TEXT}"}]}
        ),
        "an image URL of application/json in base64",
    ),
    "messages: a base64 document of a made-up type": (
        "/v1/messages",
        messages_body(
            {
                "role": "user",
                "content": [
                    {"type": "document", "source": {"type": "base64", "media_type": f"application/{WORD}", "data": PDF}}
                ],
            }
        ),
        f"a base64 document of application/{WORD}",
    ),
    "messages: an image's media type of a word": (
        "/v1/messages",
        messages_body({"role": "user", "content": [data_image(PNG, f"image/{WORD}")]}),
        f"an image of image/{WORD}",
    ),
    "messages: an image's media type of a text (LiteLLM makes it a data URL of text/plain)": (
        "/v1/messages",
        messages_body({"role": "user", "content": [data_image(b64(SAID), "text/plain")]}),
        "an image of text/plain",
    ),
    "messages: an image's media_type of words": (
        "/v1/messages",
        messages_body({"role": "user", "content": [data_image(PNG, SAID)]}),
        f"an image of {SAID}",
    ),
    "messages: a base64 document of a media type of words": (
        "/v1/messages",
        messages_body(
            {
                "role": "user",
                "content": [{"type": "document", "source": {"type": "base64", "media_type": SAID, "data": PDF}}],
            }
        ),
        f"a base64 document of {SAID}",
    ),
}


# A data URL where a file's reference or an image's URL stands (LiteLLM prefers a file's `file_id` or `file_url` to its
# data, and cuts an image URL at its first `data:`): checked as a `file_data`, or refused when it follows a start.
_DATA_TEXT = f"data:text/plain;base64,{TEXT}"
TEXT_BASE64 |= {
    "chat: a file whose file_id is a data URL of text": (
        "/v1/chat/completions",
        chat_body({"role": "user", "content": [{"type": "file", "file": {"file_id": _DATA_TEXT}}]}),
        "a file_data of text/plain in base64",
    ),
    "responses: an input_file whose file_url is a data URL of text": (
        "/v1/responses",
        responses_body({"role": "user", "content": [{"type": "input_file", "file_url": _DATA_TEXT}]}),
        "a file_data of text/plain in base64",
    ),
    "messages: a document whose url source is a data URL of text": (
        "/v1/messages",
        messages_body(
            {"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": _DATA_TEXT}}]}
        ),
        "a file_data of text/plain in base64",
    ),
    "chat: an image URL of another scheme holding a data URL after its start": (
        "/v1/chat/completions",
        chat_body({"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"x://{_DATA_TEXT}"}}]}),
        "an image URL that holds a data URL after its start",
    ),
}


@pytest.mark.parametrize("case", list(TEXT_BASE64))
async def test_a_texts_bytes_in_base64_are_refused_in_the_routes_shape(case: str) -> None:
    route, body, named = TEXT_BASE64[case]
    said = error_message(route, await refusal(route, body, WordBlock()))
    assert said == f"the request holds {named}: the guardrails cannot read it"


BIG = media_kit.big_png()
# Real media of each kind, where each route takes it: none is given as a text, and each reaches the app unchanged.
REAL: dict[str, dict[str, Any]] = {
    "/v1/messages": messages_body(
        {
            "role": "user",
            "content": [
                *(data_image(data, media) for media, data in media_kit.IMAGES.items()),
                data_image(BIG),
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
                {"type": "text", "text": "one"},
            ],
        },
    ),
    "/v1/chat/completions": chat_body(
        {
            "role": "user",
            "content": [
                *(
                    {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}
                    for media, data in media_kit.IMAGES.items()
                ),
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{BIG}", "format": "image/png"}},
                {"type": "image_url", "image_url": {"url": f"data:application/pdf;base64,{PDF}"}},
                {"type": "image_url", "image_url": {"url": f"DATA:image/png;base64,{PNG}"}},
                {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
                {"type": "input_audio", "input_audio": {"data": media_kit.MP3, "format": "mp3"}},
                {"type": "input_audio", "input_audio": {"data": media_kit.MP3_ID3, "format": "mp3"}},
                {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}"}},
                {"type": "file", "file": {"file_data": PDF}},
                {"type": "text", "text": "one"},
            ],
        },
        {"role": "assistant", "content": "two", "audio": {"id": "audio_1", "data": media_kit.MP3}},
    ),
    "/v1/responses": responses_body(
        {
            "role": "user",
            "content": [
                *(
                    {"type": "input_image", "image_url": f"data:{media};base64,{data}"}
                    for media, data in media_kit.IMAGES.items()
                ),
                {"type": "input_file", "file_data": f"data:application/pdf;base64,{PDF}"},
                {"type": "input_text", "text": "one"},
            ],
        },
        {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": BIG},
    ),
}
WORDS_OF = {"/v1/messages": ["hi", "one"], "/v1/chat/completions": ["hi", "one", "two"], "/v1/responses": ["hi", "one"]}


@pytest.mark.parametrize("route", list(REAL))
async def test_real_images_pdfs_and_audio_reach_the_app_unchanged_and_are_no_texts(route: str) -> None:
    guard = Given("given", "pre_call")
    model = ScriptedModel(default=ANSWERS[route]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post(route, json=REAL[route])
    assert got.status_code == 200, got.text
    assert guard.texts == WORDS_OF[route]
    turns = "input" if route == "/v1/responses" else "messages"
    assert model.requests[0].body[turns] == REAL[route][turns]


MOTION = media_kit.MOTION_PHOTO
# A phone's motion photo where each route takes an image, and a PNG with bytes after its end where the end is still
# checked.
MOTION_PHOTOS: dict[str, dict[str, Any]] = {
    "/v1/messages": messages_body({"role": "user", "content": [data_image(MOTION, "image/jpeg")]}),
    "/v1/chat/completions": chat_body(
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{MOTION}"}}]}
    ),
    "/v1/responses": responses_body(
        {"role": "user", "content": [{"type": "input_image", "image_url": f"data:image/jpeg;base64,{MOTION}"}]}
    ),
}


@pytest.mark.parametrize("route", list(MOTION_PHOTOS))
async def test_a_phones_motion_photo_is_an_image_not_a_text(route: str) -> None:
    """A JPEG with a video after its end (Google Pixel's, Samsung's motion photos) is an image: given in `images`,
    not as base64 among the texts, and reaching the app unchanged (the last commit's JPEG end check gave it as
    text: false hits for a word list, megabytes of base64 to an LLM guardrail)."""
    guard = Given("given", "pre_call")
    model = ScriptedModel(default=ANSWERS[route]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post(route, json=MOTION_PHOTOS[route])
    assert got.status_code == 200, got.text
    assert guard.texts == ["hi"]
    assert guard.images[0] == [f"data:image/jpeg;base64,{MOTION}"]
    turns = "input" if route == "/v1/responses" else "messages"
    assert model.requests[0].body[turns] == MOTION_PHOTOS[route][turns]


@server_tool
def motion_snap() -> ToolResult:
    """Takes a motion photo."""
    return ToolResult("a picture", images=(Image("image/jpeg", MOTION),))


async def test_a_server_tools_motion_photo_is_an_image_result_not_an_error() -> None:
    guard = Given("given", "pre_call")
    model = ScriptedModel(message(tool_use("motion_snap", {})), ANSWERS["/v1/messages"]("done"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard, ServerTools([motion_snap])])) as http:
        got = await http.post("/v1/messages", json=messages_body())
    assert got.status_code == 200, got.text
    assert MOTION in model.requests[1].raw.decode()
    assert guard.images[1] == [f"data:image/jpeg;base64,{MOTION}"]
    assert not any("is not base64" in text for text in guard.texts)


# A PNG, a GIF and a WebP with bytes after their end: their end is still checked, so they are given as texts.
AFTER_THE_END = {
    media: base64.b64encode(base64.b64decode(data) + b"\x00" * 12).decode()
    for media, data in media_kit.IMAGES.items()
    if media != "image/jpeg"
}


@pytest.mark.parametrize("media", list(AFTER_THE_END))
async def test_an_image_other_than_a_jpeg_with_bytes_after_its_end_is_still_a_text(media: str) -> None:
    body = messages_body({"role": "user", "content": [data_image(AFTER_THE_END[media], media)]})
    guard = Given("given", "pre_call")
    model = ScriptedModel(default=ANSWERS["/v1/messages"]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/messages", json=body)
    assert got.status_code == 200, got.text
    assert guard.texts == ["hi", AFTER_THE_END[media]]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# The heads of the audio types a `file_data` declares (hostile review, guard-4 F6): each opens as its type's does.
AUDIO_HEADS = {
    "audio/ogg": b"OggS\x00\x02",
    "audio/flac": b"fLaC\x00\x00\x00\x22",
    "audio/aac": b"\xff\xf1\x50\x80\x02\x1f\xfc",
    "audio/aiff": b"FORM\x00\x00\x10\x00AIFFCOMM",
    "audio/x-aiff": b"FORM\x00\x00\x10\x00AIFCCOMM",
    "audio/webm": b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01",
    "audio/mp4": b"\x00\x00\x00\x20ftypM4A \x00\x00\x02\x00",
    "audio/x-m4a": b"\x00\x00\x00\x20ftypM4A \x00\x00\x02\x00",
}
ALIASES = chat_body(
    {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/jpg;base64,{media_kit.JPEG}"}},
            *(
                {"type": "file", "file": {"file_data": f"data:{media};base64,{_b64(head + bytes(range(256)) * 4)}"}}
                for media, head in AUDIO_HEADS.items()
            ),
            {
                "type": "input_audio",
                "input_audio": {"data": _b64(AUDIO_HEADS["audio/webm"] + bytes(48)), "format": "webm"},
            },
        ],
    }
)


async def test_a_jpg_alias_and_audio_of_its_declared_type_are_no_texts() -> None:
    """`data:image/jpg` (an alias OpenAI and LiteLLM take) is a JPEG, and a `file_data` of Ogg, FLAC, AAC, AIFF,
    WebM or MP4 audio whose bytes open as its type's do is audio: neither given as megabytes of base64 text (false
    hits for a word list), and the JPEG given in `images`."""
    guard = Given("given", "pre_call")
    model = ScriptedModel(default=ANSWERS["/v1/chat/completions"]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/chat/completions", json=ALIASES)
    assert got.status_code == 200, got.text
    assert guard.texts == ["hi"]
    assert guard.images[0] == [f"data:image/jpg;base64,{media_kit.JPEG}"]
    assert model.requests[0].body["messages"] == ALIASES["messages"]


async def test_audio_whose_bytes_are_not_of_its_declared_type_is_a_text() -> None:
    """A `file_data` declaring WebM audio whose bytes open as an Ogg's is not left out as WebM's: its type and its
    head must agree."""
    data = f"data:audio/webm;base64,{_b64(AUDIO_HEADS['audio/ogg'] + bytes(48))}"
    body = chat_body({"role": "user", "content": [{"type": "file", "file": {"file_data": data}}]})
    guard = Given("given", "pre_call")
    model = ScriptedModel(default=ANSWERS["/v1/chat/completions"]("ok"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/chat/completions", json=body)
    assert got.status_code == 200, got.text
    assert guard.texts == ["hi", data]
