"""Web-search interception: a `web_search` server tool with pluggable backends (offline BM25 corpus, or HTTP)."""

from .backends import CorpusSearch, HttpSearch, SearchBackend, SearchResult
from .bm25 import BM25, tokenize
from .hook import format_results, web_search_hook, web_search_tool, websearch_hook

__all__ = [
    "BM25",
    "CorpusSearch",
    "HttpSearch",
    "SearchBackend",
    "SearchResult",
    "format_results",
    "tokenize",
    "web_search_hook",
    "web_search_tool",
    "websearch_hook",
]
