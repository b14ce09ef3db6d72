"""Calls to services outside AWS (the model API, Stripe): one rule for their HTTP client, their
per-attempt timeouts and their backoff, whichever package makes the call.

httpx is imported only when a client or a timeout is built, so a function that never calls out
(or calls Bedrock through boto3) does not load it for this module.
"""

from __future__ import annotations

import math
import random as _random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from support_agent.messages import Deadline

if TYPE_CHECKING:
    import httpx

WRITE_TIMEOUT = 10.0


def http_client(url: str, transport: httpx.BaseTransport | None) -> httpx.Client:
    """No redirects. A CA bundle is loaded only for an https endpoint: loading certifi's costs a cold
    start 60-100 ms, wasted on a plain-http one (the local simulators); anything but plain http keeps
    full verification."""
    import httpx

    return httpx.Client(transport=transport, follow_redirects=False, verify=not url.lower().startswith("http://"))


@dataclass(frozen=True)
class AttemptPolicy:
    """How often a call out is attempted, how long each attempt may take, and how long to wait between two
    (full jitter). Each caller's policy (llm/retry.py, refunds/provider/stripe_retry.py) sets its own numbers;
    ``sleep`` and ``random`` are here so tests never wait and see the same jitter."""

    max_retries: int = 3
    connect_timeout: float = 3.0
    read_timeout: float = 25.0
    backoff_base: float = 0.5
    backoff_cap: float = 8.0
    sleep: Callable[[float], None] = time.sleep
    random: Callable[[], float] = _random.random

    def backoff(self, retry: int) -> float:
        """The wait before retry ``retry`` (0-based): uniform in [0, min(cap, base * 2**retry))."""
        return self.random() * min(self.backoff_cap, self.backoff_base * 2**retry)

    def timeout(self, deadline: Deadline | None) -> httpx.Timeout:
        """Per attempt, so one attempt never outlives the deadline (httpx's read timeout is per read)."""
        import httpx

        limit = math.inf if deadline is None else max(0.01, deadline.remaining())
        return httpx.Timeout(
            connect=min(self.connect_timeout, limit),
            read=min(self.read_timeout, limit),
            write=min(WRITE_TIMEOUT, limit),
            pool=min(self.connect_timeout, limit),
        )
