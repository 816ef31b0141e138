"""The web planner: `tuneplan serve` runs a FastAPI app (`tuneplan.web.app.create_app`) that serves one
static page at `/` and the JSON API it calls under `/api` (documented at `/docs`, `/openapi.json`).
Nothing is imported here: FastAPI loads only when the app is built (the `web` extra)."""
