"""Compression interception: long history contents become stubs with keys, and `retrieve(key)` brings them back."""

from .hook import CompressionHook, compression_hook, retrieve

__all__ = ["CompressionHook", "compression_hook", "retrieve"]
