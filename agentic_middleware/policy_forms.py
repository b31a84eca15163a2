"""Which names the tool policy judges each form of tool by, on each route (docs/security.md#per-caller-tool-policy).

A tool is declared in more forms than a function: a tool the model app itself runs (OpenAI's hosted `web_search`,
`mcp`, `file_search`...; Anthropic's `web_search_20250305`; to LiteLLM, Gemini's `{"googleSearch": {}}`), a whole
MCP server the app connects to (Anthropic's `mcp_servers`, policy_mcp.py), a `namespace` of tools, Chat's legacy
`functions` and `web_search_options`. Each is judged here by names a policy can match, or, where no name can be read
(an MCP server without a list of its tools, a name given twice, a form out of every shape read here), not declared at
all under a policy that judges names: a form the policy cannot look at is refused, never passed unjudged. Only the
client's own tools in their route's client-tool shape, which the client runs itself, stay declared whatever their
names: a shape read by its keys, so that a declaration an app may read as its own tool is never taken for one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from operator import is_not
from typing import Any

import orjson

from .payload import dumps
from .policy_mcp import MCP, mcp_names, scoped_mcp_server, tool_listed
from .surfaces import canonical, part, tool_name

CHAT = "chat_completions"
MESSAGES = "messages"
RESPONSES = "responses"
FUNCTIONS_OWN = b"functions:"  # what sets a client's legacy `functions` entry apart from its `tools` in `client_own`
WEB_SEARCH = "web_search"  # the name every web search form is judged by: the shipped search's, Anthropic's
LITELLM_WEB_SEARCH = "litellm_web_search"  # the function LiteLLM's web search interception serves a search by


def wire_form(tool: Any) -> Any:
    """The tool as the model app is sent it: a plain dict as it is; anything else (a hook's pydantic model, a
    `MappingProxyType`, a dict holding one) as `dumps` writes it, read back, so that its names are read as the app
    will read them, not as an attribute that may be spelled otherwise. None: it cannot be written (nor judged)."""
    members = dict.get(tool, "tools") if isinstance(tool, dict) else None  # a namespace's
    if _plain(tool) and (members is None or (type(members) is list and all(map(_plain, members)))):
        return tool
    try:
        return orjson.loads(dumps(tool))
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return None


_PLAIN = (dict, type(None))


def _plain(tool: Any) -> bool:
    return isinstance(tool, dict) and all(type(dict.get(tool, key)) in _PLAIN for key in ("function", "custom"))


NAMESPACE = "namespace"  # OpenAI's grouping of tools (Codex's `multi_agent_v1`), which LiteLLM takes on Chat too

# What a tool of the client's own may carry beside its declaration: marks that change how the same tool is cached,
# loaded, streamed or called (Claude Code's `defer_loading`, Codex's `strict`), none another tool.
CLIENT_MARKS = frozenset(
    {"cache_control", "defer_loading", "strict", "input_examples", "eager_input_streaming", "allowed_callers"}
)
# Each route's client-tool shapes, by type: the part it must hold as an object (None: none beyond its one name), and
# every key it may have. The only forms a client's own declaration of stays declared whatever its name.
_ANTHROPIC_TOOL = ("input_schema", CLIENT_MARKS | {"type", "name", "description", "input_schema"})
_CLIENT_SHAPES: dict[tuple[str, Any], tuple[str | None, frozenset[str]]] = {
    (CHAT, "function"): ("function", CLIENT_MARKS | {"type", "function"}),
    (CHAT, "custom"): ("custom", CLIENT_MARKS | {"type", "custom"}),
    (MESSAGES, None): _ANTHROPIC_TOOL,
    (MESSAGES, "custom"): _ANTHROPIC_TOOL,
    # `output_schema`, `async`: what the client's function returns and whether it answers later (the SDK's
    # `FunctionToolParam`), the same tool's.
    (RESPONSES, "function"): (
        None,
        CLIENT_MARKS | {"type", "name", "description", "parameters", "function", "output_schema", "async"},
    ),
    (RESPONSES, "custom"): (None, CLIENT_MARKS | {"type", "name", "description", "format", "custom", "async"}),
}
_LEGACY_KEYS = frozenset({"name", "description", "parameters"}) | CLIENT_MARKS  # a Chat legacy `functions` entry
_NAMESPACE_KEYS = frozenset({"type", "name", "description", "tools"}) | CLIENT_MARKS
# Keys an app reads as a tool of a provider's own wherever they stand in a declaration: LiteLLM's Gemini mapping
# reads the one key a tool has beside `type` as Google's (`googleSearch`: a search, on the operator's account), and
# its Bedrock mapping passes any tool holding `systemTool` or `toolSpec` on as Bedrock's own. A tool holding one is
# a form nothing here can read: not declared under a policy that judges names, whatever its type.
PROVIDER_TOOL_KEYS = frozenset(
    {
        "googleSearch",
        "google_search",
        "googleSearchRetrieval",
        "google_search_retrieval",
        "enterpriseWebSearch",
        "enterprise_web_search",
        "urlContext",
        "url_context",
        "codeExecution",
        "code_execution",
        "googleMaps",
        "google_maps",
        "computerUse",
        "computer_use",
        "systemTool",
        "toolSpec",
    }
)


def client_shaped(route: str, tool: Any) -> bool:
    """Whether a tool has its route's client-tool shape: Chat, a `function` (or `custom`) object holding its name;
    Messages, a `name` and an `input_schema`, untyped or `custom`; Responses, a `function` or `custom` tool by its
    name; each with no key beyond its declaration's and `CLIENT_MARKS`. Only such a tool is one the client runs
    itself: any other (untyped on the OpenAI routes, a function beside another key, `{"googleSearch": {}}`) may be a
    tool the app runs, on the operator's account, and is judged as one, or not declared (fail closed)."""
    kind = part(tool, "type") if isinstance(tool, Mapping) else None
    if not isinstance(tool, Mapping) or not isinstance(kind, str | None):  # `{"type": []}` is no shape's (nor hashable)
        return False
    shape = _CLIENT_SHAPES.get((route, kind))
    if shape is None or not shape[1].issuperset(tool):
        return False
    holder, _keys = shape
    if holder is not None and not isinstance(part(tool, holder), Mapping):
        return False
    return tool_name(tool) is not None and (holder != "input_schema" or isinstance(part(tool, "name"), str))


def litellm_searches(tool: Any) -> bool:
    """Whether LiteLLM's web search interception (`WebSearchInterceptionLogger`, in the middleware or in LiteLLM's
    proxy behind it) would take the declaration for a web search, which it rewrites as `litellm_web_search` and
    runs on the operator's search account. It reads, on any route: a tool named `litellm_web_search` (Anthropic's
    shape, or a Chat function by that name), Claude Code's `web_search` with any type (`custom` too), the legacy
    marker `WebSearch` without an `input_schema`, and (as `family` already reads) every `web_search*` type. Such a
    declaration is judged as `web_search` even in a client's own shape: the client does not run it, the app does."""
    if not isinstance(tool, Mapping):
        return False
    kind, name = part(tool, "type"), part(tool, "name")
    if kind == "function" and part(part(tool, "function"), "name") == LITELLM_WEB_SEARCH:
        return True
    if name == LITELLM_WEB_SEARCH or (name == WEB_SEARCH and bool(kind)):
        return True
    return name == "WebSearch" and "input_schema" not in tool


def legacy_shaped(entry: Any) -> bool:
    """Whether a Chat legacy `functions` entry is a function declaration (its `name`, `description`, `parameters`):
    the only form of one that is declared under a policy that judges names."""
    name = part(entry, "name")
    return isinstance(entry, Mapping) and _LEGACY_KEYS.issuperset(entry) and isinstance(name, str) and bool(name)


def judged_names(route: str, tool: Any, hosted_mcp: Mapping[str, str], own: bool = False) -> tuple[str, ...] | None:
    """The names a tool must all be allowed by to be declared; None when it has none the policy can match, and none
    to judge (`()`) for a tool of the client's own (`own`: the client sent it so) in its route's client-tool shape.

    One reading for every route, so that a form is judged alike wherever it is sent. A tool in its route's
    client-tool shape (`client_shaped`), by its one name (`tool_name`). A `namespace`, by every tool nested in it
    (read as on Responses; another namespace or a hosted MCP server nested in it is not read: fail closed). Any other
    typed tool, one the app may run, by its type's family (`family`: `web_search` for every hosted web search,
    `web_fetch` for `web_fetch_20250910`), and by its `name` too when it carries one (Anthropic's server tools, which
    LiteLLM also takes on Chat); an `mcp` tool by each of its `allowed_tools` behind its `server_label`
    (`docs_define` for the tool `define` of `docs`, as `MCPTools(prefix="docs")` names its tools), only when that
    label is bound to the very server the tool connects to (`hosted_mcp`: the label is the client's to choose, the
    server is not). None for every other form: untyped, or a function or custom tool out of its route's shape, or one
    holding a key an app reads as a provider's own tool (`PROVIDER_TOOL_KEYS`)."""
    kind = part(tool, "type")
    if kind == NAMESPACE:
        return _nested_names(tool, hosted_mcp, own)
    if litellm_searches(tool):  # the operator's search, whoever declared it and in whichever shape
        if not PROVIDER_TOOL_KEYS.isdisjoint(tool):
            return None
        name = tool_name(tool)  # None: names that disagree, no one's (fail closed)
        return None if name is None else (WEB_SEARCH,) if name == WEB_SEARCH else (WEB_SEARCH, name)
    if client_shaped(route, tool):
        return () if own else (tool_name(tool) or "",)  # a client-shaped tool has one name
    if not isinstance(kind, str) or not kind or kind in ("function", "custom") or not isinstance(tool, Mapping):
        return None
    if not PROVIDER_TOOL_KEYS.isdisjoint(tool):
        return None
    kind, raw = family(kind), kind
    if kind == "mcp_toolset":  # Anthropic's: a server's tools by its per-tool configs, not read here (fail closed)
        return None
    if kind == MCP:  # only as `mcp` itself, the one type whose list policy_mcp writes (a dated one is not read)
        listed = tool_listed(tool, hosted_mcp) if raw == MCP else None
        return None if listed is None else mcp_names(*listed)
    name = tool_name(tool)
    if name is None:
        named = part(tool, "name") is not None or any(
            part(tool, holder) is not None for holder in ("function", "custom")
        )
        return None if named else (kind,)  # names that disagree: no one's (fail closed)
    return (kind,) if name == kind else (kind, name)


def _nested_names(tool: Any, hosted_mcp: Mapping[str, str], own: bool) -> tuple[str, ...] | None:
    """A namespace's names: those of every tool nested in it, which LiteLLM lifts out into the request's own tools
    (a nested tool of the client's own, in Responses' shape, has none to judge); None when it holds no list of tools,
    a key beyond a namespace's, or a nested form nothing here reads (a namespace, a hosted MCP server)."""
    members = part(tool, "tools")
    if not isinstance(tool, Mapping) or not _NAMESPACE_KEYS.issuperset(tool) or not isinstance(members, list):
        return None
    names: list[str] = []
    for member in members:
        kind = part(member, "type")
        if kind == NAMESPACE or (isinstance(kind, str) and family(kind) in (MCP, "mcp_toolset")):
            return None
        judged = judged_names(RESPONSES, member, hosted_mcp, own)
        if judged is None:
            return None
        names += judged
    return tuple(names) if members else None


_DATED = re.compile(r"_(?:\d{8}|\d{4}_\d{2}_\d{2})$")  # `_20250305` (Anthropic), `_2025_08_26` (OpenAI)


def family(kind: str) -> str:
    """The one name a typed tool's family is judged by, whichever version the client asks for: its type without a
    date (`web_fetch_20250910` is `web_fetch`, `code_execution_20250825` is `code_execution`), and every web search
    (`web_search_preview`, `web_search_preview_2025_03_11`, `web_search_20250305`) as `web_search`, the name of the
    shipped search and of Anthropic's."""
    kind = _DATED.sub("", kind)
    return WEB_SEARCH if kind == WEB_SEARCH or kind.startswith(f"{WEB_SEARCH}_") else kind


def scoped_fields(
    route: str,
    body: dict[str, Any],
    own: frozenset[bytes],
    allows: Callable[[str], bool],
    hosted_mcp: Mapping[str, str],
    labels: frozenset[str],
) -> dict[str, Any]:
    """The body without the tools it declares outside `tools` that the caller may not use: Chat's legacy `functions`
    (a client's own entry in a function's shape stays, as its own tools do; `function_call` goes with the last), its
    `web_search_options` (the app's web search, judged as `web_search`), Anthropic's `mcp_servers` (each as
    `policy_mcp.scoped_mcp_server` writes it, `labels` the request's hosted MCP servers). The body itself when none
    changes."""
    changed: dict[str, Any] = {}
    if route == CHAT:
        functions = body.get("functions")
        if functions is not None:
            kept = [
                entry
                for entry in (functions if isinstance(functions, list) else ())
                if _legacy_kept(entry, wire_form(entry), own, allows)
            ]
            if not isinstance(functions, list) or len(kept) != len(functions):
                changed.update({"functions": kept} if kept else {"functions": None, "function_call": None})
        if "web_search_options" in body and not allows(WEB_SEARCH):
            changed["web_search_options"] = None
    elif route == MESSAGES and "mcp_servers" in body:
        servers = body["mcp_servers"]
        written = []
        for server in servers if isinstance(servers, list) else ():
            form = wire_form(server)
            scoped = scoped_mcp_server(form, hosted_mcp, labels, allows)
            if scoped is not None:
                written.append(server if scoped is form else scoped)
        if not isinstance(servers, list) or len(written) != len(servers) or any(map(is_not, written, servers)):
            changed["mcp_servers"] = written or None
    if not changed:
        return body
    merged = {**body, **changed}
    return {key: value for key, value in merged.items() if not (key in changed and changed[key] is None)}


def _legacy_kept(entry: Any, form: Any, own: frozenset[bytes], allows: Callable[[str], bool]) -> bool:
    """Whether a legacy `functions` entry stays: in a function's shape, and the client's own or allowed by name."""
    if not legacy_shaped(form):
        return False
    return (bool(own) and FUNCTIONS_OWN + canonical(entry) in own) or allows(form["name"])
