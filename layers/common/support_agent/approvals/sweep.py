"""ApprovalSweepFunction's logic, run on a schedule: nothing stays reserved forever, no approval unseen.

First a pass over the PENDING approvals (``by_status`` index, oldest first):

* created before ``now - APPROVAL_TTL_HOURS`` → EXPIRED, the reservation returned to the order
  and an ``approval_expired`` audit row, in one transaction (``ApprovalStore.release``). A lead
  deciding at the same moment wins or loses on the state condition; the loser is counted as a
  conflict, not an error.
* otherwise, never notified (no ``notified_at``), older than ``RENOTIFY_AFTER_SECONDS`` and with
  no live notification claim (the chat function's own send failed, or a notifier died between its
  claim and ``notified_at``) → ``{"approvalId"}`` is sent to the ApprovalQueue again. The
  notifier's claim suppresses a duplicate.

Then a pass over the APPROVED ones: approved (or retried) more than ``start_grace_seconds`` ago,
RefundFlow may never have started — the lead's ``StartExecution`` failed, or its request died
after the transition. The sweep starts the attempt (``<id>`` or ``<id>-r<n>``); Step Functions
answers ExecutionAlreadyExists when it is running or has run, and nothing else happens. The
oldest APPROVED approval's age is a metric with an alarm, for the flows no start can settle.

The hand-offs share the table (store/handoffs.py): each run also measures the support inbox — how long the
oldest OPEN hand-off has waited for a person (``OldestOpenHandoffAge``, with its alarm) and how many are OPEN
and ASSIGNED. Only measured: a hand-off never expires, a person closes it.

SETTLING approvals are left alone, by both the restart and the age: the flow did start (it wrote the
SETTLING transition with the ledger row) and the payment provider has the refund, so starting the
flow again could only repeat a question whose answer is still unknown. They belong to the payment
sweep and the provider's webhooks, which watch the ledger's unsettled rows, not this table.

Each pass handles at most ``max_items`` approvals (the rest wait for the next run). An
unexpected error on one approval does not stop the others; the run then raises at the end so
the invocation counts as failed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from support_agent import observability as obs
from support_agent.approvals.flow import start_flow
from support_agent.clock import Clock, iso, parse_iso, utc_datetime
from support_agent.store.approvals import Approval, ApprovalStore, StateConflict
from support_agent.store.dynamo import DynamoDBClient, from_item, to_values
from support_agent.store.handoffs import ENTITY as HANDOFF
from support_agent.store.handoffs import HandoffStore

if TYPE_CHECKING:
    from mypy_boto3_sqs.client import SQSClient
else:
    SQSClient = Any

logger = logging.getLogger(__name__)

SWEEP_ACTOR = "system:sweep"
EXPIRED_ACTION = "approval_expired"
# The lead API starts the flow within its request (Timeout 15 s): past this, nobody else will.
START_GRACE_SECONDS = 120


@dataclass(frozen=True)
class SweepResult:
    scanned: int
    expired: int
    requeued: int
    conflicts: int  # decided by someone else between our read and our write
    errors: int
    truncated: bool  # max_items reached; the next run continues
    flows_started: int = 0  # APPROVED approvals whose RefundFlow had never started

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
        clock: Clock = utc_datetime,
        max_items: int = 500,
        sfn: Any = None,
        state_machine_arn: str = "",
        start_grace_seconds: int = START_GRACE_SECONDS,
        handoffs: HandoffStore | None = None,
    ) -> None:
        self.store = store
        self._db = db
        self._sqs = sqs
        self.queue_url = queue_url
        self.ttl = timedelta(hours=ttl_hours)
        self.renotify_after = timedelta(seconds=renotify_after_seconds)
        self._clock = clock
        self.max_items = max_items
        self._sfn = sfn  # None: APPROVED approvals are only measured, never started (tests of the rest)
        self._arn = state_machine_arn
        self.start_grace = timedelta(seconds=start_grace_seconds)
        # Only its reads are used (the oldest OPEN one): no conversation or audit table is written.
        self.handoffs = handoffs or HandoffStore(db, store.table, "", "")

    def run(self) -> SweepResult:
        now = self._clock()
        now_s = iso(now)
        expire_before = iso(now - self.ttl)
        renotify_before = iso(now - self.renotify_after)
        scanned = expired = requeued = conflicts = errors = 0
        truncated = False
        for approval in self._created_before("PENDING", max(expire_before, renotify_before)):
            if scanned >= self.max_items:
                truncated = True
                break
            scanned += 1
            approval_id, created_at = approval.approval_id, approval.created_at
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
                elif (
                    created_at < renotify_before
                    and not approval.notified_at
                    and (approval.notify_claim_until or "") <= now_s  # no live claim
                ):
                    self._sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps({"approvalId": approval_id}))
                    requeued += 1
            except StateConflict:
                conflicts += 1
            except Exception:
                errors += 1
                logger.exception("sweep failed on approval %s", approval_id, extra={"approval_id": approval_id})
        flows_started, flow_errors, flows_truncated = self._start_unstarted_flows(now)
        errors += flow_errors
        result = SweepResult(scanned, expired, requeued, conflicts, errors, truncated or flows_truncated, flows_started)
        self._report_oldest_pending(now)
        self._report_handoff_queue(now)
        logger.info("approval sweep: %s", result.as_dict())
        if errors:
            raise SweepIncomplete(result)
        return result

    def _start_unstarted_flows(self, now: datetime) -> tuple[int, int, bool]:
        """(started, errors, truncated): start RefundFlow for APPROVED approvals past the grace, and
        report the oldest APPROVED age (time since its approval or retry; 0 when none).

        Only ``created_at < now - grace`` can have been approved before the grace began, so the key
        condition bounds the read; the decision time is checked on each item.
        """
        before = iso(now - self.start_grace)
        started = errors = attempts = 0
        truncated = False
        oldest = 0.0
        try:
            for approval in self._created_before("APPROVED", before):
                approval_id = approval.approval_id
                since = approval.retried_at or approval.decided_at or approval.created_at
                oldest = max(oldest, _age(now, since))
                if since >= before or self._sfn is None:
                    continue
                if attempts >= self.max_items:
                    truncated = True
                    continue  # keep reading: the age must cover them all
                attempts += 1
                try:
                    if start_flow(self._sfn, self._arn, approval_id, approval.retries):
                        started += 1
                        logger.warning(
                            "started RefundFlow for an approval whose flow never started",
                            extra={"approval_id": approval_id, "approved_at": since},
                        )
                except Exception:
                    errors += 1
                    logger.exception("could not start RefundFlow", extra={"approval_id": approval_id})
        except Exception:
            errors += 1
            logger.exception("could not read the APPROVED approvals")
            return started, errors, truncated
        obs.emit(obs.OLDEST_APPROVED_APPROVAL_AGE, round(oldest))
        return started, errors, truncated

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
            age = max(0.0, (now - parse_iso(str(items[0]["created_at"]))).total_seconds())
            logger.info("oldest pending approval", extra={"approval_id": items[0]["approval_id"], "age_seconds": age})
        obs.emit(obs.OLDEST_PENDING_APPROVAL_AGE, round(age))

    def _report_handoff_queue(self, now: datetime) -> None:
        """How long the oldest OPEN hand-off has waited for a person (0 when none: the alarm's metric), counted
        from its opening (a released one has kept its customer waiting since then), and the inbox's depth. A
        claimed (ASSIGNED) or closed hand-off no longer counts: someone answers, or no one needs to."""
        try:
            oldest = self.handoffs.oldest_open()
            open_count, assigned_count = self._count_handoffs("OPEN"), self._count_handoffs("ASSIGNED")
        except Exception:  # as for the approvals' age: a missing datapoint does not fail the sweep
            logger.exception("could not read the hand-off queue")
            return
        age = 0.0
        if oldest is not None:
            age = max(0.0, _age(now, oldest.created_at))
            logger.info("oldest open hand-off", extra={"handoff_id": oldest.handoff_id, "age_seconds": age})
        obs.emit(obs.OLDEST_OPEN_HANDOFF_AGE, round(age))
        obs.emit(obs.OPEN_HANDOFFS, open_count)
        obs.emit(obs.ASSIGNED_HANDOFFS, assigned_count)

    def _count_handoffs(self, status: str) -> int:
        """Hand-offs in ``status`` (by_status, counted by DynamoDB, page by page: the inbox is small)."""
        kwargs: dict[str, Any] = {
            "TableName": self.store.table,
            "IndexName": "by_status",
            "KeyConditionExpression": "#st = :status",
            "FilterExpression": "entity = :e",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": to_values({":status": status, ":e": HANDOFF}),
            "Select": "COUNT",
        }
        count = 0
        while True:
            out = self._db.query(**kwargs)
            count += int(out.get("Count", 0))
            if "LastEvaluatedKey" not in out:
                return count
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def _created_before(self, status: str, before: str) -> Iterator[Approval]:
        """Approvals in ``status`` with ``created_at < before``, oldest first, page by page."""
        kwargs: dict[str, Any] = {
            "TableName": self.store.table,
            "IndexName": "by_status",
            "KeyConditionExpression": "#st = :status AND created_at < :before",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": to_values({":status": status, ":before": before}),
            "ScanIndexForward": True,
            "Limit": 100,
        }
        while True:
            out = self._db.query(**kwargs)
            for item in out.get("Items", []):
                yield Approval.from_item(from_item(item))
            if "LastEvaluatedKey" not in out:
                return
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def _age(now: datetime, since: str) -> float:
    """Seconds since a stored timestamp; 0 for one that does not parse (the sweep must not stop on it)."""
    try:
        return (now - parse_iso(since)).total_seconds()
    except ValueError:
        return 0.0
