"""Low-level DynamoDB helpers shared by the repositories.

The low-level client (not the resource API) keeps cold starts short; items are converted with
botocore-free serializers and numbers come back as ``int`` because we only store integers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
else:
    DynamoDBClient = Any

_ser = TypeSerializer()
_de = TypeDeserializer()
_NUMBER_LIMIT = 10**38


def _attribute(value: Any) -> Any:
    """``TypeSerializer.serialize``, with the types nearly every attribute has (str, int, bool) done inline:
    boto3's checks each value against every DynamoDB type in turn, ~1 µs an attribute, and a turn writes
    some 150 attributes (docs/PERFORMANCE.md, loop overhead)."""
    kind = type(value)
    if kind is str:
        return {"S": value}
    if kind is int and -_NUMBER_LIMIT < value < _NUMBER_LIMIT:  # beyond 38 digits boto3's error stands
        return {"N": str(value)}
    if kind is bool:
        return {"BOOL": value}
    return _ser.serialize(value)


def to_item(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _attribute(v) for k, v in values.items() if v is not None}


def to_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Expression attribute values (``:name`` keys)."""
    return {k: _attribute(v) for k, v in values.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | set):
        return [_plain(v) for v in value]
    return value


def from_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain(_de.deserialize(v)) for k, v in item.items()}


def put_new(table: str, item: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A TransactWriteItems Put that only creates: conditioned on ``key`` being absent, it never overwrites."""
    return {"Put": {"TableName": table, "Item": to_item(item), "ConditionExpression": f"attribute_not_exists({key})"}}


def dumps(value: Any) -> str:
    """Compact, deterministic JSON for blobs we store verbatim (message content, audit payloads)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def cancellation_codes(exc: ClientError) -> list[str]:
    """Per-item reasons of a cancelled TransactWriteItems, in request order ("None" for items that passed)."""
    reasons = exc.response.get("CancellationReasons") or []
    return [str(r.get("Code", "None")) for r in reasons]


CONDITION_FAILED = "ConditionalCheckFailed"  # a cancellation reason: that item's condition did not hold


@contextmanager
def cancellation_as(error_for: Callable[[list[str]], Exception | None]) -> Iterator[None]:
    """Around a TransactWriteItems: raise the domain error ``error_for`` picks by which items failed.

    ``error_for`` gets the per-item codes in request order (``CONDITION_FAILED`` where a condition did
    not hold, ``[]`` when DynamoDB gave none) and returns the error to raise instead, or None to let the
    cancellation through. Every other error passes untouched. The call itself stays at the call site,
    where test_transaction_sizes finds and sizes it.
    """
    try:
        yield
    except ClientError as exc:
        if error_code(exc) != "TransactionCanceledException":
            raise
        error = error_for(cancellation_codes(exc))
        if error is None:
            raise
        raise error from None


def is_conditional_failure(exc: ClientError) -> bool:
    return error_code(exc) in ("ConditionalCheckFailedException", "TransactionCanceledException")


def update_if(db: DynamoDBClient, **update: Any) -> bool:
    """One conditional UpdateItem (``update``: its parameters); False when its condition did not hold and nothing
    was written, every other error raised."""
    try:
        db.update_item(**update)
    except ClientError as exc:
        if is_conditional_failure(exc):
            return False
        raise
    return True
