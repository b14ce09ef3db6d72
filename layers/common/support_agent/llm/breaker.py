"""A circuit breaker for the model API.

When the provider is down, every turn would otherwise spend its whole deadline on retries before
answering 503. The breaker remembers recent failures so later turns answer 503 at once, and lets one
trial call through after a cool-down to find out whether the provider is back.

A *failure* is one whole `create` call that ended in `ModelUnavailable` after at least one HTTP
attempt (a retry sequence counts once), so `failure_threshold` is in turns, not in requests.
The breaker is shared by all threads of a process (a module-level singleton is the caller's job),
hence the lock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Literal

from support_agent.errors import ModelUnavailable

State = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """closed → open after `failure_threshold` consecutive failures; open → half-open after the
    cool-down, admitting exactly one trial call; its success closes, its failure reopens."""

    def __init__(
        self,
        failure_threshold: int = 5,
        cooldown_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1 or cooldown_seconds <= 0:
            raise ValueError("failure_threshold must be >= 1 and cooldown_seconds > 0")
        self.failure_threshold = failure_threshold
        self.cooldown_seconds = cooldown_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_in_flight = False

    @property
    def state(self) -> State:
        with self._lock:
            return self._state()

    def _state(self) -> State:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at < self.cooldown_seconds:
            return "open"
        return "half_open"

    def allow(self) -> None:
        """Admit a call or raise `ModelUnavailable` without touching the network."""
        with self._lock:
            state = self._state()
            if state == "closed":
                return
            if state == "open":
                assert self._opened_at is not None
                left = self.cooldown_seconds - (self._clock() - self._opened_at)
                raise ModelUnavailable(
                    "model API circuit open after repeated failures", retry_after=max(1, math.ceil(left))
                )
            if self._trial_in_flight:
                raise ModelUnavailable("model API circuit half-open, trial call in progress", retry_after=1)
            self._trial_in_flight = True

    def record_success(self) -> None:
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._trial_in_flight = False

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._trial_in_flight or self._failures >= self.failure_threshold:
                self._opened_at = self._clock()
            self._trial_in_flight = False

    def release(self) -> None:
        """The call ended without telling anything about the provider (e.g. no attempt was made)."""
        with self._lock:
            self._trial_in_flight = False
