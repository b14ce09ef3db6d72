"""ApprovalNotifierFunction's logic: tell the leads about a PENDING approval — at least once, rarely twice.

The ApprovalQueue carries ``{"approvalId": "apr_…"}``. Exactly-once is not possible across SNS and
DynamoDB, so this is at-least-once with duplicates suppressed:

1. a conditional update takes a *claim* that expires (``notify_claim_until`` = now +
   ``CLAIM_SECONDS``); a delivery that finds a live claim or ``notified_at`` publishes nothing;
2. the SNS publish;
3. ``notified_at`` is set (and the claim dropped) only after the publish succeeded.

A publish that fails drops the claim (only if it is still ours) and fails the record, so SQS
delivers it again. A crash or timeout between 1 and 3 leaves a claim without ``notified_at``: it
expires before the record's visibility timeout ends, so the redelivery publishes, and the sweep
re-enqueues any approval whose claim expired un-notified. The price: a crash *after* the publish
and before step 3 notifies the leads twice. Never zero times.

Outcomes that need no retry (unknown approval, already notified, no longer pending) are
successes; a body that is not ``{"approvalId": "apr_<ULID>"}`` fails model validation, is
reported as a batch item failure and, after ``maxReceiveCount`` receives, lands in the DLQ.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, Json

from support_agent import observability as obs
from support_agent.clock import Clock, iso, utc_datetime
from support_agent.ids import APPROVAL_ID
from support_agent.store.approvals import Approval, ApprovalStore

if TYPE_CHECKING:
    from mypy_boto3_sns.client import SNSClient
else:
    SNSClient = Any

logger = logging.getLogger(__name__)

SUBJECT_MAX = 100  # SNS limit (ASCII, no line breaks)


class ApprovalMessage(BaseModel):
    """The queue message body. Unknown extra fields are ignored; the id must be ``apr_`` + ULID."""

    model_config = ConfigDict(frozen=True)

    approval_id: str = Field(alias="approvalId", pattern=APPROVAL_ID.pattern)


class ApprovalQueueRecord(SqsRecordModel):
    """An SQS record whose body parses as :class:`ApprovalMessage` (else the record fails)."""

    body: Json[ApprovalMessage]


# Longer than the notifier's Timeout (30 s), so a live holder never loses its claim; shorter than the
# ApprovalQueue's VisibilityTimeout (180 s), so a crashed holder's redelivery finds it expired.
CLAIM_SECONDS = 120


class Outcome(StrEnum):
    PUBLISHED = "published"
    ALREADY_NOTIFIED = "already_notified"
    CLAIMED_ELSEWHERE = "claimed_elsewhere"  # a live claim: another delivery is publishing
    NOT_FOUND = "not_found"
    NOT_PENDING = "not_pending"


def lead_message(approval: Approval) -> tuple[str, str]:
    """(subject, JSON message) for the leads: the approval's facts, nothing secret.

    The reason is customer/model-supplied text, so it goes only into the JSON (escaped), never
    into the subject line.
    """
    amount, currency = approval.amount_cents, approval.currency
    subject = f"Refund approval needed: order {approval.order_id}, {amount // 100}.{amount % 100:02d} {currency}"
    body = {
        "approvalId": approval.approval_id,
        "orderId": approval.order_id,
        "customerId": approval.customer_id,
        "amountCents": amount,
        "currency": currency,
        "reason": approval.reason,
        "createdAt": approval.created_at,
    }
    return subject[:SUBJECT_MAX], json.dumps(body, ensure_ascii=False)


class ApprovalNotifier:
    def __init__(
        self,
        store: ApprovalStore,
        sns: SNSClient,
        topic_arn: str,
        clock: Clock = utc_datetime,
        claim_seconds: float = CLAIM_SECONDS,
    ) -> None:
        self.store = store
        self._sns = sns
        self.topic_arn = topic_arn
        self._clock = clock
        self.claim = timedelta(seconds=claim_seconds)

    def notify(self, approval_id: str) -> Outcome:
        """Publish one lead notification for the approval, unless it was published or is being published."""
        approval = self.store.get(approval_id)
        if approval is None:
            logger.warning("approval %s not found; nothing to notify", approval_id)
            return Outcome.NOT_FOUND
        if approval.status != "PENDING":
            return Outcome.NOT_PENDING
        if approval.notified_at:
            return Outcome.ALREADY_NOTIFIED
        now = self._clock()
        until = iso(now + self.claim)
        if not self.store.claim_notification(approval_id, iso(now), until):
            return Outcome.CLAIMED_ELSEWHERE  # or notified a moment ago; either way not ours to publish
        subject, message = lead_message(approval)
        try:
            self._sns.publish(TopicArn=self.topic_arn, Subject=subject, Message=message)
        except Exception:
            self.unclaim(approval_id, until)
            raise
        # Failing here (or dying) leaves the claim to expire: the redelivery publishes again.
        self.store.mark_notified(approval_id, iso(self._clock()))
        return Outcome.PUBLISHED

    def unclaim(self, approval_id: str, until: str) -> None:
        """Drop the claim if it is still ours, so a redelivery need not wait for it to expire."""
        try:
            if not self.store.drop_notification_claim(approval_id, until):
                logger.warning("notification claim of %s changed before it was taken back", approval_id)
        except ClientError:
            # It expires on its own; the redelivery after the visibility timeout publishes.
            logger.exception("could not take back the notification claim of %s", approval_id)


def handle_record(record: ApprovalQueueRecord, notifier: ApprovalNotifier) -> str:
    """One record of the BatchProcessor's batch: raising fails just this record."""
    obs.logger.append_keys(approval_id=record.body.approval_id, message_id=record.messageId)
    try:
        outcome = notifier.notify(record.body.approval_id)
        logger.info("approval %s: %s", record.body.approval_id, outcome.value)
        return outcome.value
    finally:
        obs.logger.remove_keys(["approval_id", "message_id"])
