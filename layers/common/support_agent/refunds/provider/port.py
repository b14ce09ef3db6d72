"""The payment-provider port: one interface every refund goes through, whichever adapter answers.

Keys: the *refund key* is a refund's identity (direct refunds ``<conversation_id>:<seq>:<tool_use_id>``,
approved ones the approval id); an *attempt key* ``<refund key>#<n>`` names one attempt and is what the
provider's idempotency key is. Repeating a call with the same attempt key is always safe: the provider
answers with the first attempt's outcome, never a second refund.

What a caller does with each outcome (the ledger rules live with the caller):

* a `ProviderRefund` — the refund as the provider holds it (``pending`` and ``requires_action`` still
  move towards ``succeeded`` or ``failed``);
* `OutcomeUnknown` — retries ran out and at least one attempt may have been executed: repeat the call
  later with the SAME attempt key;
* `ProviderRefused` — look the refund up (`find`): our request may have been refused because an earlier
  attempt already made it (``charge_already_refunded``); ``definitive`` says whether "not found" then
  proves there is no refund (a 4xx refusal) or proves nothing (a replayed 5xx, an ``idempotency_error``);
* `ProviderUnavailable` — no attempt of this call was executed (connection refused, 429, credentials):
  nothing happened in this call; an earlier call with the same key may still have refunded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from support_agent.errors import ServiceError
from support_agent.messages import Deadline
from support_agent.refunds.keys import ledger_row_of, split_attempt_key

RefundStatus = Literal["pending", "requires_action", "succeeded", "failed", "canceled"]
# A refund in one of these states moved no money and never will: `find` skips it.
DEAD_STATUSES = frozenset({"failed", "canceled"})

# Stripe's limits (https://docs.stripe.com/api/idempotent_requests, /api/metadata); we keep to them everywhere.
MAX_METADATA_KEYS = 50
MAX_METADATA_KEY_CHARS = 40
MAX_METADATA_VALUE_CHARS = 500
DEFAULT_RETRY_AFTER = 5
_METADATA_KEY = re.compile(rf"[A-Za-z0-9_.-]{{1,{MAX_METADATA_KEY_CHARS}}}")
_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


class ProviderRefund(BaseModel):
    """A refund as the provider holds it (Stripe's refund object, the fields we use; the rest ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(min_length=1)
    status: RefundStatus
    amount: int = Field(strict=True, ge=0)
    currency: str
    payment_intent: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)
    failure_reason: str = ""  # Stripe's, on a failed refund (``expired_or_canceled_card``, ``lost_or_stolen_card``...)
    created: int = 0  # seconds since the epoch, the provider's clock (reconciliation's window); 0: not told

    @field_validator("failure_reason", mode="before")
    @classmethod
    def _no_reason(cls, value: object) -> object:
        return "" if value is None else value

    @field_validator("payment_intent", mode="before")
    @classmethod
    def _no_intent(cls, value: object) -> object:
        return "" if value is None else value  # a refund of a bare charge has none

    @property
    def refund_key(self) -> str:
        return self.metadata.get("refund_key", "")

    @property
    def ledger_row(self) -> tuple[int, str] | None:
        """(customer id, sort key) of the ledger row the metadata names (its ``refund_key`` and ``customer_id``),
        or None when it names none of ours: every origin's key (chat direct, MCP keyed, approved) by the one
        grammar, refunds/keys.py. The webhook and reconciliation find a refund's row by it."""
        return ledger_row_of(self.refund_key, self.metadata.get("customer_id", ""))

    @property
    def alive(self) -> bool:
        """Money moved or may still move: not failed, not canceled."""
        return self.status not in DEAD_STATUSES


class PaymentError(ServiceError):
    """A payment-provider call that did not end in a refund object."""

    kind = "payment_error"


class ProviderRefused(PaymentError):
    """The provider answered no. ``code`` is its error code (``amount_too_large``, ``charge_already_refunded``...).

    ``definitive``: True for a refusal of the request (4xx): if `find` then finds nothing, no refund exists.
    False for a saved failure (a replayed 5xx, ``idempotency_error``): look it up, but "not found" proves nothing.
    """

    kind = "payment_refused"

    def __init__(self, code: str, message: str, *, status: int | None = None, definitive: bool = True) -> None:
        super().__init__(message[:500])
        self.code = code if _CODE.fullmatch(code) else "unknown"
        self.status = status
        self.definitive = definitive


class OutcomeUnknown(PaymentError):
    """Retries ran out and an attempt may have been executed: retry later with the same attempt key."""

    kind = "payment_outcome_unknown"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ProviderUnavailable(PaymentError):
    """No attempt of this call was executed (unreachable, 429, our credentials refused, key unreadable)."""

    kind = "payment_unavailable"

    def __init__(self, reason: str, *, retry_after: int = DEFAULT_RETRY_AFTER) -> None:
        super().__init__(reason, retry_after=retry_after)
        self.reason = reason


@dataclass(frozen=True)
class RefundAttempt:
    """One attempt at a refund, as every adapter is asked it: ``amount`` (minor units, checked when built) of
    ``payment_intent``, idempotently by ``key``, the attempt key. ``metadata``: the caller's, stored with it."""

    key: str
    payment_intent: str
    amount: int
    currency: str
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_amount(self.amount)

    def stored_metadata(self) -> dict[str, str]:
        """What the provider stores with the refund (`refund_metadata`): ``ValueError`` when it cannot be."""
        return refund_metadata(self.key, self.metadata)


class PaymentProvider(Protocol):
    """Refunds at a payment provider. ``deadline``: no attempt, and no wait between attempts, crosses it."""

    name: str

    def refund(self, attempt: RefundAttempt, *, deadline: Deadline | None = None) -> ProviderRefund:
        """Make ``attempt``'s refund, idempotently by its attempt key."""
        ...

    def find(self, refund_key: str, payment_intent: str, *, deadline: Deadline | None = None) -> ProviderRefund | None:
        """The live (not failed, not canceled) refund made for ``refund_key``, or None.

        Takes the payment intent because Stripe cannot search refunds by metadata: it lists the
        intent's refunds and matches ``metadata.refund_key``.
        """
        ...

    def retrieve(self, refund_id: str, *, deadline: Deadline | None = None) -> ProviderRefund:
        """The refund ``refund_id``; `ProviderRefused` (``resource_missing``) when the provider has none."""
        ...

    def list_for_intent(self, payment_intent: str, *, deadline: Deadline | None = None) -> list[ProviderRefund]:
        """Every refund of ``payment_intent``, failed and canceled ones included, newest first (reconciliation)."""
        ...

    def list_created_since(self, created_gte: int, *, deadline: Deadline | None = None) -> list[ProviderRefund]:
        """Every refund created at or after ``created_gte`` (seconds since the epoch) on any payment intent,
        ours or not, newest first: reconciliation finds refunds made outside our ledger this way."""
        ...


def refund_metadata(key: str, metadata: Mapping[str, str]) -> dict[str, str]:
    """What is stored with the refund: the caller's metadata plus ``refund_key`` and ``attempt``.

    Derived from the attempt key, so they cannot disagree with it; keys stay within Stripe's limits
    and free of ``[]`` (they become form field names ``metadata[<key>]``).
    """
    refund_key, attempt = split_attempt_key(key)
    out = {str(k): str(v) for k, v in metadata.items()}
    for name, value in (("refund_key", refund_key), ("attempt", str(attempt))):
        if out.setdefault(name, value) != value:
            raise ValueError(f"metadata {name}={out[name]!r} contradicts the attempt key {key!r}")
    if len(out) > MAX_METADATA_KEYS:
        raise ValueError(f"at most {MAX_METADATA_KEYS} metadata keys")
    for k, v in out.items():
        if not _METADATA_KEY.fullmatch(k) or len(v) > MAX_METADATA_VALUE_CHARS:
            raise ValueError(f"metadata {k!r} breaks the provider's limits")
    return out


def check_amount(amount: int) -> None:
    """Refunds are positive whole minor units; a float or a bool is a caller's bug, never rounded."""
    if type(amount) is not int or amount <= 0:
        raise ValueError(f"a refund amount is a positive int of minor units, not {amount!r}")
