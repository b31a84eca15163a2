"""Real media, base64 as clients send them: whole images of the four types the APIs take, a PDF, WAV and MP3 audio.

The guardrails' walk leaves bytes out of the texts only while they open (and an image or a PDF end) as their type's
do (guardrail_values.py), so the tests that prove real media still reach the app unjudged use whole files: a 1x1
PNG, JPEG, GIF and WebP as an image library writes them, a PNG of 4 MB built with a valid CRC per chunk, a PDF of
one page with its cross-reference table and `%%EOF`, a WAV of silence (the standard library's `wave`), and an MP3
of one silent MPEG-1 Layer III frame, with and without an ID3 tag.
"""

from __future__ import annotations

import base64
import io
import random
import struct
import wave
import zlib

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
JPEG = (
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHRofHh0aHBwgJC4nICIsIxwcKDcpLDAxNDQ0Hyc5"
    "PTgyPC4zNDL/2wBDAQkJCQwLDBgNDRgyIRwhMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjL/wAAR"
    "CAABAAEDASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEG"
    "E1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWG"
    "h4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEB"
    "AQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYk"
    "NOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0"
    "tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwDkKKKK8U/TD//Z"
)
GIF = "R0lGODdhAQABAIEAAMgeHgAAAAAAAAAAACwAAAAAAQABAAAIBAABBAQAOw=="
WEBP = "UklGRjoAAABXRUJQVlA4IC4AAACwAQCdASoBAAEAAUAmJaACdLoABDAAAP7x3I/4DdfFtMv/vYL/3YL/3YL/WwAA"
IMAGES = {"image/png": PNG, "image/jpeg": JPEG, "image/gif": GIF, "image/webp": WEBP}
# A phone's motion photo (Google Pixel's, Samsung's): the JPEG, then an MP4 (its `ftyp` box, an `mdat` of frames)
# in the same file, after the JPEG's end-of-image marker.
_MP4 = struct.pack(">I", 24) + b"ftypmp42" + bytes(4) + b"mp42isom" + struct.pack(">I", 40) + b"mdat" + bytes(32)
MOTION_PHOTO = base64.b64encode(base64.b64decode(JPEG) + _MP4).decode()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def big_png(side: int = 880) -> str:
    """A PNG of `side` x `side` RGBA pixels of noise (4 MB of base64 at 880), base64: noise does not compress."""
    noise = random.Random(0).randbytes(side * side * 4)
    width = side * 4
    rows = b"".join(b"\x00" + noise[row : row + width] for row in range(0, len(noise), width))  # filtered "none"
    header = struct.pack(">IIBBBBB", side, side, 8, 6, 0, 0, 0)
    chunks = _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows, 1)) + _chunk(b"IEND", b"")
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + chunks).decode()


def _pdf() -> bytes:
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 72 72] >>",
    ]
    body, offsets = b"%PDF-1.4\n", []
    for number, content in enumerate(objects, 1):
        offsets.append(len(body))
        body += b"%d 0 obj\n%s\nendobj\n" % (number, content)
    xref = b"xref\n0 4\n0000000000 65535 f \n" + b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = b"trailer\n<< /Size 4 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % len(body)
    return body + xref + trailer


PDF = base64.b64encode(_pdf()).decode()


def _wav() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(8000)
        audio.writeframes(bytes(160))
    return out.getvalue()


WAV = base64.b64encode(_wav()).decode()
# One MPEG-1 Layer III frame (128 kbps, 44.1 kHz: 417 bytes) of silence; and after an empty ID3v2.4 tag.
_FRAME = b"\xff\xfb\x90\x64" + bytes(413)
MP3 = base64.b64encode(_FRAME).decode()
MP3_ID3 = base64.b64encode(b"ID3\x04\x00\x00\x00\x00\x00\x00" + _FRAME).decode()
