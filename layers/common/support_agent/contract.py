"""The contract's error table: each domain error's status and code (docs/ARCHITECTURE.md).

Plain data, no HTTP types: the edges answer from it (`api/http.py`, the MCP and webhook endpoints), and so does
a turn's end (`agent/finish.py`), since a turn record keeps the answer a resend of its request gets. Every error
body is ``{"error": {"code", "message"}}``; 429 and 503 carry ``Retry-After`` when the error knows it.
"""

from __future__ import annotations

from support_agent.errors import (
    Conflict,
    IdempotencyKeyReused,
    InvalidRequest,
    ModelRefused,
    ModelUnavailable,
    NotFound,
    NotPermitted,
    PolicyUnavailable,
    RateLimited,
    ServiceError,
    TokenBudgetExhausted,
    TooLarge,
    Unauthenticated,
)

CONTRACT: dict[type[ServiceError], tuple[int, str]] = {
    InvalidRequest: (400, "bad_request"),
    Unauthenticated: (401, "unauthorized"),
    NotPermitted: (403, "forbidden"),
    NotFound: (404, "not_found"),
    Conflict: (409, "conflict"),
    TooLarge: (413, "too_large"),
    IdempotencyKeyReused: (422, "idempotency_key_reused"),
    TokenBudgetExhausted: (429, "token_budget_exhausted"),
    RateLimited: (429, "rate_limited"),
    ModelRefused: (502, "model_error"),
    ModelUnavailable: (503, "model_unavailable"),
    PolicyUnavailable: (503, "policy_unavailable"),
}
INTERNAL = (500, "internal_error")


def status_and_code(exc: ServiceError) -> tuple[int, str]:
    """The contract's answer for ``exc``: its own class's entry, else its nearest ancestor's."""
    for cls in type(exc).__mro__:
        if cls in CONTRACT:
            return CONTRACT[cls]
    return INTERNAL


def error_body(exc: ServiceError) -> dict[str, dict[str, str]]:
    return {"error": {"code": status_and_code(exc)[1], "message": exc.message}}
