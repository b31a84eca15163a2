"""What an MCP tool call gave, as the tool result the model reads (see the table in docs/mcp.md)."""

from __future__ import annotations

from typing import Any

import orjson

from ..surfaces import Image, ToolResult


def tool_result(result: Any) -> ToolResult:
    """An MCP `CallToolResult` as the model reads it: text joined, structured content as JSON, images as images,
    resources by their URI, `isError` as an error result."""
    texts: list[str] = []
    images: list[Image] = []
    structured = getattr(result, "structured_content", None)
    for block in getattr(result, "content", None) or ():
        kind = getattr(block, "type", None)
        if kind == "text":
            if structured is not None and _same_json(block.text, structured) and not _wraps(structured, [block.text]):
                continue  # the SDKs repeat structured content as text: once is enough
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
    if structured is not None and not _wraps(structured, texts):
        texts.insert(0, orjson.dumps(structured).decode())
    return ToolResult("\n".join(texts), bool(getattr(result, "is_error", False)), tuple(images))


def _wraps(structured: Any, texts: list[str]) -> bool:
    """Whether structured content is the SDKs' `{"result": value}` wrapping of a plain value the text gives."""
    if not (isinstance(structured, dict) and len(structured) == 1 and "result" in structured):
        return False
    value = structured["result"]
    return any(text == value or _same_json(text, value) for text in texts)


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(orjson.loads(text) == value)
    except orjson.JSONDecodeError:
        return False
