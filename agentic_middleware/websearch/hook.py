"""Web-search interception: the server runs `web_search`, also when the client asks for Anthropic's native tool.

    hooks=[web_search_hook]                                    # the bundled offline corpus
    hooks=[websearch_hook(HttpSearch("http://searx:8080"))]    # a real search API

`web_search_hook` reads AGENTIC_SEARCH_URL (with AGENTIC_SEARCH_KIND=searxng|tavily and AGENTIC_SEARCH_API_KEY)
at import, so a YAML config can name it and still reach a real search API.
"""

from __future__ import annotations

import os
from typing import Literal, cast

from ..native import NativeOptions, Source, format_sources, search_result
from ..surfaces import ToolResult
from ..tools import ServerTool, ServerTools, server_tool
from .backends import CorpusSearch, HttpSearch, SearchBackend, SearchResult

SNIPPET_CHARS = 400


def as_source(result: SearchResult) -> Source:
    """A backend's result as the model reads it: the snippet on one line, cut to `SNIPPET_CHARS`."""
    snippet = " ".join(result.snippet.split())
    if len(snippet) > SNIPPET_CHARS:
        snippet = snippet[:SNIPPET_CHARS].rsplit(" ", 1)[0] + " ..."
    return Source(result.url, result.title, snippet, result.page_age)


def format_results(query: str, results: list[SearchResult]) -> str:
    """Short numbered text: what a model reads best, with the title and url to cite."""
    return format_sources(query, [as_source(result) for result in results])


def web_search_tool(backend: SearchBackend, max_results: int = 5) -> ServerTool:
    """The `web_search(query)` tool, answered by `backend`; a native declaration's options reach the backend, and
    the results are returned as sources (`search_result`), which a client of a native tool sees as records."""

    @server_tool(
        name="web_search",
        description="Search the web. Returns numbered results with title, url and a snippet; cite what you use.",
        input_schema={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to search for."}},
            "required": ["query"],
        },
    )
    async def web_search(query: str, native_options: NativeOptions | None = None) -> ToolResult:
        found = await backend.search(query, max_results, native_options)
        return search_result(query, [as_source(result) for result in found])

    return web_search


def websearch_hook(backend: SearchBackend, max_results: int = 5) -> ServerTools:
    """A hook serving `web_search`; Anthropic's `{"type": "web_search_20250305", ...}` is mapped onto it."""
    return ServerTools([web_search_tool(backend, max_results)], native={"web_search": "web_search"})


def backend_from_env() -> SearchBackend:
    """A real search API when AGENTIC_SEARCH_URL is set, else the bundled corpus."""
    url = os.environ.get("AGENTIC_SEARCH_URL")
    if not url:
        return CorpusSearch()
    kind = os.environ.get("AGENTIC_SEARCH_KIND", "searxng")
    return HttpSearch(url, cast(Literal["searxng", "tavily"], kind), os.environ.get("AGENTIC_SEARCH_API_KEY"))


web_search_hook = websearch_hook(backend_from_env())
