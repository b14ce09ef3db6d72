"""Swagger UI for `make dev` at /api/docs, offline: no CDN is needed or reachable.

The UI's bundle and stylesheet are the copies Powertools ships for its own ``enable_swagger``
(swagger-ui-dist, Apache-2.0), served from the installed package, so nothing is vendored here.
The page loads /api/openapi.json, which is the committed docs/openapi.json, read on each request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aws_lambda_powertools.event_handler.openapi import swagger_ui

from devstack.stack import REPO_ROOT

SPEC = REPO_ROOT / "docs" / "openapi.json"
SWAGGER_DIR = Path(swagger_ui.__file__).resolve().parent

PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Support agent API — Swagger UI</title>
  <link rel="icon" href="data:,">
  <link rel="stylesheet" href="/api/docs/swagger-ui.min.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/api/docs/swagger-ui-bundle.min.js"></script>
  <script>
    // Authorize with a demo token from `make tokens` (or the banner of `make dev`).
    window.ui = SwaggerUIBundle({
      url: "/api/openapi.json",
      dom_id: "#swagger-ui",
      deepLinking: true,
      persistAuthorization: true,
      presets: [SwaggerUIBundle.presets.apis],
      layout: "BaseLayout",
    });
  </script>
</body>
</html>
"""

_FILES: dict[str, tuple[Callable[[], bytes], str]] = {
    "/api/docs": (PAGE.encode, "text/html; charset=utf-8"),
    "/api/docs/": (PAGE.encode, "text/html; charset=utf-8"),
    "/api/docs/swagger-ui-bundle.min.js": (
        (SWAGGER_DIR / "swagger-ui-bundle.min.js").read_bytes,
        "text/javascript; charset=utf-8",
    ),
    "/api/docs/swagger-ui.min.css": ((SWAGGER_DIR / "swagger-ui.min.css").read_bytes, "text/css; charset=utf-8"),
    "/api/openapi.json": (SPEC.read_bytes, "application/json"),
}


def serve(path: str) -> tuple[bytes, str] | None:
    """(body, content type) for a docs path; None for any other path."""
    found = _FILES.get(path)
    return (found[0](), found[1]) if found else None
