"""Injectable faults: what can go wrong between a client and Stripe, one route at a time."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

ROUTES = ("POST /v1/refunds", "GET /v1/refunds", "GET /v1/refunds/{id}")


class Fault(StrEnum):
    """One fault; "saved" means the answer is kept for the idempotency key and replayed."""

    RATE_LIMIT = "rate_limit"  # 429 ``rate_limit`` before anything runs: not saved
    ERROR_UNSAVED = "error_unsaved"  # 500 before the endpoint began (Stripe's edge): not saved
    ERROR_BEFORE = "error_before"  # 500 once the endpoint began, no refund made: saved
    ERROR_AFTER = "error_after"  # the refund is made, then a 500: saved, so the caller cannot tell
    TIMEOUT_AFTER = "timeout_after"  # the refund is made and saved; the answer is held ``hold_seconds``
    DROP_AFTER = "drop_after"  # the refund is made and saved; the connection closes without an answer
    SLOW = "slow"  # the request waits ``hold_seconds`` before it runs, its key in flight (409 to a retry)


@dataclass(frozen=True)
class Injected:
    fault: Fault
    hold_seconds: float = 5.0
    should_retry: bool | None = None  # sent as ``Stripe-Should-Retry`` on the faulty answer when not None


class FaultPlan:
    """Faults queued per route, each consumed by one request (``times`` requests in a row for a count)."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[Injected]] = {route: deque() for route in ROUTES}
        self._lock = threading.Lock()

    def inject(self, route: str, injected: Injected, times: int = 1) -> None:
        if route not in self._queues:
            raise ValueError(f"unknown route {route!r}; one of {', '.join(ROUTES)}")
        if times < 1:
            raise ValueError("times must be at least 1")
        with self._lock:
            self._queues[route].extend([injected] * times)

    def take(self, route: str) -> Injected | None:
        with self._lock:
            queue = self._queues[route]
            return queue.popleft() if queue else None

    def pending(self, route: str | None = None) -> int:
        """Faults not yet consumed (on one route, or all)."""
        with self._lock:
            return sum(len(q) for r, q in self._queues.items() if route in (None, r))

    def clear(self) -> None:
        with self._lock:
            for queue in self._queues.values():
                queue.clear()
