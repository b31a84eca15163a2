"""Hosted MCP servers under the tool policy: which a request may declare, and with which of their tools
(docs/security.md#per-caller-tool-policy).

A hosted MCP server is one the model app connects to itself (OpenAI's `mcp` tool, Anthropic's `mcp_servers`), so
what it exposes is read by the app, not here. Its list of tools is the only restriction the policy can put on it, and
apps read that list differently: LiteLLM's proxy takes an empty list for all of a server's tools, ignores the filter
form (`{"tool_names": [...]}`) and so exposes all of them, and applies the names of every `mcp` tool of a request to
each of its servers. So a bound server is declared only with a list that names tools, written as the plain list of
the names the caller may use on every hosted server of the request: whichever of these readings the app makes, it
exposes no tool the policy did not allow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .surfaces import part

MCP = "mcp"


def bound(hosted_mcp: Mapping[str, str], label: Any, server: Any) -> bool:
    """Whether the operator bound this label to this server (`ToolPolicy(hosted_mcp={label: url})`), compared as
    strings exactly: a URL spelled otherwise (a trailing `/`, another case) is another server, refused."""
    return isinstance(label, str) and isinstance(server, str) and hosted_mcp.get(label) == server


def server_of(tool: Any) -> Any:
    """The server a hosted `mcp` tool connects to: its `server_url`, or its `connector_id` (OpenAI's connectors);
    None when it gives both or neither, which no binding matches."""
    url, connector = part(tool, "server_url"), part(tool, "connector_id")
    return None if (url is None) == (connector is None) else url if url is not None else connector


def names_listed(tools: Any) -> list[str] | None:
    """The tool names of a server's list, as given; None when it names none (no list, an empty one: all of a server's
    tools to LiteLLM's proxy, which no one here can name) or holds anything but names."""
    if not isinstance(tools, list) or not tools or not all(isinstance(name, str) and name for name in tools):
        return None
    return tools


def mcp_names(label: Any, tools: Any) -> tuple[str, ...] | None:
    """The names of an MCP server's tools as the policy judges them, `<label>_<tool>` (as `MCPTools(prefix=label)`
    names its tools); None when its label or a list naming its tools is not given."""
    listed = names_listed(tools)
    if not isinstance(label, str) or not label or listed is None:
        return None
    return tuple(f"{label}_{name}" for name in listed)


def tool_listed(tool: Any, hosted_mcp: Mapping[str, str]) -> tuple[str, list[str]] | None:
    """An `mcp` tool's label and the tools it lists (a list, or the filter form's `tool_names`), when the label is
    bound to the very server the tool connects to and the list names tools; else None: not declared."""
    label = part(tool, "server_label")
    if not bound(hosted_mcp, label, server_of(tool)):
        return None
    allowed = part(tool, "allowed_tools")
    if isinstance(allowed, Mapping):  # the filter form, `{"tool_names": [...], "read_only": true}`
        allowed = part(allowed, "tool_names")
    listed = names_listed(allowed)
    return None if listed is None else (label, listed)


def server_listed(server: Any, hosted_mcp: Mapping[str, str]) -> tuple[str, list[str] | None] | None:
    """Anthropic's `mcp_servers` entry, when its `name` is bound to its `url`: its name and its
    `tool_configuration.allowed_tools`, or None for the list when its tools are turned off (`enabled: false`, kept as
    sent: it exposes none); None for an entry not bound, or one whose list names no tool."""
    label = part(server, "name")
    if not bound(hosted_mcp, label, part(server, "url")):
        return None
    config = part(server, "tool_configuration")
    if config is not None and part(config, "enabled") is False:
        return label, None
    listed = names_listed(None if config is None else part(config, "allowed_tools"))
    return None if listed is None else (label, listed)


def exposing_labels(tools: list[Any], servers: Any, hosted_mcp: Mapping[str, str]) -> frozenset[str]:
    """The labels of the hosted MCP servers a request would declare with tools (its `mcp` tools, `tools` as the app
    is sent them; Anthropic's `mcp_servers`): the servers an app that applies every list to every server applies
    each name to."""
    labels = set()
    for tool in tools:
        if part(tool, "type") == MCP and (listed := tool_listed(tool, hosted_mcp)) is not None:
            labels.add(listed[0])
    for server in servers if isinstance(servers, list) else ():
        if (entry := server_listed(server, hosted_mcp)) is not None and entry[1] is not None:
            labels.add(entry[0])
    return frozenset(labels)


def narrowed(names: list[str], labels: frozenset[str], allows: Callable[[str], bool]) -> list[str]:
    """The names of a server's list the caller may use on every server of `labels` (`<label>_<name>`, each): what an
    app that applies the request's lists to each of its servers may expose, never beyond the policy."""
    return [name for name in names if all(allows(f"{label}_{name}") for label in labels)]


def scoped_mcp_tool(
    tool: Any, hosted_mcp: Mapping[str, str], labels: frozenset[str], allows: Callable[[str], bool]
) -> Any:
    """An `mcp` tool as the app is sent it: itself when its list is already the plain list the caller may use, else
    a copy with `allowed_tools` written so; None when it is not declared (not bound, no tool named or allowed)."""
    listed = tool_listed(tool, hosted_mcp)
    if listed is None:
        return None
    names = narrowed(listed[1], labels | {listed[0]}, allows)
    if not names:
        return None
    return tool if part(tool, "allowed_tools") == names else {**tool, "allowed_tools": names}


def scoped_mcp_server(
    server: Any, hosted_mcp: Mapping[str, str], labels: frozenset[str], allows: Callable[[str], bool]
) -> Any:
    """An `mcp_servers` entry as the app is sent it, as `scoped_mcp_tool` writes an `mcp` tool (its
    `tool_configuration.allowed_tools`); an entry with its tools turned off stays as sent when bound."""
    entry = server_listed(server, hosted_mcp)
    if entry is None:
        return None
    label, listed = entry
    if listed is None:
        return server
    names = narrowed(listed, labels | {label}, allows)
    if not names:
        return None
    if names == listed:
        return server
    config = part(server, "tool_configuration")
    return {**server, "tool_configuration": {**config, "allowed_tools": names}}
