"""The OpenAPI 3 document of the whole HTTP API, generated from the Powertools routes.

The routers (chat, events and lead) go on one resolver built as the functions build theirs, and Powertools
writes the document from their pydantic request models, parameters and ``responses=``. Two things
are then made true to the contract that Powertools cannot know: validation answers 400
``bad_request`` (its default 422 entries are removed), and the bearer JWT is required everywhere
except the resolver's public paths.

    python -m support_agent.api.openapi > docs/openapi.json     # or: make openapi
    python -m support_agent.api.openapi --check docs/openapi.json
"""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any

from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer, Server

from support_agent.api import chat_routes, events_routes, lead_routes
from support_agent.api.http import build_resolver

TITLE = "Support agent API"
VERSION = "1.0.0"
DESCRIPTION = (
    "A customer-support agent: customers chat with a bounded, audited Claude tool-use loop; support leads "
    "decide refunds above the threshold, close hand-offs and read the audit trail.\n\n"
    "Every route except `/api/health` needs `Authorization: Bearer <JWT>`. The customer id comes from the "
    'token only. Errors are `{"error": {"code", "message"}}`; HTTP field names are camelCase, tool '
    "inputs and outputs snake_case, money integer minor units."
)
BEARER = "bearerJwt"


def _public_paths() -> frozenset[str]:
    """The paths ``build_resolver`` lets through unauthenticated (its default, read from its signature)."""
    return frozenset(inspect.signature(build_resolver).parameters["public_paths"].default)


def document() -> dict[str, Any]:
    app = build_resolver()
    app.include_router(chat_routes.router)
    app.include_router(events_routes.router)
    app.include_router(lead_routes.router)
    raw = app.get_openapi_json_schema(
        title=TITLE,
        version=VERSION,
        description=DESCRIPTION,
        servers=[Server(url="/", description="The API's base URL (the ApiUrl stack output)")],
        security_schemes={
            BEARER: HTTPBearer(
                scheme="bearer",
                bearerFormat="JWT",
                description="HS256 locally (`make tokens`), RS256/ES256 from the identity provider's JWKS in AWS.",
            )
        },
        security=[{BEARER: []}],
    )
    doc: dict[str, Any] = json.loads(raw)
    public = _public_paths()
    for path, item in doc["paths"].items():
        for operation in item.values():
            if operation["responses"].get("422", {}).get("description") == "Validation Error":
                del operation["responses"]["422"]  # Powertools' own; its validation answers our 400
            if path in public:
                operation["security"] = []
    _chat_headers(doc["paths"]["/api/chat"]["post"])
    doc["paths"] = dict(sorted(doc["paths"].items()))
    _drop_unreferenced_schemas(doc)
    return doc


def _chat_headers(operation: dict[str, Any]) -> None:
    """The chat route's headers, which it reads from the event (Powertools documents only parameters it parses):
    ``Idempotency-Key`` and ``Prefer`` in; ``Location``, ``Idempotent-Replayed`` and ``Preference-Applied``
    out."""
    operation["parameters"] = [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "1 to 255 visible ASCII characters; a resend with it gets the turn's answer again",
            "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x21-\\x7e]+$"},
        },
        {
            "name": "Prefer",
            "in": "header",
            "required": False,
            "description": "`respond-async`: hand the turn to the worker at once (202)",
            "schema": {"type": "string"},
        },
    ]
    replayed = {
        "Idempotent-Replayed": {
            "description": "`true` when the answer is a stored one, for a resend with the same key",
            "schema": {"type": "string", "enum": ["true"]},
        }
    }
    operation["responses"]["200"]["headers"] = dict(replayed)
    operation["responses"]["202"]["headers"] = {
        "Location": {
            "description": "The turn's record: GET it until it is not running",
            "required": True,
            "schema": {"type": "string"},
        },
        "Preference-Applied": {"description": "`respond-async` when asked for", "schema": {"type": "string"}},
        **replayed,
    }


def _drop_unreferenced_schemas(doc: dict[str, Any]) -> None:
    """Remove the schemas nothing points at any more (Powertools' 422 and response-validation bodies)."""
    schemas: dict[str, Any] = doc.get("components", {}).get("schemas", {})
    while True:
        text = json.dumps({k: v for k, v in doc.items() if k != "components"}) + json.dumps(schemas)
        unused = [name for name in schemas if f'"#/components/schemas/{name}"' not in text]
        if not unused:
            return
        for name in unused:
            del schemas[name]


def render() -> str:
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--check"] and len(argv) == 2:
        with open(argv[1], encoding="utf-8") as f:
            if f.read() == render():
                return 0
        print(f"{argv[1]} is out of date: run `make openapi`", file=sys.stderr)
        return 1
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
