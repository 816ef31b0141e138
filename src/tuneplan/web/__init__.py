"""The web planner: `tuneplan serve` runs a FastAPI app (`tuneplan.web.app.create_app`) that serves one
static page at `/` and the JSON API it calls under `/api` (documented at `/docs`, `/openapi.json`).

Nothing heavy is imported here: FastAPI loads only when the app is built (the `web` extra).
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def create_app(*args: Any, **kwargs: Any):
    """Build the FastAPI app (see `tuneplan.web.app.create_app`)."""
    from tuneplan.web.app import create_app as _create_app

    return _create_app(*args, **kwargs)
