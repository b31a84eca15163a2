"""Which names the tool policy judges each form of tool by, on each route (docs/security.md#per-caller-tool-policy).

A tool is declared in more forms than a function: a tool the model app itself runs (OpenAI's hosted `web_search`,
`mcp`, `file_search`...; Anthropic's `web_search_20250305`), a whole MCP server the app connects to (Anthropic's
`mcp_servers`), Chat's legacy `functions` and `web_search_options`. Each is judged here by names a policy can match,
or, where no name can be read (an MCP server without a list of its tools, a name given twice), not declared at all
under a policy that judges names: a form the policy cannot look at is refused, never passed unjudged. Only the
client's own function and custom tools, which the client runs itself, stay declared whatever their names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from .payload import dumps
from .surfaces import canonical, part, tool_name

CHAT = "chat_completions"
MESSAGES = "messages"
RESPONSES = "responses"
FUNCTIONS_OWN = b"functions:"  # what sets a client's legacy `functions` entry apart from its `tools` in `client_own`
WEB_SEARCH = "web_search"  # the name every web search form is judged by: the shipped search's, Anthropic's


def wire_form(tool: Any) -> Any:
    """The tool as the model app is sent it: a plain dict as it is; anything else (a hook's pydantic model, a
    `MappingProxyType`, a dict holding one) as `dumps` writes it, read back, so that its names are read as the app
    will read them, not as an attribute that may be spelled otherwise. None: it cannot be written (nor judged)."""
    if isinstance(tool, dict) and all(type(part(tool, key)) in _PLAIN for key in ("function", "custom")):
        return tool
    try:
        return orjson.loads(dumps(tool))
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return None


_PLAIN = (dict, type(None))


def client_runs(route: str, tool: Any) -> bool:
    """Whether the client runs a tool of this form itself (a function or custom tool; Messages' untyped tools): the
    only forms a client's own declaration of keeps. Every typed tool of Messages, and any tool of the OpenAI routes
    of another type, is one the app may run, on the operator's account: judged by name though the client sent it."""
    kind = part(tool, "type")
    return kind is None or kind == "custom" or (kind == "function" and route != MESSAGES)


def judged_names(route: str, tool: Any, hosted_mcp: Mapping[str, str]) -> tuple[str, ...] | None:
    """The names a tool must all be allowed by to be declared; None when it has none the policy can match.

    One reading for every route, so that a form is judged alike wherever it is sent. A function or custom tool the
    client runs, by its one name (`tool_name`). Any other, a tool the app may run, by its type's family (`family`:
    `web_search` for every hosted web search, `web_fetch` for `web_fetch_20250910`), and by its `name` too when it
    carries one (Anthropic's server tools, which LiteLLM also takes on Chat); an `mcp` tool by each of its
    `allowed_tools` behind its `server_label` (`docs_define` for the tool `define` of `docs`, as
    `MCPTools(prefix="docs")` names its tools), only when that label is bound to the very server the tool connects to
    (`hosted_mcp`: the label is the client's to choose, the server is not)."""
    if client_runs(route, tool):
        name = tool_name(tool)
        return None if name is None else (name,)
    kind = part(tool, "type")
    if not isinstance(kind, str) or not kind:
        return None
    kind = family(kind)
    if kind == "mcp_toolset":  # Anthropic's: a server's tools by its per-tool configs, not read here (fail closed)
        return None
    if kind == "mcp":
        allowed = part(tool, "allowed_tools")
        if isinstance(allowed, Mapping):  # the filter form, `{"tool_names": [...], "read_only": true}`
            allowed = part(allowed, "tool_names")
        label = part(tool, "server_label")
        return mcp_names(label, allowed) if bound(hosted_mcp, label, _server_of(tool)) else None
    name = tool_name(tool)
    if name is None:
        named = part(tool, "name") is not None or any(
            part(tool, holder) is not None for holder in ("function", "custom")
        )
        return None if named else (kind,)  # names that disagree: no one's (fail closed)
    return (kind,) if name == kind else (kind, name)


_DATED = re.compile(r"_(?:\d{8}|\d{4}_\d{2}_\d{2})$")  # `_20250305` (Anthropic), `_2025_08_26` (OpenAI)


def family(kind: str) -> str:
    """The one name a typed tool's family is judged by, whichever version the client asks for: its type without a
    date (`web_fetch_20250910` is `web_fetch`, `code_execution_20250825` is `code_execution`), and every web search
    (`web_search_preview`, `web_search_preview_2025_03_11`, `web_search_20250305`) as `web_search`, the name of the
    shipped search and of Anthropic's."""
    kind = _DATED.sub("", kind)
    return WEB_SEARCH if kind == WEB_SEARCH or kind.startswith(f"{WEB_SEARCH}_") else kind


def _server_of(tool: Any) -> Any:
    """The server a hosted `mcp` tool connects to: its `server_url`, or its `connector_id` (OpenAI's connectors);
    None when it gives both or neither, which no binding matches."""
    url, connector = part(tool, "server_url"), part(tool, "connector_id")
    return None if (url is None) == (connector is None) else url if url is not None else connector


def bound(hosted_mcp: Mapping[str, str], label: Any, server: Any) -> bool:
    """Whether the operator bound this label to this server (`ToolPolicy(hosted_mcp={label: url})`), compared as
    strings exactly: a URL spelled otherwise (a trailing `/`, another case) is another server, refused."""
    return isinstance(label, str) and isinstance(server, str) and hosted_mcp.get(label) == server


def mcp_names(label: Any, tools: Any) -> tuple[str, ...] | None:
    """The names of an MCP server's tools as the policy judges them, `<label>_<tool>`; None when its label or the
    list of its tools is not given (all its tools, which no one here can name)."""
    if not isinstance(label, str) or not label or not isinstance(tools, list):
        return None
    if not all(isinstance(name, str) and name for name in tools):
        return None
    return tuple(f"{label}_{name}" for name in tools)


def _mcp_server_names(server: Any, hosted_mcp: Mapping[str, str]) -> tuple[str, ...] | None:
    """Anthropic's `mcp_servers` entry, when its `name` is bound to its `url`: its `tool_configuration.allowed_tools`
    behind its `name`; none with its tools turned off (`enabled: false`)."""
    if not bound(hosted_mcp, part(server, "name"), part(server, "url")):
        return None
    config = part(server, "tool_configuration")
    if config is not None and part(config, "enabled") is False:
        return ()
    return mcp_names(part(server, "name"), None if config is None else part(config, "allowed_tools"))


def scoped_fields(
    route: str,
    body: dict[str, Any],
    own: frozenset[bytes],
    allows: Callable[[str], bool],
    hosted_mcp: Mapping[str, str],
) -> dict[str, Any]:
    """The body without the tools it declares outside `tools` that the caller may not use: Chat's legacy `functions`
    (a client's own entry stays, as its own tools do; `function_call` goes with the last), its `web_search_options`
    (the app's web search, judged as `web_search`), Anthropic's `mcp_servers`. The body itself when none goes."""
    dropped: dict[str, Any] = {}
    if route == CHAT:
        functions = body.get("functions")
        if functions is not None:
            kept = [
                entry
                for entry in (functions if isinstance(functions, list) else ())
                if (own and FUNCTIONS_OWN + canonical(entry) in own) or _allowed((tool_name(wire_form(entry)),), allows)
            ]
            if not isinstance(functions, list) or len(kept) != len(functions):
                dropped.update({"functions": kept} if kept else {"functions": None, "function_call": None})
        if "web_search_options" in body and not allows(WEB_SEARCH):
            dropped["web_search_options"] = None
    elif route == MESSAGES and "mcp_servers" in body:
        servers = body["mcp_servers"]
        kept = [
            s
            for s in (servers if isinstance(servers, list) else ())
            if _allowed(_mcp_server_names(s, hosted_mcp), allows)
        ]
        if not isinstance(servers, list) or len(kept) != len(servers):
            dropped["mcp_servers"] = kept or None
    if not dropped:
        return body
    changed = {**body, **dropped}
    return {key: value for key, value in changed.items() if not (key in dropped and dropped[key] is None)}


def _allowed(names: tuple[str | None, ...] | None, allows: Callable[[str], bool]) -> bool:
    return names is not None and all(name is not None and allows(name) for name in names)
