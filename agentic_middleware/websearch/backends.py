"""Search backends: anything with `async search(query, max_results, options)` plugs into the web_search tool.

`options` are the client's native tool options (`NativeOptions`: allowed and blocked domains, the user's location),
or None when the call is not native; the middleware filters the results by the domains afterwards as well.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..native import NativeOptions
from .bm25 import BM25

if TYPE_CHECKING:  # imported where a search goes out: a gateway on the local corpus starts without it
    import aiohttp

CORPUS = Path(__file__).with_name("corpus.json")


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str
    page_age: str | None = None


class SearchBackend(Protocol):
    async def search(
        self, query: str, max_results: int, options: NativeOptions | None = None
    ) -> list[SearchResult]: ...


class CorpusSearch:
    """Offline search over a bundled corpus ranked by BM25: real answers with no network and no key."""

    def __init__(self, documents: list[SearchResult] | None = None) -> None:
        self.documents = documents if documents is not None else load_corpus()
        self.index = BM25([f"{document.title} {document.snippet}" for document in self.documents])

    async def search(self, query: str, max_results: int, options: NativeOptions | None = None) -> list[SearchResult]:
        ranked = (self.documents[index] for index, _ in self.index.rank(query, len(self.documents)))
        return [document for document in ranked if options is None or options.allows(document.url)][:max_results]


def load_corpus(path: Path = CORPUS) -> list[SearchResult]:
    """Documents from a JSON list of {"title", "url", "content"} objects."""
    return [SearchResult(item["title"], item["url"], item["content"]) for item in json.loads(path.read_text())]


class HttpSearch:
    """A search API over HTTP; both kinds answer `{"results": [{"title", "url", "content"}]}`.

    `kind="searxng"`: GET {base_url}/search?q=...&format=json (the instance must allow the json format).
    `kind="tavily"`: POST {base_url}/search with {"query", "max_results"} (and `include_domains`, `exclude_domains`
    from the native options; not the user's country, whose ISO code Tavily's `country` does not take); `api_key`
    goes in a Bearer header.
    A failing call raises, and the toolkit turns that into an error result the model can read.

    The client is `aiohttp`, the gateway's own (`pip install 'agentic-middleware[gateway]'`): one HTTP client in the
    package, not two. Without `client`, each search opens a session of its own and closes it.
    """

    def __init__(
        self,
        base_url: str,
        kind: Literal["searxng", "tavily"] = "searxng",
        api_key: str | None = None,
        client: aiohttp.ClientSession | None = None,
        timeout: float = 10.0,
    ) -> None:
        if kind not in ("searxng", "tavily"):
            raise ValueError(f"kind must be 'searxng' or 'tavily', got {kind!r}")
        self.base_url = base_url.rstrip("/")
        self.kind = kind
        self.headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = client
        self.timeout = timeout

    async def search(self, query: str, max_results: int, options: NativeOptions | None = None) -> list[SearchResult]:
        if self.client is not None:
            return await self._search(self.client, query, max_results, options)
        try:
            import aiohttp
        except ImportError:
            raise ImportError("HttpSearch needs aiohttp: pip install 'agentic-middleware[gateway]'") from None
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as client:  # one per call: nothing to close later
            return await self._search(client, query, max_results, options)

    async def _search(
        self, client: aiohttp.ClientSession, query: str, max_results: int, options: NativeOptions | None
    ) -> list[SearchResult]:
        url = f"{self.base_url}/search"
        if self.kind == "searxng":
            request = client.get(url, params={"q": query, "format": "json"}, headers=self.headers)
        else:
            body: dict[str, Any] = {"query": query, "max_results": max_results}
            if options is not None:
                body.update(_tavily_options(options))
            request = client.post(url, json=body, headers=self.headers)
        async with request as response:
            response.raise_for_status()
            answer: Any = await response.json(content_type=None)
        items: Any = answer.get("results") if isinstance(answer, dict) else None
        return [
            SearchResult(
                str(item.get("title") or ""),
                str(item.get("url") or ""),
                str(item.get("content") or ""),
                _age(item.get("publishedDate") or item.get("published_date")),
            )
            for item in (items if isinstance(items, list) else [])
            if isinstance(item, dict)
        ][:max_results]


def _tavily_options(options: NativeOptions) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if options.allowed_domains:
        found["include_domains"] = list(options.allowed_domains)
    if options.blocked_domains:
        found["exclude_domains"] = list(options.blocked_domains)
    # The user's country is not sent: clients give an ISO 3166-1 alpha-2 code ("US"), Tavily's `country` takes a
    # lower-case country name ("united states", and only with topic "general"), and a wrong value fails the search.
    return found


def _age(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
