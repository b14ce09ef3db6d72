"""The OpenAPI 3 document of the whole HTTP API, generated from the Powertools routes.

The routers (chat, events, lead and staff) go on one resolver built as the functions build theirs, and Powertools
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

from support_agent.api import chat_routes, events_routes, lead_routes, staff_routes
from support_agent.api.http import build_resolver
from support_agent.api.route_docs import documented
from support_agent.auth import Authenticator

TITLE = "Support agent API"
VERSION = "1.0.0"
DESCRIPTION = (
    "A customer-support agent: customers chat with a bounded, audited Claude tool-use loop; support staff take "
    "over the conversations handed to a person (claim, reply, hand back to the bot, close); support leads decide "
    "refunds above the threshold and read the audit trail.\n\n"
    "Every route except `/api/health` needs `Authorization: Bearer <JWT>`. The customer id comes from the "
    'token only. Errors are `{"error": {"code", "message"}}`; HTTP field names are camelCase, tool '
    "inputs and outputs snake_case, money integer minor units."
)
BEARER = "bearerJwt"


def _public_paths() -> frozenset[str]:
    """The paths ``build_resolver`` lets through unauthenticated (its default, read from its signature)."""
    return frozenset(inspect.signature(build_resolver).parameters["public_paths"].default)


def _serves_nothing() -> Authenticator:
    raise RuntimeError("the OpenAPI document's resolver is read, never served")


def document() -> dict[str, Any]:
    app = build_resolver(_serves_nothing)
    app.include_router(chat_routes.router)
    app.include_router(events_routes.router)
    app.include_router(lead_routes.router)
    app.include_router(staff_routes.router)
    for route in app._static_routes + app._dynamic_routes:  # models named by the routes, as classes
        if route.responses:
            route.responses = documented(route.responses)
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
            if "tags" in operation:  # Powertools keeps a route's tags in a set: their order varies by hash seed
                operation["tags"] = sorted(operation["tags"])
    _chat_headers(doc["paths"]["/api/chat"]["post"])
    _reply_headers(doc["paths"]["/api/handoffs/{handoff_id}/messages"]["post"])
    doc["paths"].update(_mcp_paths())
    doc["components"]["schemas"].update(MCP_SCHEMAS)
    doc["paths"] = dict(sorted(doc["paths"].items()))
    _drop_unreferenced_schemas(doc)
    return doc


def _chat_headers(operation: dict[str, Any]) -> None:
    """The chat route's headers, which it reads from the event (Powertools documents only parameters it parses):
    ``Idempotency-Key`` and ``Prefer`` in; ``Location``, ``Idempotent-Replayed`` and ``Preference-Applied``
    out."""
    operation["parameters"] = [
        _idempotency_key("a resend with it gets the turn's answer again"),
        {
            "name": "Prefer",
            "in": "header",
            "required": False,
            "description": "`respond-async`: hand the turn to the worker at once (202)",
            "schema": {"type": "string"},
        },
    ]
    replayed = dict(_REPLAYED)
    operation["responses"]["200"]["headers"] = dict(replayed)
    operation["responses"]["202"]["headers"] = {
        "Location": {
            "description": "The turn's record: GET it until it is not running. Absent when a person answers the "
            "conversation (`owner: person`): no turn ran",
            "schema": {"type": "string"},
        },
        "Preference-Applied": {"description": "`respond-async` when asked for", "schema": {"type": "string"}},
        **replayed,
    }


_REPLAYED = {
    "Idempotent-Replayed": {
        "description": "`true` when the answer is a stored one, for a resend with the same key",
        "schema": {"type": "string", "enum": ["true"]},
    }
}


def _idempotency_key(what: str) -> dict[str, Any]:
    return {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "description": f"1 to 255 visible ASCII characters; {what}",
        "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x21-\\x7e]+$"},
    }


def _reply_headers(operation: dict[str, Any]) -> None:
    """A person's reply reads ``Idempotency-Key`` from the event, as the chat route does, and answers a resend with
    ``Idempotent-Replayed``."""
    key = _idempotency_key("a resend with it is answered from the first, stored once")
    operation["parameters"] = [*operation.get("parameters", []), key]
    operation["responses"]["201"]["headers"] = dict(_REPLAYED)


_ERROR = {"$ref": "#/components/schemas/ErrorBody"}
_JSONRPC = {"$ref": "#/components/schemas/JsonRpcMessage"}
MCP_SCHEMAS: dict[str, Any] = {
    "JsonRpcMessage": {
        "title": "JsonRpcMessage",
        "description": "One JSON-RPC 2.0 message of the Model Context Protocol (a request, a notification or "
        "a response); its methods and params are MCP's own specification. A batch (an array) is refused.",
        "type": "object",
        "required": ["jsonrpc"],
        "properties": {
            "jsonrpc": {"type": "string", "enum": ["2.0"]},
            "id": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
            "method": {"type": "string", "examples": ["tools/list", "tools/call", "initialize", "server/discover"]},
            "params": {"type": "object"},
            "result": {"type": "object"},
            "error": {"type": "object", "description": "code, message, data"},
        },
        "additionalProperties": False,
    },
    "ProtectedResourceMetadata": {
        "title": "ProtectedResourceMetadata",
        "description": "RFC 9728: the MCP resource, the JWT issuer as its authorization server, bearer tokens "
        "in the Authorization header.",
        "type": "object",
        "required": ["resource", "authorization_servers", "bearer_methods_supported"],
        "properties": {
            "resource": {"type": "string", "description": "<base>/mcp"},
            "authorization_servers": {"type": "array", "items": {"type": "string"}},
            "bearer_methods_supported": {"type": "array", "items": {"type": "string", "enum": ["header"]}},
            "resource_name": {"type": "string"},
            "resource_documentation": {"type": "string"},
        },
        "additionalProperties": False,
    },
}


def _json(description: str, schema: dict[str, Any], **headers: str) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        out["headers"] = {name: {"description": text, "schema": {"type": "string"}} for name, text in headers.items()}
    return out


def _mcp_paths() -> dict[str, Any]:
    """McpFunction's routes, written here: the MCP SDK serves them (the JSON-RPC methods are MCP's own
    specification, not ours to restate), and this module must not import it (support_agent/mcp/)."""
    challenge = 'Bearer resource_metadata="<base>/.well-known/oauth-protected-resource"'
    return {
        "/mcp": {
            "post": {
                "tags": ["MCP"],
                "summary": "MCP server (Streamable HTTP, stateless, JSON responses)",
                "description": (
                    "The Model Context Protocol for a customer's own assistant: `tools/list` and `tools/call` (the "
                    "chat's tools, scoped by the token's customer), with `initialize` and `ping` (2025-06-18, "
                    "2025-11-25) or `server/discover` (2026-07-28), as the official `mcp` SDK 2.3 speaks them. "
                    "Customers only; send `Accept: application/json, text/event-stream`. A key for a tool with an "
                    'effect goes in `params._meta["support-agent/idempotency-key"]`. Protocol faults are JSON-RPC '
                    "errors, business failures `isError` tool results. Requests carrying `tools/call` count "
                    "against `McpCallsPerMinute` (429 `rate_limited` before the JSON-RPC layer)."
                ),
                "operationId": "mcp_post",
                "requestBody": {"required": True, "content": {"application/json": {"schema": _JSONRPC}}},
                "responses": {
                    "200": _json("A JSON-RPC response: a result, or a JSON-RPC error", _JSONRPC),
                    "202": _json("A notification or a response accepted (no body)", _JSONRPC),
                    "400": _json("Not one JSON-RPC message (a parse error, an invalid request, a batch)", _JSONRPC),
                    "401": _json("No bearer token, or a bad one", _ERROR, **{"WWW-Authenticate": challenge}),
                    "403": _json("Not a customer (a support lead)", _ERROR),
                    "405": _json("GET: no server-initiated stream (stateless)", _ERROR, Allow="POST"),
                    "406": {"description": "Accept allows neither JSON nor an event stream (the SDK's answer)"},
                    "413": _json("Body larger than MAX_BODY_BYTES", _ERROR),
                    "429": _json("`rate_limited`: over McpCallsPerMinute", _ERROR, **{"Retry-After": "Seconds"}),
                },
            },
            "get": {
                "tags": ["MCP"],
                "summary": "Not offered: 405 (stateless, no server-initiated stream)",
                "operationId": "mcp_get",
                "security": [],
                "responses": {"405": _json("Always: POST JSON-RPC messages instead", _ERROR, Allow="POST")},
            },
        },
        "/.well-known/oauth-protected-resource": {
            "get": {
                "tags": ["MCP"],
                "summary": "OAuth 2.0 protected resource metadata of /mcp (RFC 9728), public",
                "operationId": "oauth_protected_resource",
                "security": [],
                "responses": {
                    "200": _json(
                        "The resource (`<base>/mcp`), its authorization server (the JWT issuer), bearer in the header",
                        {"$ref": "#/components/schemas/ProtectedResourceMetadata"},
                    )
                },
            }
        },
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
