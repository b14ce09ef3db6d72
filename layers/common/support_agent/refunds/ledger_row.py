"""A ledger row, its states, what one provider call established, and what a ledger write may answer.

Data only: the writes that move a row from state to state are the ledger's (ledger.py, approved.py,
settlements.py), which this module knows nothing of.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from support_agent.audit.chain import Head
from support_agent.refunds.keys import attempt_key
from support_agent.refunds.vocabulary import LedgerStatus
from support_agent.store.records import Record, optional

UNSETTLED: tuple[LedgerStatus, ...] = ("REQUESTED", "SETTLING")
FINAL: tuple[LedgerStatus, ...] = ("SUCCEEDED", "FAILED")
# Index keys (template.yaml, CustomerDataTable): `unsettled` holds only REQUESTED/SETTLING rows, by
# attempt_started_at (the payment sweep); `ledger_by_created` every ledger row, by created_at (reconciliation).
UNSETTLED_INDEX, UNSETTLED_INDEX_KEY = "unsettled", "UNSETTLED"
LEDGER_INDEX, LEDGER_INDEX_KEY = "ledger_by_created", "LEDGER"
Kind = Literal["direct", "approved"]


@dataclass(frozen=True, kw_only=True)
class LedgerRow(Record):
    """A ledger row, every attribute the ledger reads; the rest (timestamps, the index keys, the audit head)
    stay in ``extra``. `LedgerTable.new_row` writes a new one from `Record.item`."""

    KIND: ClassVar[str] = "ledger row"

    customer_id: int
    sk: str
    kind: Kind
    refund_key: str
    order_id: int
    amount_cents: int
    currency: str
    payment_intent: str = ""  # none on a row written before orders carried one
    status: LedgerStatus
    attempt: int
    provider: str = "none"
    conversation_id: str = optional("")
    approval_id: str = optional("")
    tool_use_id: str = optional("")  # a direct refund's tool call
    refund_id: str = optional("")
    failure_code: str = optional("")
    policy_version: int | None = None  # the support policy's version the refund was decided under

    @property
    def settled(self) -> bool:
        return self.status in FINAL

    @property
    def attempt_key(self) -> str:
        return attempt_key(self.refund_key, self.attempt)

    @property
    def audit_head(self) -> Head:
        """The head of the refund key's audit stream (``refund#<key>``), which this row owns."""
        return Head.of(self.extra)

    @property
    def audit_stream(self) -> str:
        return f"refund#{self.refund_key}"

    @property
    def metadata(self) -> dict[str, str]:
        """What the provider stores with the refund (the port adds refund_key and attempt)."""
        meta = {"customer_id": str(self.customer_id), "order_id": str(self.order_id)}
        if self.approval_id:
            meta["approval_id"] = self.approval_id
        if self.conversation_id:
            meta["conversation_id"] = self.conversation_id
        return meta


@dataclass(frozen=True)
class Outcome:
    """What one provider call (and, after a refusal, the look-up) established."""

    status: LedgerStatus  # SUCCEEDED, SETTLING or FAILED
    refund_id: str = ""
    provider_status: str = ""  # the provider's word (pending, succeeded...), or what went wrong
    failure_code: str = ""
    unknown: bool = False  # True: no answer (timeout, 5xx, unavailable); repeat the same attempt later


@dataclass(frozen=True)
class By:
    """Who records a provider's word on a row, and what comes with it: the audit row's ``actor`` and
    ``request_id``; ``extra_items``, the writer's own conditional writes in the same transaction (a webhook's
    dedupe item: `Duplicate` when one of them fails); ``announce``, a direct refund's settlement told in its
    conversation's feed (an approved one's always is: ledger.py's docstring)."""

    actor: str
    request_id: str = ""
    extra_items: Sequence[dict[str, Any]] = ()
    announce: bool = False


class LedgerRace(Exception):
    """The row, the order or the approval was not in the state the write needs; re-read and decide."""


class Duplicate(LedgerRace):
    """A writer's extra item already exists (`By.extra_items`): this change was applied."""


class ReservationMissing(LedgerRace):
    """The order no longer holds the approved amount reserved (changed underneath): ask the provider nothing."""
