"""The HTTP error contract on Powertools' resolver, shared by every function.

Every error is ``{"error": {"code", "message"}}``: validation answers 400 (not Powertools' 422),
unknown routes 404, each domain error the status `contract.py` gives it (with Retry-After where the table says so).
Authentication runs before validation, so an anonymous client learns nothing about the schema; the
authenticator is the function's to hand in (the composition root's, from functions/*/app.py, whose
handler `api_handler` builds).
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from aws_lambda_powertools.logging import correlation_paths

from support_agent.auth import Authenticator, Principal
from support_agent.config import get_settings
from support_agent.contract import error_body, status_and_code
from support_agent.errors import InvalidRequest, NotFound, ServiceError, TooLarge
from support_agent.observability import metrics, observed

logger = logging.getLogger(__name__)

JSON = "application/json"


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(status_code=status, content_type=JSON, body=json.dumps(body), headers=headers or {})


def error_response(exc: ServiceError) -> Response[Any]:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else {}
    status, _code = status_and_code(exc)
    return json_response(status, error_body(exc), headers)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in list(exc.errors())[:5]:
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body",)]
        parts.append(f"{'.'.join(loc) or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def build_resolver(
    authenticator: Callable[[], Authenticator], public_paths: Iterable[str] = ("/api/health",)
) -> APIGatewayHttpResolver:
    """``authenticator``: the process's (called per request, so it is built on the first token to verify)."""
    app = APIGatewayHttpResolver(enable_validation=True)
    public = frozenset(public_paths)

    @app.exception_handler(RequestValidationError)
    def _bad_request(exc: RequestValidationError) -> Response:
        return error_response(InvalidRequest(_validation_message(exc)))

    @app.exception_handler(RequestUnsupportedContentType)
    def _unsupported(_exc: RequestUnsupportedContentType) -> Response:  # body_problem answers first; never 415
        return error_response(InvalidRequest("content-type: send the body as application/json"))

    @app.exception_handler(ServiceError)
    def _api_error(exc: ServiceError) -> Response:
        return error_response(exc)

    @app.not_found
    def _not_found(_exc: Exception) -> Response:
        return error_response(NotFound("no such route"))

    def authenticate(app: APIGatewayHttpResolver, next_middleware: Callable[..., Response]) -> Response:
        if app.current_event.raw_path not in public:
            app.append_context(principal=authenticator().authenticate(app.current_event.headers))
        return next_middleware(app)

    app.use([authenticate])
    return app


def principal(app: APIGatewayHttpResolver) -> Principal:
    value = app.context.get("principal")
    if not isinstance(value, Principal):  # a route declared public by mistake
        raise NotFound("no such route")
    return value


def body_size(event: dict[str, Any]) -> int:
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        try:
            return len(base64.b64decode(body))
        except ValueError:
            return len(body)
    return len(body.encode())


# The media types we take a body as: application/json and any application/*+json (RFC 6839), in any case,
# with parameters (charset=utf-8). Anything else is a 400 in our shape, never Powertools' 415.
_JSON_TYPE = re.compile(r"^application/(?:[\w.+-]+\+)?json\s*(?:;.*)?$", re.IGNORECASE)


def _content_types(event: dict[str, Any]) -> list[str]:
    headers = event.get("headers") or {}
    return [str(v).strip() for k, v in headers.items() if isinstance(k, str) and k.lower() == "content-type"]


def body_problem(event: dict[str, Any]) -> str | None:
    """Why a body cannot be one of ours (a JSON object in UTF-8), checked before Powertools sees it.

    Left to Powertools, a form or multipart content type is parsed as a form (a multipart type without a
    boundary raises: a 500), an unknown one gets its own 415 shape, bytes that are not UTF-8 raise (a 500),
    a JSON array passes an optional body's validation as "no body", deep nesting overflows the parser's
    stack, and an integer of more than 4300 digits raises a plain ValueError (a 500).
    """
    body = event.get("body")
    method = str(((event.get("requestContext") or {}).get("http") or {}).get("method", "")).upper()
    carries_body = bool(body) or method in ("POST", "PUT", "PATCH")
    if carries_body and not all(_JSON_TYPE.match(t) for t in _content_types(event)):
        return "content-type: send the body as application/json"
    if not body:
        return None
    try:
        text = base64.b64decode(body).decode("utf-8") if event.get("isBase64Encoded") else str(body)
        value = json.loads(text)
    except UnicodeDecodeError:
        return "body: not UTF-8 text"
    except RecursionError:  # "[[[[…" a few thousand deep: Python's parser gives up (and Powertools' too)
        return "body: nested too deeply"
    except json.JSONDecodeError:
        return None  # malformed JSON: Powertools' validation answers it (400) like any other bad body
    except ValueError:  # int() refuses more than sys.get_int_max_str_digits() digits (4300)
        return "body: a number has too many digits"
    if value is not None and not isinstance(value, dict):  # null is an optional body left out
        return "body: must be a JSON object"
    return None


def canonical_content_type(event: dict[str, Any]) -> dict[str, Any]:
    """The event with an accepted JSON media type spelt ``application/json``, the only spelling Powertools
    parses as JSON (its check is case-sensitive and knows no ``+json``; the rest get its own 415 body)."""
    declared = _content_types(event)
    if not declared or declared == [JSON] or not all(_JSON_TYPE.match(t) for t in declared):
        return event  # nothing to respell (a GET without a body may declare anything: nothing parses it)
    headers = {k: v for k, v in (event.get("headers") or {}).items() if str(k).lower() != "content-type"}
    return {**event, "headers": {**headers, "content-type": JSON}}


def handle(app: APIGatewayHttpResolver, event: dict[str, Any], context: Any, max_body_bytes: int) -> dict[str, Any]:
    """Resolve an API Gateway v2 event; oversized bodies are refused before anything parses them."""
    if body_size(event) > max_body_bytes:
        resp = error_response(TooLarge(f"request body is larger than {max_body_bytes} bytes"))
        return {"statusCode": resp.status_code, "headers": {"Content-Type": JSON}, "body": resp.body}
    problem = body_problem(event)
    if problem is not None:
        resp = error_response(InvalidRequest(problem))
        return {"statusCode": resp.status_code, "headers": {"Content-Type": JSON}, "body": resp.body}
    try:
        return app.resolve(canonical_content_type(event), context)
    except ServiceError as exc:  # raised by a middleware, outside the route's exception handlers
        resp = error_response(exc)
        headers = {"Content-Type": JSON, **{k: v for k, v in resp.headers.items() if isinstance(v, str)}}
        return {"statusCode": resp.status_code, "headers": headers, "body": resp.body}


def api_handler(
    routers: APIGatewayHttpRouter | Iterable[APIGatewayHttpRouter], authenticator: Callable[[], Authenticator]
) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """An API function's Lambda handler: the routes of ``routers`` (one, or several a function serves together)
    on the shared resolver. Every log line carries the API request id (correlation_id); the routes add their own
    keys (the conversation, the approval)."""
    app = build_resolver(authenticator)
    for router in [routers] if isinstance(routers, APIGatewayHttpRouter) else routers:
        app.include_router(router)

    @observed(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
    @metrics.log_metrics(capture_cold_start_metric=True)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return handle(app, event, context, get_settings().max_body_bytes)

    return handler
