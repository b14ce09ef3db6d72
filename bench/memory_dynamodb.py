"""An in-memory stand-in for the DynamoDB client, so the loop benchmark measures our code, not I/O.

The real stores (`ConversationStore`, `CustomerDataStore`, audit puts) run unchanged on top of it:
items are serialized and parsed exactly as for DynamoDB, and the update expressions the stores use
(``SET a = :x``, ``if_not_exists``, ``REMOVE``, ``ADD``) are applied. Condition expressions are
*not* evaluated — the benchmark has one writer — and ``ReturnValuesOnConditionCheckFailure`` never
happens. Not for tests of correctness: those run on moto.

Its own cost is kept small, because the loop bench counts it as ours: items are stored and returned as
top-level copies (an update replaces attribute values, never changes one in place, so nested values can
be shared), and each key condition and update expression is parsed once.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

_KEYS = {"conversation_id": "seq", "customer_id": "sk", "approval_id": "", "stream": "event_id"}


class MemoryDynamoDB:
    def __init__(self) -> None:
        self.tables: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}  # table -> partition -> sort key -> item
        self.calls = 0

    @staticmethod
    def _key(key: dict[str, Any]) -> tuple[str, str]:
        for pk, sk in _KEYS.items():  # a key pair present in full (audit rows also carry conversation_id)
            if pk in key and (not sk or sk in key):
                return (str(key[pk]), str(key[sk]) if sk else "")
        raise KeyError(f"no known key in {sorted(key)}")

    def _partition(self, table: str, pk: str) -> dict[str, dict[str, Any]]:
        return self.tables.setdefault(table, {}).setdefault(pk, {})

    # -- reads --------------------------------------------------------------------------------------

    def get_item(self, TableName: str, Key: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.calls += 1
        pk, sk = self._key(Key)
        item = self._partition(TableName, pk).get(sk)
        return {"Item": dict(item)} if item is not None else {}

    def query(
        self, TableName: str, KeyConditionExpression: str, ExpressionAttributeValues: dict[str, Any], **kw: Any
    ) -> dict[str, Any]:
        """The key conditions the stores use: ``pk = :v`` with ``sk > :n``, ``sk >= :n`` or ``begins_with(sk, :p)``."""
        self.calls += 1
        pk_name, pk_ref, above, prefix = _key_condition(KeyConditionExpression)
        values = ExpressionAttributeValues
        out = []
        for item in self._partition(TableName, str(values[pk_ref])).values():
            if pk_name not in item:
                continue
            if above:
                name, op, ref = above
                value, bound = _num(item[name]), _num(values[ref])
                if not (value >= bound if op == ">=" else value > bound):
                    continue
            if prefix and not item[prefix[0]]["S"].startswith(values[prefix[1]]["S"]):
                continue
            out.append(dict(item))
        sk_name = _KEYS.get(pk_name, "")
        out.sort(key=lambda i: _sort_key(i.get(sk_name)))
        return {"Items": out, "Count": len(out)}

    # -- writes -------------------------------------------------------------------------------------

    def put_item(self, TableName: str, Item: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.calls += 1
        self._put(TableName, Item)
        return {}

    def _put(self, table: str, item: dict[str, Any]) -> None:
        pk, sk = self._key(item)
        self._partition(table, pk)[sk] = dict(item)

    def update_item(
        self,
        TableName: str,
        Key: dict[str, Any],
        UpdateExpression: str,
        ExpressionAttributeValues: dict[str, Any] | None = None,
        ReturnValues: str = "NONE",
        **_: Any,
    ) -> dict[str, Any]:
        self.calls += 1
        item = self._update(TableName, Key, UpdateExpression, ExpressionAttributeValues or {})
        return {"Attributes": dict(item)} if ReturnValues == "ALL_NEW" else {}

    def _update(self, table: str, key: dict[str, Any], expression: str, values: dict[str, Any]) -> dict[str, Any]:
        pk, sk = self._key(key)
        item = self._partition(table, pk).setdefault(sk, dict(key))
        for action, name, ref, kept in _actions(expression):
            if action == "REMOVE":
                item.pop(name, None)
            elif action == "ADD":
                item[name] = {"N": str(_num(item.get(name, {"N": "0"})) + _num(values[ref]))}
            else:  # SET name = ref, or SET name = if_not_exists(kept, ref)
                item[name] = (item.get(kept) if kept else None) or values[ref]
        return item

    def transact_write_items(self, TransactItems: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        self.calls += 1
        for entry in TransactItems:
            if "Put" in entry:
                self._put(entry["Put"]["TableName"], entry["Put"]["Item"])
            elif "Update" in entry:
                u = entry["Update"]
                self._update(u["TableName"], u["Key"], u["UpdateExpression"], u.get("ExpressionAttributeValues", {}))
        return {}


@lru_cache(maxsize=64)
def _key_condition(
    expression: str,
) -> tuple[str, str, tuple[str, str, str] | None, tuple[str, str] | None]:
    """(partition key, its value ref, ``(sort key, > or >=, ref)``, ``(attribute, ref)`` of begins_with)."""
    pk_name, pk_ref = re.match(r"\s*(\w+)\s*=\s*(:\w+)", expression).groups()  # type: ignore[union-attr]
    above = re.search(r"(\w+)\s*(>=?)\s*(:\w+)", expression)
    prefix = re.search(r"begins_with\((\w+),\s*(:\w+)\)", expression)
    return (
        pk_name,
        pk_ref,
        (above.group(1), above.group(2), above.group(3)) if above else None,
        (prefix.group(1), prefix.group(2)) if prefix else None,
    )


@lru_cache(maxsize=256)
def _actions(expression: str) -> tuple[tuple[str, str, str, str], ...]:
    """An update expression as ``(action, attribute, value ref, if_not_exists attribute)`` steps, parsed once
    per distinct expression (the stores reuse a few)."""
    steps = []
    for action, body in re.findall(r"(SET|REMOVE|ADD)\s+(.*?)(?=\s+(?:SET|REMOVE|ADD)\s+|$)", expression):
        for part in _split(body):
            if action == "REMOVE":
                steps.append((action, part, "", ""))
            elif action == "ADD":
                name, ref = part.split()
                steps.append((action, name, ref, ""))
            else:
                name, value = (s.strip() for s in part.split("=", 1))
                m = re.match(r"if_not_exists\((\w+),\s*(:\w+)\)", value)
                steps.append((action, name, m.group(2), m.group(1)) if m else (action, name, value, ""))
    return tuple(steps)


def _split(body: str) -> list[str]:
    """Split an update clause on top-level commas (not those inside if_not_exists(...))."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return [p.strip() for p in parts if p.strip()]


def _num(value: dict[str, Any]) -> int:
    return int(value["N"])


def _sort_key(value: dict[str, Any] | None) -> tuple[int, Any]:
    if not value:
        return (0, "")
    return (0, int(value["N"])) if "N" in value else (1, value.get("S", ""))
