"""The audited write: an owner item's own change and the audit rows it chains, as one transaction's items.

Every audit stream has one owner item holding its head (audit/chain.py): a conversation's header, an approval,
a hand-off, a ledger row, an erasure run's record, a customer's MCP item. A writer reads the owner (and with it
the head), then writes its change, its rows chained after that head and the new head, in one
TransactWriteItems whose owner item is conditioned on the head it read: two writers racing cannot fork a stream,
one transaction fails. This module is the one place that splice is written; every writer builds its items here
(the approvals, the hand-offs, the conversations and so the chat's turn, erasure, the refund ledger and requests,
the MCP server) and adds its other items after them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from support_agent.audit.chain import Head, chain
from support_agent.store.audit import AuditRecord
from support_agent.store.dynamo import put_new, to_item, to_values
from support_agent.store.records import Record, optional


@dataclass(frozen=True, kw_only=True)
class StreamOwner(Record):
    """A record whose item owns an audit stream: the stream's head, which its audited writes advance."""

    audit_n: int = optional(0)
    audit_hash: str = optional("")
    audit_event: str = optional("")

    @property
    def head(self) -> Head:
        return Head(self.audit_n, self.audit_hash, self.audit_event)


@dataclass(frozen=True)
class AuditedWrite:
    """``rows`` chained after ``read`` (the head the writer read from the owner), and the ``head`` they make.

    `update` and `put` give the transaction's items: the owner's own write first, carrying the head (an Update
    conditioned on ``read`` and advancing it; a new item written with it), then one Put per row. With no rows
    the owner's write is the caller's alone: nothing of the chain is read or written.
    """

    audit_table: str
    read: Head
    rows: tuple[AuditRecord, ...]
    head: Head

    @classmethod
    def of(cls, audit_table: str, read: Head, records: Sequence[AuditRecord]) -> Self:
        rows, head = chain(read, records)
        return cls(audit_table, read, tuple(rows), head)

    def update(
        self,
        table: str,
        key: Mapping[str, Any],
        sets: Sequence[str],
        condition: str = "",
        values: Mapping[str, Any] | None = None,
        names: Mapping[str, str] | None = None,
        then: str = "",
    ) -> list[dict[str, Any]]:
        """The owner's Update (its ``SET`` assignments ``sets`` and the new head's, then ``then``: a ``REMOVE``
        or ``ADD`` clause; its ``condition`` and the head read's), then the rows' Puts."""
        values = dict(values or {})
        if self.rows:
            (head_if, read_values), (head_sets, new_values) = _head_condition(self.read), _head_set(self.head)
            sets, condition = [*sets, head_sets], f"{condition} AND {head_if}" if condition else head_if
            values.update({**read_values, **new_values})
        update: dict[str, Any] = {
            "TableName": table,
            "Key": to_item(key),
            "UpdateExpression": "SET " + ", ".join(sets) + (f" {then}" if then else ""),
        }
        if condition:
            update["ConditionExpression"] = condition
        if names:
            update["ExpressionAttributeNames"] = dict(names)
        if values:
            update["ExpressionAttributeValues"] = to_values(values)
        return [{"Update": update}, *self.puts()]

    def put(self, table: str, item: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
        """A new owner item, written once (``key`` absent), holding the head its stream's first rows make; then
        the rows' Puts. A new item starts its stream: the head read is the empty one."""
        if self.read.n:
            raise ValueError("a new owner item starts its stream: the head read must be empty")
        return [put_new(table, {**item, **self.head.attributes()}, key), *self.puts()]

    def puts(self) -> list[dict[str, Any]]:
        return [row.put(self.audit_table) for row in self.rows]


UNAUDITED = AuditedWrite("", Head(), (), Head())
"""An owner's write with no audit row: the caller's update alone (an approval's move the ledger writes with the
refund key's row, not the approval's)."""


def _head_condition(read: Head) -> tuple[str, dict[str, Any]]:
    """The owner item's condition: its head is still the one the writer read; and its values."""
    if read.n == 0:
        return "attribute_not_exists(audit_n)", {}
    return "audit_n = :audit_n_read AND audit_hash = :audit_hash_read", {
        ":audit_n_read": read.n,
        ":audit_hash_read": read.hash,
    }


def _head_set(new: Head) -> tuple[str, dict[str, Any]]:
    """The SET assignments advancing the owner item's head, and their values."""
    return "audit_n = :audit_n_new, audit_hash = :audit_hash_new, audit_event = :audit_event_new", {
        ":audit_n_new": new.n,
        ":audit_hash_new": new.hash,
        ":audit_event_new": new.event_id,
    }
