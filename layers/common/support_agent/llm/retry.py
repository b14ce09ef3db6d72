"""The retry, deadline and breaker policy every model adapter shares.

One place decides when a failed model call is tried again, so the three providers keep the same
rules (docs/ARCHITECTURE.md, rule 4): exponential backoff with full jitter, or the server's own `retry-after`;
never an attempt after the turn's deadline, never a sleep that would cross it; when retries run out
→ `ModelUnavailable` (503) with a `retry_after` for clients. An adapter only says, per attempt,
whether a failure is worth repeating (raise `Retryable`) or final (`ModelRefused`/`ModelUnavailable`).

Breaker bookkeeping: a whole call that ended in `ModelUnavailable` after at least one attempt is one
failure; a `ModelRefused` means the provider answered, so it counts as a success for the breaker.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Mapping
from typing import TypeVar

import httpx

from support_agent.errors import ModelRefused, ModelUnavailable
from support_agent.llm.breaker import CircuitBreaker
from support_agent.messages import Deadline

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_BASE = 0.5
BACKOFF_CAP = 8.0
DEFAULT_RETRY_AFTER = 5
MAX_RETRY_AFTER = 60
SPEND_LIMIT_RETRY_AFTER = 3600
DEADLINE_MARGIN = 1.0
WRITE_TIMEOUT = 10.0
SPEND_LIMIT = re.compile(r"spend|billing|credit|usage limit", re.IGNORECASE)


_ERROR_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")


def error_type(value: str) -> str:
    """The provider's error type or code when it looks like one (a short identifier), else "".

    It ends up in our clients' 502/503 bodies, so free text a provider (or a proxy) puts there never does.
    """
    return value if _ERROR_TYPE.fullmatch(value) else ""


def refused(reason: str, detail: str, secret: str = "") -> ModelRefused:
    """The 502 for a request the provider refused: its error type at most, its own words only in our log.

    A provider's message can name the account id, the role and the model ARN (a Bedrock AccessDenied):
    fine for the operator's log, not for every customer's browser.
    """
    if secret:
        detail = detail.replace(secret, "***")
    log.warning("model API refused the request (%s): %s", reason, detail[:1000])
    return ModelRefused(f"the model API refused the request ({reason})")


class Retryable(Exception):
    """One failed attempt that may succeed if repeated."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def backoff(retry: int, random: Callable[[], float]) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**retry))."""
    return random() * min(BACKOFF_CAP, BACKOFF_BASE * 2**retry)


def clamp_retry_after(seconds: float | None) -> int:
    """The Retry-After we pass on to our clients: whole seconds, at least 1, at most a minute."""
    if seconds is None:
        return DEFAULT_RETRY_AFTER
    return max(1, min(MAX_RETRY_AFTER, math.ceil(seconds)))


def retry_after_header(headers: Mapping[str, str]) -> float | None:
    """Seconds from `retry-after-ms` (OpenAI) or `retry-after`; None when absent or an HTTP date."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            value = float(headers.get(name, "")) * scale
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            return value
    return None


def http_timeout(connect: float, read: float, deadline: Deadline | None) -> httpx.Timeout:
    """Per attempt, so one attempt never outlives the turn (httpx's read timeout is per read)."""
    limit = math.inf if deadline is None else max(0.01, deadline.remaining())
    return httpx.Timeout(
        connect=min(connect, limit),
        read=min(read, limit),
        write=min(WRITE_TIMEOUT, limit),
        pool=min(connect, limit),
    )


def http_client(url: str, transport: httpx.BaseTransport | None) -> httpx.Client:
    """The model's HTTP client. A CA bundle is loaded only for an https endpoint: loading certifi's
    costs a cold start 60-100 ms, wasted on a plain-http one (the local and simulated models);
    anything but plain http keeps full verification."""
    return httpx.Client(transport=transport, follow_redirects=False, verify=not url.lower().startswith("http://"))


def call_with_retries(
    attempt: Callable[[], T],
    *,
    deadline: Deadline | None,
    max_retries: int,
    breaker: CircuitBreaker,
    sleep: Callable[[float], None],
    random: Callable[[], float],
    on_retry: Callable[[int], None] = lambda _n: None,
) -> T:
    """`attempt()` until it succeeds, raises a final error, or the retries or the deadline run out."""
    breaker.allow()
    attempts = 0
    try:
        retry = 0
        while True:
            if deadline is not None and deadline.remaining() <= 0:
                raise ModelUnavailable(
                    "turn deadline reached before the model answered", retry_after=DEFAULT_RETRY_AFTER
                )
            attempts += 1
            try:
                result = attempt()
                break
            except Retryable as fault:
                wait = backoff(retry, random) if fault.retry_after is None else fault.retry_after
                retry_after = clamp_retry_after(fault.retry_after)
                if retry >= max_retries:
                    raise ModelUnavailable(
                        f"model API unavailable ({fault.reason}) after {retry + 1} attempts",
                        retry_after=retry_after,
                    ) from None
                if wait > MAX_RETRY_AFTER or (deadline is not None and wait + DEADLINE_MARGIN > deadline.remaining()):
                    raise ModelUnavailable(
                        f"model API unavailable ({fault.reason}); no time left to retry",
                        retry_after=retry_after,
                    ) from None
                log.warning("model call failed (%s), retry %d in %.2fs", fault.reason, retry + 1, wait)
                sleep(wait)
                retry += 1
                on_retry(retry)
    except ModelUnavailable:
        if attempts:
            breaker.record_failure()
        else:
            breaker.release()
        raise
    except ModelRefused:
        breaker.record_success()  # the provider answered; the request was at fault
        raise
    except BaseException:
        breaker.release()
        raise
    breaker.record_success()
    return result


class RetryingClient:
    """What every model adapter shares: per-attempt timeouts, retries with jitter bounded by the
    deadline, a breaker, and the per-thread retry count the loop logs (`last_retries`).

    `sleep`, `clock` and `random` are injectable so tests never wait.
    """

    def __init__(
        self,
        *,
        connect_timeout: float,
        read_timeout: float,
        max_retries: int,
        breaker: CircuitBreaker | None,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
        random: Callable[[], float],
    ) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_retries = max_retries
        self.breaker = breaker if breaker is not None else CircuitBreaker(clock=clock)
        self._sleep = sleep
        self._clock = clock
        self._random = random
        self._local = threading.local()

    @property
    def last_retries(self) -> int:
        return int(getattr(self._local, "retries", 0))

    def _begin(self) -> None:
        """A new `create`: its retry count starts at zero, whatever the last call of this thread did."""
        self._local.retries = 0

    def _retried(self, attempt: Callable[[], T], deadline: Deadline | None) -> T:
        return call_with_retries(
            attempt,
            deadline=deadline,
            max_retries=self.max_retries,
            breaker=self.breaker,
            sleep=self._sleep,
            random=self._random,
            on_retry=self._count_retry,
        )

    def _count_retry(self, retry: int) -> None:
        self._local.retries = retry

    def _timeout(self, deadline: Deadline | None) -> httpx.Timeout:
        return http_timeout(self.connect_timeout, self.read_timeout, deadline)
