"""A Responses app that stores like OpenAI, for the tests of follow-ups by `previous_response_id`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.responses import JSONResponse, StreamingResponse

from agentic_middleware import sse
from agentic_middleware.testing import ScriptedModel


class StoringModel:
    """A Responses app that stores like OpenAI: `previous_response_id` must name a stored response, and every
    `function_call` in the context (stored and new) needs its output, else 400. `answer` gives each response from
    the request's body; a streaming request gets it as an event stream."""

    def __init__(self, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.answer = answer
        self.stored: dict[str, list[Any]] = {}
        self.contexts: list[list[Any]] = []  # each answered request's whole context
        self.answers: list[dict[str, Any]] = []  # each response, in order
        self.model = ScriptedModel(default=self.reply)

    def reply(self, request: Any) -> Any:
        body = request.body
        previous = body.get("previous_response_id")
        if previous is not None and previous not in self.stored:
            return JSONResponse({"error": {"message": f"Previous response with id '{previous}' not found."}}, 404)
        items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
        context = [*self.stored.get(previous, []), *items]
        answered = {item.get("call_id") for item in context if item.get("type", "").endswith("_call_output")}
        for item in context:
            if item.get("type") in ("function_call", "custom_tool_call") and item["call_id"] not in answered:
                message = f"No tool output found for function call {item['call_id']}."
                return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, 400)
        result = self.answer(body)
        self.contexts.append(context)
        self.answers.append(result)
        if body.get("store", True):
            self.stored[result["id"]] = [*context, *result["output"]]
        if body.get("stream"):
            return StreamingResponse(iter(list(sse.responses_events(result))), media_type="text/event-stream")
        return result
