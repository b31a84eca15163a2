"""The state kept between requests: one small key-value interface, an in-process default, and each caller's view.

Two things outlive a request: the Responses chain records (chains.py) and what a hook keeps for a later turn (the
compression stash, compression.py). Both go through `KeyValueStore`: `get`, `put` with a time to live, `delete`,
values as bytes (JSON written with orjson). `MemoryStore` is the default, in this process; a store shared by
replicas (`agentic_middleware.redis.RedisStore`) makes a follow-up on another replica find what the first left.

Hooks reach the store through their request's `logging_obj.state`, a `CallerState`: every key it reads or writes
names the request's caller (callers.py), so one caller never reads or changes another's state.

A store that cannot answer raises (`StoreUnavailable` for the shipped ones), within a bound of its own: what each
user of the store then does is written next to it (chains.py, compression.py, docs/errors.md).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from typing import Any, Protocol, runtime_checkable

import orjson
from starlette.types import Scope

from .callers import Caller, identify, key_hash
from .errors import ConfigurationError
from .payload import own_size

logger = logging.getLogger("agentic_middleware")


class StoreUnavailable(Exception):
    """The store did not answer (down, unreachable, or slower than its timeout)."""


@runtime_checkable
class KeyValueStore(Protocol):
    """Bytes under string keys, each for a time to live. `get` returns None for a key it does not hold (or no longer
    holds: expired or evicted); `delete` of a key it does not hold does nothing. Each may raise when the store
    cannot answer; none may hang (a shared store bounds each call by a timeout)."""

    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl: float) -> None: ...

    async def delete(self, key: str) -> None: ...


class MemoryStore:
    """The default store: in this process, bounded by `max_entries` and by `max_bytes` of values, the least recently
    used dropped first; each entry for the time to live it was put with."""

    def __init__(self, max_entries: int = 4096, max_bytes: int = 64 * 1024 * 1024) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ConfigurationError("MemoryStore needs max_entries >= 1 and max_bytes >= 1")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.size = 0  # the bytes of the values held
        self.entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.entries)

    async def get(self, key: str) -> bytes | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        if entry[0] <= time.monotonic():
            self._drop(key)
            return None
        self.entries.move_to_end(key)
        return entry[1]

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        self._drop(key)
        if len(value) > self.max_bytes:
            return  # it could never be held: as if evicted at once
        # At its own size: a value is orjson's output, which keeps the 4-8 KB buffer it was written into however short
        # (`own_size`), so `max_bytes` would bound a fraction of what the entries hold.
        self.entries[key] = (time.monotonic() + ttl, own_size(value))
        self.size += len(value)
        while len(self.entries) > self.max_entries or self.size > self.max_bytes:
            self._drop(next(iter(self.entries)))

    async def delete(self, key: str) -> None:
        self._drop(key)

    def _drop(self, key: str) -> None:
        entry = self.entries.pop(key, None)
        if entry is not None:
            self.size -= len(entry[1])


def caller_part(caller: str | None) -> str:
    """The part of a key naming a caller: hashed, so that a store's keys name no one; `-` for a request that names
    no one (such requests share their state, and only with each other)."""
    return "-" if caller is None else hashlib.sha256(caller.encode()).hexdigest()[:32]


class CallerState:
    """One request's view of the store: `name` becomes `<kind>:<caller>:<name>`, the caller being the request's
    (`request.state.agentic_caller`, else the middleware's `caller` function; asked once). Values are JSON.

    Every method raises when the caller function or the store fails: a hook decides what that means for it."""

    __slots__ = ("_who", "caller", "scope", "store")  # one per request that has a `logging_obj`, for its whole life

    def __init__(self, store: KeyValueStore, scope: Scope, caller: Caller | None = None) -> None:
        self.store = store
        self.scope = scope
        self.caller = key_hash if caller is None else caller
        self._who: str | None = None

    async def key(self, kind: str, name: str) -> str:
        """`<kind>:<caller>:<name>`; a kind holding `:` could end where another kind's caller part begins (kind
        `a:<hash>` of one caller, kind `a` of that hash's caller), so it is refused: the caller is always the
        second part, whatever the name holds."""
        if not isinstance(kind, str) or not kind or ":" in kind:
            raise ValueError(f"a state's kind must be a non-empty string without ':', got {kind!r}")
        return f"{kind}:{await self.who()}:{name}"

    async def who(self) -> str:
        """The caller's part of the keys: a hash, or `-` for a request that names no one."""
        if self._who is None:
            self._who = caller_part(await identify(self.scope, self.caller))
        return self._who

    async def named(self) -> bool:
        """Whether the request names a caller: state that holds a client's content is kept only for one."""
        return await self.who() != "-"

    async def get(self, kind: str, name: str) -> Any:
        """The JSON value under `name`, or None."""
        raw = await self.store.get(await self.key(kind, name))
        return None if raw is None else orjson.loads(raw)

    async def put(self, kind: str, name: str, value: Any, ttl: float) -> None:
        await self.store.put(await self.key(kind, name), orjson.dumps(value), ttl)

    async def delete(self, kind: str, name: str) -> None:
        await self.store.delete(await self.key(kind, name))


class FailureLog:
    """Logs a store's failures once per kind of failure until the store answers again (then says so once), so that
    an outage under load is a few lines, not one per request; each failure is also logged at debug level."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.failing: set[tuple[str, str]] = set()

    def failed(self, operation: str, error: BaseException, then: str = "") -> None:
        """`operation` failed with `error`; `then` says what happens instead."""
        kind = (operation, type(error).__name__)
        if kind in self.failing:
            logger.debug("%s failed to %s again: %s", self.what, operation, error)
            return
        self.failing.add(kind)
        logger.warning(
            "%s failed to %s (%s: %s)%s; logged once until it answers again",
            self.what,
            operation,
            type(error).__name__,
            error,
            f": {then}" if then else "",
            exc_info=None if isinstance(error, StoreUnavailable) else error,  # a store of one's own: its traceback
        )

    def answered(self) -> None:
        if self.failing:
            self.failing.clear()
            logger.warning("%s answers again", self.what)
