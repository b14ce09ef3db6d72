"""When a Stripe request is repeated, and what a final answer means (the rules of refunds/provider/port.py).

Every repeat resends the same request — the same bytes, the same ``Idempotency-Key`` — so Stripe
executes a refund at most once however often we ask:

* repeated: a timeout, a connection reset, a 409 (a request with the key is in flight), a 429, a 5xx
  that is not a replay; ``Stripe-Should-Retry: true`` repeats anything, ``false`` stops (as the SDK);
* final: a 2xx; a replayed 5xx (``Idempotent-Replayed: true``: every repeat would replay it) and any
  other refusal → `ProviderRefused` (look it up); 401/403 → `ProviderUnavailable` (our credentials:
  nothing was executed, and "refused" must not read as "no refund");
* out of attempts, or of the caller's deadline (no attempt and no wait crosses it): `OutcomeUnknown`
  if an attempt of a write may have been executed, else `ProviderUnavailable`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import httpx

from support_agent.config import Settings
from support_agent.messages import Deadline
from support_agent.outbound import AttemptPolicy
from support_agent.refunds.provider.port import (
    DEFAULT_RETRY_AFTER,
    OutcomeUnknown,
    ProviderRefused,
    ProviderUnavailable,
)

log = logging.getLogger(__name__)

DEADLINE_MARGIN = 1.0  # never wait for a retry that could not finish before the deadline
# Raised before a byte could reach Stripe: the attempt was certainly not executed.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


@dataclass(frozen=True)
class StripePolicy(AttemptPolicy):
    """Stripe's attempts, backoff (full jitter) and timeouts: these numbers, the rest `AttemptPolicy`'s."""

    max_retries: int = 2
    read_timeout: float = 10.0
    backoff_cap: float = 4.0
    max_retry_after: float = 10.0  # a longer Retry-After ends the call: the caller retries later

    @classmethod
    def from_settings(cls, settings: Settings) -> StripePolicy:
        return cls(
            max_retries=settings.stripe_max_retries,
            connect_timeout=settings.stripe_connect_timeout,
            read_timeout=settings.stripe_read_timeout,
        )


class _Repeat(Exception):
    """An attempt worth repeating; ``maybe_executed``: Stripe may have acted on it."""

    def __init__(self, reason: str, *, maybe_executed: bool, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.maybe_executed = maybe_executed
        self.retry_after = retry_after


def call(
    http: httpx.Client, request: httpx.Request, policy: StripePolicy, deadline: Deadline | None, *, write: bool
) -> Any:
    """The JSON of a 2xx to `request`, repeated under `policy`; a final failure raises (module docstring)."""
    maybe_executed = False
    reason = "deadline reached before the first attempt"
    retry_after: float | None = None
    for retry in range(policy.max_retries + 1):
        if deadline is not None and deadline.remaining() <= 0:
            break
        try:
            return _attempt(http, request, policy, deadline, write)
        except _Repeat as fault:
            maybe_executed = maybe_executed or fault.maybe_executed
            reason, retry_after = fault.reason, fault.retry_after
        if retry == policy.max_retries:
            break
        wait = policy.backoff(retry) if retry_after is None else retry_after
        if wait > policy.max_retry_after or (deadline is not None and wait + DEADLINE_MARGIN > deadline.remaining()):
            reason += "; no time left to retry"
            break
        log.warning(
            "Stripe %s %s failed (%s), retry %d in %.2fs", request.method, request.url.path, reason, retry + 1, wait
        )
        policy.sleep(wait)
    if write and maybe_executed:
        raise OutcomeUnknown(f"Stripe outcome unknown ({reason})")
    seconds = DEFAULT_RETRY_AFTER if retry_after is None else max(1, math.ceil(retry_after))
    raise ProviderUnavailable(f"Stripe unavailable ({reason})", retry_after=seconds)


def _attempt(
    http: httpx.Client, request: httpx.Request, policy: StripePolicy, deadline: Deadline | None, write: bool
) -> Any:
    request.extensions["timeout"] = policy.timeout(deadline).as_dict()
    try:
        r = http.send(request)
    except NOT_SENT as exc:
        raise _Repeat(type(exc).__name__, maybe_executed=False) from None
    except httpx.TransportError as exc:  # a read timeout, a reset: sent, so possibly executed
        raise _Repeat(type(exc).__name__, maybe_executed=True) from None
    if r.is_success:
        try:
            return r.json()
        except ValueError:
            if write:  # a 2xx we cannot read: repeating only replays it
                raise OutcomeUnknown(f"unreadable {r.status_code} from Stripe") from None
            raise _Repeat(f"unreadable {r.status_code}", maybe_executed=False) from None
    raise _failure(r, write)


def _failure(r: httpx.Response, write: bool) -> Exception:
    status = r.status_code
    code, message = _error(r)
    replayed = r.headers.get("idempotent-replayed", "").lower() == "true"
    should_retry = r.headers.get("stripe-should-retry", "").lower()
    if status >= 500 and replayed:
        return _saved_failure(status, code, message, write)
    if status in (401, 403):
        return ProviderUnavailable(f"Stripe refused our credentials ({status} {code})", retry_after=60)
    repeat = status in (409, 429) or status >= 500
    if should_retry in ("true", "false"):
        repeat = should_retry == "true"
    if repeat:
        return _Repeat(f"{status} {code}", maybe_executed=status != 429, retry_after=_retry_after(r))
    if status == 429:
        return ProviderUnavailable(f"Stripe rate limited ({code})", retry_after=DEFAULT_RETRY_AFTER)
    if status >= 500 or status == 409:
        return _saved_failure(status, code, message, write)
    # A 4xx: Stripe refused the request. Except idempotency_error: the key's first request differed (ours, or a
    # bug), so a refund may exist under it and "not found" would prove nothing.
    return ProviderRefused(code, message, status=status, definitive=code != "idempotency_error")


def _saved_failure(status: int, code: str, message: str, write: bool) -> Exception:
    """A failure Stripe would answer again to every repeat: for a write, look it up; a read is unavailable."""
    if write:
        return ProviderRefused(code, message, status=status, definitive=False)
    return ProviderUnavailable(f"Stripe failed ({status} {code})")


def _error(r: httpx.Response) -> tuple[str, str]:
    """Stripe's ``{"error": {"type", "code", "message"}}``: the code (else the type), and the message."""
    try:
        body = r.json()
        error = body.get("error") if isinstance(body, dict) else None
    except ValueError:
        error = None
    if not isinstance(error, dict):
        return f"http_{r.status_code}", r.reason_phrase
    code = error.get("code") or error.get("type") or f"http_{r.status_code}"
    return str(code), str(error.get("message") or "")


def _retry_after(r: httpx.Response) -> float | None:
    try:
        value = float(r.headers.get("retry-after", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
