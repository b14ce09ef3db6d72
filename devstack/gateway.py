"""A local stand-in for the HTTP API: the template's HttpApi routes → their functions, as API Gateway v2 events.

Routes come from the template (moto's CloudFormation skips AWS::ApiGatewayV2::*), never from a second
list. Static pages from web/ are served beside the API, and /api/dev/tokens hands out demo tokens.
"""

from __future__ import annotations

import base64
import json
import mimetypes
import time
import uuid
from collections.abc import Callable
from functools import lru_cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from devstack import apidocs
from devstack.functions import FunctionError, FunctionPool
from devstack.stack import REPO_ROOT, Route, load_template

WEB_DIR = REPO_ROOT / "web"
PAGES = {"/": "index.html", "/chat": "index.html", "/lead": "lead.html"}
MAX_BODY = 10 * 1024 * 1024  # API Gateway's payload limit


@lru_cache(maxsize=1)
def cors_configuration() -> dict[str, Any]:
    """The HttpApi's CorsConfiguration, read from template.yaml (AllowOrigins resolved to its parameter's
    default), so the local gateway answers CORS as the deployed API does and cannot drift from it."""
    template = load_template()
    config = dict(template["Resources"]["HttpApi"]["Properties"]["CorsConfiguration"])
    origins = config.get("AllowOrigins")
    if isinstance(origins, dict) and "Ref" in origins:
        config["AllowOrigins"] = str(template["Parameters"][origins["Ref"]]["Default"]).split(",")
    return config


def cors_headers(origin: str | None, preflight: bool) -> dict[str, str]:
    """API Gateway's CORS headers for a request from ``origin``: none for a same-origin request (no Origin)
    or an origin not allowed; a preflight gets the allowed methods and headers, an answer the exposed ones."""
    config = cors_configuration()
    allowed = config.get("AllowOrigins") or []
    if not origin or ("*" not in allowed and origin not in allowed):
        return {}
    out = {"Access-Control-Allow-Origin": "*" if "*" in allowed else origin}
    if preflight:
        out["Access-Control-Allow-Methods"] = ",".join(config.get("AllowMethods") or [])
        out["Access-Control-Allow-Headers"] = ",".join(config.get("AllowHeaders") or [])
        if config.get("MaxAge") is not None:
            out["Access-Control-Max-Age"] = str(config["MaxAge"])
    elif config.get("ExposeHeaders"):
        out["Access-Control-Expose-Headers"] = ",".join(config["ExposeHeaders"])
    return out


def match(routes: list[Route], method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    parts = path.split("/")
    for route in routes:
        if route.method not in (method, "ANY"):
            continue
        template = route.path.split("/")
        if len(template) != len(parts):
            continue
        params: dict[str, str] = {}
        for t, p in zip(template, parts, strict=True):
            if t.startswith("{") and t.endswith("}") and p:
                params[t[1:-1]] = p
            elif t != p:
                break
        else:
            return route, params
    return None


def api_event(
    method: str,
    raw_path: str,
    query: str,
    headers: dict[str, str],
    body: bytes,
    route: Route,
    params: dict[str, str],
    source_ip: str,
) -> dict[str, Any]:
    """An API Gateway HTTP API (payload 2.0) event, as Lambda receives it."""
    text: str | None = None
    is_b64 = False
    if body:
        try:
            text = body.decode()
        except UnicodeDecodeError:
            text, is_b64 = base64.b64encode(body).decode(), True
    now = time.time()
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": f"{route.method} {route.path}",
        "rawPath": raw_path,
        "rawQueryString": query,
        "headers": {k.lower(): v for k, v in headers.items()},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": headers.get("Host", "localhost"),
            "domainPrefix": "local",
            "http": {
                "method": method,
                "path": raw_path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": headers.get("User-Agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": f"{route.method} {route.path}",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": is_b64,
    }
    if query:
        event["queryStringParameters"] = dict(parse_qsl(query, keep_blank_values=True))
    if params:
        event["pathParameters"] = params
    if text is not None:
        event["body"] = text
    return event


class Gateway(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that leaves mid-request is not an error worth a traceback."""
        import sys

        if isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError):
            return
        super().handle_error(request, client_address)

    def __init__(
        self,
        address: tuple[str, int],
        routes: list[Route],
        pools: dict[str, FunctionPool],
        extra: dict[str, Callable[[], Any]],
    ) -> None:
        super().__init__(address, _Handler)
        self.routes, self.pools, self.extra = routes, pools, extra


class _Handler(BaseHTTPRequestHandler):
    server: Gateway
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), {"Content-Type": "application/json"})

    def _handle(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._json(413, {"message": "Request Entity Too Large"})
            return
        body = self.rfile.read(length) if length else b""
        if url.path in self.server.extra and self.command == "GET":
            self._json(200, self.server.extra[url.path]())
            return
        docs = apidocs.serve(url.path) if self.command in ("GET", "HEAD") else None
        if docs is not None:  # Swagger UI and the committed OpenAPI document (local only)
            self._send(200, docs[0], {"Content-Type": docs[1], "Cache-Control": "no-cache"})
            return
        found = match(self.server.routes, self.command, url.path)
        if found is None:
            if not url.path.startswith("/api/") and self.command in ("GET", "HEAD"):
                self._static(url.path)
                return
            self._json(404, {"error": {"code": "not_found", "message": "no such route"}})
            return
        route, params = found
        event = api_event(
            self.command, url.path, url.query, dict(self.headers.items()), body, route, params, self.client_address[0]
        )
        try:
            out = self.server.pools[route.function].invoke(event)
        except FunctionError:
            self._json(500, {"message": "Internal Server Error"})
            return
        self._lambda_response(out)

    def _lambda_response(self, out: Any) -> None:
        if not isinstance(out, dict) or "statusCode" not in out:  # payload 2.0 also accepts a bare body
            self._json(200, out)
            return
        body = out.get("body") or ""
        raw = base64.b64decode(body) if out.get("isBase64Encoded") else str(body).encode()
        headers = {k: str(v) for k, v in (out.get("headers") or {}).items()}
        headers.setdefault("Content-Type", "application/json")
        headers.update(cors_headers(self.headers.get("Origin"), preflight=False))
        self._send(int(out["statusCode"]), raw, headers)

    def _static(self, path: str) -> None:
        name = PAGES.get(path, path.lstrip("/"))
        target = (WEB_DIR / name).resolve()
        if not target.is_file() or WEB_DIR.resolve() not in target.parents:
            self._send(HTTPStatus.NOT_FOUND, b"not found", {"Content-Type": "text/plain"})
            return
        ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        self._send(200, Path(target).read_bytes(), {"Content-Type": ctype, "Cache-Control": "no-cache"})

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

    def __getattr__(self, name: str) -> Any:
        # API Gateway routes any method (TRACE, PROPFIND…): unmatched, it is the contract's 404, never
        # http.server's HTML 501.
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)

    def do_OPTIONS(self) -> None:  # CORS preflight, as the template's CorsConfiguration allows
        self._send(204, b"", cors_headers(self.headers.get("Origin") or "*", preflight=True))
