"""The Audit table: append-only rows with server-generated, time-ordered keys; its row and its reads.

Rows are only ever written as part of the transaction that does the audited thing (store/audited_write.py), with
``attribute_not_exists`` so no row is overwritten; the writing roles hold PutItem and nothing else. The row and
the table's reads are DynamoDB code, so they live here with the other stores; the chain they are verified by and
the seals they are checked against are the audit package's (audit/chain.py, audit/seal.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Self

from support_agent.audit.chain import CHAIN_FIELDS, Head, verify
from support_agent.audit.chain import VERSION as CHAIN_VERSION
from support_agent.ids import ulid
from support_agent.refunds import keys as refund_keys
from support_agent.store.dynamo import DynamoDBClient, dumps, from_item, put_new, to_item, to_values
from support_agent.store.records import Record

if TYPE_CHECKING:
    from support_agent.audit.seal import SealReader

AUDIT_PAYLOAD_MAX_CHARS = 4000


def _clip(value: Any) -> str:
    text = dumps(value)
    return text if len(text) <= AUDIT_PAYLOAD_MAX_CHARS else text[:AUDIT_PAYLOAD_MAX_CHARS] + "…[truncated]"


_NOT_PAYLOAD = CHAIN_FIELDS | {"extra"}  # what `item` leaves out: the chain's fields, the undeclared attributes


def _parsed(value: Any) -> Any:
    """A stored payload (JSON text) as its value; as stored when it is not JSON (clipped, say)."""
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value


@dataclass(frozen=True)
class AuditRecord(Record):
    """One audit row. Written by `put`, in the audited change's transaction; read back by `from_item` (the
    lead's view, api/responses.py ``AuditRecord.of``), ``input``/``output`` parsed from their stored JSON
    text. The trail's reads and the chain's verification keep the stored rows as they are: the chain hashes
    the stored text."""

    KIND: ClassVar[str] = "audit row"

    stream: str
    action: str
    actor: str
    outcome: str
    customer_id: int | None
    created_at: str
    tool: str | None = None
    input: Any = None
    output: Any = None
    conversation_id: str | None = None
    approval_id: str | None = None
    request_id: str | None = None
    tool_use_id: str | None = None
    handoff_id: str | None = None
    refund_key: str | None = None
    origin: str | None = None  # "mcp" for a call through the MCP server (absent: the chat's, or no call)
    client: str | None = None  # the MCP client's name, as it gave it
    proposal_id: str | None = None  # an action the customer confirms (actions/proposals.py): its stream's id
    policy_version: int | None = None  # the support policy's version the decision applied (policy/model.py)
    event_id: str = field(default_factory=ulid)
    # The chain (audit/chain.py): set by `chain`, never by hand.
    n: int | None = None
    payload_hash: str | None = None
    prev_hash: str | None = None
    hash: str | None = None

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Self:
        return super().from_item({**item, "input": _parsed(item.get("input")), "output": _parsed(item.get("output"))})

    def put(self, table: str) -> dict[str, Any]:
        """The TransactWriteItems element that writes this row exactly once (chained: see audit/chain.py `chain`)."""
        chain = {}
        if self.n is not None:
            chain = {
                "n": self.n,
                "v": CHAIN_VERSION,
                "payload_hash": self.payload_hash,
                "prev_hash": self.prev_hash,
                "hash": self.hash,
            }
        return put_new(table, {**self.item(), **chain}, "event_id")

    def payload(self) -> dict[str, Any]:
        """The stored row without its chain fields, as a read gives it back (absent fields left out)."""
        return {k: v for k, v in self.item().items() if v is not None}

    def item(self) -> dict[str, Any]:
        """The row's declared attributes but its chain's (`put` adds those), payloads as clipped JSON text."""
        out = {k: v for k, v in self.__dict__.items() if v is not None and k not in _NOT_PAYLOAD}
        for name in ("input", "output"):
            if name in out:
                out[name] = _clip(out[name])
        return out


# The streams a row names, and the key prefix of each: a conversation's trail follows them.
NAMED_STREAMS = (
    ("approval_id", "approval#"),
    ("handoff_id", "handoff#"),
    ("refund_key", "refund#"),
    ("proposal_id", "proposal#"),
)
PROPOSAL_PREFIX = "PROPOSAL#"  # store/proposals.py's sort keys (a leaf constant: that module imports this one)


@dataclass(frozen=True)
class Streams:
    """The streams (`NAMED_STREAMS`) a call's effect wrote: an approval, a hand-off, a refund key, a proposal. Its
    writer says which (a tool's outcome, tools/registry.py); the call's own row names them, so the trail follows
    them."""

    approval_id: str | None = None
    handoff_id: str | None = None
    refund_key: str | None = None
    proposal_id: str | None = None


MAX_FOLLOWED_STREAMS = 200


class AuditStore:
    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        conversations_table: str = "",
        approvals_table: str = "",
        customer_table: str = "",
        seals: SealReader | None = None,
    ) -> None:
        self._db = client
        self._seals = seals  # the sealed heads (audit/seal.py); None: no seal bucket configured
        self.table = table
        # Where the streams' heads live (verification only): header, approval/hand-off item, ledger row.
        self._conversations = conversations_table
        self._approvals = approvals_table
        self._customers = customer_table

    def list_stream(self, stream: str) -> list[dict[str, Any]]:
        return self._query(
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": "stream"},
            ExpressionAttributeValues=to_values({":s": stream}),
        )

    def list_customer(self, customer_id: int) -> list[dict[str, Any]]:
        return self._query(
            IndexName="by_customer",
            KeyConditionExpression="customer_id = :c",
            ExpressionAttributeValues=to_values({":c": customer_id}),
        )

    def conversation_trail(self, conversation_id: str) -> list[dict[str, Any]]:
        """The conversation's rows and those of every stream they name (approvals, hand-offs, refund keys,
        and the streams those name), oldest first (``created_at``, then ``event_id``)."""
        streams = self.streams_of(conversation_id)
        rows = [row for rows in streams.values() for row in rows]
        return sorted(rows, key=lambda r: (str(r.get("created_at", "")), str(r["event_id"])))

    def streams_of(self, stream: str) -> dict[str, list[dict[str, Any]]]:
        """``stream``'s rows and those of the streams its rows name, transitively, by stream (it first)."""
        found: dict[str, list[dict[str, Any]]] = {}
        pending = [stream]
        while pending and len(found) < MAX_FOLLOWED_STREAMS:
            current = pending.pop(0)
            if current in found:
                continue
            found[current] = self.list_stream(current)
            for row in found[current]:
                for name, prefix in NAMED_STREAMS:
                    if row.get(name) and f"{prefix}{row[name]}" not in found:
                        pending.append(f"{prefix}{row[name]}")
        return {k: v for k, v in found.items() if v or k == stream}

    def head(self, stream: str, rows: list[dict[str, Any]]) -> Head | None:
        """The head the stream's owner item holds; None when there is no owner item."""
        item: dict[str, Any] | None
        if stream.startswith(("approval#", "handoff#")):
            item = self._get(self._approvals, {"approval_id": stream.split("#", 1)[1]})
        elif stream.startswith("refund#"):
            customers = {r["customer_id"] for r in rows if r.get("customer_id") is not None}
            if len(customers) != 1:
                return None
            sk = refund_keys.ledger_sk(stream.split("#", 1)[1])  # the row owning ``refund#<key>``
            item = self._get(self._customers, {"customer_id": customers.pop(), "sk": sk}) if sk else None
        elif stream.startswith("proposal#"):  # the proposal item (store/proposals.py), in its customer's partition
            owners = {(r.get("customer_id"), r.get("conversation_id") or "mcp") for r in rows}
            if len(owners) != 1:
                return None
            customer, scope = owners.pop()
            sk = f"{PROPOSAL_PREFIX}{scope}#{stream.split('#', 1)[1]}"
            item = self._get(self._customers, {"customer_id": customer, "sk": sk}) if customer is not None else None
        else:  # a conversation, or an erasure run (its record: a key of the Conversations table)
            # Query, not GetItem: the lead role reads the Conversations table by Query only.
            out = self._db.query(
                TableName=self._conversations,
                KeyConditionExpression="conversation_id = :c AND seq = :zero",
                ExpressionAttributeValues=to_values({":c": stream, ":zero": 0}),
                ConsistentRead=True,
            )
            item = from_item(out["Items"][0]) if out.get("Items") else None
        return None if item is None else Head.of(item)

    def verify_stream(self, stream: str, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """``{"stream", "rows", "status", "firstBreak", "chainStartsAt", "unchained", "redacted", "sealedAt",
        "sealedThrough"}``: the chain against its owner's head and its latest sealed head."""
        rows = self.list_stream(stream) if rows is None else rows
        head = self.head(stream, rows)
        seal = self._seals.latest(stream) if self._seals is not None else None
        answer = verify(rows, head or Head(), seal.head if seal else None)
        return {
            "stream": stream,
            **answer,
            "sealedAt": seal.sealed_at if seal else None,
            "sealedThrough": seal.head.n if seal else None,
        }

    def verify_trail(self, stream: str) -> dict[str, Any]:
        """``stream`` verified with every stream it names: its own answer, ``status`` broken when any stream
        is, ``redacted`` every stream's, and ``streams`` (each stream's own answer, it first)."""
        answers = [self.verify_stream(name, rows) for name, rows in self.streams_of(stream).items()]
        broken = [a for a in answers if a["status"] != "ok"]
        first = {**broken[0]["firstBreak"], "stream": broken[0]["stream"]} if broken else None
        redacted = [event_id for a in answers for event_id in a["redacted"]]
        return {
            **answers[0],
            "status": "broken" if broken else "ok",
            "firstBreak": first,
            "redacted": redacted,
            "streams": answers,
        }

    def _get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        out = self._db.get_item(TableName=table, Key=to_item(key), ConsistentRead=True)
        item = out.get("Item")
        return from_item(item) if item else None

    def page_customer(
        self, customer_id: int, start_key: dict[str, Any] | None = None, limit: int = 100
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "by_customer",
            "KeyConditionExpression": "customer_id = :c",
            "ExpressionAttributeValues": to_values({":c": customer_id}),
            "Limit": limit,
        }
        if start_key:
            kwargs["ExclusiveStartKey"] = start_key
        out = self._db.query(**kwargs)
        return [from_item(i) for i in out.get("Items", [])], out.get("LastEvaluatedKey")

    def _query(self, **kwargs: Any) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        while True:
            out = self._db.query(TableName=self.table, **kwargs)
            rows.extend(from_item(i) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return rows
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]
