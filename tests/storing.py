"""A Responses app that stores like OpenAI, per API key, for the tests of follow-ups by `previous_response_id`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from agentic_middleware import sse
from agentic_middleware.testing import ScriptedModel


class StoringModel:
    """A Responses app that stores like OpenAI: each response is stored for the API key that made it (a key of
    another project gets 404 for it), `previous_response_id` must name a response stored for the request's key, and
    every `function_call` in the context (stored and new) needs its output, else 400. `answer` gives each response
    from the request's body; a streaming request gets it as an event stream. `delete` deletes as the API's
    `DELETE /v1/responses/{id}` does."""

    def __init__(self, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.answer = answer
        self.stored: dict[str, list[Any]] = {}
        self.owners: dict[str, str] = {}  # each stored response's API key
        self.contexts: list[list[Any]] = []  # each answered request's whole context
        self.answers: list[dict[str, Any]] = []  # each response, in order
        self.model = ScriptedModel(default=self.reply)

    def holds(self, response_id: Any, key: str) -> bool:
        return response_id in self.stored and self.owners.get(response_id) == key

    def reply(self, request: Any) -> Any:
        body, key = request.body, request.headers.get("authorization", "")
        previous = body.get("previous_response_id")
        if previous is not None and not self.holds(previous, key):
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
            self.owners[result["id"]] = key
        if body.get("stream"):
            return StreamingResponse(iter(list(sse.responses_events(result))), media_type="text/event-stream")
        return result

    def delete(self, response_id: str, key: str) -> JSONResponse:
        """`DELETE /v1/responses/{id}` for `key`: 404 for a response it cannot see."""
        if not self.holds(response_id, key):
            return JSONResponse({"error": {"message": f"Response with id '{response_id}' not found."}}, 404)
        del self.stored[response_id], self.owners[response_id]
        return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})


def app_of(store: StoringModel, prefix: str = "/v1", failing: set[str] | None = None) -> tuple[Starlette, list[str]]:
    """The storing app serving `POST responses`, `compact`, `input_tokens` (each a check of the context, as the
    API's are) and `DELETE responses/{id}` (503 for the ids in `failing`); the list gets each id it deleted."""
    deleted: list[str] = []

    async def delete(request: Request) -> Response:
        response_id = request.path_params["response_id"]
        if failing is not None and response_id in failing:
            return JSONResponse({"error": {"message": "The server is overloaded.", "type": "server_error"}}, 503)
        answer = store.delete(response_id, request.headers.get("authorization", ""))
        if answer.status_code == 200:
            deleted.append(response_id)
        return answer

    routes = [
        Route("/responses", store.model, methods=["POST"]),
        Route("/responses/compact", store.model, methods=["POST"]),
        Route("/responses/input_tokens", store.model, methods=["POST"]),
        Route("/responses/{response_id}", delete, methods=["DELETE"]),
    ]
    return Starlette(routes=[Mount(prefix, routes=routes)]), deleted
