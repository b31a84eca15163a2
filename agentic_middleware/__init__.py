"""Server-side tools for any LLM gateway: a pure ASGI agentic loop with LiteLLM-compatible hooks."""

from .config import Settings, load_config
from .errors import ConfigurationError, HookError
from .hooks import AgenticHook, AgenticLoopLogging, AgenticLoopPlan, AgenticLoopRequestPatch, CustomLogger
from .middleware import AgenticLoopMiddleware
from .payload import JSONObject

__all__ = [
    "AgenticHook",
    "AgenticLoopLogging",
    "AgenticLoopMiddleware",
    "AgenticLoopPlan",
    "AgenticLoopRequestPatch",
    "ConfigurationError",
    "CustomLogger",
    "HookError",
    "JSONObject",
    "Settings",
    "load_config",
]
