"""agentic_middleware.websearch: BM25 over the bundled corpus, the native-tool mapping, and the HTTP search backends."""

from __future__ import annotations

import json
import math
from typing import Any

import aiohttp
import pytest
from conftest import anthropic_client, openai_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentic_middleware import AgenticLoopMiddleware
from agentic_middleware.gateway import serving
from agentic_middleware.native import NativeOptions
from agentic_middleware.testing import RecordedRequest, ScriptedModel, chat_completion, message, tool_call, tool_use
from agentic_middleware.websearch import BM25, CorpusSearch, HttpSearch, SearchResult, format_results, web_search_tool
from agentic_middleware.websearch.hook import backend_from_env, websearch_hook


@pytest.mark.parametrize(
    ("query", "title"),
    [
        ("What is the capital of Australia?", "Canberra"),
        ("How tall is Mount Everest?", "Mount Everest"),
        ("deepest point of the ocean", "Mariana Trench"),
        ("who created the python language", "Python programming language"),
        ("why does water boil at a lower temperature at altitude", "Boiling point of water"),
        ("Who won Nobel prizes in two different sciences?", "Marie Curie"),
    ],
)
async def test_bm25_ranks_the_right_document_first(query: str, title: str) -> None:
    results = await CorpusSearch().search(query, 3)
    assert results[0].title == title
    assert len(results) == 3


def test_bm25_scores_follow_the_formula() -> None:
    index = BM25(["a b", "a c c", "d"], k1=1.2, b=0.75)
    average = (2 + 3 + 1) / 3
    idf_c = math.log((3 - 1 + 0.5) / (1 + 0.5) + 1)
    expected = idf_c * 2 * 2.2 / (2 + 1.2 * (1 - 0.75 + 0.75 * 3 / average))
    assert index.score("c", 1) == pytest.approx(expected)
    assert index.score("C!", 1) == pytest.approx(expected)  # lowercased words, punctuation dropped
    assert index.idf["a"] > 0  # the +1 keeps a term found in most documents positive
    assert index.rank("a", 5) == [(0, index.score("a", 0)), (1, index.score("a", 1))]  # the shorter one first
    assert index.rank("zebra", 5) == []


async def test_a_native_web_search_tool_is_served_by_ours_under_the_anthropic_sdk() -> None:
    def answer(request: RecordedRequest) -> dict[str, Any]:
        result = request.body["messages"][-1]["content"][0]
        return message(f"Found: {result['content'].splitlines()[2]}")

    model = ScriptedModel(message(tool_use("web_search", {"query": "capital of Australia"})), answer)
    app = AgenticLoopMiddleware(model, hooks=[websearch_hook(CorpusSearch())])
    reply = await anthropic_client(app).messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": "What is the capital of Australia?"}],
        tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}],
    )

    assert [block.type for block in reply.content] == ["server_tool_use", "web_search_tool_result", "text"]
    assert reply.content[2].text == "Found: [1] Canberra"  # type: ignore[union-attr]
    assert reply.stop_reason == "end_turn"
    (declared,) = model.requests[0].body["tools"]
    assert declared["name"] == "web_search" and "type" not in declared
    assert declared["input_schema"]["required"] == ["query"]
    result = model.requests[1].body["messages"][-1]["content"][0]
    assert result["content"].startswith('Search results for "capital of Australia":\n\n[1] Canberra\nURL: https://')
    assert "is_error" not in result


async def test_web_search_on_chat_under_the_openai_sdk() -> None:
    def answer(request: RecordedRequest) -> dict[str, Any]:
        return chat_completion(request.body["messages"][-1]["content"].splitlines()[2])

    model = ScriptedModel(chat_completion(tool_calls=[tool_call("web_search", {"query": "Mount Everest"})]), answer)
    app = AgenticLoopMiddleware(model, hooks=[websearch_hook(CorpusSearch())])
    completion = await openai_client(app).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "How tall is Everest?"}]
    )
    assert completion.choices[0].message.content == "[1] Mount Everest"
    assert completion.choices[0].message.tool_calls is None


def fake_search_api(seen: list[tuple[Request, bytes]], status: int = 200) -> Starlette:
    results = [
        {"title": f"Result {n}", "url": f"https://search.test/{n}", "content": f"Snippet {n}."} for n in range(1, 8)
    ]

    async def search(request: Request) -> JSONResponse:
        seen.append((request, await request.body()))
        return JSONResponse({"results": results} if status == 200 else {"error": "down"}, status_code=status)

    return Starlette(routes=[Route("/search", search, methods=["GET", "POST"])])


@pytest.mark.parametrize("kind", ["searxng", "tavily"])
async def test_the_http_backends_speak_each_kind(kind: Any) -> None:
    seen: list[tuple[Request, bytes]] = []
    async with serving(fake_search_api(seen)) as url:
        backend = HttpSearch(f"{url}/", kind=kind, api_key="k")  # a session of its own, closed after the search
        results = await backend.search("ozone layer", 3)

    assert results == [SearchResult(f"Result {n}", f"https://search.test/{n}", f"Snippet {n}.") for n in (1, 2, 3)]
    ((request, body),) = seen
    assert request.headers["authorization"] == "Bearer k"
    if kind == "searxng":
        assert request.method == "GET"
        assert dict(request.query_params) == {"q": "ozone layer", "format": "json"}
    else:
        assert request.method == "POST"
        assert json.loads(body) == {"query": "ozone layer", "max_results": 3}


async def test_tavily_gets_the_domains_but_not_the_iso_country_code_it_does_not_take() -> None:
    seen: list[tuple[Request, bytes]] = []
    options = NativeOptions.read(
        {
            "allowed_domains": ["a.test"],
            "blocked_domains": ["b.test"],
            "user_location": {"type": "approximate", "country": "US", "city": "Austin"},
        }
    )
    async with serving(fake_search_api(seen)) as url, aiohttp.ClientSession() as client:
        await HttpSearch(url, kind="tavily", client=client).search("ozone layer", 3, options)
    ((_, body),) = seen
    assert json.loads(body) == {
        "query": "ozone layer",
        "max_results": 3,
        "include_domains": ["a.test"],
        "exclude_domains": ["b.test"],
    }


async def test_a_failing_search_api_becomes_an_error_result_the_model_reads() -> None:
    async with serving(fake_search_api([], status=503)) as url:
        tool = web_search_tool(HttpSearch(url, kind="tavily"))
        result = await tool({"query": "x"}, 5.0, None)
    assert result.is_error
    assert "web_search failed: ClientResponseError" in result.content and "503" in result.content


async def test_the_web_search_tool_formats_short_text() -> None:
    long = SearchResult("Long", "https://x.test", "word " * 200)
    text = format_results("q", [long])
    assert text.startswith('Search results for "q":\n\n[1] Long\nURL: https://x.test\nword word')
    assert text.endswith(" ...") and len(text) < 500
    assert format_results("q", []) == 'No results for "q".'
    assert (await web_search_tool(CorpusSearch())({"query": "qwxyz"}, 5.0, None)).content == 'No results for "qwxyz".'


def test_the_backend_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTIC_SEARCH_URL", raising=False)
    assert isinstance(backend_from_env(), CorpusSearch)
    monkeypatch.setenv("AGENTIC_SEARCH_URL", "http://tavily.test")
    monkeypatch.setenv("AGENTIC_SEARCH_KIND", "tavily")
    backend = backend_from_env()
    assert isinstance(backend, HttpSearch) and backend.kind == "tavily"
    with pytest.raises(ValueError, match="kind"):
        HttpSearch("http://x", kind="bing")  # type: ignore[arg-type]
