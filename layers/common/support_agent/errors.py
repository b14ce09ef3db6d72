"""Errors that map to the HTTP contract (docs/ARCHITECTURE.md's error table)."""

from __future__ import annotations


class ApiError(Exception):
    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after

    def body(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}


class BadRequest(ApiError):
    status, code = 400, "bad_request"


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class NotFound(ApiError):
    status, code = 404, "not_found"


class Conflict(ApiError):
    status, code = 409, "conflict"


class TooLarge(ApiError):
    status, code = 413, "too_large"


class TokenBudgetExhausted(ApiError):
    status, code = 429, "token_budget_exhausted"


class RateLimited(ApiError):
    status, code = 429, "rate_limited"


class ModelError(ApiError):
    """The model API refused the request (a 4xx other than 429): resending will not help."""

    status, code = 502, "model_error"


class ModelUnavailable(ApiError):
    """The model API is down, overloaded or too slow for the turn's deadline; the client may resend."""

    status, code = 503, "model_unavailable"
