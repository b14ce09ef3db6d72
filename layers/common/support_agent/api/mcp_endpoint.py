"""McpFunction's HTTP edge: API Gateway v2 events in, the SDK's Streamable HTTP transport inside.

Per invocation: route (``POST /mcp``, ``GET /mcp`` → 405, ``GET /.well-known/oauth-protected-resource``),
then, before the JSON-RPC layer, the body's size, the bearer token (the same verification as /api; customers
only) and, for a request carrying ``tools/call``, the customer's MCP rate limit. Then the event becomes an
ASGI scope and body, served by a fresh stateless ``StreamableHTTPSessionManager`` (JSON responses) under
``anyio.run`` around the process's one server object (mcp/server.py's, kept by the composition root), and the
ASGI response becomes the Lambda's answer. Stateless: any instance answers any request; nothing is kept between
requests. An edge like the routes beside it: errors in the API's contract (contract.py), services from wiring.py.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from support_agent import wiring
from support_agent.auth import Principal, require_customer
from support_agent.config import get_settings
from support_agent.contract import error_body, status_and_code
from support_agent.errors import NotPermitted, RateLimited, ServiceError, TooLarge, Unauthenticated
from support_agent.mcp.server import PRINCIPAL_SCOPE_KEY
from support_agent.store.ratelimit import RateLimiter

MCP_PATH = "/mcp"
RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"
JSON = "application/json"

# The manager logs its start and stop at INFO: once per request here, which says nothing.
logging.getLogger("mcp.server.streamable_http_manager").setLevel(logging.WARNING)


def _response(status: int, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": JSON, **(headers or {})},
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }


def _error(exc: ServiceError, headers: dict[str, str] | None = None) -> dict[str, Any]:
    status, _code = status_and_code(exc)
    extra = dict(headers or {})
    if exc.retry_after is not None:
        extra["Retry-After"] = str(exc.retry_after)
    return _response(status, error_body(exc), extra)


def _headers(event: dict[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}


def _scheme(headers: dict[str, str]) -> str:
    """API Gateway always sends X-Forwarded-Proto (https); without it, a local server over plain http."""
    proto = headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return proto if proto in ("http", "https") else "http"


def base_url(event: dict[str, Any]) -> str:
    """The public base URL: MCP_PUBLIC_BASE_URL when set, else the request's scheme and host."""
    configured = get_settings().mcp_public_base_url.rstrip("/")
    if configured:
        return configured
    headers = _headers(event)
    proto = _scheme(headers)
    host = headers.get("host") or str((event.get("requestContext") or {}).get("domainName") or "localhost")
    return f"{proto}://{host.strip()}"


def resource_metadata_url(event: dict[str, Any]) -> str:
    return base_url(event) + RESOURCE_METADATA_PATH


def resource_metadata(event: dict[str, Any]) -> dict[str, Any]:
    """RFC 9728's protected resource metadata for ``<base>/mcp``: bearer JWTs from our issuer, in the header."""
    return {
        "resource": base_url(event) + MCP_PATH,
        "authorization_servers": [get_settings().jwt_issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": "Support agent MCP server",
        "resource_documentation": base_url(event) + "/api/docs",
    }


def _unauthorized(event: dict[str, Any], exc: Unauthenticated, token_sent: bool) -> dict[str, Any]:
    # RFC 6750 §3 + RFC 9728 §5.1: where the client finds how to get a token; invalid_token when one was sent.
    challenge = f'Bearer resource_metadata="{resource_metadata_url(event)}"'
    if token_sent:
        challenge = f'Bearer error="invalid_token", resource_metadata="{resource_metadata_url(event)}"'
    return _error(exc, {"WWW-Authenticate": challenge})


def _body(event: dict[str, Any]) -> bytes:
    raw = event.get("body") or ""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(raw)
        except ValueError:
            return str(raw).encode()
    return str(raw).encode()


def _carries_tool_call(body: bytes) -> bool:
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return False  # the SDK answers a parse error; nothing runs
    messages = message if isinstance(message, list) else [message]
    return any(isinstance(m, dict) and m.get("method") == "tools/call" for m in messages)


def authenticate(event: dict[str, Any]) -> Principal:
    """The verified customer; Unauthenticated (401) or NotPermitted (403, a lead) otherwise."""
    principal = wiring.authenticator().authenticate(event.get("headers") or {})
    require_customer(principal)
    return principal


def limiter() -> RateLimiter:
    settings = get_settings()
    return RateLimiter(
        wiring.client("dynamodb"), settings.conversations_table, settings.mcp_calls_per_minute, kind="mcp"
    )


def asgi_scope(event: dict[str, Any], principal: Principal) -> dict[str, Any]:
    """The ASGI HTTP scope of an API Gateway v2 (payload 2.0) event, with the verified principal."""
    http = (event.get("requestContext") or {}).get("http") or {}
    headers = _headers(event)
    host = headers.get("host", "localhost")
    scheme = _scheme(headers)
    path = str(event.get("rawPath") or http.get("path") or MCP_PATH)
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": str(http.get("method") or "POST").upper(),
        "scheme": scheme,
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": str(event.get("rawQueryString") or "").encode(),
        "headers": [(k.encode("latin-1", "replace"), v.encode("latin-1", "replace")) for k, v in headers.items()],
        "client": (str(http.get("sourceIp") or "0.0.0.0"), 0),
        "server": (host.split(":")[0], 443 if scheme == "https" else 80),
        "state": {},
        PRINCIPAL_SCOPE_KEY: principal,
    }


async def serve_asgi(scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """One request through a fresh stateless session manager; returns the status, headers and body."""
    manager = StreamableHTTPSessionManager(app=wiring.mcp_server(), json_response=True, stateless=True)
    status = 500
    headers: list[tuple[bytes, bytes]] = []
    chunks: list[bytes] = []
    done = anyio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the client "disconnects" only once the whole answer is out
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = int(message["status"])
            headers = list(message.get("headers") or [])
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body") or b""))
            if not message.get("more_body"):
                done.set()

    async with manager.run():
        await manager.handle_request(scope, receive, send)  # type: ignore[arg-type]
    done.set()
    return status, headers, b"".join(chunks)


def _lambda_response(status: int, raw_headers: list[tuple[bytes, bytes]], body: bytes) -> dict[str, Any]:
    out: dict[str, str] = {}
    for k, v in raw_headers:
        name, value = k.decode("latin-1"), v.decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    try:
        return {"statusCode": status, "headers": out, "body": body.decode("utf-8"), "isBase64Encoded": False}
    except UnicodeDecodeError:
        return {"statusCode": status, "headers": out, "body": base64.b64encode(body).decode(), "isBase64Encoded": True}


def handle(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    http = (event.get("requestContext") or {}).get("http") or {}
    method = str(http.get("method") or "").upper()
    path = str(event.get("rawPath") or http.get("path") or "")
    if path == RESOURCE_METADATA_PATH:
        if method != "GET":
            return _response(405, {"error": {"code": "method_not_allowed", "message": "use GET"}}, {"Allow": "GET"})
        return _response(200, resource_metadata(event), {"Cache-Control": "public, max-age=3600"})
    if path != MCP_PATH:
        return _response(404, {"error": {"code": "not_found", "message": "no such route"}})
    if method != "POST":
        # Stateless: no server-initiated stream to open (GET) and no session to end (DELETE).
        return _response(
            405,
            {"error": {"code": "method_not_allowed", "message": "POST JSON-RPC messages to /mcp"}},
            {"Allow": "POST"},
        )
    body = _body(event)
    max_bytes = get_settings().max_body_bytes
    if len(body) > max_bytes:
        return _error(TooLarge(f"request body is larger than {max_bytes} bytes"))
    token_sent = "authorization" in _headers(event)
    try:
        principal = authenticate(event)
    except Unauthenticated as exc:
        return _unauthorized(event, exc, token_sent)
    except NotPermitted as exc:
        return _error(exc)
    if _carries_tool_call(body) and principal.customer_id is not None:
        try:
            limiter().take(principal.customer_id)
        except RateLimited as exc:
            return _error(exc)
    status, headers, answer = anyio.run(serve_asgi, asgi_scope(event, principal), body)
    return _lambda_response(status, headers, answer)
