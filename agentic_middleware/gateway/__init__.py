"""`agentic-gateway`: a Starlette gateway with the agentic middleware in front of a model server, or of the scripted
demo model. Needs the `gateway` extra: `pip install 'agentic-middleware[gateway]'`.
"""

try:
    import aiohttp  # noqa: F401  (each checked here so that a missing one names the extra, not itself)
    import prometheus_client  # noqa: F401
    import uvicorn  # noqa: F401
    import yaml  # noqa: F401
except ImportError as error:  # pragma: no cover - the message is tested in a venv without the extra
    raise ImportError(
        f"agentic_middleware.gateway needs the gateway extra: pip install 'agentic-middleware[gateway]' ({error})",
        name=error.name,
    ) from error

from .app import DEMO_CONFIG, create_app, model_app
from .demo_model import DemoModel
from .serve import serving
from .upstream import Upstream, Upstreams

__all__ = ["DEMO_CONFIG", "DemoModel", "Upstream", "Upstreams", "create_app", "model_app", "serving"]
