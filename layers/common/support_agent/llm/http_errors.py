"""What an HTTP model provider's error answer means, the same for every HTTP adapter (llm/http_client.py).

The adapter reads its provider's error body (a `ProviderError`); the status decides the rest: a spend or
quota limit → `ModelUnavailable` with a long `retry_after` (not retried: resending will not help for a
long time), a 5xx or one of the adapter's retryable statuses → `Retryable` (with the server's
`retry-after`), any other 4xx → `ModelRefused`, whose body names the status and error type only.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from support_agent.errors import ModelUnavailable
from support_agent.llm.retry import SPEND_LIMIT_RETRY_AFTER, Retryable, error_type, refused, retry_after_header


@dataclass(frozen=True)
class ProviderError:
    """A provider's error body as its adapter reads it: ``kind`` (its type or code) may go in our answer's
    reason, ``message`` only to our log; ``spent``: out of credit, quota or spend limit."""

    kind: str = ""
    message: str = ""
    spent: bool = False


def failure(r: httpx.Response, error: ProviderError, key: str, retryable: frozenset[int], spent: str) -> Exception:
    """What to raise for a non-200 ``r``. ``key`` is scrubbed from what is logged; ``spent``: the 503's words."""
    reason = f"HTTP {r.status_code} {error_type(error.kind)}".rstrip()
    if 400 <= r.status_code < 500 and error.spent:
        return ModelUnavailable(f"{spent} ({reason})", retry_after=SPEND_LIMIT_RETRY_AFTER)
    if r.status_code in retryable or r.status_code >= 500:
        return Retryable(reason, retry_after_header(r.headers))
    return refused(reason, error.message, key)
