"""OpenAI Responses reasoning items and the items they led to, for leaving some items out of a round's output.

A reasoning item leads to the items after it, up to the next reasoning item or message.
The API pairs them both ways: a reasoning item needs an item after it, and a stored call sent back with its id needs
its reasoning item. A reasoning model calling tools in parallel sends one reasoning item, then several calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_ENDS = frozenset({"reasoning", "message"})  # what ends the items a reasoning item led to


def kept_positions(items: list[Any], dropped: set[int]) -> list[int]:
    """The positions of `items` that stay when those in `dropped` leave, with the reasoning items they need.

    A reasoning item stays while any item it led to stays: then nothing kept lacks its reasoning item, and no kept
    reasoning item lacks an item after it.
    """
    kept = []
    for index, item in enumerate(items):
        if index in dropped:
            continue
        if is_reasoning(item):
            led = _led(items, index)
            if led and all(position in dropped for position in led):
                continue
        kept.append(index)
    return kept


def leading(items: Mapping[int, Any], at: int) -> int | None:
    """The position of the reasoning item that led to the item at `at` (back over the calls between), if any."""
    at -= 1
    while isinstance(items.get(at), dict) and items[at].get("type") not in _ENDS:
        at -= 1
    return at if is_reasoning(items.get(at)) else None


def is_reasoning(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "reasoning"


def _led(items: list[Any], index: int) -> range:
    """The positions of the items the reasoning item at `index` led to."""
    end = index + 1
    while end < len(items) and not (isinstance(items[end], dict) and items[end].get("type") in _ENDS):
        end += 1
    return range(index + 1, end)
