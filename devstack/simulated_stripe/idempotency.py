"""Idempotency as Stripe API v1 does it.

* The first answer for a key is saved once the endpoint began executing — a 500 included — and replayed
  (same status and body) for 24 hours; after that the key is forgotten and a request with it runs anew.
* A request with a saved key but other parameters (or another endpoint) is a 400 ``idempotency_error``.
* A request while another with the same key is still executing is a 409 ``idempotency_key_in_use``.
* Neither of those, nor a validation failure or a 429, is saved: the key stays usable.
* Keys are scoped per API key.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from devstack.simulated_stripe.ledger import Clock
from devstack.simulated_stripe.wire import StripeError

TTL_SECONDS = 24 * 3600
MAX_KEY_LENGTH = 255

Fingerprint = tuple[str, str, tuple[tuple[str, str], ...]]  # method, path, the form fields sorted


@dataclass(frozen=True)
class Saved:
    fingerprint: Fingerprint
    status: int
    body: dict[str, Any]
    request_id: str  # the request whose answer this is (``Original-Request`` on a replay)
    saved_at: int


class IdempotencyStore:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._saved: dict[tuple[str, str], Saved] = {}
        self._in_flight: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def begin(self, scope: str, key: str, fingerprint: Fingerprint) -> Saved | None:
        """The saved answer to replay, or None: run the request, its key now in flight until ``finish``."""
        if len(key) > MAX_KEY_LENGTH:
            raise StripeError(400, f"Idempotency keys can be at most {MAX_KEY_LENGTH} characters long.")
        with self._lock:
            slot = (scope, key)
            if slot in self._in_flight:
                raise StripeError(
                    409,
                    "There is currently another in-progress request using this Stripe-Idempotency-Key (that "
                    "probably means you submitted twice, and the other request is still going through): "
                    f"{key}. Please try again later.",
                    code="idempotency_key_in_use",
                )
            saved = self._saved.get(slot)
            if saved is not None and self._clock.now() - saved.saved_at >= TTL_SECONDS:
                del self._saved[slot]  # pruned: the key is new again
                saved = None
            if saved is None:
                self._in_flight.add(slot)
                return None
            if saved.fingerprint != fingerprint:
                raise StripeError(
                    400,
                    "Keys for idempotent requests can only be used with the same parameters they were first "
                    f"used with. Try using a key other than '{key}' if you meant to execute a different request.",
                    type="idempotency_error",
                )
            return saved

    def finish(self, scope: str, key: str, saved: Saved | None) -> None:
        """Save the answer (None: nothing to save) and release the key."""
        with self._lock:
            self._in_flight.discard((scope, key))
            if saved is not None:
                self._saved[(scope, key)] = saved

    def reset(self) -> None:
        """Every saved answer forgotten. A request still in flight keeps its key until it finishes (it then
        saves its answer): a reset does not make a running request's key usable by a second one."""
        with self._lock:
            self._saved.clear()

    def in_flight(self, scope: str, key: str) -> bool:
        """Whether a request with the key is executing now (tests wait on it to race a second one)."""
        with self._lock:
            return (scope, key) in self._in_flight

    def saved(self, scope: str, key: str) -> Saved | None:
        with self._lock:
            return self._saved.get((scope, key))
