"""A field the API fills with an image is left out of a guardrail's texts only when the whole string is an image
(hostile review, guard F2).

The walk took a string for an image by its start: a `data:image/` prefix, or base64 whose first 16 characters
decode to a PNG, JPEG, GIF or WebP header. Words after such a start (`"iVBORw0KGgoAAAAN the pineapple is here"`)
reached the app unjudged in an image generation's result, a screenshot, a code interpreter's image output, and in
a later round, where the model's own image generation is carried into the rerun. Now a string is an image only when
it is strict base64 whole (its alphabet, `=` padding at the end, a length of fours, no whitespace) of those bytes,
bare or in a `data:image/png|jpeg|gif|webp;base64,` URL; anything else is given as a text, its mask written where
it was. Real LiteLLM `CustomGuardrail`s; the client is httpx on the middleware, the app a scripted model.
"""

from __future__ import annotations

from typing import Any

import media_kit
import pytest
from conftest import http_client
from guardrail_kit import SAID, WORD, Masking, WordBlock

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.testing import ScriptedModel, function_call, response

U = {"role": "user", "content": "hi"}
# A 1x1 PNG, whole.
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PNG_HEAD = PIXEL[:16]  # "iVBORw0KGgoAAAAN": decodes to a PNG's signature
INTERPRETER = {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "container_id": "c1", "code": "x"}


def generated(result: str) -> dict[str, Any]:
    return {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": result}


def screenshot(url: str) -> dict[str, Any]:
    return {
        "type": "computer_call_output",
        "call_id": "c1",
        "output": {"type": "computer_screenshot", "image_url": url},
    }


def interpreted(url: str) -> dict[str, Any]:
    return INTERPRETER | {"outputs": [{"type": "image", "url": url}]}


# Strings that open as an image does and are not one, each where an image belongs.
NOT_IMAGES = {
    "words after a PNG's base64 head": generated(f"{PNG_HEAD} {SAID}"),
    "words after a whole PNG": generated(PIXEL + SAID),
    "a data URL with words after its base64": interpreted(f"data:image/png;base64,AAAA {SAID}"),
    "a data URL with a line break in its base64": screenshot(f"data:image/png;base64,{PIXEL[:8]}\n{SAID}"),
    "a data URL with words in its parameters": screenshot(f"data:image/png;{WORD};base64,{PIXEL}"),
}


@pytest.mark.parametrize("case", list(NOT_IMAGES))
async def test_words_where_an_image_belongs_after_an_images_start_are_judged(case: str) -> None:
    guard = WordBlock("all")
    model = ScriptedModel(default=response("never"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/responses", json={"model": "g", "input": [U, NOT_IMAGES[case]]})
    assert got.status_code == 400 and got.json()["error"]["message"] == f"blocked: {WORD}"
    assert model.requests == []


async def test_a_screenshots_data_url_of_a_type_of_words_is_refused_as_an_input_images_is() -> None:
    """A computer call's screenshot is an image part to LiteLLM: base64 of a type no image has (`image/<word>`) is
    refused as in an `input_image`, where a provider may decode it; the word is never read as bytes."""
    model = ScriptedModel(default=response("never"))
    async with http_client(AgenticLoopMiddleware(model, hooks=[WordBlock("all")])) as http:
        body = {"model": "g", "input": [U, screenshot(f"data:image/{WORD};base64,{PIXEL}")]}
        got = await http.post("/v1/responses", json=body)
    said = f"the request holds an image URL of image/{WORD} in base64: the guardrails cannot read it"
    assert (got.status_code, got.json()["error"]["message"]) == (400, said)
    assert model.requests == []


async def test_a_mask_of_words_after_an_images_start_is_written_where_they_were() -> None:
    guard = Masking()
    model = ScriptedModel(default=response("ok"))
    items = [U, generated(f"{PNG_HEAD} {SAID}"), screenshot(f"data:image/png;base64,{PIXEL} {SAID}")]
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/responses", json={"model": "g", "input": items})
    assert got.status_code == 200
    sent = model.requests[0].body["input"]
    assert sent[1]["result"] == f"{PNG_HEAD} the masked is here"
    assert sent[2]["output"]["image_url"] == f"data:image/png;base64,{PIXEL} the masked is here"


@server_tool
def define(term: str) -> str:
    """Defines a term."""
    return "a fruit"


async def test_the_models_own_image_generation_of_words_is_judged_in_the_rerun() -> None:
    model = ScriptedModel(
        response(generated(f"{PNG_HEAD} {SAID}"), function_call("define", {"term": "fruit"})), response("done")
    )
    guard = WordBlock("all")
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard, ServerTools([define])])) as http:
        got = await http.post("/v1/responses", json={"model": "g", "input": [U]})
    assert got.status_code == 400 and got.json()["error"]["message"] == f"blocked: {WORD}"
    assert len(model.requests) == 1  # the rerun, which would carry the words, is refused before the app
    assert guard.calls[1] == [f"{PNG_HEAD} {SAID}", "a fruit"]  # the rerun's new texts


def image_items(data: str) -> list[Any]:
    return [generated(data), screenshot(f"data:image/png;base64,{data}"), interpreted(f"data:image/jpeg;base64,{data}")]


@pytest.mark.parametrize(
    "data", [PIXEL, *media_kit.IMAGES.values(), media_kit.big_png()], ids=["pixel", *media_kit.IMAGES, "4 MB"]
)
async def test_a_whole_image_where_an_image_belongs_is_still_left_out(data: str) -> None:
    guard = WordBlock("all")
    model = ScriptedModel(default=response("ok"))
    items = [U, *image_items(data)]
    async with http_client(AgenticLoopMiddleware(model, hooks=[guard])) as http:
        got = await http.post("/v1/responses", json={"model": "g", "input": items})
    assert got.status_code == 200
    assert guard.texts == ["hi", "x"]  # the message, and the interpreter's code
    assert model.requests[0].body["input"] == items
