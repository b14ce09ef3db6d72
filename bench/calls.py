"""Count AWS requests with botocore's event hooks, and size what DynamoDB is asked to store.

Used by `make bench` (the AWS-calls table) and by tests/integration/test_aws_calls.py. Hooks go on
a session's event system *before* its clients are created (a client copies the emitter when it is
made), so attach to ``boto3``'s default session and then let the code under test build its clients.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

DYNAMODB_ITEM_LIMIT = 400 * 1024


@dataclass
class Call:
    service: str
    operation: str
    params: dict[str, Any]
    wire_bytes: int = 0

    @property
    def table(self) -> str:
        return str(self.params.get("TableName", ""))

    @property
    def kind(self) -> str:
        """What the call is for, in the terms docs/ARCHITECTURE.md uses for a turn."""
        p, op = self.params, self.operation
        if self.service != "dynamodb":
            return f"{self.service}:{op}"
        key = p.get("Key") or p.get("Item") or {}
        if str(key.get("conversation_id", {}).get("S", "")).startswith("rate#"):
            return "rate_limit"
        if op == "TransactWriteItems":  # a turn's claim: its record first (and its idempotency key)
            (first,) = p["TransactItems"][0].values()
            if str((first.get("Item") or first.get("Key") or {}).get("conversation_id", {}).get("S", "")).startswith(
                "turn#"
            ):
                return "turn_claim"
        if str(key.get("conversation_id", {}).get("S", "")).startswith(("turn#", "idem#")):
            return "turn_record"  # the answer stored on the record (or a key read or released)
        expression = str(p.get("UpdateExpression", ""))
        if op == "UpdateItem" and "lease_owner" in expression:
            return "lease_release" if expression.startswith("REMOVE") else "lease_acquire"
        if op == "PutItem" and "lease_owner" in p.get("Item", {}):
            return "lease_acquire"  # a new conversation's header, born leased
        if op == "Query" and "seq >" in str(p.get("KeyConditionExpression", "")):
            return "history_query"
        if op == "TransactWriteItems":
            return "transact_write"
        if op in ("GetItem", "Query", "BatchGetItem", "Scan"):
            return f"read:{op}"
        return f"write:{op}"


def item_size(item: dict[str, Any]) -> int:
    """DynamoDB's size of an item in AttributeValue form (names + values, as AWS documents it)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    (kind, v), *_ = value.items()
    if kind == "S":
        return len(str(v).encode())
    if kind == "N":
        digits = str(v).lstrip("-").replace(".", "").lstrip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind == "B":
        return len(base64.b64decode(v)) if isinstance(v, str) else len(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + _value_size(x) for x in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_size(x) for k, x in v.items())
    if kind in ("SS", "NS", "BS"):
        return sum(_value_size({kind[0]: x}) for x in v)
    return 0


def written_items(call: Call) -> list[dict[str, Any]]:
    """The full items a write call puts (TransactWriteItems Puts, PutItem)."""
    if call.operation == "PutItem":
        return [call.params["Item"]]
    if call.operation == "TransactWriteItems":
        return [t["Put"]["Item"] for t in call.params.get("TransactItems", []) if "Put" in t]
    return []


@dataclass
class CallCounter:
    """Records every AWS request made by clients created after `attach`."""

    calls: list[Call] = field(default_factory=list)
    _events: Any = None

    def attach(self, events: Any) -> CallCounter:
        self._events = events
        events.register("before-parameter-build", self._on_params, unique_id="bench-calls-params")
        events.register("before-call", self._on_call, unique_id="bench-calls-wire")
        return self

    def detach(self) -> None:
        if self._events is not None:
            self._events.unregister("before-parameter-build", unique_id="bench-calls-params")
            self._events.unregister("before-call", unique_id="bench-calls-wire")
            self._events = None

    def _on_params(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        service = model.service_model.endpoint_prefix
        self.calls.append(Call(service, model.name, json.loads(json.dumps(params, default=str))))

    def _on_call(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        body = params.get("body") or b""
        if self.calls and self.calls[-1].operation == model.name:
            self.calls[-1].wire_bytes = len(body if isinstance(body, bytes) else str(body).encode())

    def mark(self) -> int:
        return len(self.calls)

    def since(self, mark: int) -> list[Call]:
        return self.calls[mark:]


def kinds(calls: list[Call]) -> Counter[str]:
    return Counter(c.kind for c in calls)


def largest_item(calls: list[Call]) -> int:
    return max((item_size(i) for c in calls for i in written_items(c)), default=0)


def bytes_written(calls: list[Call]) -> int:
    """Item bytes of every Put in the calls (Updates add a few numbers; their expressions are not counted)."""
    return sum(item_size(i) for c in calls for i in written_items(c))
