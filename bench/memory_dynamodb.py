"""An in-memory stand-in for the DynamoDB client, so the loop benchmark measures our code, not I/O.

The real stores (`ConversationStore`, `CustomerDataStore`, audit puts) run unchanged on top of it:
items are serialized and parsed exactly as for DynamoDB, and the update expressions the stores use
(``SET a = :x``, ``if_not_exists``, ``REMOVE``, ``ADD``) are applied. Condition expressions are
*not* evaluated — the benchmark has one writer — and ``ReturnValuesOnConditionCheckFailure`` never
happens. Not for tests of correctness: those run on moto.
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
        return {"Item": _copy(item)} if item is not None else {}

    def query(
        self, TableName: str, KeyConditionExpression: str, ExpressionAttributeValues: dict[str, Any], **kw: Any
    ) -> dict[str, Any]:
        """The key conditions the stores use: ``pk = :v`` with ``sk > :n``, ``sk >= :n`` or ``begins_with(sk, :p)``."""
        self.calls += 1
        pk_name, pk_ref = re.match(r"\s*(\w+)\s*=\s*(:\w+)", KeyConditionExpression).groups()  # type: ignore[union-attr]
        pk_value = str(ExpressionAttributeValues[pk_ref])
        out = []
        for item in self._partition(TableName, pk_value).values():
            if pk_name not in item:
                continue
            above = re.search(r"(\w+)\s*(>=?)\s*(:\w+)", KeyConditionExpression)
            if above:
                value, bound = _num(item[above.group(1)]), _num(ExpressionAttributeValues[above.group(3)])
                if not (value >= bound if above.group(2) == ">=" else value > bound):
                    continue
            prefix = re.search(r"begins_with\((\w+),\s*(:\w+)\)", KeyConditionExpression)
            if prefix and not item[prefix.group(1)]["S"].startswith(ExpressionAttributeValues[prefix.group(2)]["S"]):
                continue
            out.append(item)
        sk_name = next((sk for pk, sk in _KEYS.items() if pk == pk_name), "")
        out.sort(key=lambda i: _sort_key(i.get(sk_name)))
        return {"Items": _copy(out), "Count": len(out)}

    # -- writes -------------------------------------------------------------------------------------

    def put_item(self, TableName: str, Item: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.calls += 1
        self._put(TableName, Item)
        return {}

    def _put(self, table: str, item: dict[str, Any]) -> None:
        pk, sk = self._key(item)
        self._partition(table, pk)[sk] = _copy(item)

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
        return {"Attributes": _copy(item)} if ReturnValues == "ALL_NEW" else {}

    def _update(self, table: str, key: dict[str, Any], expression: str, values: dict[str, Any]) -> dict[str, Any]:
        pk, sk = self._key(key)
        item = self._partition(table, pk).setdefault(sk, _copy(key))
        for action, parts in _clauses(expression):
            for part in parts:
                if action == "REMOVE":
                    item.pop(part.strip(), None)
                elif action == "ADD":
                    name, ref = part.split()
                    item[name] = {"N": str(_num(item.get(name, {"N": "0"})) + _num(values[ref]))}
                else:
                    name, value = (s.strip() for s in part.split("=", 1))
                    if m := re.match(r"if_not_exists\((\w+),\s*(:\w+)\)", value):
                        item[name] = item.get(m.group(1)) or values[m.group(2)]
                    else:
                        item[name] = values[value]
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


def _copy(value: Any) -> Any:
    """A deep copy of attribute values (dicts, lists, scalars): what the client's wire format would give,
    without ``copy.deepcopy``'s memo bookkeeping, which cost as much as the stores' own serialization."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@lru_cache(maxsize=256)
def _clauses(expression: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """An update expression's clauses, parsed once per distinct expression (the stores reuse a few)."""
    found = re.findall(r"(SET|REMOVE|ADD)\s+(.*?)(?=\s+(?:SET|REMOVE|ADD)\s+|$)", expression)
    return tuple((action, tuple(_split(body))) for action, body in found)


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
