"""The domain filters of a native search (`allowed_domains`, `blocked_domains`), with every URL read as a browser
reads it.

A filter that reads a URL one way while the client's browser opens it another is no filter: Python's `urlsplit`
reads `http://evil.com\\@allowed.com/` as a URL of allowed.com, which a browser opens as evil.com. So URLs are
parsed by ada (the WHATWG URL parser Node.js uses; `pip install 'agentic-middleware[native]'`), which applies the
rules a browser does: a backslash is a path separator, IPv4 addresses written in decimal, hex, octal or short form
are one address, IPv6 literals are canonical, hosts are percent-decoded and IDNA-encoded. What cannot be read (not
an http(s) URL, no host, a path that dot segments make ambiguous or that servers read otherwise) fails closed: an
allow list does not let it in, and a block list keeps it out.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from ..errors import ConfigurationError, RequestRefused

EXTRA = "pip install 'agentic-middleware[native]'"
_WEB = frozenset({"http:", "https:"})
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")  # a URL that starts with one names its scheme (WHATWG)
_EDGES = "".join(map(chr, range(0x21)))  # C0 controls and space, which the WHATWG parser strips from both ends
_INNER = str.maketrans("", "", "\t\n\r")  # which it removes everywhere
_HOST_END = re.compile(r"[/\\?#]")
_RESULT_PARTS = ("protocol", "hostname", "pathname")
_RULE_PARTS = ("protocol", "hostname", "pathname", "username", "password", "port", "search", "hash")
# Entries a filter list may hold: each costs ~15 us to read (~100 us with a `*`) and each result is checked against
# every one, all on the event loop, so a client's 100,000-entry list (2.5 MB) held every other request for ~9 s.
MAX_ENTRIES = 1000

Parser = Callable[..., Mapping[str, Any]]
_parse: Parser | None = None


def require() -> Parser:
    """ada's parser; a `ConfigurationError` naming the extra when it is not installed (`ServerTools(native=...)`
    asks when it is built, so a gateway without it fails at start rather than at its first filtered search)."""
    global _parse
    try:
        from ada_url import parse_url
    except ImportError:
        raise ConfigurationError(
            f"native tools read their results' URLs as a browser does, with ada-url (the WHATWG URL parser): {EXTRA}"
        ) from None
    _parse = parse_url
    return parse_url


@dataclass(frozen=True)
class Address:
    """Where a URL leads: its host as DNS compares it, and its path percent-decoded (`ambiguous` when a `.` or
    `..` segment shows only once decoded, which servers resolve differently). `alias` is the path as servers that
    drop a segment's `;parameters` (Tomcat, Jetty) or its trailing dots and spaces (IIS) read it, where that differs:
    `/docs;x/keys` and `/docs./keys` are `/docs/keys` there."""

    host: str
    path: str
    ambiguous: bool
    alias: str | None = None


@dataclass(frozen=True)
class Rule:
    """One entry of a domain filter: a host (its subdomains included, or only them for `*.host`), and optionally a
    path under which URLs match (on a segment boundary: `docs` holds `/docs` and `/docs/a`, not `/docs-private`)."""

    host: str
    path: str = ""
    subdomains_only: bool = False
    # A path with `*` (any characters, as Anthropic's `example.com/*/articles`): as a pattern, and case-folded.
    pattern: re.Pattern[str] | None = None
    folded: re.Pattern[str] | None = None

    def covers(self, address: Address, unsure: bool) -> bool:
        """Whether the address is in this rule. `unsure` (True for a block, False for an allowance) is the answer
        where the path cannot be judged: a path made ambiguous by dot segments, or one that differs only in case
        (which some servers ignore)."""
        host = address.host
        if not (host.endswith(f".{self.host}") or (host == self.host and not self.subdomains_only)):
            return False
        if not self.path:
            return True
        if address.ambiguous:
            return unsure
        readings = (address.path,) if address.alias is None else (address.path, address.alias)
        held = [self.holds(path, unsure) for path in readings]
        return any(held) if unsure else all(held)  # a block takes the path in any reading, an allowance in every one

    def holds(self, path: str, unsure: bool) -> bool:
        """Whether the path is under this rule's path (case-folded for a block, which holds whatever case a server
        ignores)."""
        if self.pattern is not None and self.folded is not None:
            return (self.folded if unsure else self.pattern).fullmatch(path) is not None
        path, mine = (path.lower(), self.path.lower()) if unsure else (path, self.path)
        return path == mine or path.startswith(f"{mine}/")


def address(url: object) -> Address | None:
    """Where a browser goes for a result's URL; None for what leads nowhere a filter can judge.

    A URL with a scheme must be http(s). One without (`example.com/a`, `//example.com/a`) is read as an http URL,
    as an address bar reads it; one that starts with a single `/`, `?` or `#` is relative to a page we do not know.
    """
    if not isinstance(url, str):
        return None
    text = url.strip(_EDGES).translate(_INNER)
    if not _SCHEME.match(text):
        if text[:2].replace("\\", "/") == "//":
            text = f"http:{text}"
        elif not text or text[0] in "/\\?#":
            return None
        else:
            text = f"http://{text}"
    parts = _parsed(text, _RESULT_PARTS)
    if parts is None or parts["protocol"] not in _WEB or not parts["hostname"]:
        return None
    path = unquote(parts["pathname"]).replace("\\", "/")
    segments = path.split("/")
    aliased = [_alias(segment) for segment in segments]
    ambiguous = not {".", ".."}.isdisjoint(segments + aliased)  # `..;` is `..` to Tomcat
    path, alias = path.strip("/"), "/".join(aliased).strip("/")
    return Address(_dns_host(parts["hostname"]), path, ambiguous, alias if alias != path else None)


def _alias(segment: str) -> str:
    """A path segment as servers that drop `;parameters` and trailing dots and spaces read it."""
    bare = segment.partition(";")[0]
    return bare if bare in (".", "..") else bare.rstrip(". ")


def rules(entries: Any, where: str) -> tuple[tuple[str, ...], tuple[Rule, ...]]:
    """A filter as the client gave it (absent, or a list of strings) and as rules; a `RequestRefused` naming the
    field (`where`) for anything else, as Anthropic's API answers 400."""
    if entries is None:
        return (), ()
    if not isinstance(entries, list) or not all(isinstance(entry, str) for entry in entries):
        got = "a list with an entry that is not a string" if isinstance(entries, list) else shown(entries)
        raise RequestRefused(f"{where} must be a list of domain strings, got {got}", param=where)
    if len(entries) > MAX_ENTRIES:
        raise RequestRefused(f"{where} has {len(entries)} entries, more than {MAX_ENTRIES}", param=where)
    compiled = []
    for number, entry in enumerate(entries):
        found = rule(entry)
        if found is None:
            raise RequestRefused(
                f"{where}[{number}] is not a domain: {entry!r} (a host, optionally with a path: example.com, "
                "docs.example.com/guide)",
                param=f"{where}[{number}]",
            )
        compiled.append(found)
    return tuple(entries), tuple(compiled)


def rule(entry: str) -> Rule | None:
    """A filter entry as a rule: `example.com`, `*.example.com`, `example.com/docs`, `example.com/*/articles`, an
    IP address, optionally with `http://` or `https://` in front; None when it is anything else (a port, a user, a
    query, another scheme, a `*` in the host but for a leading `*.`, more than one `*` in the path, as Anthropic's
    API refuses them, an empty label such as `.com`'s, which no host has)."""
    text = entry.strip(_EDGES).translate(_INNER)
    subdomains_only = text.startswith("*.")
    text = text.removeprefix("*.")
    if not text or text[0] in "/\\?#" or "*" in _HOST_END.split(text.partition("://")[2] or text, maxsplit=1)[0]:
        return None
    parts = _parsed(text if _SCHEME.match(text) else f"http://{text}", _RULE_PARTS)
    if parts is None or parts["protocol"] not in _WEB or not parts["hostname"]:
        return None
    if any(parts[name] for name in ("username", "password", "port", "search", "hash")):
        return None
    path = unquote(parts["pathname"]).replace("\\", "/").strip("/")
    if {".", ".."} & set(path.split("/")):
        return None
    host = _dns_host(parts["hostname"])
    if not host or "" in host.split(".") or path.count("*") > 1:
        return None
    if "*" not in path:
        return Rule(host, path, subdomains_only)
    pattern = "".join(".*" if piece == "*" else re.escape(piece) for piece in re.split(r"(\*)", path))
    pattern = f"(?:{pattern})(?:/.*)?"  # on a segment boundary, as a plain path
    return Rule(host, path, subdomains_only, re.compile(pattern, re.S), re.compile(pattern, re.S | re.I))


def within(found: Address, among: Sequence[Rule], unsure: bool) -> bool:
    return any(one.covers(found, unsure) for one in among)


def _parsed(text: str, parts: tuple[str, ...]) -> Mapping[str, Any] | None:
    parse = _parse or require()
    try:
        return parse(text, attributes=parts)
    except ValueError:  # not a URL by the WHATWG rules: a browser would not open it either
        return None


def _dns_host(host: str) -> str:
    """The host as DNS compares it: without trailing dots (`example.com.` is example.com); an IPv4-mapped IPv6
    address (`[::ffff:7f00:1]`) as the IPv4 address it reaches. ada has already lower-cased, percent-decoded and
    IDNA-encoded names, and written every IP address in its one canonical form."""
    if host.startswith("["):
        try:
            mapped = ipaddress.IPv6Address(host[1:-1]).ipv4_mapped
        except ValueError:  # not what ada writes: compared as written
            return host
        return str(mapped) if mapped is not None else host
    return host.rstrip(".")


def shown(value: Any) -> str:
    """What a wrong value is, for an error message."""
    kinds = {str: "a string", dict: "an object", list: "a list", bool: "a boolean", int: "a number", float: "a number"}
    return kinds.get(type(value), type(value).__name__)
