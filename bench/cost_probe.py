"""Inside a local function's process: every AWS request it makes, with DynamoDB's capacity units by item size.

Loaded by bench/cost_hook/sitecustomize.py when BENCH_COST_CALLS names a file (bench/cost.py sets it for each
function of the local stack), before the handler is imported. botocore hooks on boto3's default session,
which every client of the layer comes from (wiring.client), write one JSON line per request. An item whose
size the request does not carry (UpdateItem, DeleteItem, a transaction's Update or Delete) is read before and
after through a client of its own, which no hook sees: DynamoDB bills the larger of the two sizes.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from bench.calls import item_size

KB, READ_BLOCK = 1024, 4096
_lock = threading.Lock()


def read_units(size: int, consistent: bool, transactional: bool = False) -> float:
    """Read request units: per 4 KB (at least one block, found or not); half for an eventually consistent
    read, twice for a transactional one."""
    blocks = max(1, -(-size // READ_BLOCK))
    return blocks * (2.0 if transactional else 1.0 if consistent else 0.5)


def write_units(size: int, transactional: bool = False) -> float:
    """Write request units: per 1 KB of the item (the larger of before and after), twice in a transaction."""
    return max(1, -(-size // KB)) * (2.0 if transactional else 1.0)


def dynamodb_units(operation: str, params: dict[str, Any], parsed: dict[str, Any], sizes: dict[str, int]) -> float:
    """The request units one DynamoDB request consumes; ``sizes``: item sizes read around it ("key" -> bytes)."""
    consistent = bool(params.get("ConsistentRead"))
    if operation == "GetItem":
        return read_units(item_size(parsed.get("Item") or {}), consistent)
    if operation in ("Query", "Scan"):
        return read_units(sum(item_size(i) for i in parsed.get("Items") or []), consistent)
    if operation == "BatchGetItem":
        found = [i for items in (parsed.get("Responses") or {}).values() for i in items]
        return sum(read_units(item_size(i), consistent) for i in found) or read_units(0, consistent)
    if operation == "TransactGetItems":
        return sum(read_units(item_size(r.get("Item") or {}), True, True) for r in parsed.get("Responses") or [])
    if operation == "PutItem":
        return write_units(max(item_size(params["Item"]), sizes.get("0", 0)))
    if operation in ("UpdateItem", "DeleteItem"):
        return write_units(sizes.get("0", 0))
    if operation == "BatchWriteItem":
        puts = [
            r["PutRequest"]["Item"] for rs in params.get("RequestItems", {}).values() for r in rs if "PutRequest" in r
        ]
        deletes = sum(1 for rs in params.get("RequestItems", {}).values() for r in rs if "DeleteRequest" in r)
        return sum(write_units(item_size(i)) for i in puts) + deletes
    if operation == "TransactWriteItems":
        total = 0.0
        for n, entry in enumerate(params.get("TransactItems", [])):
            ((kind, body),) = entry.items()
            if kind == "Put":
                total += write_units(max(item_size(body["Item"]), sizes.get(str(n), 0)), True)
            else:  # Update, Delete, ConditionCheck (priced as a transactional write: the larger figure)
                total += write_units(sizes.get(str(n), 0), True)
        return total
    return 0.0


def _keys(operation: str, params: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The items whose size the request does not carry: position -> (table, key)."""
    if operation in ("UpdateItem", "DeleteItem", "PutItem"):
        key = params.get("Key")
        if key is None:  # PutItem: the key is in the item; an overwritten item bills its old size too
            return {}
        return {"0": (params["TableName"], key)}
    if operation == "TransactWriteItems":
        out = {}
        for n, entry in enumerate(params.get("TransactItems", [])):
            ((kind, body),) = entry.items()
            if kind != "Put":
                out[str(n)] = (body["TableName"], body["Key"])
        return out
    return {}


class Probe:
    def __init__(self, path: str, function: str) -> None:
        self.path, self.function = path, function
        self._reader: Any = None

    def _get(self, table: str, key: dict[str, Any]) -> int:
        if self._reader is None:  # a client of its own session: no hook of ours sees its requests
            import botocore.session

            self._reader = botocore.session.get_session().create_client(
                "dynamodb", endpoint_url=os.environ.get("AWS_ENDPOINT_URL"), region_name="us-east-1"
            )
        return item_size(self._reader.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item") or {})

    def before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        context["bench_params"] = json.loads(json.dumps(params, default=str))
        if model.service_model.endpoint_prefix == "dynamodb":
            keys = _keys(model.name, params)
            context["bench_before"] = {n: self._get(t, k) for n, (t, k) in keys.items()}

    def after(self, http_response: Any, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        service, operation = model.service_model.endpoint_prefix, model.name
        params = context.get("bench_params", {})
        record: dict[str, Any] = {
            "function": self.function,
            "service": service,
            "operation": operation,
            "status": getattr(http_response, "status_code", 0),
            "bytes": len(getattr(http_response, "content", b"") or b""),
        }
        if service == "dynamodb":
            sizes = dict(context.get("bench_before", {}))
            for n, (table, key) in _keys(operation, params).items():
                sizes[n] = max(sizes.get(n, 0), self._get(table, key))
            record["units"] = dynamodb_units(operation, params, parsed, sizes)
            record["write"] = operation in (
                "PutItem",
                "UpdateItem",
                "DeleteItem",
                "BatchWriteItem",
                "TransactWriteItems",
            )
            record["table"] = params.get("TableName", "")
        elif service == "sqs" and operation in ("SendMessage", "SendMessageBatch"):
            body = str(params.get("MessageBody", "")) or json.dumps(params.get("Entries", []))
            record["chunks"] = max(1, -(-len(body.encode()) // (64 * KB)))
        elif service == "sns" and operation == "Publish":
            record["chunks"] = max(1, -(-len(str(params.get("Message", "")).encode()) // (64 * KB)))
        line = json.dumps(record) + "\n"
        with _lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)


def install(path: str, function: str) -> None:
    import boto3

    boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    probe = Probe(path, function)
    events = boto3.DEFAULT_SESSION.events
    events.register("before-parameter-build", probe.before, unique_id="bench-cost-before")
    events.register("after-call", probe.after, unique_id="bench-cost-after")
