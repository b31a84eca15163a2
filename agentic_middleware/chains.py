"""Follow-ups by `previous_response_id` after a Responses turn whose id names an incomplete stored response.

The app stores each response with its context, and a store like OpenAI's refuses a follow-up whose context holds a
`function_call` without its output. Some turns end with an id that names such a response: a live stream's id is the
first round's (the SDKs' stream helpers need one id from `response.created` to the end), and a turn refused without
a closing call (`closing="text"`, or a server call next to a client's call) ends on a response whose server calls
never ran. For those, and only those, a small record is kept under the id the client got: the response to chain
from (the turn's last) and the items the follow-up must carry first (an output for each server call left
unanswered). A request whose `previous_response_id` names a record is rewritten before any call of the app. A
record is bound to the caller whose turn made it (callers.py): it is stored under a key naming that caller, and a
request of another caller neither finds, uses nor changes it.

With the hooks' state (store.py), this is what the middleware keeps between requests. The default store is in the
process (bounded, with a time to live); replicas share one on Redis (`RedisChainStore`, redis.py) or pass a
`ChainStore` of their own. A store that fails is logged (once per kind of failure) and read as holding nothing, but
for a DELETE, which must know (followups.py: 503).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import orjson
from starlette.types import Scope

from .callers import Caller, identify, key_hash
from .errors import ConfigurationError
from .store import FailureLog, KeyValueStore, MemoryStore, caller_part
from .surfaces import field
from .surfaces.responses import CALL_TYPES, input_items
from .surfaces.responses_relay import ResponsesRelay

logger = logging.getLogger("agentic_middleware")

# What each unanswered server call's output says, by why the turn ended (as the closing call's outputs, in the past).
NOT_RUN = {
    "limit": "Not run: that request's budget of server tool calls was spent (max_agentic_loops={limit}).",
    "repeated_tool_calls": "Not run: the same call had already run in that request.",
}
NOT_RUN_OTHERWISE = "Not run: the server ended that request before running this call."


@runtime_checkable
class ChainStore(Protocol):
    """Where the records live: a mapping from a key (`chain_key`: the caller and the id a client got) to a JSON
    object (`previous_response_id`, the id to chain from; `input`, the items to put first; `caller`, the key's
    caller part; `deleted` once the app deleted the client's id). Values are plain JSON, so a shared store can keep
    them as `orjson.dumps(chain)`. `get` returns None for a key it does not hold (or no longer holds). A store may
    also have `async delete(key)`: a client's `DELETE` of a recorded id then drops its record (followups.py)."""

    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def put(self, key: str, chain: dict[str, Any]) -> None: ...


class KeyValueChainStore:
    """A `ChainStore` on a `KeyValueStore` (store.py): each record as JSON under `chain:<key>`, for `ttl` seconds
    after it was recorded. `shared`: the middleware's hooks keep their state in the same store (their request's
    `logging_obj.state`), as `RedisChainStore` does; else they get one of their own in this process."""

    def __init__(self, store: KeyValueStore, ttl: float = 86400.0, shared: bool = False) -> None:
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < float("inf"):
            raise ConfigurationError(f"a chain store's ttl must be a number of seconds above 0, got {ttl!r}")
        if isinstance(store, type) or not all(
            inspect.iscoroutinefunction(getattr(store, name, None)) for name in ("get", "put", "delete")
        ):
            raise ConfigurationError(
                f"KeyValueChainStore needs a KeyValueStore (an instance) with async get, put and delete: {store!r}"
            )
        self.store = store
        self.ttl = float(ttl)
        self.shared = shared

    async def get(self, key: str) -> dict[str, Any] | None:
        raw = await self.store.get(f"chain:{key}")
        if raw is None:
            return None
        try:
            chain = orjson.loads(raw)
        except orjson.JSONDecodeError:
            logger.warning("the chain store holds a record of %r that is not JSON: taken as none", key)
            return None
        return chain if isinstance(chain, dict) else None

    async def put(self, key: str, chain: dict[str, Any]) -> None:
        await self.store.put(f"chain:{key}", orjson.dumps(chain), self.ttl)

    async def delete(self, key: str) -> None:
        await self.store.delete(f"chain:{key}")


class MemoryChainStore(KeyValueChainStore):
    """The default store: in this process, the `max_entries` most recently recorded or used ids, each for `ttl`
    seconds after it was recorded."""

    def __init__(self, max_entries: int = 4096, ttl: float = 86400.0) -> None:
        if max_entries < 1 or ttl <= 0:
            raise ConfigurationError("MemoryChainStore needs max_entries >= 1 and ttl > 0")
        super().__init__(MemoryStore(max_entries), ttl)
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self.memory)

    @property
    def memory(self) -> MemoryStore:
        assert isinstance(self.store, MemoryStore)
        return self.store


class ChainsUnavailable(Exception):
    """The store or the caller function failed where the middleware must know whether a record exists (a DELETE)."""


def chain_key(caller: str | None, response_id: str) -> str:
    """The store's key of a record: the caller (hashed, so that a store's keys name no one) and the id the client
    got. A request that names no one has keys of its own (`-:`), shared by every such request."""
    return f"{caller_part(caller)}:{response_id}"


class Chains:
    """Records what an incomplete turn's follow-up needs, and rewrites that follow-up; every record is bound to the
    caller whose turn made it (callers.py): another caller's request never finds it."""

    def __init__(self, store: ChainStore, caller: Caller = key_hash) -> None:
        self.store = store
        self.caller = caller
        self.failures = FailureLog("the chain store")

    async def key(self, scope: Scope, response_id: str) -> str:
        """The store's key of `response_id` for this request's caller; raises when the caller function fails."""
        return chain_key(await identify(scope, self.caller), response_id)

    async def resume(self, body: dict[str, Any], scope: Scope) -> dict[str, Any] | None:
        """The request rewritten to chain from the recorded response, its items first; None: nothing recorded for
        this caller.

        A store or caller function that fails leaves the request as it is (it may then fail at the app, as without
        a record)."""
        previous = body.get("previous_response_id")
        items = body.get("input")
        if not isinstance(previous, str) or not isinstance(items, str | list | None):
            return None
        try:
            key = await self.key(scope, previous)
        except Exception:
            logger.warning("the caller function failed: the request goes as sent", exc_info=True)
            return None
        chain = await self.read(key)
        if chain is None or chain.get("deleted"):  # a deleted id fails at the app as any deleted id does
            return None
        given = input_items(body) or []
        return {**body, "previous_response_id": chain["previous_response_id"], "input": [*chain["input"], *given]}

    async def read(self, key: str, strict: bool = False) -> dict[str, Any] | None:
        """The record under a key, if the store holds a well-formed one made by that key's caller; a store that
        fails (`strict`: raises `ChainsUnavailable`), or a record of another shape, is logged as a warning and
        taken as none."""
        try:
            chain = await self.store.get(key)
        except Exception as error:
            self.failures.failed("read", error, "the request goes as sent")
            if strict:
                raise ChainsUnavailable("the chain store failed") from error
            return None
        self.failures.answered()
        if chain is None:
            return None
        if not (
            isinstance(chain, Mapping)
            and isinstance(chain.get("previous_response_id"), str)
            and isinstance(chain.get("input"), list)
            and chain.get("caller") == key.partition(":")[0]
        ):
            logger.warning(
                "the chain store's record of %r is not {previous_response_id: str, input: list, caller: str} for "
                "that caller: the request goes as sent (got %.200r)",
                key,
                chain,
            )
            return None
        return dict(chain)

    async def lookup(self, scope: Scope, response_id: str) -> tuple[str, dict[str, Any] | None]:
        """The key and record of an id for this request's caller; raises `ChainsUnavailable` when the caller
        function or the store fails (a DELETE must not answer as if there were no record)."""
        try:
            key = await self.key(scope, response_id)
        except Exception as error:
            logger.warning("the caller function failed", exc_info=True)
            raise ChainsUnavailable("the caller function failed") from error
        return key, await self.read(key, strict=True)

    async def mark_deleted(self, key: str, chain: dict[str, Any]) -> None:
        """Note that the app deleted the client's id: a retried DELETE goes on to the chained response."""
        try:
            await self.store.put(key, {**chain, "deleted": True})
        except Exception as error:
            self.failures.failed("update", error)

    async def drop(self, key: str) -> None:
        """Drop a record (when the store has `delete`)."""
        delete = getattr(self.store, "delete", None)
        if delete is None:
            return
        try:
            await delete(key)
        except Exception as error:
            self.failures.failed("delete", error)

    async def record(
        self, scope: Scope, body: Mapping[str, Any], last: Any, final: Any, events: Any, reason: str, limit: int
    ) -> None:
        """After a turn: a record under the id the client got when it does not name a complete stored response.

        `scope` names the caller, `body` is the last call's request, `last` the app's last answer (the stored
        response), `final` the client's answer, `events` the client's stream if any (a live stream's id is its
        first round's), `reason` why the loop ended (with `limit`, for the outputs' text)."""
        if body.get("store") is False or not isinstance(last, Mapping) or final is None:
            return
        relay = getattr(events, "relay", None)
        client_id = relay.response_id if isinstance(relay, ResponsesRelay) and relay.started else field(final, "id")
        last_id = last.get("id")
        if not isinstance(client_id, str) or not isinstance(last_id, str):
            return
        given = {field(item, "call_id") for item in field(final, "output") or () if field(item, "type") in CALL_TYPES}
        text = NOT_RUN.get(reason, NOT_RUN_OTHERWISE).format(limit=limit)
        outputs = [
            {"type": f"{item['type']}_output", "call_id": item["call_id"], "output": text}
            for item in last.get("output") or ()
            if isinstance(item, Mapping)
            and item.get("type") in CALL_TYPES
            and isinstance(item.get("call_id"), str)
            and item["call_id"] not in given
        ]
        if client_id == last_id and not outputs:
            return  # the client's id names the turn's last response, which answers every call it holds
        try:
            key = await self.key(scope, client_id)
        except Exception:
            logger.warning("the caller function failed: %r is not recorded, its follow-up may fail", client_id)
            return
        chain = {"previous_response_id": last_id, "input": outputs, "caller": key.partition(":")[0]}
        try:
            await self.store.put(key, chain)
        except Exception as error:
            self.failures.failed("record", error, "a follow-up by that id may fail at the app")
            return
        self.failures.answered()


def chains_of(option: ChainStore | bool | None, caller: Caller | None = None) -> Chains | None:
    """The middleware's `chain_store` option: None or True, a `MemoryChainStore`; False, none; else the store given.
    `caller` is the middleware's (callers.py), `key_hash` by default."""
    caller = key_hash if caller is None else caller
    if option is False:
        return None
    if option is None or option is True:
        return Chains(MemoryChainStore(), caller)
    if (
        isinstance(option, type)
        or not isinstance(option, ChainStore)
        or not all(inspect.iscoroutinefunction(getattr(option, name)) for name in ("get", "put"))
    ):
        raise ConfigurationError(
            f"chain_store must be a store (an instance) with async get(id) and put(id, chain), or a bool: {option!r}"
        )
    return Chains(option, caller)


def hooks_store(chains: Chains | None) -> KeyValueStore:
    """Where the hooks' state lives (`logging_obj.state`): the chain store's key-value store when it is shared
    (`RedisChainStore`), else a `MemoryStore` of this middleware's own."""
    store = chains.store if chains is not None else None
    if isinstance(store, KeyValueChainStore) and store.shared:
        return store.store
    return MemoryStore()


_REDIS_OPTIONS = ("redis", "prefix", "ttl", "timeout")


def chain_store_from_config(value: object, where: str) -> ChainStore | bool | None:
    """YAML's `chain_store`: true/false/null as in code, or `{redis: URL}` (with `prefix`, `ttl` and `timeout` as
    `RedisChainStore` takes them), which needs the `[redis]` extra."""
    if value is None or isinstance(value, bool):
        return value
    if not isinstance(value, Mapping) or not isinstance(value.get("redis"), str):
        raise ConfigurationError(f"{where} must be true, false or {{redis: URL}}, got {value!r:.200}")
    unknown = sorted(map(str, set(value) - set(_REDIS_OPTIONS)))
    if unknown:
        raise ConfigurationError(f"{where} has unknown keys {unknown} (known: {', '.join(_REDIS_OPTIONS)})")
    try:
        from .redis import RedisChainStore
    except ImportError as error:
        raise ConfigurationError(f"{where}: {error}") from None
    options = {name: value[name] for name in ("prefix", "ttl", "timeout") if name in value}
    return RedisChainStore(value["redis"], **options)
