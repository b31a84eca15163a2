"""One server tool: a function declared with `@server_tool` (name, description, schema), run once per call with its
timeout, its result written as the text the model reads. tools.py's `ServerTools` hook serves a list of them.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, overload

import orjson

from .concurrency import awaitable
from .errors import ConfigurationError
from .native import NativeOptions
from .payload import unread_input
from .schema import description_of, fitted, function_schema
from .surfaces import ToolResult, surfaces
from .tool_results import images_checked

logger = logging.getLogger("agentic_middleware")

# A tool function that declares this parameter gets the request's `logging_obj`: per-request state lives there.
REQUEST_PARAMETER = "logging_obj"
# A tool function that declares this parameter gets the client's native tool options (`NativeOptions`, or None).
NATIVE_PARAMETER = "native_options"


@dataclass(frozen=True)
class ServerTool:
    """A function the server runs when the model calls the tool `name`.

    An `async def` runs on the event loop; a plain `def` runs in a worker thread, so that it holds up no
    other request and its timeout applies (past it the model reads a timeout error; the thread runs on
    to its end and its result is dropped).
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    function: Callable[..., Any]
    timeout: float | None = None
    run: Callable[..., Awaitable[Any]] = field(init=False, repr=False, compare=False)
    wants_request: bool = field(init=False, repr=False, compare=False)
    wants_native: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "run", awaitable(self.function))
        parameters = inspect.signature(self.function).parameters
        object.__setattr__(self, "wants_request", REQUEST_PARAMETER in parameters)
        object.__setattr__(self, "wants_native", NATIVE_PARAMETER in parameters)

    async def __call__(
        self, arguments: Any, timeout: float, logging_obj: Any, native: NativeOptions | None = None
    ) -> ToolResult:
        """Run once; a failure or a timeout becomes an error result the model can read."""
        unread = unread_input(arguments)
        if unread is not None or not isinstance(arguments, dict):
            written = unread if unread is not None else arguments if isinstance(arguments, str) else None
            if written is None:
                written = orjson.dumps(arguments, default=repr).decode()
            return ToolResult(f"{self.name} needs a JSON object of arguments, got {written!r}", True)
        if self.wants_request:
            arguments = {**arguments, REQUEST_PARAMETER: logging_obj}
        if self.wants_native:
            arguments = {**arguments, NATIVE_PARAMETER: native}
        try:
            async with asyncio.timeout(self.timeout or timeout):
                result = await self.run(**arguments)
        except TimeoutError:
            return ToolResult(f"{self.name} timed out after {self.timeout or timeout:g} s", True)
        except Exception as error:
            logger.warning("server tool %s failed: %s: %s", self.name, type(error).__name__, error)
            return ToolResult(f"{self.name} failed: {type(error).__name__}: {error}", True)
        try:
            if isinstance(result, ToolResult):  # its content too: a tool may build one from any value
                return images_checked(result._replace(content=text_of(result.content)), self.name)
            return ToolResult(text_of(result))
        except Exception as error:  # a value no JSON can hold (a dict that contains itself), or a `str` that raised
            why = str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
            logger.warning("server tool %s returned a result that is not JSON: %s", self.name, why)
            return ToolResult(f"{self.name} failed: its result cannot be written as JSON ({why})", True)


def text_of(result: Any) -> str:
    """A tool's result as the text the model reads: a string as it is, anything else as JSON.

    The JSON is Python's, where orjson's stricter one refuses: integers past 64 bits stay exact, keys that are not
    strings are written as strings, nesting deeper than orjson's 254 levels is kept; anything else that is not JSON is
    written as its `str`. A lone surrogate (which UTF-8 cannot carry, so no body could) becomes U+FFFD. Raises
    ValueError for a value no JSON can hold (one that contains itself, or nesting past Python's recursion limit).
    """
    if isinstance(result, str):
        return result if _utf8(result) else _replace_surrogates(result)
    try:
        text = orjson.dumps(result, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError: an integer past 64 bits, deep nesting, a cycle, a lone surrogate
        pass
    else:
        # orjson writes NaN and the infinities as null, which would tell the model a value is missing: Python's
        # json writes them as NaN and Infinity. Only a result whose JSON holds a null can hold one.
        if "null" not in text or not _has_non_finite(result):
            return text
    try:
        text = json.dumps(result, default=str, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except TypeError as error:  # keys json cannot write either (a tuple)
        raise ValueError(str(error)) from None
    return text if _utf8(text) else _replace_surrogates(text)


def _has_non_finite(value: Any) -> bool:
    """Whether a value orjson could write holds a float NaN or infinity (in its dicts, lists and tuples)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def _utf8(text: str) -> bool:
    """Whether UTF-8 can carry the text (no lone surrogate): the bytes of a body must be UTF-8."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _replace_surrogates(text: str) -> str:
    # Through UTF-16, a surrogate pair becomes its character again; a lone surrogate becomes U+FFFD.
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


@overload
def server_tool(function: Callable[..., Any], /) -> ServerTool: ...
@overload
def server_tool(
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
    timeout: float | None = None,
) -> Callable[[Callable[..., Any]], ServerTool]: ...
def server_tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
    timeout: float | None = None,
) -> ServerTool | Callable[[Callable[..., Any]], ServerTool]:
    """Declare a function as a server tool; name, description and schema default to the function's own."""

    def declare(function: Callable[..., Any]) -> ServerTool:
        return ServerTool(
            name=name or function.__name__,
            description=description or description_of(function),
            input_schema=input_schema or function_schema(function, frozenset((REQUEST_PARAMETER, NATIVE_PARAMETER))),
            function=function,
            timeout=timeout,
        )

    return declare if function is None else declare(function)


def as_server_tool(tool: object) -> ServerTool:
    """A tool as `ServerTools` serves it: a declaration as it is, a plain function declared with the defaults."""
    if isinstance(tool, ServerTool):
        return tool
    if inspect.isroutine(tool):
        return server_tool(tool)
    raise ConfigurationError(
        f"ServerTools takes functions or tools declared with @server_tool, got {type(tool).__name__}: {tool!r}"
    )


def warn_long_descriptions(tools: Iterable[ServerTool]) -> None:
    """Say which descriptions a route's provider would refuse, and so are shortened there (`fitted`)."""
    for tool in tools:
        for surface in surfaces().values():
            limit = surface.max_description
            if limit is not None and fitted(tool.description, limit) != tool.description:
                logger.warning(
                    "server tool %s: its description is %d characters, over the %d %s takes: shortened there",
                    *(tool.name, len(tool.description), limit, surface.name),
                )
