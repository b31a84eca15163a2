"""Server-side tools for any LLM gateway: a pure ASGI agentic loop with LiteLLM-compatible hooks."""

__version__ = "0.2.0"  # the one place the version is written: pyproject.toml reads it (tool.hatch.version)

from .chains import ChainStore, MemoryChainStore
from .config import Settings, load_config
from .declare import ServerTool, server_tool
from .errors import ConfigurationError, HookError, RequestRefused
from .hooks import AgenticHook, AgenticLoopLogging, AgenticLoopPlan, AgenticLoopRequestPatch, CustomLogger
from .middleware import AgenticLoopMiddleware
from .observe import RoundRecord
from .payload import JSONObject
from .policy import ToolPolicy
from .tools import ServerTools

__all__ = [
    "AgenticHook",
    "AgenticLoopLogging",
    "AgenticLoopMiddleware",
    "AgenticLoopPlan",
    "AgenticLoopRequestPatch",
    "ChainStore",
    "ConfigurationError",
    "CustomLogger",
    "HookError",
    "JSONObject",
    "MemoryChainStore",
    "RequestRefused",
    "RoundRecord",
    "ServerTool",
    "ServerTools",
    "Settings",
    "ToolPolicy",
    "__version__",
    "load_config",
    "server_tool",
]
