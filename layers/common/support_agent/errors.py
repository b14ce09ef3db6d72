"""Domain errors: what went wrong, in the service's own terms.

Stores, tools, the loop and the model adapters raise these; none of them knows HTTP. One table
(`contract.py`) gives each the contract's status and code, read by the edges (`api/http.py`) and by the turn
record (which keeps a resend's answer), so a sweep or a queue consumer that reuses a store gets an error it can
act on, not an HTTP answer.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base of every error the service raises on purpose. ``kind`` names it in logs and metrics."""

    kind = "internal_error"

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class InvalidRequest(ServiceError):
    """The request (its body, parameters or headers) is malformed or breaks a limit on its shape."""

    kind = "invalid_request"


class Unauthenticated(ServiceError):
    """No, a bad, an expired or a too long-lived credential."""

    kind = "unauthenticated"


class NotPermitted(ServiceError):
    """The caller is who they say, but their role may not do this."""

    kind = "not_permitted"


class NotFound(ServiceError):
    """Unknown, or not the caller's: the same answer, so ids cannot be probed."""

    kind = "not_found"


class Conflict(ServiceError):
    """The change does not fit the current state (another turn holds the lease, a decided approval, ...)."""

    kind = "conflict"


class LeaseLost(Conflict):
    """This turn's lease on its conversation lapsed or was taken over: it stops before any further effect."""

    kind = "lease_lost"


class LeaseHeld(Conflict):
    """Another turn (or an erasure) holds the conversation's lease: the caller may resend once it ends."""

    kind = "lease_held"


class TooLarge(ServiceError):
    kind = "too_large"


class IdempotencyKeyReused(ServiceError):
    """An Idempotency-Key sent again with another request body: the client reused it by mistake."""

    kind = "idempotency_key_reused"


class TokenBudgetExhausted(ServiceError):
    kind = "token_budget_exhausted"


class RateLimited(ServiceError):
    kind = "rate_limited"


class ModelError(ServiceError):
    """A model call that failed. ``retries``: how often the adapter tried again first (for the log)."""

    retries = 0


class ModelRefused(ModelError):
    """The model API refused the request (a 4xx other than 429): resending will not help."""

    kind = "model_error"


class ModelUnavailable(ModelError):
    """The model API is down, overloaded or too slow for the turn's deadline; the caller may resend."""

    kind = "model_unavailable"


class PolicyUnavailable(ServiceError):
    """No version of the support policy can be applied: none validates, or none could be read (policy/source.py).
    Nothing is decided without rules: a tool answers is_error, a route 503."""

    kind = "policy_unavailable"
