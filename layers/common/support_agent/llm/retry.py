"""The retry, deadline and breaker policy every model adapter shares.

One place decides when a failed model call is tried again, so the three providers keep the same
rules (docs/ARCHITECTURE.md, rule 4): exponential backoff with full jitter, or the server's own `retry-after`;
never an attempt after the turn's deadline, never a sleep that would cross it; when retries run out
→ `ModelUnavailable` (503) with a `retry_after` for clients. The numbers (attempts, backoff, timeouts)
and the breaker are one `RetryPolicy`, built once from the settings and given to every adapter. An
adapter only says, per attempt, whether a failure is worth repeating (raise `Retryable`) or final
(`ModelRefused`/`ModelUnavailable`).

Breaker bookkeeping: a whole call that ended in `ModelUnavailable` after at least one attempt is one
failure; a `ModelRefused` means the provider answered, so it counts as a success for the breaker.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from support_agent.config import Settings
from support_agent.errors import ModelRefused, ModelUnavailable
from support_agent.llm.base import LlmClient, LlmRequest, LlmResponse, TextSink
from support_agent.llm.breaker import CircuitBreaker
from support_agent.messages import Deadline
from support_agent.outbound import AttemptPolicy

log = logging.getLogger(__name__)

DEFAULT_RETRY_AFTER = 5
MAX_RETRY_AFTER = 60
SPEND_LIMIT_RETRY_AFTER = 3600
DEADLINE_MARGIN = 1.0
SPEND_LIMIT = re.compile(r"spend|billing|credit|usage limit", re.IGNORECASE)


@dataclass(frozen=True)
class RetryPolicy(AttemptPolicy):
    """How every adapter retries and times out: one object, given to each, built once from settings.

    `breaker` is shared state on purpose (one per process: `wiring`); the numbers are `AttemptPolicy`'s
    defaults: 3 retries, 3 s to connect, 25 s to read, waits from 0.5 s doubling up to 8 s.
    """

    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)

    @classmethod
    def from_settings(cls, settings: Settings, breaker: CircuitBreaker | None = None) -> RetryPolicy:
        return cls(
            max_retries=settings.llm_max_retries,
            connect_timeout=settings.llm_connect_timeout,
            read_timeout=settings.llm_read_timeout,
            breaker=breaker or CircuitBreaker(settings.breaker_failure_threshold, settings.breaker_cooldown_seconds),
        )


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


def call_with_retries(
    attempt: Callable[[], LlmResponse], deadline: Deadline | None, policy: RetryPolicy
) -> LlmResponse:
    """`attempt()` until it succeeds, raises a final error, or the retries or the deadline run out.

    The answer, or the model error, carries how many retries it took: the loop logs it, and a shared
    adapter keeps no per-call state.
    """
    policy.breaker.allow()
    attempts = retry = 0
    try:
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
                wait = policy.backoff(retry) if fault.retry_after is None else fault.retry_after
                retry_after = clamp_retry_after(fault.retry_after)
                if retry >= policy.max_retries:
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
                policy.sleep(wait)
                retry += 1
    except ModelUnavailable as exc:
        exc.retries = retry
        if attempts:
            policy.breaker.record_failure()
        else:
            policy.breaker.release()
        raise
    except ModelRefused as exc:
        exc.retries = retry
        policy.breaker.record_success()  # the provider answered; the request was at fault
        raise
    except BaseException:
        policy.breaker.release()
        raise
    policy.breaker.record_success()
    return replace(result, retries=retry) if retry else result


Attempt = Callable[[Deadline | None], LlmResponse]


class RetryingClient(LlmClient):
    """What every model adapter shares: each request is answered under the adapter's `RetryPolicy`.

    An adapter only builds its request (`_request`, once per call; a configuration fault raises there,
    before the breaker is asked) and says what one attempt does with the time left; with a `text` sink,
    an attempt that streams feeds it (an adapter that cannot stream ignores it).
    """

    def __init__(self, policy: RetryPolicy | None) -> None:
        self.policy = policy if policy is not None else RetryPolicy()

    def answer(self, request: LlmRequest, deadline: Deadline | None, text: TextSink | None = None) -> LlmResponse:
        attempt = self._request(request, text)
        return call_with_retries(lambda: attempt(deadline), deadline, self.policy)

    def _request(self, request: LlmRequest, text: TextSink | None = None) -> Attempt:
        raise NotImplementedError
