"""Proposals: an action the customer confirms (actions/proposals.py), one item in the customer's own partition.

``PROPOSAL#<conversation id>#<proposal id>`` in CustomerData, so a read names the signed-in customer and the
conversation and finds nothing of anyone else's. The proposal id is derived from the tool call's keys
(`proposal_id_of`): a replay of the call after a crash finds the same item. The item owns the audit stream
``proposal#<id>`` (its head: `StreamOwner`); each move is one transaction conditioned on the status it read and on
that head, with its audit row, the caller's own items (an order's update) and the conversation's notification
(store/notifications.py ``proposal.*``), so only the writer whose move landed announces it.

PROPOSED -> CONFIRMING (the customer confirmed; the action runs, keyed by the proposal) -> CONFIRMED (its outcome:
done, or refused when the current policy no longer allows it); PROPOSED -> DECLINED | EXPIRED.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from support_agent.audit.chain import Head
from support_agent.errors import LeaseLost
from support_agent.store.audit import PROPOSAL_PREFIX, AuditRecord
from support_agent.store.audited_write import AuditedWrite, StreamOwner
from support_agent.store.dynamo import CONDITION_FAILED, DynamoDBClient, cancellation_as, dumps, from_item, to_values
from support_agent.store.notifications import Notification, NotificationStore
from support_agent.store.records import Codec, stored

ProposalStatus = Literal["PROPOSED", "CONFIRMING", "CONFIRMED", "DECLINED", "EXPIRED"]
DECIDED: tuple[str, ...] = ("CONFIRMED", "DECLINED", "EXPIRED")
JSON = Codec(json.loads, dumps)


def proposal_id_of(scope: str, seq: int, call_id: str) -> str:
    """``prp_<32 hex>`` from the call's keys (a conversation's ``(id, seq, tool_use_id)``, an MCP call's): the same
    call always names the same proposal."""
    return "prp_" + hashlib.sha256(f"{scope}#{seq}#{call_id}".encode()).hexdigest()[:32]


def proposal_sk(scope: str, proposal_id: str) -> str:
    return f"{PROPOSAL_PREFIX}{scope}#{proposal_id}"


@dataclass(frozen=True, kw_only=True)
class ProposalItem(StreamOwner):
    """The stored proposal; ``conversation_id`` is the call's scope (a conversation id, or "mcp")."""

    KIND: ClassVar[str] = "proposal"

    customer_id: int
    sk: str
    proposal_id: str
    conversation_id: str
    seq: int
    tool_use_id: str
    action: str
    order_id: int
    input: dict[str, Any] = stored(codec=JSON)
    summary: str
    status: ProposalStatus
    created_at: str
    expires_at: str
    policy_version: int
    requested_by: str = ""
    decided_at: str | None = None
    decided_by: str | None = None
    decided_policy_version: int | None = None
    # What the policy said when the customer confirmed (the rule's statuses and threshold): the execution, resumed
    # after a crash, applies these and not a newer version's.
    terms: dict[str, Any] | None = stored(codec=JSON, default=None)
    step: str | None = None  # how far a confirmed execution got (cancel: "order_cancelled")
    refund_cents: int | None = None  # a cancellation's: what was paid and not yet refunded when it cancelled
    outcome: dict[str, Any] | None = stored(codec=JSON, default=None)
    after_seq: int | None = None
    updated_at: str | None = None

    @property
    def owner_conversation_id(self) -> str:
        return "" if self.conversation_id == "mcp" else self.conversation_id

    @property
    def statuses(self) -> tuple[str, ...]:
        """The order statuses the policy allowed when the customer confirmed (its terms): what the execution checks."""
        return tuple((self.terms or {}).get("statuses") or ("PROCESSING",))

    def row(self, action: str, actor: str, outcome: str, now: str, output: Any, **fields: Any) -> AuditRecord:
        """A row of this proposal's stream (``proposal#<id>``)."""
        return AuditRecord(
            stream=f"proposal#{self.proposal_id}",
            action=action,
            actor=actor,
            outcome=outcome,
            customer_id=self.customer_id,
            created_at=now,
            tool=self.action,
            output=output,
            conversation_id=self.conversation_id,
            tool_use_id=self.tool_use_id,
            proposal_id=self.proposal_id,
            **fields,
        )

    def note(self, kind: str, now: str, **data: Any) -> Notification | None:
        """The conversation's ``proposal.<kind>`` notification (none for an MCP call's: no conversation)."""
        if not self.owner_conversation_id:
            return None
        fields = {"proposalId": self.proposal_id, "action": self.action, "orderId": self.order_id, **data}
        return Notification(
            conversation_id=self.conversation_id,
            type=f"proposal.{kind}",  # type: ignore[arg-type]
            at=now,
            data=fields,
        )


class ProposalExists(Exception):
    """The proposal was written before (a replayed call): read it."""


class ProposalMoved(Exception):
    """The proposal was not in the status (or at the audit head) the move read: read it again."""


class ItemRefused(Exception):
    """One of the caller's own items failed its condition (``index`` among them): nothing was written."""

    def __init__(self, index: int) -> None:
        super().__init__(f"item {index} refused")
        self.index = index


class ProposalStore:
    def __init__(self, client: DynamoDBClient, table: str, audit_table: str, conversations_table: str) -> None:
        self._db = client
        self.table = table
        self._audit = audit_table
        self._notes = NotificationStore(client, conversations_table)

    def get(self, customer_id: int, scope: str, proposal_id: str) -> ProposalItem | None:
        out = self._db.get_item(
            TableName=self.table,
            Key=to_values({"customer_id": customer_id, "sk": proposal_sk(scope, proposal_id)}),
            ConsistentRead=True,
        )
        return ProposalItem.from_item(from_item(out["Item"])) if out.get("Item") else None

    def list(self, customer_id: int, scope: str) -> list[ProposalItem]:
        """The conversation's proposals, oldest first (their ids are hashes: sorted by ``created_at``)."""
        rows: list[ProposalItem] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "customer_id = :c AND begins_with(sk, :p)",
            "ExpressionAttributeValues": to_values({":c": customer_id, ":p": proposal_sk(scope, "")}),
            "ConsistentRead": True,
        }
        while True:
            out = self._db.query(**kwargs)
            rows.extend(ProposalItem.from_item(from_item(i)) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return sorted(rows, key=lambda p: (p.created_at, p.proposal_id))
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def erasure_update(self, item: ProposalItem, erased: str, erased_at: str) -> dict[str, Any]:
        """The UpdateItem erasure makes of a proposal: what it would change (its input: an address; its summary,
        which quotes it) goes; its status, times, versions and outcome (states and amounts, no address) stay."""
        return {
            "TableName": self.table,
            "Key": to_values({"customer_id": item.customer_id, "sk": item.sk}),
            "UpdateExpression": "SET #input = :empty, summary = :erased, erased_at = :now",
            "ExpressionAttributeNames": {"#input": "input"},
            "ExpressionAttributeValues": to_values({":empty": dumps({}), ":erased": erased, ":now": erased_at}),
        }

    def create(self, proposal: ProposalItem, row: AuditRecord, fence: dict[str, Any] | None = None) -> ProposalItem:
        """Write a new proposal with its stream's first row and its ``proposal.created`` notification; with a turn's
        ``fence`` (its lease check) too. `ProposalExists` when the call wrote it before; `LeaseLost` on the fence."""
        write = AuditedWrite.of(self._audit, Head(), [row])
        items = write.put(self.table, proposal.item(), "sk")
        if fence is not None:
            items.append(fence)
        ours = len(items)

        def cancelled(codes: list[str]) -> Exception | None:
            if codes[:1] == [CONDITION_FAILED]:
                return ProposalExists(proposal.proposal_id)
            if fence is not None and codes[ours - 1 : ours] == [CONDITION_FAILED]:
                return LeaseLost("the conversation's lease was lost before the proposal was written; nothing was")
            return None

        note = proposal.note(
            "created",
            proposal.created_at,
            summary=proposal.summary,
            expiresAt=proposal.expires_at,
            policyVersion=proposal.policy_version,
        )
        with cancellation_as(cancelled):
            self._notes.transact(items, note)
        return replace(proposal, **write.head.attributes())

    def move(
        self,
        proposal: ProposalItem,
        sets: dict[str, Any],
        rows: Sequence[AuditRecord],
        *,
        note: Notification | None = None,
        extra: Sequence[dict[str, Any]] = (),
    ) -> ProposalItem:
        """Set ``sets`` (declared fields; ``status`` among them to move it) on the proposal, conditioned on its status
        and audit head as read, with ``rows`` on its stream, the caller's ``extra`` items and ``note``, in one
        transaction. `ProposalMoved` when the proposal moved on meanwhile; `ItemRefused` when an extra item's condition
        failed (nothing written). The proposal as written."""
        assignments, names, values = ProposalItem.assign(sets)
        write = AuditedWrite.of(self._audit, proposal.head, rows)
        items = write.update(
            self.table,
            {"customer_id": proposal.customer_id, "sk": proposal.sk},
            assignments,
            "#st = :read_status",
            {**values, ":read_status": proposal.status},
            {**names, "#st": "status"},
        )
        first_extra = len(items)
        items.extend(extra)

        def cancelled(codes: list[str]) -> Exception | None:
            if codes[:1] == [CONDITION_FAILED] or not codes:
                return ProposalMoved(proposal.proposal_id)
            for index, code in enumerate(codes[first_extra : first_extra + len(extra)]):
                if code == CONDITION_FAILED:
                    return ItemRefused(index)
            return None

        with cancellation_as(cancelled):
            self._notes.transact(items, note)
        return replace(proposal, **sets, **write.head.attributes())
