"""A Starlette gateway with the agentic middleware in front of a model app: `python -m examples.gateway`."""

from .app import CONFIG, create_app, model_app, model_from_env
from .demo_model import DemoModel
from .serve import serving
from .upstream import Upstream

__all__ = ["CONFIG", "DemoModel", "Upstream", "create_app", "model_app", "model_from_env", "serving"]
