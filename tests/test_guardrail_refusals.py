"""A guardrail's refusal tells what it is: its code follows its status, and it is logged as the client's, not as a
failure of the server (a client sending blocked words must not fill the error log with tracebacks)."""

from __future__ import annotations

import logging
from typing import Any

import openai
import pytest
from conftest import openai_client
from fastapi import HTTPException
from guardrail_kit import Guard

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.testing import ScriptedModel, chat_completion


class Refuses(Guard):
    def __init__(self, status: int) -> None:
        super().__init__("refuses")
        self.status = status

    async def apply_guardrail(self, inputs: Any, request_data: dict, input_type: Any, logging_obj: Any = None) -> Any:  # type: ignore[override]
        raise HTTPException(status_code=self.status, detail=f"no ({self.status})")


@pytest.mark.parametrize(
    "status, code",
    [
        (400, "invalid_request"),
        (401, "unauthorized"),
        (403, "forbidden"),
        (404, "not_found"),
        (422, "invalid_request"),
        (429, "rate_limit_exceeded"),
        (503, "service_unavailable"),
    ],
)
@pytest.mark.parametrize("route", ["chat", "responses"])
async def test_a_refusals_code_follows_its_status_on_the_openai_routes(status: int, code: str, route: str) -> None:
    model = ScriptedModel()
    client = openai_client(AgenticLoopMiddleware(model, hooks=[Refuses(status)]))
    with pytest.raises(openai.APIStatusError) as raised:
        if route == "chat":
            await client.chat.completions.create(model="g", messages=[{"role": "user", "content": "hi"}])
        else:
            await client.responses.create(model="g", input="hi")
    assert raised.value.status_code == status
    assert raised.value.body == {
        "message": f"no ({status})",
        "type": "invalid_request_error" if status < 500 else "server_error",
        "param": None,
        "code": code,
    }
    assert model.requests == []


async def test_a_refusal_is_logged_as_the_clients_without_an_error_or_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = openai_client(AgenticLoopMiddleware(ScriptedModel(chat_completion("never")), hooks=[Refuses(403)]))
    with caplog.at_level(logging.INFO), pytest.raises(openai.PermissionDeniedError):
        await client.chat.completions.create(model="g", messages=[{"role": "user", "content": "hi"}])
    refused = [record for record in caplog.records if "refused the request (403)" in record.getMessage()]
    assert [(record.levelno, record.exc_info) for record in refused] == [(logging.WARNING, None)]
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
