"""JSON schemas of server tool functions, read off their signatures and docstrings.

Each parameter's schema comes from pydantic's `TypeAdapter(...).json_schema()` when pydantic is installed (it is in
every FastAPI app; `pip install 'agentic-middleware[pydantic]'`), else from a plain mapping of the common types. The
result is made to suit every provider's tool rules: titles dropped, `$ref`s inlined unless a type refers to itself,
every array with `items`, no `*args`/`**kwargs`, a description per parameter from `Annotated[type, "text"]` or the
docstring's `Args:` section.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

_PLAIN = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?):\s*$")
_ARGUMENT = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
# The JSON Schema keywords (2020-12, and drafts 4-7) whose values are schemas: one (or, for `items` in drafts before
# 2020-12, a list of them), a list, or a map of names to them. Only these are cleaned; every other keyword's value
# is data (a `default`, `examples`, a `const`, an `enum`) and kept whole: its `title` keys are not schema titles.
_SCHEMAS = frozenset(
    {"additionalItems", "additionalProperties", "contains", "contentSchema", "else", "if", "items", "not", "then"}
    | {"propertyNames", "unevaluatedItems", "unevaluatedProperties", "allOf", "anyOf", "oneOf", "prefixItems"}
)
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)


def function_schema(function: Callable[..., Any], skipped: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The JSON schema of a function's keyword arguments; `skipped` names parameters the caller fills itself."""
    hints = typing.get_type_hints(function, include_extras=True)
    described = argument_docs(inspect.getdoc(function) or "")
    properties: dict[str, Any] = {}
    required = []
    definitions: dict[str, Any] = {}
    for name, parameter in inspect.signature(function).parameters.items():
        if name in skipped or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        annotation, note = _unannotated(hints.get(name, Any))
        schema = type_schema(annotation, definitions)
        description = note or described.get(name)
        if description:
            schema = {**schema, "description": description}
        if parameter.default is parameter.empty:
            required.append(name)
        elif _is_json(parameter.default):
            schema = {**schema, "default": parameter.default}
        properties[name] = schema
    result: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if definitions:
        result["$defs"] = definitions
    return result


def description_of(function: Callable[..., Any]) -> str:
    """The docstring without its `Args:`/`Returns:`/... sections, which the schema and the result tell."""
    kept = []
    for line in (inspect.getdoc(function) or "").splitlines():
        if _SECTION.match(line):
            break
        kept.append(line)
    return "\n".join(kept).strip()


def fitted(description: str, limit: int | None) -> str:
    """The description within `limit` characters (a provider refuses longer ones), cut at a word and marked `…`.

    Counted in UTF-16 code units, as JavaScript counts a string's length: never fewer than its characters, so what
    fits here fits however the provider counts.
    """
    if limit is None or 2 * len(description) <= limit or len(description.encode("utf-16-le")) <= 2 * limit:
        return description
    kept = description.encode("utf-16-le")[: 2 * (limit - 1)].decode("utf-16-le", errors="ignore")
    space = max(kept.rfind(" "), kept.rfind("\n"))
    if space > len(kept) * 4 // 5:  # a word cut in two only when no space is near the end
        kept = kept[:space]
    return f"{kept.rstrip()}…"


def argument_docs(docstring: str) -> dict[str, str]:
    """Each argument's text in a Google-style `Args:` section (continuation lines joined)."""
    found: dict[str, str] = {}
    inside, current, indent = False, None, None
    for line in docstring.splitlines():
        if _SECTION.match(line.strip()) and not line.startswith((" ", "\t")):
            inside, current = line.strip().startswith(("Args", "Arguments", "Parameters")), None
            continue
        if not inside or not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        match = _ARGUMENT.match(line.strip())
        if match and (indent is None or depth <= indent):
            indent, current = depth, match.group(1)
            found[current] = match.group(2).strip()
        elif current is not None:
            found[current] = f"{found[current]} {line.strip()}".strip()
    return found


def type_schema(annotation: Any, definitions: dict[str, Any]) -> dict[str, Any]:
    """One type's schema: pydantic's where it can, else the plain mapping; shared `$defs` go in `definitions`."""
    try:
        from pydantic import TypeAdapter
    except ImportError:
        return _plain(annotation)
    try:
        schema = TypeAdapter(annotation).json_schema()
    except Exception:  # a type pydantic cannot take (typing.TypedDict before 3.12, ...): the plain mapping
        return _plain(annotation)
    defs = schema.pop("$defs", {})
    recursive = {name for name in defs if _refers_to(defs[name], name, defs, set())}
    cleaned: dict[str, Any] = _cleaned(schema, defs, recursive)
    for name in recursive:
        definitions.setdefault(name, _cleaned(defs[name], defs, recursive))
    return cleaned


def portable(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema from elsewhere (an MCP server's) made to suit every provider as ours are: titles dropped,
    `$ref`s inlined unless a type refers to itself, arrays given `items`, and an object at the top."""
    found = schema.get("$defs")
    defs: dict[str, Any] = found if isinstance(found, dict) else {}
    recursive = {name for name in defs if _refers_to(defs[name], name, defs, set())}
    cleaned: dict[str, Any] = _cleaned({k: v for k, v in schema.items() if k != "$defs"}, defs, recursive)
    if recursive:
        cleaned["$defs"] = {name: _cleaned(defs[name], defs, recursive) for name in recursive}
    return {**cleaned, "type": "object"} if "type" not in cleaned else cleaned


def _unannotated(annotation: Any) -> tuple[Any, str | None]:
    """`Annotated[T, "text", ...]` as T and its first text; anything else as it is."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *extras = typing.get_args(annotation)
        return base, next((extra for extra in extras if isinstance(extra, str)), None)
    return annotation, None


def _refers_to(node: Any, name: str, defs: Mapping[str, Any], seen: set[str]) -> bool:
    """Whether `node` reaches the definition `name` through `$ref`s."""
    if isinstance(node, dict):
        reference = node.get("$ref")
        if isinstance(reference, str) and reference.startswith("#/$defs/"):
            target = reference.removeprefix("#/$defs/")
            if target == name:
                return True
            if target not in seen:
                seen.add(target)
                if _refers_to(defs.get(target), name, defs, seen):
                    return True
        return any(_refers_to(value, name, defs, seen) for value in node.values())
    if isinstance(node, list):
        return any(_refers_to(item, name, defs, seen) for item in node)
    return False


def _cleaned(node: Any, defs: Mapping[str, Any], recursive: set[str]) -> Any:
    """Titles dropped, references inlined (a self-referring type stays a `$ref`), arrays given `items`: in the
    schema and its subschemas, never in the data it holds (a `default` of `{"title": ...}` is kept whole)."""
    if isinstance(node, list):
        return [_cleaned(item, defs, recursive) for item in node]
    if not isinstance(node, dict):
        return node
    reference = node.get("$ref")
    if isinstance(reference, str) and reference.startswith("#/$defs/"):
        target = reference.removeprefix("#/$defs/")
        if target not in recursive and target in defs:
            rest = {key: value for key, value in node.items() if key != "$ref"}
            return _cleaned({**defs[target], **rest}, defs, recursive)
    cleaned: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            cleaned[key] = {name: _cleaned(schema, defs, recursive) for name, schema in value.items()}
        elif key in _SCHEMAS:
            cleaned[key] = _cleaned(value, defs, recursive)
        else:  # a value, not a schema (`default`, `examples`, `const`, `enum`, `required`, ...): kept as it is
            cleaned[key] = value
    if cleaned.get("type") == "array" and "items" not in cleaned:
        cleaned["items"] = {}
    return cleaned


def _plain(annotation: Any) -> dict[str, Any]:
    """A schema without pydantic: the common types, and `{}` (any value) for the rest."""
    annotation, _ = _unannotated(annotation)
    if annotation in _PLAIN:
        return {"type": _PLAIN[annotation]}
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_plain(argument) for argument in arguments]}
    if origin is typing.Literal:
        return {"enum": list(arguments)}
    if annotation in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset):
        items = [argument for argument in arguments if argument is not Ellipsis]
        return {"type": "array", "items": _plain(items[0]) if len(set(items)) == 1 else {}}
    if annotation is dict or origin is dict:
        return {"type": "object", "additionalProperties": _plain(arguments[1]) if len(arguments) == 2 else {}}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [member.value for member in annotation]}
    if isinstance(annotation, type) and (typing.is_typeddict(annotation) or dataclasses.is_dataclass(annotation)):
        fields = typing.get_type_hints(annotation)
        if dataclasses.is_dataclass(annotation):
            needed = [
                f.name
                for f in dataclasses.fields(annotation)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            ]
        else:
            needed = [name for name in fields if name in getattr(annotation, "__required_keys__", fields)]
        return {
            "type": "object",
            "properties": {name: _plain(kind) for name, kind in fields.items()},
            "required": needed,
        }
    return {}


def _is_json(value: Any) -> bool:
    if isinstance(value, str | int | float | bool) or value is None:
        return True
    if isinstance(value, list | tuple):
        return all(_is_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _is_json(item) for key, item in value.items())
    return False
