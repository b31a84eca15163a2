"""`@server_tool` schemas: every parameter type a tool author writes, valid for OpenAI's and Anthropic's tool rules."""

from __future__ import annotations

import dataclasses
import enum
import sys
from typing import Annotated, Any, Literal, Optional, TypedDict

import jsonschema
import pydantic
import pytest
from conftest import anthropic_client, openai_client

from agentic_middleware import AgenticLoopMiddleware, ServerTools, server_tool
from agentic_middleware.testing import ScriptedModel, chat_completion, message


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Box:
    width: float
    height: float = 1.0


class Person(pydantic.BaseModel):
    name: str
    friends: list[Person] = []


class Address(pydantic.BaseModel):
    city: str


class Customer(pydantic.BaseModel):
    title: str  # a field named like the keyword pydantic writes: it must stay
    address: Address


def everything(
    words: list[str],
    tags: list,  # type: ignore[type-arg]
    limit: Optional[int],  # noqa: UP045
    count: int | None,
    mode: Literal["fast", "slow"],
    color: Color,
    weights: dict[str, int],
    point: Point,
    box: Box,
    person: Person,
    customer: Customer,
    pair: tuple[int, str],
    note: Annotated[str, "A note for the log."],
    depth: int = 2,
    *args: Any,
    logging_obj: Any = None,
    **kwargs: Any,
) -> str:
    """Do everything at once.

    Args:
        words: The words to look up,
            one per entry.
        tags (list): Free tags.
        depth: How deep to go.

    Returns:
        A summary.
    """
    return "done"


def nodes(schema: Any) -> list[dict[str, Any]]:
    """Every schema object inside `schema` (the names in `properties` are skipped: they are not schemas)."""
    if isinstance(schema, list):
        return [node for item in schema for node in nodes(item)]
    if not isinstance(schema, dict):
        return []
    found = [schema]
    for key, value in schema.items():
        if key in ("properties", "$defs"):
            found += [node for child in value.values() for node in nodes(child)]
        elif key not in ("enum", "default", "required", "const"):
            found += nodes(value)
    return found


def check_tool_rules(schema: dict[str, Any]) -> None:
    """What OpenAI's function calling and Anthropic's tools demand of a parameters schema."""
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    for node in nodes(schema):
        if node.get("type") == "array":
            assert "items" in node, node  # OpenAI: "array schema missing items"
        if "required" in node:
            assert set(node["required"]) <= set(node.get("properties", {})), node
        reference = node.get("$ref")
        if reference is not None:
            assert reference.removeprefix("#/$defs/") in schema.get("$defs", {}), reference


@pytest.fixture(params=["pydantic", "plain"])
def generator(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "plain":
        monkeypatch.setitem(sys.modules, "pydantic", None)  # as if pydantic were not installed
    return str(request.param)


def test_every_parameter_type_gets_a_schema_the_providers_accept(generator: str) -> None:
    tool = server_tool(everything)
    schema = tool.input_schema
    check_tool_rules(schema)
    properties = schema["properties"]

    assert "args" not in properties and "kwargs" not in properties and "logging_obj" not in properties
    assert schema["required"] == [
        *("words", "tags", "limit", "count", "mode", "color", "weights"),
        *("point", "box", "person", "customer", "pair", "note"),
    ]
    assert properties["words"]["type"] == "array" and properties["words"]["items"] == {"type": "string"}
    assert properties["tags"]["type"] == "array"
    assert {"type": "integer"} in properties["limit"]["anyOf"] and {"type": "null"} in properties["limit"]["anyOf"]
    assert {"type": "integer"} in properties["count"]["anyOf"]
    assert properties["mode"]["enum"] == ["fast", "slow"]
    assert properties["color"]["enum"] == ["red", "blue"]
    assert properties["weights"]["additionalProperties"] == {"type": "integer"}
    assert properties["point"]["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer"}}
    assert properties["box"]["required"] == ["width"]
    assert properties["pair"]["type"] == "array"
    assert properties["depth"]["default"] == 2
    assert properties["words"]["description"] == "The words to look up, one per entry."
    assert properties["tags"]["description"] == "Free tags."
    assert properties["note"]["description"] == "A note for the log."
    assert tool.description == "Do everything at once."
    if generator == "pydantic":
        # Nested models inlined, titles gone (a field named `title` stays), a self-referring model by `$ref`.
        assert properties["customer"]["properties"]["address"]["properties"] == {"city": {"type": "string"}}
        assert "title" in properties["customer"]["properties"]
        assert not any(isinstance(node.get("title"), str) for node in nodes(schema))
        assert properties["person"]["$ref"] == "#/$defs/Person"
        assert schema["$defs"]["Person"]["properties"]["friends"]["items"] == {"$ref": "#/$defs/Person"}


NAMED = [{"title": "Groceries"}]  # data holding a `title` key, as examples, a const, an enum and a default


class Listing(pydantic.BaseModel):
    kind: dict[str, str] = pydantic.Field(examples=NAMED, json_schema_extra={"const": NAMED[0]})
    order: dict[str, str] = pydantic.Field(json_schema_extra={"enum": NAMED})
    shape: dict[str, str] = pydantic.Field(default={"type": "array"})


def test_title_keys_in_a_schemas_data_are_kept_where_its_titles_are_dropped() -> None:
    """Only the schema's own `title`s are dropped: a `title` key in its data is the value the model should send."""

    def list_notes(listing: Listing) -> str:
        return "listed"

    properties = server_tool(list_notes).input_schema["properties"]["listing"]["properties"]

    assert properties == {
        "kind": {"type": "object", "additionalProperties": {"type": "string"}, "examples": NAMED, "const": NAMED[0]},
        "order": {"type": "object", "additionalProperties": {"type": "string"}, "enum": NAMED},
        "shape": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "default": {"type": "array"},  # data: not given `items` as an array schema is
        },
    }


async def test_a_list_parameter_reaches_the_model_with_items_on_both_routes() -> None:
    @server_tool
    def search(queries: list[str], site: str | None = None) -> str:
        """Search for several queries."""
        return "results"

    model = ScriptedModel(message("ok"), chat_completion("ok"))
    app = AgenticLoopMiddleware(model, hooks=[ServerTools([search])])
    await anthropic_client(app).messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "q"}])
    await openai_client(app).chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])

    declared = model.requests[0].body["tools"][0]["input_schema"]
    function = model.requests[1].body["tools"][0]["function"]["parameters"]
    for schema in (declared, function):
        check_tool_rules(schema)
        assert schema["properties"]["queries"] == {"type": "array", "items": {"type": "string"}}
        assert schema["required"] == ["queries"]
