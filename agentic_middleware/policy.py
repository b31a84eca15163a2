"""Per-caller tool policy: which of the server's tools one request may use, and how many reruns it gets.

`tool_policy(scope) -> ToolPolicy | None` (sync or async) is the middleware's `tool_policy` option, read once per
request before anything is declared or run. The loop applies the answer in two places that every route, stream and
hook passes (asking.py): what is sent to the model app (`scoped`: a tool a hook declared that the caller may not use is
left out of the body on the wire; the hooks still see the request they made, so that their gates still claim a call
the model makes to it anyway), and the claims of the gates (`denied`: a round claiming such a call runs no plan, and
every claimed call gets an error result the model reads). Names are matched as MCP's `allowed_tools` match them
(`matches`, the one matcher of both), against the names the model sees: after an MCP `prefix`.
"""

from __future__ import annotations

import asyncio
import copy
import fnmatch
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as attribute
from types import MappingProxyType
from typing import Any

from starlette.types import Scope

from .errors import ConfigurationError
from .policy_forms import FUNCTIONS_OWN, RESPONSES, WEB_SEARCH, family, judged_names, scoped_fields, wire_form
from .policy_mcp import MCP, exposing_labels, scoped_mcp_tool
from .surfaces import Surface, ToolResult, canonical, field, part, tool_name
from .tools import ServerTools

PolicyFunction = Callable[[Scope], "ToolPolicy | Awaitable[ToolPolicy | None] | None"]

DENIED = "Not run: this caller may not use the tool {name!r}. Go on without it."
HELD_BACK = (
    "Not run: this turn also called {denied}, which this caller may not use, so none of its server calls ran. "
    "Call {name!r} again, without {denied}, if you still need it."
)
PROMPT_REFUSED = (
    "this caller's tool policy does not allow a stored prompt (`{param}`): the tools it may carry cannot be judged"
)
# The fields that name a stored prompt, whose template the app fills in with tools of its own: OpenAI Responses'
# `prompt`, and LiteLLM's prompt management on every route (`prompt_id`, with its `prompt_variables`,
# `prompt_version`, `prompt_label` and `prompt_environment`), whose template's parameters replace the request's.
LITELLM_PROMPT_FIELDS = ("prompt_id", "prompt_variables", "prompt_version", "prompt_label", "prompt_environment")


# The names a hook serves a hosted tool's family by whatever the middleware's hooks: LiteLLM's web search
# interception (`WebSearchInterceptionLogger`, in the middleware or in LiteLLM's proxy behind it) turns a client's
# native web search into the function `litellm_web_search` and runs the model's calls to it on the operator's search.
SERVED_FAMILIES: Mapping[str, str] = MappingProxyType({"litellm_web_search": WEB_SEARCH})


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether a tool name matches any of the names or shell patterns (`"get_*"`), case-sensitively: MCP's
    `allowed_tools` and `denied_tools` and the tool policy's lists are read by this one function."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def names_of(value: str | Iterable[str] | None, option: str, owner: str) -> tuple[str, ...] | None:
    """A list of names, where one string is one name (not its characters); None stays None."""
    if value is None:
        return None
    listed = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, Iterable) else None
    if listed is None or not all(isinstance(name, str) and name for name in listed):
        raise ConfigurationError(f"{owner} {option} must be a name or a list of names, got {value!r}")
    return listed


@dataclass(frozen=True)
class ToolPolicy:
    """What one caller may do with the server's tools.

    `allowed_tools`: the tool names (or shell patterns) the caller may use, None for all; `denied_tools`: those it
    may not, applied after `allowed_tools`; both name tools as the model sees them (an MCP tool with its `prefix`).
    A tool a hook serves a hosted tool's family by, under a name of its own (LiteLLM's `litellm_web_search`, the
    target of a `ServerTools(native=...)` mapping: `served`), is judged by that family as well as by its name: a
    caller denied `web_search` gets no web search under another name. `max_agentic_loops` caps the request's loop
    limit (whatever else sets it), None for no cap. `hosted_mcp`: the MCP servers the model app may connect to for
    this caller (OpenAI's `mcp` tool, Anthropic's `mcp_servers`), each label bound to its server's URL (or OpenAI
    `connector_id`), `{"docs": "https://docs.example/mcp"}`; a hosted MCP entry is judged (as `<label>_<tool>`) only
    when its label and server are bound so, else not declared, under any policy that judges names. Setting it makes
    a policy judge names. `ToolPolicy()` allows everything, as no policy does.
    """

    allowed_tools: tuple[str, ...] | None = None
    denied_tools: tuple[str, ...] | None = None
    max_agentic_loops: int | None = None
    hosted_mcp: Mapping[str, str] | None = attribute(default=None, hash=False)  # a mapping is not hashable
    # The served name -> the family it serves (`serving`); the middleware's own knowledge, not the caller's policy.
    served: Mapping[str, str] = attribute(
        default_factory=lambda: SERVED_FAMILIES, hash=False, compare=False, repr=False
    )

    def __init__(
        self,
        allowed_tools: str | Iterable[str] | None = None,
        denied_tools: str | Iterable[str] | None = None,
        max_agentic_loops: int | None = None,
        hosted_mcp: Mapping[str, str] | None = None,
    ) -> None:
        object.__setattr__(self, "allowed_tools", names_of(allowed_tools, "allowed_tools", "ToolPolicy"))
        object.__setattr__(self, "denied_tools", names_of(denied_tools, "denied_tools", "ToolPolicy") or None)
        if hosted_mcp is not None and not (
            isinstance(hosted_mcp, Mapping)
            and all(isinstance(key, str) and key and isinstance(url, str) and url for key, url in hosted_mcp.items())
        ):
            raise ConfigurationError(f"ToolPolicy hosted_mcp must map labels to server URLs, got {hosted_mcp!r}")
        object.__setattr__(self, "hosted_mcp", None if hosted_mcp is None else MappingProxyType(dict(hosted_mcp)))
        limit = max_agentic_loops
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise ConfigurationError(f"ToolPolicy max_agentic_loops must be a whole number >= 0, got {limit!r}")
        object.__setattr__(self, "max_agentic_loops", limit)
        object.__setattr__(self, "served", SERVED_FAMILIES)

    @property
    def judges_names(self) -> bool:
        """Whether some tool name may be refused (else only the loop limit is capped)."""
        return self.allowed_tools is not None or self.denied_tools is not None or self.hosted_mcp is not None

    def allows(self, name: str) -> bool:
        """Whether the caller may use the tool the model knows as `name`: by that name, and by the family of the
        hosted tool it serves when a hook serves one by it (`served`), so that both must be allowed."""
        family = self.served.get(name)
        return self._allows(name) and (family is None or self._allows(family))

    def _allows(self, name: str) -> bool:
        if self.allowed_tools is not None and not matches(name, self.allowed_tools):
            return False
        return self.denied_tools is None or not matches(name, self.denied_tools)

    def serving(self, families: Mapping[str, str]) -> ToolPolicy:
        """This policy, with the names the middleware's hooks serve a hosted tool's family by (`{"find":
        "web_search"}` for `ServerTools(native={"web_search": "find"})`) judged by that family too. The policy
        function need not know the hooks' names for a family: the middleware adds them to what it returns."""
        if not families or all(self.served.get(name) == kind for name, kind in families.items()):
            return self
        policy = copy.copy(self)
        object.__setattr__(policy, "served", MappingProxyType({**self.served, **families}))
        return policy

    def capped(self, limit: int) -> int:
        """The request's loop limit under this policy's cap."""
        return limit if self.max_agentic_loops is None else min(limit, self.max_agentic_loops)


def served_families(hooks: Iterable[object]) -> Mapping[str, str]:
    """The names the middleware's hooks serve a hosted tool's family by: each `ServerTools` hook's `native` targets
    (`native={"web_search": "find"}` serves every web search as `find`); LiteLLM's are every policy's
    (`SERVED_FAMILIES`). A
    target is a web search whether or not the client declared one natively: the model may call it either way."""
    served = {
        target: family(kind)
        for hook in hooks
        if isinstance(hook, ServerTools)
        for kind, target in hook.native.items()
        if family(kind) != target
    }
    return MappingProxyType(served)


async def policy_of(scope: Scope, function: PolicyFunction, timeout: float | None = None) -> ToolPolicy | None:
    """The policy for this request, as the function gives it. A function that raises raises; one that returns
    anything but a `ToolPolicy` or None raises TypeError; an async one that does not answer within `timeout` (the
    middleware's `hook_timeout`: it is server code asked per request, as a hook is) raises TimeoutError. The
    middleware refuses the request on each (fail closed), never running it unchecked nor leaving it hanging."""
    value: Any = function(scope)
    if inspect.isawaitable(value):
        try:
            value = await asyncio.wait_for(value, timeout)
        except TimeoutError:
            raise TimeoutError(f"timed out after hook_timeout={timeout:g} s") from None
    if value is not None and not isinstance(value, ToolPolicy):
        raise TypeError(f"the tool_policy function must return a ToolPolicy or None, got {type(value).__name__}")
    return value


def stored_prompt(route: str, body: Mapping[str, Any]) -> str | None:
    """The field of a request that names a stored prompt, if any: a template the model app fills the request in
    with, its tools included, after the policy judged it. Nothing here can read that template, so under a policy
    that judges names such a request is refused (fail closed).

    LiteLLM's proxy, which the middleware may wrap, reads `prompt_id` on every route, and merges its template's
    parameters over the request's (`tools` among them); its `prompt_variables`, `prompt_version`, `prompt_label`
    and `prompt_environment` only make sense with one, and are refused alike, present with any value but null."""
    if route == RESPONSES and body.get("prompt") is not None:
        return "prompt"
    return next((name for name in LITELLM_PROMPT_FIELDS if body.get(name) is not None), None)


def client_own(body: dict[str, Any], policy: ToolPolicy | None) -> frozenset[bytes]:
    """The client's own tool declarations in its request `body`, as they stand before any hook runs: the ones
    `scoped` leaves declared (its `tools`, and its legacy `functions` on Chat, marked apart).

    Taken as bytes when the request arrives, not read from its `tools` later: a hook that appends a tool to that very
    list, or renames one of its tools in place, must not make the tool the client's own (and so pass the policy)."""
    if policy is None or not policy.judges_names:
        return _NOTHING_OWN
    tools, functions = body.get("tools"), body.get("functions")
    own = frozenset(map(canonical, tools)) if isinstance(tools, list) else _NOTHING_OWN
    if isinstance(functions, list):
        own |= {FUNCTIONS_OWN + canonical(entry) for entry in functions}
    return own


_NOTHING_OWN: frozenset[bytes] = frozenset()  # one for every request without a policy: `frozenset()` makes a new one
_NO_SERVERS: Mapping[str, str] = MappingProxyType({})  # no hosted MCP server bound: none declared
_NO_LABELS: frozenset[str] = frozenset()


def scoped(surface: Surface, body: dict[str, Any], own: frozenset[bytes], policy: ToolPolicy) -> dict[str, Any]:
    """The body as it goes to the model app: without the tools declared in it that the caller may not use.

    A tool the client declared itself (one equal to a declaration of `own`, its request's tools as they arrived:
    `client_own`) in its route's client-tool shape stays: the client runs it, not the server. Any other goes unless
    every name it is judged by is allowed (`policy_forms.judged_names`: a hosted tool the app runs is judged though
    the client sent it; a `namespace` by every tool in it); one with no name the policy can match (none, two that
    disagree, a form out of its route's shape) cannot be judged, and goes (fail closed). A hosted MCP server stays
    only with the tools the caller may use listed, written as a plain list (`policy_mcp`). So do the tools declared
    outside `tools` (`scoped_fields`). When no tool is left, `tools` goes, and `tool_choice` with it (an API refuses
    either without tools).
    """
    if not policy.judges_names:
        return body
    route = surface.name
    hosted = policy.hosted_mcp or _NO_SERVERS
    tools = body.get("tools")
    forms = [wire_form(tool) for tool in tools] if isinstance(tools, list) else []
    labels = exposing_labels(forms, body.get("mcp_servers"), hosted) if hosted else _NO_LABELS
    body = scoped_fields(route, body, own, policy.allows, hosted, labels)
    if tools is None:
        return body
    kept, changed = [], not isinstance(tools, list)
    for tool, form in zip(tools if isinstance(tools, list) else (), forms, strict=True):
        if part(form, "type") == MCP:
            written = scoped_mcp_tool(form, hosted, labels, policy.allows)
            if written is not None:
                kept.append(tool if written is form else written)
            changed |= written is not form
            continue
        names = judged_names(route, form, hosted, bool(own) and canonical(tool) in own)
        if names is not None and all(map(policy.allows, names)):
            kept.append(tool)
        else:
            changed = True
    if not changed:
        return body
    if kept:
        return {**body, "tools": kept}
    return {name: value for name, value in body.items() if name not in ("tools", "tool_choice")}


def claimed_names(claim: Any) -> list[str] | None:
    """The tool names of a gate's claim (its `tool_calls`, as LiteLLM's hooks name them); None when the claim does
    not give every call it makes one name (`tool_name`: none, or a `name` and a `function.name` that disagree), so
    that the policy cannot judge it."""
    calls = field(claim, "tool_calls")
    if not isinstance(calls, list | tuple) or not calls:
        return None
    names = []
    for call in calls:
        name = tool_name(call)
        if name is None:
            return None
        names.append(name)
    return names


def denied_results(surface: Surface, claimed: list[dict[str, Any]], policy: ToolPolicy) -> list[ToolResult]:
    """The error results of a round whose claim holds a call the caller may not use: each such call is refused, and
    the others of the claim are held back with it (the hook's plan runs the claim whole, or not at all). A call
    without one name is refused too: no name it has is one the policy allowed."""
    names = [surface.call_name(call) for call in claimed]
    refused = {index for index, name in enumerate(names) if name is None or not policy.allows(name)}
    denied = ", ".join(sorted({repr(names[index]) for index in refused}))
    return [
        ToolResult(
            DENIED.format(name=name) if index in refused else HELD_BACK.format(denied=denied, name=name),
            True,
        )
        for index, name in enumerate(names)
    ]
