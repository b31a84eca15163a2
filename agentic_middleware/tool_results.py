"""What a server tool gives for one call: `ToolResult`, with its images and the sources a search found.

Its own module because both sides use it: the wire formats (`surfaces`) write it into their bodies, and the native
tools (`native`) read its sources into the providers' records; `surfaces` re-exports it, where users import it.
"""

from __future__ import annotations

from typing import NamedTuple


class Image(NamedTuple):
    """An image a tool gave, base64-encoded."""

    media_type: str
    data: str


class Source(NamedTuple):
    """One document a search found: what a native search record shows, and what citations point at."""

    url: str
    title: str
    text: str = ""  # the snippet or page text the model reads
    page_age: str | None = None  # as the source gives it ("2 days ago", "2025-04-01")


class ToolResult(NamedTuple):
    """What a server tool gave for one call: the text the model reads, whether it is an error, any images
    (sent as image blocks where the route's tool results take them, else named in a short note), and the
    sources a search found (see `agentic_middleware.native.search_result`)."""

    content: str
    is_error: bool = False
    images: tuple[Image, ...] = ()
    sources: tuple[Source, ...] = ()

    def as_text(self) -> str:
        """The content with a note per image, for routes whose tool results take only text."""
        notes = (
            f"[image {image.media_type}: not shown, this API takes text only in tool results]" for image in self.images
        )
        return "\n".join((self.content, *notes) if self.content else notes) if self.images else self.content
