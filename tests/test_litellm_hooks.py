"""LiteLLM's five built-in agentic hooks, inside the middleware and inside LiteLLM's SDK, side by side.

Each test runs one hook offline against local stand-ins for its service (a Perplexity-compatible search, a sandbox
object, Headroom and Compresr services on 127.0.0.1), once mounted in `AgenticLoopMiddleware` and driven by an
official SDK, once in LiteLLM's SDK (`litellm.callbacks=[hook]`, `api_base` at the same scripted model served by
uvicorn), and compares what the model app received and what the client got.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from conftest import anthropic_client, openai_client
from servers import serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-list download at import
litellm = pytest.importorskip("litellm")

from litellm.integrations.websearch_interception.handler import WebSearchInterceptionLogger  # noqa: E402

from agentic_middleware import AgenticLoopMiddleware  # noqa: E402
from agentic_middleware.closing import DEFAULT_CLOSING_TEXT  # noqa: E402
from agentic_middleware.testing import (  # noqa: E402
    RecordedRequest,
    ScriptedModel,
    chat_completion,
    message,
    tool_call,
    tool_use,
)

Script = Callable[[], ScriptedModel]


@contextlib.asynccontextmanager
async def served(app: ASGIApp) -> AsyncIterator[str]:
    """The app under uvicorn on a free loopback port; yields its base URL."""
    async with serving("uvicorn", app) as server:
        yield f"http://127.0.0.1:{server.port}"


@pytest.fixture
def sdk(monkeypatch: pytest.MonkeyPatch) -> Any:
    """LiteLLM's module with its global callback lists restored after the test, and its clients dropped."""
    for name in (
        "callbacks",
        "success_callback",
        "failure_callback",
        "_async_success_callback",
        "_async_failure_callback",
        "input_callback",
        "service_callback",
    ):
        if isinstance(getattr(litellm, name, None), list):
            monkeypatch.setattr(litellm, name, list(getattr(litellm, name)))
    yield litellm
    litellm.in_memory_llm_clients_cache.flush_cache()  # its cached HTTP clients belong to this test's event loop


def bodies(model: ScriptedModel) -> list[dict[str, Any]]:
    return [request.body for request in model.requests]


def tool_names(body: dict[str, Any]) -> list[str]:
    """The names of the tools a request declares, in either wire format."""
    return [
        tool.get("name") or tool.get("function", {}).get("name") or tool.get("type") for tool in body.get("tools", [])
    ]


def blocks(content: list[Any]) -> list[tuple[str, Any]]:
    """Anthropic content blocks by type, with what identifies them across runs (not their generated ids)."""
    seen = []
    for block in content:
        block = block if isinstance(block, dict) else block.model_dump()
        kind = block["type"]
        detail = {
            "text": lambda b: b["text"],
            "tool_use": lambda b: (b["name"], b["input"]),
            "server_tool_use": lambda b: (b["name"], b["input"]),
            "web_search_tool_result": lambda b: (
                [r["url"] for r in b["content"]] if isinstance(b["content"], list) else b["content"]["error_code"]
            ),
        }.get(kind, lambda b: None)(block)
        seen.append((kind, detail))
    return seen


# --- WebSearchInterceptionLogger: a Perplexity-compatible search on 127.0.0.1 ---------------------------------


class Search:
    """A Perplexity Search API stand-in that records the queries it gets."""

    def __init__(self) -> None:
        self.queries: list[Any] = []
        self.app = Starlette(routes=[Route("/search", self.search, methods=["POST"])])

    async def search(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.queries.append(body["query"])
        result = {"title": f"About {body['query']}", "url": "https://example.com/sun", "snippet": "Sunny, 21 C."}
        return JSONResponse({"id": "search-1", "results": [{**result, "date": "2026-11-30"}]})


@pytest.fixture
async def search(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Search]:
    stand_in = Search()
    async with served(stand_in.app) as base:
        monkeypatch.setenv("PERPLEXITY_API_BASE", base)
        monkeypatch.setenv("PERPLEXITYAI_API_KEY", "test-key")
        yield stand_in


NATIVE_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
QUESTION = [{"role": "user", "content": "Weather in Paris?"}]


def searching_model() -> ScriptedModel:
    return ScriptedModel(
        message(tool_use("litellm_web_search", {"query": "Paris weather"}, id="toolu_search1")),
        message("It is sunny in Paris."),
    )


async def search_both(
    sdk: Any, hook: Any, ours: ScriptedModel, theirs: ScriptedModel, **options: Any
) -> tuple[Any, Any]:
    """The question with the native search tool: through the middleware (with `options`) over `ours`, and through
    LiteLLM's SDK over `theirs` under uvicorn, the same hook in both."""
    app = AgenticLoopMiddleware(ours, hooks=[hook], **options)
    reply = await anthropic_client(app).messages.create(
        model="scripted", max_tokens=100, messages=QUESTION, tools=[NATIVE_SEARCH]
    )
    sdk.callbacks = [hook]
    async with served(theirs) as base:
        expected = await sdk.anthropic_interface.messages.acreate(
            model="anthropic/scripted",
            messages=QUESTION,
            tools=[NATIVE_SEARCH],
            api_base=base,
            api_key="k",
            max_tokens=100,
        )
    return reply, expected


async def test_websearch_on_messages_matches_litellm(sdk: Any, search: Search) -> None:
    ours, theirs = searching_model(), searching_model()
    hook = WebSearchInterceptionLogger(enabled_providers=["anthropic"])
    reply, expected = await search_both(sdk, hook, ours, theirs)

    # The model saw the converted tool, then the search result, the same way in both.
    assert [tool_names(body) for body in bodies(ours)] == [["litellm_web_search"]] * 2
    assert [body["messages"] for body in bodies(ours)] == [body["messages"] for body in bodies(theirs)]
    assert [tool_names(body) for body in bodies(ours)] == [tool_names(body) for body in bodies(theirs)]
    assert bodies(ours)[1]["messages"][2]["content"][0]["content"].startswith("Title: About Paris weather")
    # The client got the native blocks and the text, as from LiteLLM.
    assert blocks(reply.content) == blocks(expected["content"])
    assert [kind for kind, _ in blocks(reply.content)] == ["server_tool_use", "web_search_tool_result", "text"]
    assert search.queries == ["Paris weather", "Paris weather"]


async def test_websearch_stream_is_answered_as_a_stream_and_its_gate_sees_no_stream(sdk: Any, search: Search) -> None:
    ours, theirs = searching_model(), searching_model()
    hook = WebSearchInterceptionLogger(enabled_providers=["anthropic"])
    app = AgenticLoopMiddleware(ours, hooks=[hook])
    async with anthropic_client(app).messages.stream(
        model="scripted", max_tokens=100, messages=QUESTION, tools=[NATIVE_SEARCH]
    ) as stream:
        reply = await stream.get_final_message()

    sdk.callbacks = [hook]
    async with served(theirs) as base:
        chunks = await sdk.anthropic_interface.messages.acreate(
            model="anthropic/scripted",
            max_tokens=100,
            messages=QUESTION,
            tools=[NATIVE_SEARCH],
            api_base=base,
            api_key="k",
            stream=True,
        )
        events = [chunk async for chunk in chunks]

    # Both called the model without streaming, and looped (the hook's gate refuses a stream).
    assert len(ours.requests) == len(theirs.requests) == 2
    assert not any(body.get("stream") for body in bodies(ours) + bodies(theirs))
    starts = [orjson.loads(line[6:]) for event in events for line in event.splitlines() if line.startswith(b"data: ")]
    their_blocks = [start["content_block"] for start in starts if start["type"] == "content_block_start"]
    assert [kind for kind, _ in blocks(reply.content)] == [block["type"] for block in their_blocks]
    assert [kind for kind, _ in blocks(reply.content)] == ["server_tool_use", "web_search_tool_result", "text"]


async def test_websearch_limit_set_by_the_hook_holds(sdk: Any, search: Search) -> None:
    """The hook's `max_agentic_loops=1` holds in both. At the limit LiteLLM drops the refused call; so does
    `closing="text"`, which also gives `closing_text` as the answer's text (the refused answer had nothing else),
    while the default `closing="call"` makes one more, tool-less call for a closing answer."""

    def model() -> ScriptedModel:
        return ScriptedModel(
            message(tool_use("litellm_web_search", {"query": "Paris weather"}, id="toolu_a")),
            message(tool_use("litellm_web_search", {"query": "Paris forecast"}, id="toolu_b")),
            message("Sunny, from what I found."),
        )

    hook = WebSearchInterceptionLogger(enabled_providers=["anthropic"], max_agentic_loops=1)
    text_model, call_model, theirs = model(), model(), model()
    text_reply, expected = await search_both(sdk, hook, text_model, theirs, closing="text")
    call_reply = await anthropic_client(AgenticLoopMiddleware(call_model, hooks=[hook])).messages.create(
        model="scripted", max_tokens=100, messages=QUESTION, tools=[NATIVE_SEARCH]
    )

    assert search.queries == ["Paris weather"] * 3  # one search each: the second call is refused every time
    assert len(text_model.requests) == len(theirs.requests) == 2
    assert blocks(text_reply.content)[:-1] == blocks(expected["content"])
    assert blocks(text_reply.content)[-1] == ("text", DEFAULT_CLOSING_TEXT)
    assert text_reply.stop_reason == expected["stop_reason"] == "end_turn"
    assert len(call_model.requests) == 3 and bodies(call_model)[2]["tool_choice"] == {"type": "none"}  # closing call
    assert blocks(call_reply.content)[-1] == ("text", "Sunny, from what I found.")


CHAT_SEARCH = {"type": "web_search"}


async def test_websearch_on_chat_matches_litellm_and_sends_the_model_as_the_client_named_it(
    sdk: Any, search: Search
) -> None:
    def model() -> ScriptedModel:
        return ScriptedModel(
            chat_completion(tool_calls=[tool_call("litellm_web_search", {"query": "Paris weather"}, id="call_s1")]),
            chat_completion("It is sunny in Paris."),
        )

    ours, theirs = model(), model()
    hook = WebSearchInterceptionLogger(enabled_providers=["openai"])
    app = AgenticLoopMiddleware(ours, hooks=[hook])
    reply = await openai_client(app).chat.completions.create(
        model="gpt-x",
        messages=QUESTION,
        tools=[CHAT_SEARCH],  # type: ignore[list-item]
    )
    sdk.callbacks = [hook]
    async with served(theirs) as base:
        expected = await sdk.acompletion(
            model="openai/gpt-x", messages=QUESTION, tools=[CHAT_SEARCH], api_base=f"{base}/v1", api_key="k"
        )

    assert [body["model"] for body in bodies(ours)] == [body["model"] for body in bodies(theirs)] == ["gpt-x"] * 2
    assert [tool_names(body) for body in bodies(ours)] == [tool_names(body) for body in bodies(theirs)]
    assert tool_names(bodies(ours)[0]) == ["litellm_web_search"]
    assert [m["role"] for m in bodies(ours)[1]["messages"]] == [m["role"] for m in bodies(theirs)[1]["messages"]]
    assert bodies(ours)[1]["messages"][-1]["content"] == bodies(theirs)[1]["messages"][-1]["content"]
    assert reply.choices[0].message.content == expected.choices[0].message.content == "It is sunny in Paris."


# --- CompressionInterceptionLogger: LiteLLM's own BM25 compression, no service --------------------------------

LONG_HISTORY = [
    {"role": "user", "content": "Here is the log: " + "disk quota exceeded on /var. " * 300},
    {"role": "assistant", "content": "Noted."},
    {"role": "user", "content": "Here is the config: " + "alpha=1 beta=2. " * 400},
    {"role": "assistant", "content": "Ok."},
    {"role": "user", "content": "What does the config set?"},
]


def retrieving_model() -> ScriptedModel:
    def retrieve(request: RecordedRequest) -> dict[str, Any]:
        stub = next(m for m in request.body["messages"] if str(m["content"]).startswith("[Compressed: "))
        key = stub["content"].split()[1]  # "[Compressed: message_2 — ...]"
        return message(tool_use("litellm_content_retrieve", {"key": key}, id="toolu_r1"))

    return ScriptedModel(retrieve, message("It sets alpha=1 and beta=2."))


async def test_compression_on_messages_matches_litellm(sdk: Any) -> None:
    from litellm.integrations.compression_interception.handler import CompressionInterceptionLogger

    ours, theirs = retrieving_model(), retrieving_model()
    hook = CompressionInterceptionLogger(compression_trigger=1000)
    app = AgenticLoopMiddleware(ours, hooks=[hook])
    reply = await anthropic_client(app).messages.create(model="claude-x", max_tokens=100, messages=LONG_HISTORY)
    sdk.callbacks = [hook]
    async with served(theirs) as base:
        expected = await sdk.anthropic_interface.messages.acreate(
            model="anthropic/claude-x", max_tokens=100, messages=LONG_HISTORY, api_base=base, api_key="k"
        )

    first, rerun = bodies(ours)
    # Compressed the same way, with the retrieve tool added.
    assert first["messages"] == bodies(theirs)[0]["messages"] != LONG_HISTORY
    assert tool_names(first) == tool_names(bodies(theirs)[0]) == ["litellm_content_retrieve"]
    # The rerun brings back the original the model asked for, found under the request's call id.
    result = rerun["messages"][-1]["content"][0]
    assert result == bodies(theirs)[1]["messages"][-1]["content"][0]
    assert result["content"] in {m["content"] for m in LONG_HISTORY}
    assert blocks(reply.content) == blocks(expected["content"])


# --- CodeInterpreterInterceptionLogger: a local sandbox object ---------------------------------------------------


class Sandbox:
    """A sandbox stand-in: runs Python in-process and records its containers' lives."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.ran: list[str] = []
        self.deleted: list[str] = []

    async def acreate_sandbox(self) -> Any:
        from litellm.llms.base_llm.sandbox.transformation import ContainerHandle

        self.created.append(f"box-{len(self.created)}")
        return ContainerHandle(id=self.created[-1], provider="local")

    async def arun_code(self, *, container: Any, code: str) -> Any:
        from litellm.llms.base_llm.sandbox.transformation import CodeExecutionResult

        self.ran.append(code)
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            exec(code, {})  # the scripted model's own code
        return CodeExecutionResult(stdout=output.getvalue())

    async def adelete_sandbox(self, *, container: Any) -> None:
        self.deleted.append(container.id)


CODE_TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}


def coding_model() -> ScriptedModel:
    return ScriptedModel(
        chat_completion(tool_calls=[tool_call("litellm_code_execution", {"code": "print(6 * 7)"}, id="call_c1")]),
        chat_completion("The answer is 42."),
    )


async def test_code_interpreter_on_chat_matches_litellm(sdk: Any) -> None:
    from litellm.integrations.code_interpreter_interception.handler import CodeInterpreterInterceptionLogger

    ours, theirs = coding_model(), coding_model()
    our_box, their_box = Sandbox(), Sandbox()
    app = AgenticLoopMiddleware(ours, hooks=[CodeInterpreterInterceptionLogger(sandbox_config=our_box)])
    reply = await openai_client(app).chat.completions.create(
        model="gpt-x",
        messages=[{"role": "user", "content": "What is 6 times 7?"}],
        tools=[CODE_TOOL],  # type: ignore[list-item]
    )
    sdk.callbacks = [CodeInterpreterInterceptionLogger(sandbox_config=their_box)]
    async with served(theirs) as base:
        expected = await sdk.acompletion(
            model="openai/gpt-x",
            messages=[{"role": "user", "content": "What is 6 times 7?"}],
            tools=[CODE_TOOL],
            api_base=f"{base}/v1",
            api_key="k",
        )

    assert [tool_names(body) for body in bodies(ours)] == [tool_names(body) for body in bodies(theirs)]
    assert tool_names(bodies(ours)[0]) == ["litellm_code_execution"]
    assert bodies(ours)[1]["messages"][-1] == bodies(theirs)[1]["messages"][-1]
    assert bodies(ours)[1]["messages"][-1]["content"] == "42\n"
    assert reply.choices[0].message.content == expected.choices[0].message.content == "The answer is 42."
    # One sandbox, created, used and deleted, in both.
    assert (our_box.created, our_box.ran, our_box.deleted) == (their_box.created, their_box.ran, their_box.deleted)
    assert our_box.deleted == ["box-0"]


async def test_websearch_whose_searches_all_fail_terminates_as_in_litellm(
    sdk: Any, search: Search, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook's plan terminates (`stop_reason="web_search_failed"`); its post hook gets the answer without the
    claimed call and adds the native error blocks, in both."""
    monkeypatch.setenv("PERPLEXITY_API_BASE", "http://127.0.0.1:9")  # nothing listens there: every search fails

    def model() -> ScriptedModel:
        return ScriptedModel(
            message("Let me search.", tool_use("litellm_web_search", {"query": "Paris weather"}, id="toolu_f"))
        )

    ours, theirs = model(), model()
    hook = WebSearchInterceptionLogger(enabled_providers=["anthropic"])
    reply, expected = await search_both(sdk, hook, ours, theirs)

    assert len(ours.requests) == len(theirs.requests) == 1
    assert blocks(reply.content) == blocks(expected["content"])
    assert [kind for kind, _ in blocks(reply.content)] == ["server_tool_use", "web_search_tool_result", "text"]
    assert reply.stop_reason == expected["stop_reason"] == "end_turn"
