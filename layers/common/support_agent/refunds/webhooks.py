"""Stripe's webhooks (``POST /webhooks/stripe``): what the provider says of a refund, applied once, never backwards.

`StripeWebhooks.receive` takes the raw body and the ``Stripe-Signature`` header; the HTTP edge (the API Gateway
event, the body's shape, the error contract, the response) is api/stripe_webhook.py's.

Signature, as Stripe documents it (https://docs.stripe.com/webhooks#verify-manually): the
``Stripe-Signature`` header is ``t=<unix seconds>,v1=<hex>[,v1=<hex>…]`` (other schemes, ``v0``, are
ignored); ``v1`` is HMAC-SHA256, keyed by the endpoint's signing secret, of ``<t>.<raw body>``. A request
is genuine when one ``v1`` matches one of our secrets (``STRIPE_WEBHOOK_SECRET``, comma separated: while
Stripe rolls a secret it signs with both, and we accept either) by a constant-time comparison, and ``t``
is within 300 s of our clock. Anything else — no header, a malformed one, a stale ``t``, a wrong secret, a
changed body — is a 400 and changes nothing; no log line holds the body or the header.

Events: ``refund.updated``, ``refund.failed`` and ``charge.refund.updated`` carry the refund object. Stripe
sends a ``refund.*`` and a ``charge.refund.updated`` for one change, with different event ids, at least
once each and in any order. The refund's metadata names its ledger row (``customer_id`` and
``refund_key``), read with one GetItem; the change is applied by `RefundSettler.apply` (never backwards)
in one transaction with a dedupe item ``WEBHOOK#<refund id>#<status>`` under the customer, created only
if absent: a crash cannot lose a change nor a redelivery apply one twice. A refund that settles so is
announced in its conversation's feed in that transaction (``refund.settled``, or ``approval.decided``), so a
redelivery announces nothing twice either. Other event types: 200, ignored.
A refund the ledger does not know (made in Stripe's dashboard, or another system's): 200, logged as a
reconciliation finding.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from support_agent.errors import InvalidRequest, ServiceError
from support_agent.refunds.ledger import RefundLedger
from support_agent.refunds.ledger_row import By, Duplicate, LedgerRow
from support_agent.refunds.provider.port import ProviderRefund
from support_agent.refunds.settle import RefundSettler
from support_agent.store.dynamo import put_new

logger = logging.getLogger(__name__)

TOLERANCE_SECONDS = 300  # Stripe's libraries' default: a replayed request older than this is refused
SCHEME = "v1"
HANDLED = frozenset({"refund.updated", "refund.failed", "charge.refund.updated"})
ACTOR = "stripe-webhook"
_TIMESTAMP = re.compile(r"[0-9]{1,12}")

Outcome = Literal["applied", "unchanged", "duplicate", "ignored", "unknown_refund"]


class BadSignature(InvalidRequest):
    """The request is not provably Stripe's: 400, nothing changed."""

    kind = "webhook_signature"


class WebhookSecretUnavailable(ServiceError):
    """No signing secret to verify with (not configured, or unreadable): a deployment fault, not the sender's."""

    kind = "webhook_secret_unavailable"


def secrets_of(value: str) -> list[str]:
    """The signing secrets in ``STRIPE_WEBHOOK_SECRET``: comma separated (two while Stripe rolls one)."""
    return [s.strip() for s in value.split(",") if s.strip()]


def signature(payload: bytes, secret: str, timestamp: int) -> str:
    """The hex ``v1`` of ``payload`` signed at ``timestamp`` with ``secret``."""
    signed = str(timestamp).encode() + b"." + payload
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def verify_signature(
    payload: bytes, header: str | None, secrets: Sequence[str], now: float, tolerance: int = TOLERANCE_SECONDS
) -> int:
    """The signed timestamp, once ``header`` proves ``payload`` is Stripe's; `BadSignature` otherwise.

    Every secret is compared with every ``v1`` (``hmac.compare_digest``), so the time taken does not
    depend on where a guess first differs.
    """
    if not header:
        raise BadSignature("Stripe-Signature: missing")
    timestamps: list[str] = []
    candidates: list[str] = []
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            raise BadSignature("Stripe-Signature: malformed")
        if name == "t":
            timestamps.append(value)
        elif name == SCHEME:
            candidates.append(value)
    if len(timestamps) != 1 or not _TIMESTAMP.fullmatch(timestamps[0]):
        raise BadSignature("Stripe-Signature: malformed (one timestamp t= expected)")
    if not candidates:
        raise BadSignature(f"Stripe-Signature: no {SCHEME} signature")
    if not secrets:  # ours to fix, not the sender's: raised, so the function errs and Stripe retries
        raise WebhookSecretUnavailable("no webhook signing secret is configured (STRIPE_WEBHOOK_SECRET)")
    timestamp = int(timestamps[0])
    expected = [signature(payload, secret, timestamp) for secret in secrets]
    matched = False
    for candidate in candidates:
        for want in expected:
            matched |= hmac.compare_digest(want.encode(), candidate.encode())
    if not matched:
        raise BadSignature("Stripe-Signature: no signature matches")
    if abs(now - timestamp) > tolerance:
        raise BadSignature(f"Stripe-Signature: timestamp outside the {tolerance} s tolerance")
    return timestamp


class _EventData(BaseModel):
    model_config = ConfigDict(extra="ignore")
    object: dict[str, Any]


class StripeEvent(BaseModel):
    """An event as Stripe sends it (the fields we use; ``data.object`` is the refund for the handled types)."""

    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1, max_length=255)
    type: str = Field(min_length=1, max_length=255)
    created: int = 0
    data: _EventData


@dataclass(frozen=True)
class WebhookResult:
    outcome: Outcome
    event_id: str
    event_type: str
    refund_id: str = ""
    refund_status: str = ""  # the provider's
    ledger_status: str = ""  # the row's, after


class StripeWebhooks:
    """Receives one webhook request: verify, read the refund's row, apply the change once."""

    def __init__(
        self,
        ledger: RefundLedger,
        settler: RefundSettler,
        customer_table: str,
        secrets: Callable[[], Sequence[str]],
        clock: Callable[[], float] = time.time,
        tolerance: int = TOLERANCE_SECONDS,
    ) -> None:
        self.ledger = ledger
        self.settler = settler
        self.customer_table = customer_table
        self.secrets = secrets
        self.clock = clock
        self.tolerance = tolerance

    # -- the event -----------------------------------------------------------------------------------------------

    def receive(self, payload: bytes, header: str | None) -> WebhookResult:
        verify_signature(payload, header, self.secrets(), self.clock(), self.tolerance)
        try:
            event = StripeEvent.model_validate_json(payload)
        except ValidationError:
            raise InvalidRequest("body: not a Stripe event") from None
        if event.type not in HANDLED:
            logger.info("webhook ignored", extra={"event_id": event.id, "event_type": event.type})
            return WebhookResult("ignored", event.id, event.type)
        try:
            refund = ProviderRefund.model_validate(event.data.object)
        except ValidationError:
            raise InvalidRequest(f"body: {event.type} without a refund object") from None
        fields = {"event_id": event.id, "event_type": event.type, "refund_id": refund.id, "status": refund.status}
        found = refund.ledger_row
        row = self.ledger.get(*found) if found else None
        if row is None or row.refund_key != refund.refund_key:
            # Made outside our ledger (the dashboard, another system) or by a row since erased: the
            # reconciliation reports it; Stripe must not retry it.
            logger.warning(
                "reconciliation finding: webhook for a refund the ledger does not know",
                extra={**fields, "finding": "unknown_refund", "payment_intent": refund.payment_intent},
            )
            return WebhookResult("unknown_refund", event.id, event.type, refund.id, refund.status)
        if refund.metadata.get("attempt", str(row.attempt)) != str(row.attempt) and refund.alive:
            logger.warning(
                "reconciliation finding: webhook for a live refund of another attempt",
                extra={**fields, "finding": "other_attempt", "attempt": row.attempt},
            )
        try:
            # Announced (a direct refund's settlement too): the customer's turn is long over when a webhook comes.
            after = self.settler.apply(
                row, refund, By(ACTOR, event.id, [self._dedupe(row, refund, event)], announce=True)
            )
        except Duplicate:
            logger.info("webhook duplicate", extra=fields)
            return WebhookResult("duplicate", event.id, event.type, refund.id, refund.status, row.status)
        changed = (after.status, after.refund_id, after.attempt) != (row.status, row.refund_id, row.attempt)
        outcome: Outcome = "applied" if changed else "unchanged"
        logger.info("webhook " + outcome, extra={**fields, "ledger_from": row.status, "ledger_to": after.status})
        return WebhookResult(outcome, event.id, event.type, refund.id, refund.status, after.status)

    def _dedupe(self, row: LedgerRow, refund: ProviderRefund, event: StripeEvent) -> dict[str, Any]:
        """Created with the change it marks, only if absent: (refund id, status) is applied once."""
        from support_agent.clock import utc_now

        return put_new(
            self.customer_table,
            {
                "customer_id": row.customer_id,
                "sk": f"WEBHOOK#{refund.id}#{refund.status}",
                "refund_key": row.refund_key,
                "event_id": event.id,
                "event_type": event.type,
                "received_at": utc_now(),
            },
            "sk",
        )
