"""What the APIs put in the fields of a request that hold no words (ids, fixed words, settings, images, bytes, media
types, URLs), told from words a client wrote there: the tests by which a guardrail's walk leaves a field out.

A field taken for one of these is left out only while it holds what the API puts there; anything else in it is
given to the guardrails (guardrail_walk.py, guardrail_opaque.py), since a lenient app may show the model what it
does not read as bytes. Bytes are left out only where their field declares a type whose bytes the model reads as
no characters (an image, a PDF, audio) and they open as that type's do (an image and a PDF: and end so): words in
the base64 alphabet (`the/pineapple/is/here+`) are not bytes of any. A media type is left out only while it is one
of the types its field takes. What can not be told apart is not given: a single word of an id's characters, a
word after `https://` in a URL (given as an image), words hidden inside bytes that open and end as their type's
do, words in the base64 alphabet after a JPEG's head (its end is not checked: a phone's motion photo holds a video
after it). Its own module because both walks, and a tool's image result (tool_results.py), ask the same questions.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

# Fields of a known record whose values are not words: ids, the type, a role or status (fixed words of the API),
# a provider's signature and cache settings, a caller's ids. The model app reads none of them as text.
HARMLESS = frozenset(
    (
        "type",
        "id",
        "call_id",
        "tool_use_id",
        "tool_call_id",
        "item_id",
        "approval_request_id",
        "file_id",
        "container_id",
        "role",
        "status",
        "signature",
        "cache_control",
        "caller",
    )
)

# The roles of the APIs' messages, and the statuses of the Responses items (read from the openai SDK's types; no
# Messages block has one): the fixed words a `role` or `status` holds. Any other word there is given (`fixed`).
ROLES = frozenset(("user", "assistant", "system", "developer", "tool", "function"))
STATUSES = frozenset(
    ("in_progress", "completed", "incomplete", "failed", "searching", "interpreting", "generating", "calling")
)
# What an id, a type, a signature or an encrypted content of the APIs is made of: one token of ASCII letters,
# digits and `_-.:+/=`. Anthropic's ids match `^[a-zA-Z0-9_-]+$` (its API's own pattern); OpenAI's are `call_…`,
# `fc_…`, `msg_…`, `rs_…`, `file-…`; LiteLLM's Gemini tool call ids carry a base64 thought signature after
# `__thought__`, and some providers' ids are `functions.name:0`; signatures and encrypted contents are base64
# (standard or URL-safe) or, ours, `amw1.` and base64. Free text (a space, other punctuation, a letter beyond
# ASCII) is not one, and is given; a single word of these characters can not be told from an id, and is not.
_TOKEN = re.compile(r"[A-Za-z0-9_.:+/=-]*")
# The settings objects the APIs put in `cache_control` (`{"type": "ephemeral", "ttl": "5m"}`) and a Messages
# tool call's `caller` (`{"type": "code_execution_20250825", "tool_id": "srvtoolu_…"}`): their keys, each value a
# token. An object with any other key, or a value not a token, is given, keys and all.
_SETTINGS = {"cache_control": frozenset(("type", "ttl")), "caller": frozenset(("type", "tool_id"))}
# The fields left out only while they hold what the API puts there (`fixed`).
CHECKED = HARMLESS.union(("encrypted_content",))


def fixed(key: str, value: Any) -> bool:
    """Whether the value of a field taken for an id or a fixed word (`CHECKED`) is what the API puts there, and so
    no words: left out. A free-text id or status, a role none of the APIs has, an object in an id, or cache
    settings with a key the API does not have, are words a client wrote where a lenient app may show them."""
    if isinstance(value, str):
        if key == "role":
            return value in ROLES
        if key == "status":
            return value in STATUSES
        return key not in _SETTINGS and _TOKEN.fullmatch(value) is not None
    if isinstance(value, dict):
        names = _SETTINGS.get(key)
        return (
            names is not None
            and names.issuperset(value)
            and all(isinstance(inner, str) and _TOKEN.fullmatch(inner) for inner in value.values())
        )
    return not isinstance(value, list)  # a number, a boolean, null: no words


# Base64 as the APIs take bytes: the standard alphabet, `=` padding only at the end, no whitespace, a length of
# fours (checked apart, `_whole`), as the SDKs and browsers encode. One compiled character class over the whole
# string: 7 ms for a 5 MB image (6.8 MB of base64), where `binascii.a2b_base64(..., strict_mode=True)` takes 12 ms
# and decodes the whole image into memory, and a pattern of four-character groups (which would check the length
# too) 140 ms. Possessive (`*+`): a string that is not one fails in one pass, where backtracking over a 5 MB string
# with a space at its end took 130 ms.
_BASE64 = "[A-Za-z0-9+/]*+={0,2}+"
_BYTES = re.compile(_BASE64)
# A MIME type of no parameters (`application/pdf`); a file's data, with its `data:` URL prefix (its parameters, as
# `data:audio/webm;codecs=opus;base64,` a browser's recorder writes, each a token `=` a token) or without; an image
# behind a data URL of the four image types the APIs take, or bare; a URL of any scheme, one token of printable ASCII.
_TOKEN_CHARS = "[A-Za-z0-9!#$&^_.+-]"
_MIME = f"[A-Za-z0-9]{_TOKEN_CHARS}*+/[A-Za-z0-9]{_TOKEN_CHARS}*+"
_MIME_TYPE = re.compile(_MIME)
_FILE_DATA = re.compile(f"(?:(?i:data):({_MIME})(?:;{_TOKEN_CHARS}++={_TOKEN_CHARS}++)*+;(?i:base64),)?+{_BASE64}")
_IMAGE = re.compile(f"(?:(?i:data):image/(?:png|jpe?g|gif|webp);base64,)?+{_BASE64}")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*+://[!-~]++")
# A `data:` URL's media type and parameters, however written (its scheme in any case, as RFC 3986 has it): to tell
# bytes of a known type from base64 of anything else (refused).
_DATA_URL = re.compile(r"data:([^;,]*+)([^,]*+),", re.IGNORECASE)
# How the bytes of a PNG, JPEG and GIF begin; a WebP's are `RIFF`, four bytes of size, `WEBP` (`_opens_as_image`).
_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8")
# How they end: a PNG with its IEND chunk (length 0, the name, its CRC), a GIF with its trailer; a WebP's RIFF
# size is its length less 8 (`_opens_as_image`). A JPEG's end is not checked: phones' motion photos (Google
# Pixel's, Samsung's) append an MP4 after its end-of-image marker (FF D9) in the same file, and such a photo must
# stay an image, not base64 given as text (megabytes of it to an LLM guardrail, false hits for a word list) nor a
# server tool's error result. So words in the base64 alphabet after a JPEG's head are left out as its bytes: the
# model sees pixels, not characters, and a guardrail judging images gets it in `images`.
_ENDS = {b"\x89PNG": b"\x00\x00\x00\x00IEND\xaeB`\x82", b"GIF8": b";"}
# The API's words for an image's or a file's detail and an audio's format (read from the openai SDK's types).
_DETAILS = frozenset(("auto", "low", "high", "original"))
# OpenAI's audio formats, and those LiteLLM passes on to Gemini (`aiff`, `ogg`, `webm`, `m4a`, `mp4`).
_AUDIO_FORMATS = frozenset(("wav", "mp3", "aac", "flac", "opus", "pcm16", "aiff", "ogg", "webm", "m4a", "mp4"))
# The media types the APIs take as bytes the model reads as no characters (pixels, a PDF's pages, sound): the
# four image types (Anthropic's image sources, OpenAI's image inputs), a PDF (Anthropic's base64 documents,
# OpenAI's file inputs), and audio as LiteLLM names an input's format. A field declaring one is left out only while
# its bytes open (and a PDF's end) as that type's do (`_BYTES_OF`); any other type there is given, as a word.
IMAGE_TYPES = frozenset(("image/png", "image/jpeg", "image/gif", "image/webp"))
# `image/jpg`: a common alias of `image/jpeg` that OpenAI and LiteLLM take in a data URL (not Anthropic's
# `media_type`, which `is_image_type` checks): a JPEG's bytes either way.
_IMAGE_DATA_TYPES = IMAGE_TYPES | {"image/jpg"}


def _wave(head: bytes) -> bool:
    return head[:4] == b"RIFF" and head[8:12] == b"WAVE"


def _mpeg(head: bytes) -> bool:
    """An ID3 tag, or an MPEG frame's 11 bits of sync (which an AAC ADTS header shares)."""
    return head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0)


# How the bytes of each audio type open, by its media type: a WAV's `RIFF`, a size, `WAVE`; an MP3's ID3 tag or
# frame sync; an Ogg's `OggS`; a FLAC's `fLaC`; an AAC's ADTS header (`FFF1`, `FFF9`: sync, no layer); an AIFF's
# `FORM`, a size, `AIFF` (or `AIFC`); a WebM's EBML head (`1A45DFA3`); an MP4's (M4A's) `ftyp` box at byte 4.
_AUDIO_HEADS: dict[str, Callable[[bytes], bool]] = {
    **dict.fromkeys(("audio/wav", "audio/x-wav", "audio/wave"), _wave),
    **dict.fromkeys(("audio/mpeg", "audio/mp3"), _mpeg),
    **dict.fromkeys(("audio/ogg", "audio/opus"), lambda head: head.startswith(b"OggS")),
    **dict.fromkeys(("audio/flac", "audio/x-flac"), lambda head: head.startswith(b"fLaC")),
    **dict.fromkeys(("audio/aac", "audio/x-aac"), lambda head: head[:2] in (b"\xff\xf1", b"\xff\xf9")),
    **dict.fromkeys(
        ("audio/aiff", "audio/x-aiff"), lambda head: head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC")
    ),
    "audio/webm": lambda head: head.startswith(b"\x1a\x45\xdf\xa3"),
    **dict.fromkeys(("audio/mp4", "audio/m4a", "audio/x-m4a"), lambda head: head[4:8] == b"ftyp"),
}
_AUDIO_TYPES = frozenset(_AUDIO_HEADS)
# A media hint's types but a video's: those above, HEIF images, and raw PCM audio (Gemini's `audio/pcm`).
_HINTED = _IMAGE_DATA_TYPES | _AUDIO_TYPES | {"application/pdf", "image/heic", "image/heif", "audio/pcm"}


def _whole(text: str, start: int) -> bool:
    """Whether the base64 from `start` on (its alphabet checked) is a length of fours: whole, as encoders write it."""
    return (len(text) - start) % 4 == 0


def is_image(text: str) -> bool:
    """Whether a whole string is an image and not words: strict base64 whose bytes open as a PNG, JPEG, GIF or WebP
    does and, but for a JPEG, end so, bare or in a `data:image/png|jpeg|jpg|gif|webp;base64,` URL. A field the API fills
    with an image may hold anything a client writes there: words after an image's first bytes, words in the base64
    alphabet between a PNG's, GIF's or WebP's head and no end of one, whitespace, another media type (a subtype is
    a token, and a token can be a word) make it a text, given to the guardrail. A JPEG's end is not checked (a
    phone's motion photo appends a video after it: `_ENDS`), so words in the base64 alphabet after a JPEG's head are
    taken for its bytes; and words hidden inside the bytes of any image that opens (and ends) as one are not found:
    the model sees its pixels, not characters, and a guardrail that judges images gets it in `images`. Fast on a
    multi-MB image: one C call checks the whole alphabet (`_BASE64`; 7 ms for a 5 MB image), and only its first 16
    and last 24 characters are decoded (a few microseconds more)."""
    return _IMAGE.fullmatch(text) is not None and _opens_as_image(text, text.find(",") + 1)  # bare: no comma


def is_base64_image(data: str) -> bool:
    """Whether `data` is bare base64 of an image by `is_image`'s rule: what a tool's image must be (`tool_results`),
    as its bytes are written into the next round where no guardrail reads them."""
    return _BYTES.fullmatch(data) is not None and _opens_as_image(data, 0)


def _opens_as_image(text: str, start: int) -> bool:
    """Whether the base64 from `start` on (its alphabet checked) is whole and its bytes open as a PNG, JPEG, GIF or
    WebP does, and end so but for a JPEG (`_ENDS`)."""
    if not _whole(text, start):
        return False
    head = base64.b64decode(text[start : start + 16])
    magic = next((magic for magic in _MAGIC if head.startswith(magic)), None)
    if magic is not None:
        end = _ENDS.get(magic)
        return end is None or _tail(text, start, 24).endswith(end)
    if head[:4] != b"RIFF" or head[8:12] != b"WEBP":
        return False
    return int.from_bytes(head[4:8], "little") == _size(text, start) - 8


def _tail(text: str, start: int, chars: int) -> bytes:
    """The last bytes of whole base64 from `start` on: its last `chars` characters (a multiple of 4) decoded."""
    return base64.b64decode(text[max(start, len(text) - chars) :])


def _size(text: str, start: int) -> int:
    """How many bytes whole base64 from `start` on decodes to, by its length and padding."""
    return (len(text) - start) // 4 * 3 - text.endswith("=") - text.endswith("==")


def _pdf(text: str, start: int) -> bool:
    """A PDF opens with `%PDF-` and has its `%%EOF` in its last 1024 bytes (where readers look for it)."""
    return base64.b64decode(text[start : start + 8]).startswith(b"%PDF-") and b"%%EOF" in _tail(text, start, 1368)


def _audio(text: str, start: int) -> bool:
    """Audio opens as one of the audio types does (`_AUDIO_HEADS`), whichever its format says. Only its head is
    read: raw PCM, which has none, is given."""
    head = _head(text, start)
    return any(opens(head) for opens in set(_AUDIO_HEADS.values()))


def _head(text: str, start: int) -> bytes:
    return base64.b64decode(text[start : start + 16])


# HEIF images (HEIC, an iPhone's photos) and MP4, QuickTime and WebM videos, which Gemini takes inline: an ISO
# media file's `ftyp` box at byte 4 (a HEIF's brand one of its own), a WebM's EBML head.
_HEIF_TYPES = ("image/heic", "image/heif")
_HEIF_BRANDS = (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1")
_MEDIA_HEADS: dict[str, Callable[[bytes], bool]] = {
    **dict.fromkeys(_HEIF_TYPES, lambda head: head[4:8] == b"ftyp" and head[8:12] in _HEIF_BRANDS),
    **dict.fromkeys(("video/mp4", "video/quicktime"), lambda head: head[4:8] == b"ftyp"),
    "video/webm": lambda head: head.startswith(b"\x1a\x45\xdf\xa3"),
}


def _opens_as(opens: Callable[[bytes], bool]) -> Callable[[str, int], bool]:
    """A `file_data` of the media type it declares (audio, a HEIF image, a video), told by its head: `opens`."""
    return lambda text, start: opens(_head(text, start))


# How the bytes of each known type are told from words (the alphabet and length checked first).
_BYTES_OF: dict[str, Callable[[str, int], bool]] = {
    "application/pdf": _pdf,
    **dict.fromkeys(_IMAGE_DATA_TYPES, _opens_as_image),
    **{media: _opens_as(opens) for media, opens in (_AUDIO_HEADS | _MEDIA_HEADS).items()},
}


def is_audio(value: str) -> bool:
    """An audio's bytes, as the APIs take them in an `input_audio`'s `data` and return them in a Chat message's
    `audio.data`: whole base64 that opens as audio does (`_audio`), whatever its format says."""
    return _BYTES.fullmatch(value) is not None and _whole(value, 0) and _audio(value, 0)


def is_pdf(value: str) -> bool:
    """A base64 document's `data` (Anthropic's, of `application/pdf`): whole base64 of a PDF (`_pdf`)."""
    return _BYTES.fullmatch(value) is not None and _whole(value, 0) and _pdf(value, 0)


def file_data_type(value: str) -> str | None:
    """The media type a `file_data` (or an image URL) declares in a `data:` URL holding base64 (its parameters
    naming `base64`), lower-cased, `""` where it names none; else None."""
    found = _DATA_URL.match(value)
    return found.group(1).lower() if found is not None and "base64" in found.group(2).lower() else None


def is_file_data(value: str) -> bool:
    """A file's `file_data` that holds bytes the model reads as no characters: whole base64 behind a
    `data:<type>;base64,` prefix of a known type (`_BYTES_OF`), or bare, of a PDF, its bytes those of the type."""
    found = _FILE_DATA.fullmatch(value)
    if found is None:
        return False
    start = value.find(",") + 1  # bare: no comma
    check = _BYTES_OF.get(found.group(1).lower() if found.group(1) else "application/pdf")
    return check is not None and _whole(value, start) and check(value, start)


def is_file_image(value: str) -> bool:
    """A `file_data` that is an image (`data:image/png;base64,...` whose bytes are a PNG's), which LiteLLM gives
    the model as an image: left out of the texts (`is_file_data`), so given among the `images`."""
    declared = file_data_type(value)
    return (declared in _IMAGE_DATA_TYPES or declared in _HEIF_TYPES) and is_file_data(value)


def is_byte_type(value: str) -> bool:
    """A declared media type whose bytes the walk can tell (`_BYTES_OF`): a PDF, an image, audio."""
    return value in _BYTES_OF


def is_bare_base64(value: str) -> bool:
    """A string of the base64 alphabet alone (no `data:` prefix), which a provider may decode as a file's bytes."""
    return _BYTES.fullmatch(value) is not None


def is_image_type(value: str) -> bool:
    """An image source's `media_type`: one of the four image types the APIs take."""
    return value in IMAGE_TYPES


def is_image_data_type(value: str) -> bool:
    """A base64 image's declared type: one of the four image types, or `image/jpg` (which LiteLLM takes)."""
    return value in _IMAGE_DATA_TYPES


def is_pdf_type(value: str) -> bool:
    """A base64 document's `media_type`: Anthropic takes `application/pdf` only."""
    return value == "application/pdf"


def is_plain_text_type(value: str) -> bool:
    """A text document source's `media_type`: Anthropic's `text/plain`."""
    return value == "text/plain"


def is_url(value: str) -> bool:
    """A URL of any scheme, one token of printable ASCII (`https://...`, `gs://...`)."""
    return _URL.fullmatch(value) is not None


def is_image_or_url(value: str) -> bool:
    """An image's URL, where the API takes an image or a URL of one (a URL is given as one of the `images`)."""
    return is_image(value) or is_url(value)


def is_token(value: str) -> bool:
    """An id's or an index's one token (`fixed`)."""
    return fixed("id", value)


def is_audio_format(value: str) -> bool:
    """An `input_audio`'s format: one of the API's words, or an audio MIME type."""
    return value in _AUDIO_FORMATS or value in _AUDIO_TYPES


def is_media_hint(value: str) -> bool:
    """LiteLLM's `format` (or `mime_type`, `content_type`) on a media part, the type a provider is told its media is:
    one whose bytes the model reads as no characters, of any case (a MIME type's is none): one of the known types
    (`image/jpg` too) or a video's (`video/mp4`, as Gemini takes a video by URL). A text's, JSON's, any other would
    have the provider decode the bytes, or what a URL or file id names, as words no guardrail was given."""
    lowered = value.lower()
    return lowered in _HINTED or (lowered.startswith("video/") and _MIME_TYPE.fullmatch(lowered) is not None)


def is_detail(value: str) -> bool:
    return value in _DETAILS


def never(value: str) -> bool:
    """A field whose string is never what the API puts there (it puts a number, or an object): given."""
    return False
