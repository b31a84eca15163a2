"""Native server tools, faithfully: a client that declared a provider's own tool (Anthropic's `web_search_20250305`,
OpenAI's `web_search`) gets the provider's own record of each call, served by one of ours.

`ServerTools(native=...)` maps the declared tool onto a served one and runs it like any other; this package adds
what a client of the provider's tool expects around that: the tool's options (`max_uses`, domain filters, the user's
location), the record of each search in the final answer (Messages `server_tool_use` and `web_search_tool_result`
blocks, Responses `web_search_call` items), citations of the results the model's text names by URL, and, on the next
turn, those records turned back into the app's own tool calls and results. Each wire format's part is a
`NativeFormat`, which its `Surface.native_format()` gives.
"""

from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..errors import RequestRefused
from ..tool_results import Source, ToolResult
from . import domains
from .domains import Rule

__all__ = [
    "NativeCall",
    "NativeFormat",
    "NativeOptions",
    "NativeRequest",
    "NativeRound",
    "NativeRun",
    "Source",
    "format_sources",
    "search_result",
]

STATE_KEY = "agentic_native_tools"  # where a request's native tools live in its `logging_obj.model_call_details`
MAX_USES_EXCEEDED = "max_uses_exceeded"
UNAVAILABLE = "unavailable"
RECORDED = frozenset({"web_search"})  # the native tools (`native=` keys) whose records we write
CITED_CHARS = 150  # Anthropic's `cited_text` holds at most this much of the source
_URL_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_~/%?#=&+@")
_TRAILING = frozenset(".:,;!")  # end a URL unless a URL's characters follow (`a.html`, `a:8080`)
FILTERS = ("allowed_domains", "blocked_domains")  # Anthropic's fields, and OpenAI's `filters` (blocked as some serve)
_PREFIX = "amw1."  # our `encrypted_content`: this prefix, then the source's text as URL-safe base64


@dataclass(frozen=True)
class NativeOptions:
    """The options of a client's native tool declaration, read the same way from every format.

    A served tool function that declares a `native_options` parameter gets these (None when the call is not native):
    `allowed_domains` and `blocked_domains` (hosts, subdomains included, optionally with a path prefix), and
    `user_location` (`city`, `region`, `country`, `timezone`, as the client gave them). The results are filtered by
    the domains afterwards too (see native/domains.py), so a backend that ignores them is still held to them.
    `declared` is the declaration as the client sent it.
    """

    declared: Mapping[str, Any] = field(default_factory=dict)
    max_uses: int | None = None
    allowed_domains: tuple[str, ...] = ()
    blocked_domains: tuple[str, ...] = ()
    user_location: Mapping[str, Any] | None = None
    _allowed: tuple[Rule, ...] | None = field(default=None, repr=False, compare=False)
    _blocked: tuple[Rule, ...] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("allowed", "blocked"):
            if getattr(self, f"_{name}") is None:
                _, compiled = domains.rules(list(getattr(self, f"{name}_domains")), f"{name}_domains")
                object.__setattr__(self, f"_{name}", compiled)

    @classmethod
    def read(cls, tool: Mapping[str, Any], where: str = "the native tool") -> NativeOptions:
        """Anthropic's fields (`max_uses`, `allowed_domains`, `blocked_domains`, `user_location`) and OpenAI's
        (`filters.allowed_domains`, and `filters.blocked_domains` as OpenAI-compatible providers take it;
        `user_location`, chat's `user_location.approximate`).

        A field of the wrong type is refused (`RequestRefused`, a 400 naming `where` and the field), as the
        providers' APIs refuse it, rather than read as absent: a filter given as a string must not filter nothing.
        """
        filters = tool.get("filters")
        if filters is not None and not isinstance(filters, dict):
            raise RequestRefused(
                f"{where}.filters must be an object, got {domains.shown(filters)}", param=f"{where}.filters"
            )
        lists = {name: _domain_list(tool, filters or {}, name, where) for name in FILTERS}
        unknown = sorted(key for key in filters or {} if key not in FILTERS)
        if unknown:  # a filter we would not apply: refused, never read as no filter
            raise RequestRefused(
                f"{where}.filters.{unknown[0]} is not a filter the gateway applies (it applies {', '.join(FILTERS)})",
                param=f"{where}.filters.{unknown[0]}",
            )
        (allowed, allowed_rules), (blocked, blocked_rules) = lists["allowed_domains"], lists["blocked_domains"]
        location = tool.get("user_location")
        if location is not None and not isinstance(location, dict):
            raise RequestRefused(
                f"{where}.user_location must be an object, got {domains.shown(location)}",
                param=f"{where}.user_location",
            )
        if isinstance(location, dict) and isinstance(location.get("approximate"), dict):
            location = location["approximate"]
        max_uses = tool.get("max_uses")
        if max_uses is not None and (type(max_uses) is not int or max_uses < 1):
            raise RequestRefused(
                f"{where}.max_uses must be a positive integer, got {max_uses!r}", param=f"{where}.max_uses"
            )
        name = tool.get("name")
        if name is not None and not isinstance(name, str):
            raise RequestRefused(f"{where}.name must be a string, got {domains.shown(name)}", param=f"{where}.name")
        return cls(
            declared=dict(tool),
            max_uses=max_uses,
            allowed_domains=allowed,
            blocked_domains=blocked,
            user_location=(
                {key: value for key, value in location.items() if key != "type" and value is not None}
                if isinstance(location, dict)
                else None
            ),
            _allowed=allowed_rules,
            _blocked=blocked_rules,
        )

    @property
    def filtered(self) -> bool:
        return bool(self._allowed or self._blocked)

    def allows(self, url: str) -> bool:
        """Whether a result's URL passes the domain filters, read as a browser reads it; with a filter, a URL that
        leads nowhere a filter can judge does not pass (see native/domains.py)."""
        if not self.filtered:
            return True
        found = domains.address(url)
        if found is None:
            return False
        if self._allowed and not domains.within(found, self._allowed, unsure=False):
            return False
        return not domains.within(found, self._blocked or (), unsure=True)


def _domain_list(
    tool: Mapping[str, Any], filters: Mapping[str, Any], name: str, where: str
) -> tuple[tuple[str, ...], tuple[Rule, ...]]:
    """One filter, from Anthropic's place (`allowed_domains`) or OpenAI's (`filters.allowed_domains`). Given in
    both, it is refused: which one the client meant is not ours to guess, and their union would widen an allowance."""
    top, inner = tool.get(name), filters.get(name)
    if top is not None and inner is not None:
        raise RequestRefused(
            f"{where}.{name} and {where}.filters.{name} are both given: give the domains once",
            param=f"{where}.filters.{name}",
        )
    return domains.rules(top, f"{where}.{name}") if inner is None else domains.rules(inner, f"{where}.filters.{name}")


def format_sources(query: str | None, sources: Sequence[Source]) -> str:
    """The text a model reads for a search's results: numbered, each with its title, URL, text and age.

    The next turn's record of a native search is turned back into this text, so a tool that builds its result with
    `search_result` gives the model the same text on every turn.
    """
    if not sources:
        return f'No results for "{query}".' if query else "No results."
    entries = []
    for number, source in enumerate(sources, 1):
        lines = [f"[{number}] {source.title}", f"URL: {source.url}"]
        text = " ".join(source.text.split())
        if text:
            lines.append(text)
        if source.page_age:
            lines.append(f"Age: {source.page_age}")
        entries.append("\n".join(lines))
    head = f'Search results for "{query}":' if query else "Search results:"
    return head + "\n\n" + "\n\n".join(entries)


def search_result(query: str | None, sources: Sequence[Source]) -> ToolResult:
    """What a search tool returns: the sources, and the text `format_sources` writes of them for the model."""
    found = tuple(sources)
    return ToolResult(format_sources(query, found), sources=found)


def encode_text(text: str) -> str:
    """A source's text as the `encrypted_content` of its record (ours to define: it is not encrypted)."""
    return _PREFIX + base64.urlsafe_b64encode(text.encode()).decode()


def decode_text(content: Any) -> str:
    """The text `encode_text` wrote; empty for anything else (a record made by the provider itself), and for one of
    ours that does not decode (with a guardrail mounted, such a request is refused first: guardrail_native.py)."""
    try:
        return (read_text(content) if isinstance(content, str) else None) or ""
    except ValueError:
        return ""


def read_text(content: str) -> str | None:
    """The text of an `encrypted_content` that is ours (`amw1.`), decoded as the next turn decodes it for the model;
    None for one that is not ours. One of ours that does not decode raises ValueError (`binascii.Error`, or
    `UnicodeDecodeError`)."""
    if not content.startswith(_PREFIX):
        return None
    return base64.urlsafe_b64decode(content[len(_PREFIX) :]).decode()


def query_of(call_input: Any) -> str | None:
    query = call_input.get("query") if isinstance(call_input, dict) else None
    return query if isinstance(query, str) else None


class NativeCall(NamedTuple):
    """A call of a natively declared tool, before it ran: the app's call, the tool's name as the client declared it
    (Anthropic's `web_search`), and its query."""

    call: dict[str, Any]
    name: str
    query: str | None

    def ran(self, result: ToolResult, error_code: str | None = None) -> NativeRun:
        return NativeRun(self.call, self.name, self.query, result, error_code)


class NativeRun(NamedTuple):
    """One call of a natively declared tool in one round: the app's call, what came of it, and why it failed."""

    call: dict[str, Any]
    name: str  # the tool's name as the client declared it (Anthropic's `web_search`)
    query: str | None
    result: ToolResult
    error_code: str | None = None  # Anthropic's web search error codes: `max_uses_exceeded`, `unavailable`

    def holds_results(self) -> bool:
        """Whether the record's results are what the model read: its sources, or none because the tool said it
        found none (`search_result` with no sources); not a tool's plain text, which no record carries."""
        return bool(self.result.sources) or self.result.content == format_sources(self.query, ())

    def cited_sources(self) -> tuple[Source, ...]:
        """The sources a citation may point at: none for a failed call, whose record holds no results."""
        return () if self.error_code is not None else self.result.sources


class NativeRound(NamedTuple):
    """The record of one round with native calls: the app's answer, and the native calls that ran; `streamed` when
    a live stream already sent their records (see native/live.py), so the final answer carries only the rest."""

    response: dict[str, Any]
    runs: tuple[NativeRun, ...]
    streamed: bool = False

    def searches(self) -> int:
        """The searches that ran and answered: what `usage.server_tool_use.web_search_requests` counts."""
        return sum(run.error_code is None for run in self.runs)

    def sources(self) -> list[Source]:
        return [source for run in self.runs for source in run.cited_sources()]


class NativeRequest:
    """The native tools one request declared (by the served tool's name) and how often each was used.

    Kept in the request's `logging_obj`, so nothing is shared between requests.
    """

    def __init__(self, declared: dict[str, NativeOptions]) -> None:
        self.declared = declared
        self.used: Counter[str] = Counter()

    @staticmethod
    def of(logging_obj: Any) -> NativeRequest | None:
        details = getattr(logging_obj, "model_call_details", None)
        state = details.get(STATE_KEY) if isinstance(details, dict) else None
        return state if isinstance(state, NativeRequest) else None

    def keep(self, logging_obj: Any) -> None:
        details = getattr(logging_obj, "model_call_details", None)
        if isinstance(details, dict):
            details[STATE_KEY] = self

    def take(self, name: str) -> bool:
        """Count one use of `name`; False once its `max_uses` is spent."""
        limit = self.declared[name].max_uses
        if limit is not None and self.used[name] >= limit:
            return False
        self.used[name] += 1
        return True

    @staticmethod
    def exceeded(name: str, options: NativeOptions) -> ToolResult:
        return ToolResult(
            f"{name} error: {MAX_USES_EXCEEDED}: this request allows at most {options.max_uses} uses of {name}", True
        )

    @staticmethod
    def restricted(result: ToolResult, options: NativeOptions, query: str | None) -> ToolResult:
        """The result without sources the domain filters exclude; its text written anew when any were dropped.

        A result without sources (a tool that returns plain text) cannot be judged by the filters: with one set, its
        text does not reach the model, which reads an error instead (fail closed), and the record says `unavailable`.
        """
        if options.filtered and not result.sources and not result.is_error:
            return ToolResult(
                "the search's results carry no URLs to check against this request's domain filters, so none is shown",
                is_error=True,
            )
        kept = tuple(source for source in result.sources if options.allows(source.url))
        if len(kept) == len(result.sources):
            return result
        return result._replace(content=format_sources(query, kept), sources=kept, images=())  # theirs, maybe


def citations(text: str, sources: Sequence[Source]) -> Iterator[tuple[int, Source, int]]:
    """Each source the text cites, with the source's number and where its URL begins in the text.

    The model cites a result by writing its URL (as the results it read show them): each occurrence counts, unless
    it goes on as a longer URL.
    """
    seen: set[str] = set()
    for number, source in enumerate(sources):
        if not source.url or source.url in seen:
            continue
        seen.add(source.url)
        start = text.find(source.url)
        while start != -1:
            end = start + len(source.url)
            if _url_ends(text, end):  # not the start of a longer URL
                yield number, source, start
            start = text.find(source.url, end)


def _url_ends(text: str, end: int) -> bool:
    """Whether a URL written in `text` ends at `end`: at the text's end, or a character no URL goes on with, or
    punctuation (`.`, `:`, `,`...) that ends the sentence rather than goes on as `.html` or `:8080`."""
    while end < len(text) and text[end] in _TRAILING:
        end += 1
    return end == len(text) or text[end] not in _URL_CHARACTERS


class NativeFormat(ABC):
    """One wire format's part of native tools: its records, its citations, and its history turned back."""

    def declared(self, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """Native tools the request declares outside `tools` (chat's `web_search_options`), as tool declarations,
        each with the field it came from."""
        return []

    def served(self, body: dict[str, Any], renamed: Mapping[str, str]) -> dict[str, Any]:
        """The request's fields that name a native tool (`renamed`: its declared name or type -> the served tool's
        name) made to name the served tool instead, as the tool itself is: a forced `tool_choice`, and the like."""
        return body

    @abstractmethod
    def request(self, body: dict[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
        """The request as the app understands it: earlier turns' records (of the tools `names` maps, by the record's
        name) turned back into the app's own calls and results, and the fields the server serves removed."""

    @abstractmethod
    def record(self, final: dict[str, Any], round: NativeRound) -> dict[str, Any]:
        """The final answer with one round's record in front of it, and citations of that round's results."""
