"""Calls made at once, each in a thread of its own: the races the tests set up (in moto, under
`tests.support.aws.serialised_moto`; or in process, as a breaker's half-open trial)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_together(calls: list[Callable[[], object]], timeout: float | None = 30) -> None:
    """Starts every call, then waits for each (``timeout`` seconds at most, per thread)."""
    threads = [threading.Thread(target=call) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
