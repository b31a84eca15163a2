"""`LoopSetup`: what every loop of one middleware shares, prepared once when the middleware is built.

The hooks sorted by what they take part in (request hooks, LiteLLM's pre-call lifecycle, guardrails), the
operator's internal headers, the settings and the observer; each request's `AgenticLoop` (`loop.py`) reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from starlette.types import ASGIApp

from .ends import REQUEST_HOOK
from .hooks import BoundHook
from .observe import Observer
from .precall import has_pre_call, idle_guardrail, is_guardrail, judges_reruns
from .settings import Settings
from .store import KeyValueStore, MemoryStore

if TYPE_CHECKING:
    from .chains import Chains

logger = logging.getLogger("agentic_middleware")


class LoopSetup:
    """What every loop of one middleware shares, prepared once when the middleware is built."""

    def __init__(
        self,
        app: ASGIApp,
        hooks: Sequence[BoundHook],
        settings: Settings,
        observer: Observer,
        chains: Chains | None = None,
        state: KeyValueStore | None = None,
    ) -> None:
        self.app = app
        self.chains = chains  # follow-ups by id after an incomplete Responses turn (chains.py)
        self.state = MemoryStore() if state is None else state  # the hooks' `logging_obj.state` (store.py)
        self.hooks = hooks
        self.request_hooks = [hook for hook in hooks if hook.methods[REQUEST_HOOK] is not None]
        self.pre_call_hooks = [hook for hook in hooks if has_pre_call(hook)]  # LiteLLM's pre-call lifecycle
        self.guardrail_hooks = [hook for hook in hooks if is_guardrail(hook)]  # they judge every request
        self.rerun_guardrails = [hook for hook in hooks if judges_reruns(hook)]  # and what each round adds
        for hook in hooks:
            if (event := idle_guardrail(hook)) is not None:
                logger.warning(
                    "guardrail %s has event_hook %r: only pre_call and during_call guardrails judge requests here, "
                    "so it will never act",
                    hook.name,
                    event,
                )
        self.internal_headers = settings.header_templates()
        self.settings = settings
        self.observer = observer
