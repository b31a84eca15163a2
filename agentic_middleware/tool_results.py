"""What a server tool gives for one call: `ToolResult`, with its images and the sources a search found.

Its own module because both sides use it: the wire formats (`surfaces`) write it into their bodies, and the native
tools (`native`) read its sources into the providers' records; `surfaces` re-exports it, where users import it.
"""

from __future__ import annotations

from typing import NamedTuple

from .guardrail_values import is_base64_image

# The media types of the images the APIs take (Anthropic's image `media_type`; OpenAI's input images).
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


class Image(NamedTuple):
    """An image a tool gave, base64-encoded: `media_type` one of `IMAGE_TYPES`, `data` its bytes in base64."""

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


def images_checked(result: ToolResult, name: str) -> ToolResult:
    """`result` with its images as the APIs take them (a media type lower-cased), or an error result if one is
    none. A tool's image is written into the next round as an image's `media_type` and `data` (an `input_image`'s
    data URL), which no guardrail reads as words: so it must be an image, a media type of `IMAGE_TYPES` and bare
    base64 of such bytes by the guardrails' rule (`guardrail_values.is_image`), or the result says which was not, its
    words not repeated, and sends no image (the model reads the error; a request is not failed for a tool's image)."""
    images = []
    for image in result.images:
        media = image.media_type.lower() if isinstance(image, Image) and isinstance(image.media_type, str) else None
        if media not in IMAGE_TYPES:
            return ToolResult(f"{name} failed: its image's media type is not one of {', '.join(IMAGE_TYPES)}", True)
        if not isinstance(image.data, str) or not is_base64_image(image.data):
            return ToolResult(f"{name} failed: its image's data is not base64 of a PNG, JPEG, GIF or WebP image", True)
        images.append(image._replace(media_type=media))
    return result._replace(images=tuple(images)) if images else result
