"""Calls to services outside AWS (the model API, Stripe): one rule for their HTTP client, their
per-attempt timeouts and their backoff, whichever package makes the call.

httpx is imported only when a client or a timeout is built, so a function that never calls out
(or calls Bedrock through boto3) does not load it for this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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


def attempt_timeout(connect: float, read: float, deadline: Deadline | None) -> httpx.Timeout:
    """Per attempt, so one attempt never outlives the deadline (httpx's read timeout is per read)."""
    import httpx

    limit = math.inf if deadline is None else max(0.01, deadline.remaining())
    return httpx.Timeout(
        connect=min(connect, limit),
        read=min(read, limit),
        write=min(WRITE_TIMEOUT, limit),
        pool=min(connect, limit),
    )


def full_jitter(random: Callable[[], float], retry: int, base: float, cap: float) -> float:
    """The wait before retry ``retry`` (0-based): uniform in [0, min(cap, base * 2**retry))."""
    return random() * min(cap, base * 2**retry)
