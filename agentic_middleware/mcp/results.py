"""What an MCP tool call gave, as the tool result the model reads (see the table in docs/mcp.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ..tool_results import Image, ToolResult


def tool_result(result: Any) -> ToolResult:
    """An MCP `CallToolResult` as the model reads it: text joined, structured content as JSON, images as images,
    resources by their URI, `isError` as an error result.

    Servers often send one thing twice, as content and as structured content: the SDKs add a text that is the
    structured content's JSON; others wrap the content in one key (`{"content": text}`, `{"entities": [...]}`,
    `{"content": [image]}`). The model reads it once: what only repeats is left out.
    """
    texts: list[str] = []
    images: list[Image] = []
    structured = getattr(result, "structured_content", None)
    blocks = list(getattr(result, "content", None) or ())
    repeated = structured is not None and _wraps(structured, blocks)
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            if structured is not None and not repeated and _same_json(block.text, structured):
                continue  # the text is the structured content's JSON, which goes first (compact): once is enough
            texts.append(block.text)
        elif kind == "image":
            images.append(Image(block.mime_type, block.data))
        elif kind == "audio":
            texts.append(f"[audio {block.mime_type}: not shown]")
        elif kind == "resource_link":
            texts.append(f"[resource {block.uri}{f': {block.name}' if block.name else ''}]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            texts.append(f"[resource {resource.uri}]\n{text}" if text is not None else f"[resource {resource.uri}]")
    if structured is not None and not repeated:
        texts.insert(0, orjson.dumps(structured).decode())
    return ToolResult("\n".join(texts), bool(getattr(result, "is_error", False)), tuple(images))


def _wraps(structured: Any, blocks: Sequence[Any]) -> bool:
    """Whether structured content is one key wrapping what the content already says: a text (as it is, or as
    JSON), the texts joined, or the content blocks themselves (filesystem's `read_media_file` sends its image so)."""
    if not (isinstance(structured, dict) and len(structured) == 1):
        return False
    (value,) = structured.values()
    texts = [block.text for block in blocks if getattr(block, "type", None) == "text"]
    if not blocks:
        return False  # nothing to repeat: the structured content is all there is
    if isinstance(value, str):
        return value in texts or value == "\n".join(texts)
    if isinstance(value, list) and len(value) == len(blocks):
        dumped = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in blocks]
        if [_unset_left_out(item) for item in value] == dumped:
            return True
    return any(_same_json(text, value) for text in texts)


def _unset_left_out(item: Any) -> Any:
    """A block as the SDK dumps it: fields set to null are left out."""
    return {key: value for key, value in item.items() if value is not None} if isinstance(item, dict) else item


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(orjson.loads(text) == value)
    except orjson.JSONDecodeError:
        return False
