"""The state kept between requests on Redis, for replicas behind a load balancer (docs/production.md).

`RedisChainStore(url)` is a chain store (chains.py) whose Redis also holds the hooks' state (the compression
stash): every replica given the same URL finds what another left. In YAML: `chain_store: {redis: URL}`.

Redis is asked through the official `redis` package's asyncio client (extra `[redis]`). Every call is bounded by
`timeout` (connecting, each socket read, and the call as a whole, one retry included): a Redis that is down, unreachable
or stalled raises `StoreUnavailable` within it, never hangs a request. What a failure means for a request is its
user's (docs/errors.md): the chain store's follow-up goes as sent and its DELETE is 503; the compression stash is
kept in the request alone.
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

try:
    import redis.asyncio as aioredis
    from redis.asyncio.connection import SSLConnection
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import RedisError
except ImportError as error:
    raise ImportError(
        f"agentic_middleware.redis needs the redis package: pip install 'agentic-middleware[redis]' ({error})",
        name=error.name,
    ) from error

from .chains import KeyValueChainStore
from .errors import ConfigurationError
from .store import StoreUnavailable

__all__ = ["RedisChainStore", "RedisStore"]

DEFAULT_TIMEOUT = 2.0  # seconds: a Redis on the same network answers in a millisecond or two
MAX_PX = 2**62  # a time to live (ms) past what Redis can count (now + PX within 64 bits) is kept as long as it can


class RedisStore:
    """A `KeyValueStore` (store.py) on Redis: each key under `prefix`, each value with its time to live (`PX`).

    The client connects on first use, in the event loop of that use, and reconnects after Redis comes back."""

    def __init__(self, url: str, *, prefix: str = "agentic:", timeout: float = DEFAULT_TIMEOUT) -> None:
        if not isinstance(prefix, str):
            raise ConfigurationError(f"the Redis prefix must be a string, got {prefix!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
            raise ConfigurationError(f"the Redis timeout must be a number of seconds above 0, got {timeout!r}")
        self.url = url
        self.prefix = prefix
        self.timeout = float(timeout)
        try:
            self.client: aioredis.Redis = self._connect()  # checks the URL now; connects on first use
        except (ValueError, RedisError) as error:
            raise ConfigurationError(f"not a Redis URL ({error}): {_shown(url)}") from None
        self.lock = threading.Lock()
        self.first = True  # `client` not yet given to a loop
        self.local = threading.local()  # this thread's (event loop, client): loops of other threads run at once
        kwargs = self.client.connection_pool.connection_kwargs
        self.where = f"Redis at {kwargs.get('host', kwargs.get('path', '?'))}:{kwargs.get('port', '')}".rstrip(":")
        if issubclass(self.client.connection_pool.connection_class, SSLConnection):
            self.where += " over TLS"  # a rediss:// URL to a Redis without TLS fails as "no answer in time"

    def _connect(self) -> aioredis.Redis:
        return aioredis.Redis.from_url(
            self.url,
            socket_timeout=self.timeout,
            socket_connect_timeout=self.timeout,
            retry=Retry(NoBackoff(), 1),  # once more on a fresh connection: a pooled one may predate a restart
        )

    def _client(self) -> aioredis.Redis:
        """The client of the running event loop: an asyncio connection serves only the loop that opened it, so
        a store used from another loop (a test client's loop per request, a loop per test, a loop in each of
        several threads) gets a client of its own; a former one's connections are left to their loop, which may
        be closed already. The first loop to ask gets `client`."""
        loop = asyncio.get_running_loop()
        if getattr(self.local, "loop", None) is not loop:
            with self.lock:
                first, self.first = self.first, False
            self.local.client = self.client if first else self._connect()
            self.local.loop = loop
        client: aioredis.Redis = self.local.client
        return client

    def __repr__(self) -> str:
        return f"RedisStore({self.where}, prefix={self.prefix!r})"

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            async with asyncio.timeout(self.timeout * 2):  # the retry's connect and read each have `timeout`
                return await getattr(self._client(), name)(*args, **kwargs)
        except (RedisError, OSError, TimeoutError) as error:
            reason = "no answer in time" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"
            raise StoreUnavailable(f"{self.where} failed ({reason})") from error

    async def get(self, key: str) -> bytes | None:
        value = await self._call("get", self.prefix + key)
        if isinstance(value, str):  # a URL with `decode_responses=true`: the values are orjson's UTF-8
            return value.encode()
        return value if isinstance(value, bytes) or value is None else bytes(value)

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        await self._call("set", self.prefix + key, value, px=round(min(max(ttl * 1000, 1), MAX_PX)))

    async def delete(self, key: str) -> None:
        await self._call("delete", self.prefix + key)

    async def aclose(self) -> None:
        """Close the client's connections (a gateway's shutdown; they would close with the process anyway)."""
        if getattr(self.local, "loop", None) is asyncio.get_running_loop():
            await self.local.client.aclose()
        elif self.first:
            await self.client.aclose()


class RedisChainStore(KeyValueChainStore):
    """The chain store on Redis at `url` (`redis://host:port/db`, `rediss://` for TLS, `unix://` for a socket): each
    record under `<prefix>chain:<caller>:<id>` for `ttl` seconds. The middleware's hooks keep their state there too
    (`<prefix>compression:<caller>:<key>`). `timeout` bounds each call to Redis (docs/production.md)."""

    def __init__(
        self, url: str, *, prefix: str = "agentic:", ttl: float = 86400.0, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        super().__init__(RedisStore(url, prefix=prefix, timeout=timeout), ttl, shared=True)

    def __repr__(self) -> str:
        return f"RedisChainStore({self.store!r}, ttl={self.ttl:g})"


def _shown(url: str) -> str:
    """A URL without its password, for error messages."""
    scheme, found, rest = url.partition("://")
    if found and "@" in rest:
        return f"{scheme}://***@{rest.rpartition('@')[2]}"
    return url
