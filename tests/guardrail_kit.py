"""The LiteLLM guardrails the guardrail tests mount: one blocking WORD, one masking it, each a real `CustomGuardrail`.

Several test files judge requests with the same two guardrails; they differ only in how much of a tool call they
read and in what they record, so those are options here rather than a copy of the class in each file. A test's own
guardrail starts from `Guard`, which mounts it the usual way. Importing this module skips the importing test file
when LiteLLM is not installed.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import orjson
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-list download at import
pytest.importorskip("litellm")

from fastapi import HTTPException
from litellm.integrations.custom_guardrail import CustomGuardrail

WORD = "pineapple"
SAID = f"the {WORD} is here"


def body_for(path: str, text: str = SAID) -> dict[str, Any]:
    """A request saying `text` in the shape of the route `path` names (Messages, Responses, else Chat)."""
    if "messages" in path:
        return {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": text}]}
    if "responses" in path:
        return {"model": "m", "input": text}
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


# How much of each tool call a guardrail reads: none of it, the `function.arguments` strings (as LiteLLM's content
# filter does), or every string of the call (its name and id too).
Reads = Literal["texts", "arguments", "all"]


def masked(value: Any) -> Any:
    """The value with WORD masked wherever it stands, keys included: what the app must get after a mask."""
    return orjson.loads(orjson.dumps(value).replace(WORD.encode(), b"masked"))


class Guard(CustomGuardrail):
    """A guardrail as the tests mount one: on for every request (`default_on`), on `pre_call` unless told, named
    after its class unless told; a test's guardrail then says only what it does (its `apply_guardrail`)."""

    def __init__(self, name: str | None = None, event_hook: Any = "pre_call", **options: Any) -> None:
        super().__init__(
            guardrail_name=name or type(self).__name__, event_hook=event_hook, **{"default_on": True, **options}
        )


class Recording(Guard):
    """Keeps what each call was given: its texts (copied), tool calls and images, in call order."""

    def __init__(self, name: str, event_hook: str) -> None:
        super().__init__(name, event_hook)
        self.calls: list[list[str]] = []
        self.tool_calls: list[Any] = []
        self.images: list[Any] = []

    @property
    def texts(self) -> list[str]:
        """Every text given, over all calls."""
        return [text for texts in self.calls for text in texts]

    def record(self, inputs: Any) -> None:
        self.calls.append(list(inputs["texts"]))
        self.tool_calls.append(inputs.get("tool_calls"))
        self.images.append(inputs.get("images"))


class WordBlock(Recording):
    """Blocks WORD in any text (and, per `reads`, tool call) it is given, with LiteLLM's HTTPException."""

    def __init__(
        self, reads: Reads = "texts", event_hook: str = "pre_call", skip_system: bool = False, skip_tool: bool = False
    ) -> None:
        super().__init__("word-block", event_hook)
        self.reads = reads
        self.skip_system_message_in_guardrail = skip_system
        self.skip_tool_message_in_guardrail = skip_tool

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        self.record(inputs)
        judged = list(inputs["texts"])
        if self.reads == "arguments":
            judged += [call["function"]["arguments"] for call in inputs.get("tool_calls") or ()]
        elif self.reads == "all":
            judged.append(orjson.dumps(inputs.get("tool_calls")).decode())
        if any(WORD in text for text in judged):
            raise HTTPException(status_code=400, detail=f"blocked: {WORD}")
        return inputs


class Masking(Recording):
    """Rewrites WORD in every text (and, per `reads`, tool call) it is given, returning them to be written back."""

    def __init__(self, reads: Reads = "texts", name: str = "mask", event_hook: str = "pre_call") -> None:
        super().__init__(name, event_hook)
        self.reads = reads

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        self.record(inputs)
        result = {**inputs, "texts": [text.replace(WORD, "masked") for text in inputs["texts"]]}
        if inputs.get("tool_calls") and self.reads == "all":
            result["tool_calls"] = masked(inputs["tool_calls"])
        elif inputs.get("tool_calls") and self.reads == "arguments":
            result["tool_calls"] = [
                {
                    **call,
                    "function": {
                        **call["function"],
                        "arguments": call["function"]["arguments"].replace(WORD, "masked"),
                    },
                }
                for call in inputs["tool_calls"]
            ]
        return result
