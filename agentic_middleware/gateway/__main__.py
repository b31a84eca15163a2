"""`python -m agentic_middleware.gateway`, the same as the `agentic-gateway` command."""

import sys

from .cli import main

sys.exit(main())
