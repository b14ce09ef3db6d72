"""ApprovalNotifierFunction's logic: tell the leads about a PENDING approval, exactly once.

The ApprovalQueue carries ``{"approvalId": "apr_…"}``. Claim-then-publish: a conditional update
sets ``notified_at`` *before* the SNS publish, so a redelivered or duplicated message finds the
claim and publishes nothing. If the publish fails after the claim, the claim is taken back (only
if it is still ours) and the record fails, so SQS delivers it again.

Outcomes that need no retry (unknown approval, already notified, no longer pending) are
successes; a body that is not ``{"approvalId": "apr_<ULID>"}`` fails model validation, is
reported as a batch item failure and, after ``maxReceiveCount`` receives, lands in the DLQ.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import boto3
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, Json

from support_agent import observability as obs
from support_agent.config import Settings, get_settings
from support_agent.ids import APPROVAL_ID
from support_agent.store.approvals import ApprovalStore
from support_agent.store.dynamo import DynamoDBClient, is_conditional_failure, to_item, to_values

if TYPE_CHECKING:
    from mypy_boto3_sns.client import SNSClient
else:
    SNSClient = Any

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]
SUBJECT_MAX = 100  # SNS limit (ASCII, no line breaks)


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """The timestamp format every stored ``*_at`` uses, so strings compare in time order."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ApprovalMessage(BaseModel):
    """The queue message body. Unknown extra fields are ignored; the id must be ``apr_`` + ULID."""

    model_config = ConfigDict(frozen=True)

    approval_id: str = Field(alias="approvalId", pattern=APPROVAL_ID.pattern)


class ApprovalQueueRecord(SqsRecordModel):
    """An SQS record whose body parses as :class:`ApprovalMessage` (else the record fails)."""

    body: Json[ApprovalMessage]


class Outcome(StrEnum):
    PUBLISHED = "published"
    ALREADY_NOTIFIED = "already_notified"
    NOT_FOUND = "not_found"
    NOT_PENDING = "not_pending"


def lead_message(approval: dict[str, Any]) -> tuple[str, str]:
    """(subject, JSON message) for the leads: the approval's facts, nothing secret.

    The reason is customer/model-supplied text, so it goes only into the JSON (escaped), never
    into the subject line.
    """
    amount = int(approval["amount_cents"])
    currency = str(approval.get("currency", ""))
    subject = f"Refund approval needed: order {approval['order_id']}, {amount // 100}.{amount % 100:02d} {currency}"
    body = {
        "approvalId": approval["approval_id"],
        "orderId": approval["order_id"],
        "customerId": approval["customer_id"],
        "amountCents": amount,
        "currency": currency,
        "reason": approval.get("reason", ""),
        "createdAt": approval.get("created_at"),
    }
    return subject[:SUBJECT_MAX], json.dumps(body, ensure_ascii=False)


class ApprovalNotifier:
    def __init__(
        self,
        store: ApprovalStore,
        db: DynamoDBClient,
        sns: SNSClient,
        topic_arn: str,
        clock: Clock = utc_now,
    ) -> None:
        self.store = store
        self._db = db
        self._sns = sns
        self.topic_arn = topic_arn
        self._clock = clock

    def notify(self, approval_id: str) -> Outcome:
        """Publish one lead notification for the approval, unless it was already published."""
        approval = self.store.get(approval_id)
        if approval is None:
            logger.warning("approval %s not found; nothing to notify", approval_id)
            return Outcome.NOT_FOUND
        if approval.get("status") != "PENDING":
            return Outcome.NOT_PENDING
        if approval.get("notified_at"):
            return Outcome.ALREADY_NOTIFIED
        claimed_at = iso(self._clock())
        if not self.store.claim_notification(approval_id, claimed_at):
            return Outcome.ALREADY_NOTIFIED  # a concurrent delivery won the claim
        subject, message = lead_message(approval)
        try:
            self._sns.publish(TopicArn=self.topic_arn, Subject=subject, Message=message)
        except Exception:
            self.unclaim(approval_id, claimed_at)
            raise
        return Outcome.PUBLISHED

    def unclaim(self, approval_id: str, claimed_at: str) -> None:
        """Remove ``notified_at`` if it is still the claim we set, so a redelivery can publish."""
        try:
            self._db.update_item(
                TableName=self.store.table,
                Key=to_item({"approval_id": approval_id}),
                UpdateExpression="REMOVE notified_at",
                ConditionExpression="notified_at = :claimed",
                ExpressionAttributeValues=to_values({":claimed": claimed_at}),
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                # The approval stays claimed without a notification; logged for an operator.
                logger.exception("could not take back the notification claim of %s", approval_id)
                return
            logger.warning("notification claim of %s changed before it was taken back", approval_id)


def default_notifier() -> ApprovalNotifier:
    """The function's notifier, built on first use (so importing the handler calls no AWS).

    Cached per settings object, so ``wiring.reset()`` (which drops the settings) rebuilds it.
    """
    return _notifier_for(get_settings())


@lru_cache(maxsize=1)
def _notifier_for(settings: Settings) -> ApprovalNotifier:
    db = boto3.client("dynamodb")
    return ApprovalNotifier(
        ApprovalStore(db, settings.approvals_table),
        db,
        boto3.client("sns"),
        settings.leads_topic_arn,
    )


def handle_record(record: ApprovalQueueRecord) -> str:
    """The BatchProcessor record handler: raising fails just this record."""
    obs.logger.append_keys(approval_id=record.body.approval_id, message_id=record.messageId)
    try:
        outcome = default_notifier().notify(record.body.approval_id)
        logger.info("approval %s: %s", record.body.approval_id, outcome.value)
        return outcome.value
    finally:
        obs.logger.remove_keys(["approval_id", "message_id"])
