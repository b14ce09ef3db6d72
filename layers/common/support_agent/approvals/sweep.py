"""ApprovalSweepFunction's logic, run on a schedule: nothing stays reserved forever, no approval unseen.

One pass over the PENDING approvals (``by_status`` index, oldest first):

* created before ``now - APPROVAL_TTL_HOURS`` → EXPIRED, the reservation returned to the order
  and an ``approval_expired`` audit row, in one transaction (``ApprovalStore.release``). A lead
  deciding at the same moment wins or loses on the state condition; the loser is counted as a
  conflict, not an error.
* otherwise, never notified (no ``notified_at``) and older than ``RENOTIFY_AFTER_SECONDS`` (the
  chat function's own send came after its transaction and failed) → ``{"approvalId"}`` is sent to
  the ApprovalQueue again. The notifier's claim makes a duplicate harmless.

Each run handles at most ``max_items`` approvals (the rest wait for the next run). An
unexpected error on one approval does not stop the others; the run then raises at the end so
the invocation counts as failed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import boto3

from support_agent import observability as obs
from support_agent.approvals.notifier import Clock, iso, utc_now
from support_agent.config import Settings, get_settings
from support_agent.store.approvals import ApprovalStore, StateConflict
from support_agent.store.dynamo import DynamoDBClient, from_item, to_values

if TYPE_CHECKING:
    from mypy_boto3_sqs.client import SQSClient
else:
    SQSClient = Any

logger = logging.getLogger(__name__)

SWEEP_ACTOR = "system:sweep"
EXPIRED_ACTION = "approval_expired"


@dataclass(frozen=True)
class SweepResult:
    scanned: int
    expired: int
    requeued: int
    conflicts: int  # decided by someone else between our read and our write
    errors: int
    truncated: bool  # max_items reached; the next run continues

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SweepIncomplete(Exception):
    def __init__(self, result: SweepResult) -> None:
        super().__init__(f"approval sweep finished with {result.errors} error(s): {result.as_dict()}")
        self.result = result


class ApprovalSweeper:
    def __init__(
        self,
        store: ApprovalStore,
        db: DynamoDBClient,
        sqs: SQSClient,
        queue_url: str,
        ttl_hours: int,
        renotify_after_seconds: int,
        clock: Clock = utc_now,
        max_items: int = 500,
    ) -> None:
        self.store = store
        self._db = db
        self._sqs = sqs
        self.queue_url = queue_url
        self.ttl = timedelta(hours=ttl_hours)
        self.renotify_after = timedelta(seconds=renotify_after_seconds)
        self._clock = clock
        self.max_items = max_items

    def run(self) -> SweepResult:
        now = self._clock()
        now_s = iso(now)
        expire_before = iso(now - self.ttl)
        renotify_before = iso(now - self.renotify_after)
        scanned = expired = requeued = conflicts = errors = 0
        truncated = False
        for approval in self._pending_created_before(max(expire_before, renotify_before)):
            if scanned >= self.max_items:
                truncated = True
                break
            scanned += 1
            approval_id = str(approval["approval_id"])
            created_at = str(approval["created_at"])
            try:
                if created_at < expire_before:
                    self.store.release(
                        approval_id,
                        "PENDING",
                        "EXPIRED",
                        SWEEP_ACTOR,
                        EXPIRED_ACTION,
                        now_s,
                        reason=f"not decided within {int(self.ttl.total_seconds() // 3600)} hours",
                    )
                    expired += 1
                    obs.emit(obs.APPROVALS_EXPIRED)
                elif created_at < renotify_before and not approval.get("notified_at"):
                    self._sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps({"approvalId": approval_id}))
                    requeued += 1
            except StateConflict:
                conflicts += 1
            except Exception:
                errors += 1
                logger.exception("sweep failed on approval %s", approval_id, extra={"approval_id": approval_id})
        result = SweepResult(scanned, expired, requeued, conflicts, errors, truncated)
        self._report_oldest_pending(now)
        logger.info("approval sweep: %s", result.as_dict())
        if errors:
            raise SweepIncomplete(result)
        return result

    def _report_oldest_pending(self, now: datetime) -> None:
        """The age of the oldest PENDING approval left (0 when none): the "pending too long" alarm's metric."""
        try:
            out = self._db.query(
                TableName=self.store.table,
                IndexName="by_status",
                KeyConditionExpression="#st = :pending",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=to_values({":pending": "PENDING"}),
                ScanIndexForward=True,
                Limit=1,
            )
        except Exception:  # the sweep itself succeeded; a missing datapoint is not a reason to fail it
            logger.exception("could not read the oldest pending approval")
            return
        items = [from_item(i) for i in out.get("Items", [])]
        age = 0.0
        if items:
            created = datetime.fromisoformat(str(items[0]["created_at"]).replace("Z", "+00:00"))
            age = max(0.0, (now - created).total_seconds())
            logger.info("oldest pending approval", extra={"approval_id": items[0]["approval_id"], "age_seconds": age})
        obs.emit(obs.OLDEST_PENDING_APPROVAL_AGE, round(age))

    def _pending_created_before(self, before: str) -> Iterator[dict[str, Any]]:
        """PENDING approvals with ``created_at < before``, oldest first, page by page."""
        kwargs: dict[str, Any] = {
            "TableName": self.store.table,
            "IndexName": "by_status",
            "KeyConditionExpression": "#st = :pending AND created_at < :before",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": to_values({":pending": "PENDING", ":before": before}),
            "ScanIndexForward": True,
            "Limit": 100,
        }
        while True:
            out = self._db.query(**kwargs)
            for item in out.get("Items", []):
                yield from_item(item)
            if "LastEvaluatedKey" not in out:
                return
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def default_sweeper() -> ApprovalSweeper:
    """The function's sweeper, built on first use (so importing the handler calls no AWS).

    Cached per settings object, so ``wiring.reset()`` (which drops the settings) rebuilds it.
    """
    return _sweeper_for(get_settings())


@lru_cache(maxsize=1)
def _sweeper_for(settings: Settings) -> ApprovalSweeper:
    db = boto3.client("dynamodb")
    return ApprovalSweeper(
        ApprovalStore(db, settings.approvals_table, settings.customer_data_table, settings.audit_table),
        db,
        boto3.client("sqs"),
        settings.approval_queue_url,
        settings.approval_ttl_hours,
        settings.renotify_after_seconds,
    )
