"""Web-search interception: the server runs `web_search`, also when the client asks for Anthropic's native tool.

    hooks=[web_search_hook]                                    # the bundled offline corpus
    hooks=[websearch_hook(HttpSearch("http://searx:8080"))]    # a real search API

`web_search_hook` reads AGENTIC_SEARCH_URL (with AGENTIC_SEARCH_KIND=searxng|tavily and AGENTIC_SEARCH_API_KEY)
at import, so a YAML config can name it and still reach a real search API.
"""

from __future__ import annotations

import os
from typing import Literal, cast

from agentic_middleware import ServerTool, ServerTools, server_tool

from .backends import CorpusSearch, HttpSearch, SearchBackend, SearchResult

SNIPPET_CHARS = 400


def format_results(query: str, results: list[SearchResult]) -> str:
    """Short numbered text: what a model reads best, with the title and url to cite."""
    if not results:
        return f'No results for "{query}".'
    entries = []
    for number, result in enumerate(results, 1):
        snippet = " ".join(result.snippet.split())
        if len(snippet) > SNIPPET_CHARS:
            snippet = snippet[:SNIPPET_CHARS].rsplit(" ", 1)[0] + " ..."
        entries.append(f"[{number}] {result.title}\nURL: {result.url}\n{snippet}")
    return f'Search results for "{query}":\n\n' + "\n\n".join(entries)


def web_search_tool(backend: SearchBackend, max_results: int = 5) -> ServerTool:
    """The `web_search(query)` tool, answered by `backend`."""

    @server_tool(
        name="web_search",
        description="Search the web. Returns numbered results with title, url and a snippet; cite what you use.",
        input_schema={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to search for."}},
            "required": ["query"],
        },
    )
    async def web_search(query: str) -> str:
        return format_results(query, await backend.search(query, max_results))

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
