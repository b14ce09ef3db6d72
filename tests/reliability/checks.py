"""The invariants every reliability property ends with, read straight from the tables.

* history: every conversation is a valid Messages API sequence (`history.problems`) and the next request
  built from it passes the official SDK's request types unchanged (no stray or malformed field);
* audit: one `tool_call` audit row per stored tool_use, matched by tool_use id;
* money: per order `available + reserved + refunded = total`, none negative; `refunded` is exactly the
  direct refund rows plus the refunds of approvals a lead approved; direct refunds never exceed the
  threshold; `reserved` is exactly the open approvals' amounts;
* leases: no turn left holding a conversation.

`World` names the tables, so the same checks run on in-process moto and on the local stack's moto server.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from support_agent.agent import history as hist
from support_agent.agent.prompt import SYSTEM_PROMPT
from support_agent.llm.anthropic import build_body, encode_body
from support_agent.llm.base import LlmRequest
from support_agent.store.dynamo import from_item, to_values
from tests.support.sdk_judge import sdk_problems

OPEN_APPROVAL = ("PENDING", "APPROVED", "FAILED")
FENCE_TAG = re.compile(r"</?untrusted-data-[0-9a-f]{16}>")


def _as_conversation(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, messages) of one conversation's rows in seq order."""
    header = next(r for r in rows if r["seq"] == 0)
    return header, [{"role": r["role"], "content": json.loads(r["content"])} for r in rows if r["seq"] > 0]


@dataclass(frozen=True)
class World:
    ddb: Any
    conversations: str
    customer_data: str
    approvals: str
    audit: str
    threshold: int = 5000

    @classmethod
    def of_settings(cls, ddb: Any, s: Any) -> World:
        tables = (s.conversations_table, s.customer_data_table, s.approvals_table, s.audit_table)
        return cls(ddb, *tables, s.refund_threshold_cents)

    # reads ------------------------------------------------------------------------------------------------

    def scan(self, table: str, **kw: Any) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True, **kw}
        while True:
            out = self.ddb.scan(**kwargs)
            rows.extend(from_item(i) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return rows
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def query(self, table: str, **kw: Any) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": table, **kw}
        while True:
            out = self.ddb.query(**kwargs)
            rows.extend(from_item(i) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return rows
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def conversation_ids(self) -> list[str]:
        rows = self.scan(self.conversations, ProjectionExpression="conversation_id")
        return sorted({r["conversation_id"] for r in rows if r["conversation_id"].startswith("conv_")})

    def conversation(self, cid: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        rows = self.query(
            self.conversations,
            KeyConditionExpression="conversation_id = :c",
            ExpressionAttributeValues=to_values({":c": cid}),
            ConsistentRead=True,
        )
        return _as_conversation(rows)

    def audit_rows(self, stream: str) -> list[dict[str, Any]]:
        return self.query(
            self.audit,
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": "stream"},
            ExpressionAttributeValues=to_values({":s": stream}),
            ConsistentRead=True,
        )

    def customer_rows(self, customer_id: int, prefix: str = "") -> list[dict[str, Any]]:
        if not prefix:
            return self.query(
                self.customer_data,
                KeyConditionExpression="customer_id = :c",
                ExpressionAttributeValues=to_values({":c": customer_id}),
                ConsistentRead=True,
            )
        return self.query(
            self.customer_data,
            KeyConditionExpression="customer_id = :c AND begins_with(sk, :p)",
            ExpressionAttributeValues=to_values({":c": customer_id, ":p": prefix}),
            ConsistentRead=True,
        )

    def order(self, customer_id: int, order_id: int) -> dict[str, Any]:
        out = self.ddb.get_item(
            TableName=self.customer_data,
            Key={"customer_id": {"N": str(customer_id)}, "sk": {"S": f"ORDER#{order_id}"}},
            ConsistentRead=True,
        )
        return from_item(out["Item"])


# -- history ----------------------------------------------------------------------------------------------


def history_problems(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[str]:
    """`history.problems` plus: the next request built from this history is one the API accepts."""
    found = hist.problems(messages)
    if not found and messages:
        nxt = hist.for_request([*messages, {"role": "user", "content": [{"type": "text", "text": "next"}]}])
        body = build_body("claude-test", 1024, LlmRequest(SYSTEM_PROMPT, nxt, tools, None))
        found += sdk_problems(body)
        try:  # what the client would send: UTF-8, and strict JSON (no NaN/Infinity, which the API refuses)
            json.loads(encode_body(body), parse_constant=_refuse)
        except (UnicodeError, ValueError) as exc:
            found.append(f"the next request cannot be sent as strict JSON: {exc!r}"[:300])
    return found


def _refuse(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def check_conversation(world: World, cid: str, tools: list[dict[str, Any]]) -> dict[str, int]:
    """History valid, audit rows = tool calls, lease released. Returns counts for the report."""
    header, messages = world.conversation(cid)
    problems = history_problems(messages, tools)
    assert problems == [], (cid, problems)
    assert "lease_owner" not in header, f"{cid}: a turn still holds the lease"
    uses = [b["id"] for m in messages if m["role"] == "assistant" for b in hist.tool_uses(m)]
    audited = [r.get("tool_use_id") for r in world.audit_rows(cid) if r["action"] == "tool_call"]
    assert Counter(uses) == Counter(audited), f"{cid}: tool calls {sorted(uses)} vs audit rows {sorted(audited)}"
    assert header["next_seq"] == len(messages) + 1, f"{cid}: header next_seq {header['next_seq']} vs {len(messages)}"
    return {"messages": len(messages), "tool_calls": len(uses)}


# -- money ------------------------------------------------------------------------------------------------


def check_money(world: World, customer_id: int, order_ids: Iterable[int] | None = None) -> None:
    """The money invariant and the approval rule for a customer's orders (all of them by default)."""
    rows = world.customer_rows(customer_id, "")
    orders = {int(o["order_id"]): o for o in rows if o["sk"].startswith("ORDER#")}
    refunds = [r for r in rows if r["sk"].startswith("REFUND#")]
    wanted = set(orders) if order_ids is None else set(order_ids)
    approvals = [
        a
        for a in world.scan(world.approvals)
        if a.get("entity", "APPROVAL") == "APPROVAL" and int(a["customer_id"]) == customer_id
    ]
    by_id = {a["approval_id"]: a for a in approvals}
    for oid in wanted:
        o = orders[oid]
        total, avail, res, done = (
            int(o[k]) for k in ("total_cents", "available_cents", "reserved_cents", "refunded_cents")
        )
        assert avail + res + done == total, (oid, o)
        assert min(avail, res, done) >= 0, (oid, o)
        direct = [int(r["amount_cents"]) for r in refunds if r.get("kind") == "direct" and int(r["order_id"]) == oid]
        assert sum(direct) <= world.threshold, f"order {oid}: {sum(direct)} refunded directly, above the threshold"
        approved = []
        for r in refunds:
            if r.get("kind") == "approved" and int(r["order_id"]) == oid:
                a = by_id.get(r["approval_id"])
                assert a is not None and a["status"] == "REFUNDED", f"refund row without a refunded approval: {r}"
                assert a.get("decided_by"), f"approval {a['approval_id']} refunded without a lead's decision"
                approved.append(int(r["amount_cents"]))
        assert done == sum(direct) + sum(approved), (oid, done, direct, approved)
        held = [int(a["amount_cents"]) for a in approvals if int(a["order_id"]) == oid and a["status"] in OPEN_APPROVAL]
        assert res == sum(held), f"order {oid}: reserved {res} but open approvals hold {held}"


def check_turn(world: World, cid: str, tools: list[dict[str, Any]], own_orders: Iterable[int] | None = None) -> None:
    """A turn of customer 7's, judged on state: its conversation (`check_conversation`) and its money, on
    ``own_orders`` or all its orders (`check_money`)."""
    check_conversation(world, cid, tools)
    check_money(world, 7, own_orders)


def untouched(world: World, customer_id: int) -> None:
    """Nothing of this customer's money moved: every order fully available, no refund rows."""
    for row in world.customer_rows(customer_id, ""):
        assert not row["sk"].startswith("REFUND#"), f"a refund on customer {customer_id}: {row}"
        if row["sk"].startswith("ORDER#"):
            assert row["available_cents"] == row["total_cents"], f"customer {customer_id}'s order changed: {row}"


# -- leaks ------------------------------------------------------------------------------------------------


def leaks(text: str, markers: Iterable[str], ids: Iterable[int], echoed: Iterable[int] = ()) -> list[str]:
    """Markers (names, notes, memos) and ids of another customer found in `text`.

    An id the model itself sent (`echoed`) may come back in an error message ("order 2001 was not found"):
    that tells the model nothing it did not know, so it is not a leak.
    """
    text = FENCE_TAG.sub("<fence>", text)  # a random hex tag may hold "2001" by chance: not data
    found = [m for m in markers if m.lower() in text.lower()]
    allowed = {str(i) for i in echoed}
    found += [str(i) for i in ids if str(i) not in allowed and re.search(rf"(?<!\d){i}(?!\d)", text)]
    return found


def ints_in(value: Any) -> set[int]:
    """Every integer (or integer-looking string) anywhere in a tool input: what the model could echo."""
    out: set[int] = set()
    if isinstance(value, bool):
        return out
    if isinstance(value, int):
        out.add(value)
    elif isinstance(value, float) and value.is_integer():
        out.add(int(value))
    elif isinstance(value, str):
        out |= {int(m) for m in re.findall(r"\d+", value)}
    elif isinstance(value, dict):
        for k, v in value.items():
            out |= ints_in(k) | ints_in(v)
    elif isinstance(value, list):
        for v in value:
            out |= ints_in(v)
    return out


class MotoSnapshot:
    """The in-process moto's DynamoDB items, saved once and put back before each example: a clean, seeded
    world in microseconds. (moto copies every table a transaction touches before applying it, so tables
    that grew over thousands of examples would make each write slower than the last.)
    """

    def __init__(self, region: str = "us-east-1") -> None:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        self._tables = dynamodb_backends[DEFAULT_ACCOUNT_ID][region].tables
        self._saved = {name: copy.deepcopy(t.items) for name, t in self._tables.items()}

    def restore(self) -> None:
        for name, table in self._tables.items():
            table.items = copy.deepcopy(self._saved[name])


class BackendWorld(World):
    """The same reads, straight from the in-process moto's tables instead of through its HTTP layer.

    moto serialises every response field by field; the checks after each step read whole partitions,
    which made them half of the hostile-model property's time. Only for sequential tests: a thread
    writing while these iterate would change the dicts under them.
    """

    region = "us-east-1"

    def _table(self, name: str) -> Any:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        return dynamodb_backends[DEFAULT_ACCOUNT_ID][self.region].tables[name]

    @staticmethod
    def _plain(item: Any) -> dict[str, Any]:
        return from_item(item.to_json()["Attributes"])

    def _partition(self, table: str, key: dict[str, Any]) -> list[dict[str, Any]]:
        from moto.dynamodb.models.dynamo_type import DynamoType

        rows = self._table(table).items.get(DynamoType(key), {})
        return [self._plain(i) for i in rows.values()]

    def scan(self, table: str, **kw: Any) -> list[dict[str, Any]]:
        if kw:
            return super().scan(table, **kw)
        return [self._plain(i) for i in self._table(table).all_items()]

    def conversation_ids(self) -> list[str]:
        names = (str(k.value) for k in self._table(self.conversations).items)
        return sorted(n for n in names if n.startswith("conv_"))

    def conversation(self, cid: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        rows = sorted(self._partition(self.conversations, {"S": cid}), key=lambda r: int(r["seq"]))
        return _as_conversation(rows)

    def audit_rows(self, stream: str) -> list[dict[str, Any]]:
        return sorted(self._partition(self.audit, {"S": stream}), key=lambda r: str(r["event_id"]))

    def customer_rows(self, customer_id: int, prefix: str = "") -> list[dict[str, Any]]:
        rows = self._partition(self.customer_data, {"N": str(customer_id)})
        return sorted((r for r in rows if str(r["sk"]).startswith(prefix)), key=lambda r: str(r["sk"]))

    def order(self, customer_id: int, order_id: int) -> dict[str, Any]:
        return next(r for r in self.customer_rows(customer_id, "ORDER#") if r["sk"] == f"ORDER#{order_id}")
