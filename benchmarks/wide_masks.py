"""Case 13: a guardrail's mask over the keys of one wide object, per key, wide against narrow.

A guardrail is given the keys of free-form JSON as texts (a block type no reader knows, a schema's property
names), and a mask it returns renames them in place. Each renamed key once rebuilt its whole object, so one
request of 16,000 keys held the worker's event loop for a minute (docs/security.md#guardrails); each object is now
rebuilt once. The figure is the time per key of one masked request at 16,000 keys over that at 1,000: about 1 when
the write-back is linear (the request's own parse and write are linear too), 16 when it is quadratic.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentic_middleware import AgenticHook, AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel, message

from .cases import Config, Row
from .harness import asgi_sample, median, paired, us

WORD = "pineapple"
NARROW, WIDE = 1_000, 16_000


class Mask(AgenticHook):
    """A LiteLLM-style guardrail (an `apply_guardrail` judging requests) that masks WORD in every text; LiteLLM's
    `CustomGuardrail` is not needed (the benchmark extra does not install LiteLLM)."""

    event_hook = "pre_call"
    guardrail_name = "mask"

    async def apply_guardrail(self, inputs: Any, request_data: Any, input_type: Any, logging_obj: Any = None) -> Any:
        return {**inputs, "texts": [text.replace(WORD, "masked") for text in inputs["texts"]]}


def request(keys: int) -> bytes:
    """A Messages request whose one block, of a type no reader knows, has `keys` keys holding WORD."""
    block: dict[str, Any] = {"type": "x_future_block"}
    block.update({f"{WORD}{index}": index for index in range(keys)})
    content = [{"type": "text", "text": "hi"}, block]
    return orjson.dumps({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": content}]})


async def wide_masks(config: Config) -> list[Row]:
    app = AgenticLoopMiddleware(ScriptedModel(default=message("ok")), hooks=[Mask()])
    narrow, wide = request(NARROW), request(WIDE)
    samples = await paired(
        {
            "narrow": asgi_sample(app, "POST", "/v1/messages", narrow),
            "wide": asgi_sample(app, "POST", "/v1/messages", wide),
        },
        config.pairs(15),
        warmup=1,
    )
    per_narrow, per_wide = median(samples["narrow"]) / NARROW, median(samples["wide"]) / WIDE
    detail = (
        f"one masked request: {NARROW:,} keys {us(median(samples['narrow']))} ({us(per_narrow)} a key), "
        f"{WIDE:,} keys {us(median(samples['wide']))} ({us(per_wide)} a key)"
    )
    return [
        Row(
            13,
            "guardrail mask of a wide object",
            "time per key, 16,000 / 1,000 keys",
            per_wide / per_narrow,
            2.0,
            detail,
        )
    ]


CASES = {13: wide_masks}
