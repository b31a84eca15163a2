"""The texts the model reads outside a request's messages: a structured output's JSON schema (its name, description
and every key and string of the schema, where a property's name and description tell the model what to write) and,
on Responses, a stored prompt's `variables`. Given after the messages' texts (guardrail_texts.py), each where the
route puts it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .guardrail_texts import part_slots
from .guardrail_walk import Slot, every_string, plain, read_fields, rest_slots, string_slot, unreadable

_SCHEMA_READ = read_fields("name", "description", "schema")
_RESPONSE_FORMAT_READ = read_fields("json_schema")


def extra_slots(data: dict[str, Any], api_surface: str) -> Iterator[Slot]:
    """The texts the model reads outside the messages, after theirs: a structured output's JSON schema (Chat's
    `response_format`, Responses' `text.format`, Messages' `output_config.format` and the beta's `output_format`:
    its name, description and every key and string of the schema, where a property's name and description tell
    the model what to write), and on
    Responses a stored prompt's `variables` (strings, or parts: the prompt's words, filled in)."""
    if api_surface == "chat_completions":
        fmt = _object(data, "response_format")
        if fmt is not None:
            yield from _schema_slots(_object(fmt, "json_schema"))
            if not plain(fmt, _RESPONSE_FORMAT_READ):  # its type, when free text; fields made up on it
                yield from rest_slots(fmt, _RESPONSE_FORMAT_READ)
    elif api_surface == "anthropic_messages":
        yield from _schema_slots(_object(data, "output_format"))  # the beta's
        config = _object(data, "output_config")  # structured outputs as released: `output_config.format`
        yield from _schema_slots(_object(config, "format") if config is not None else None)
    else:
        text = _object(data, "text")
        yield from _schema_slots(_object(text, "format") if text is not None else None)
        prompt = _object(data, "prompt")
        variables = _object(prompt, "variables") if prompt is not None else None
        for name, value in list((variables or {}).items()):
            if isinstance(value, str):
                yield variables, name
            elif isinstance(value, dict):
                yield from part_slots(value)
            elif value is not None:
                raise unreadable(f"a prompt variable that is {type(value).__name__}")


def _object(holder: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = holder.get(key)
    if value is None or isinstance(value, dict):
        return value
    raise unreadable(f"a {key} that is {type(value).__name__}")


def _schema_slots(schema_format: dict[str, Any] | None) -> Iterator[Slot]:
    """A structured output's schema object (Chat's `json_schema`, Responses' `text.format`, Messages'
    `output_format`): its name, description and every key and string of its schema; and, walked as a known part's
    are (`rest_slots`), its `type` when it is no token and the fields a client made up on it, which an app that
    writes the format into the prompt shows the model."""
    if schema_format is None:
        return
    yield from string_slot(schema_format, "name")
    yield from string_slot(schema_format, "description")
    schema = schema_format.get("schema")
    if schema is not None:
        yield from every_string(schema, 1)
    if not plain(schema_format, _SCHEMA_READ):
        yield from rest_slots(schema_format, _SCHEMA_READ)
