"""AWS in tests is moto, shaped by our real template.yaml."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from devstack.stack import load_template

TABLE_KEYS = ("AttributeDefinitions", "KeySchema", "GlobalSecondaryIndexes")


def create_tables(ddb: Any) -> dict[str, str]:
    """Create every DynamoDB table of template.yaml (named by logical id); returns logical -> name."""
    names = {}
    for logical_id, res in load_template()["Resources"].items():
        if res["Type"] != "AWS::DynamoDB::Table":
            continue
        props = {k: v for k, v in res["Properties"].items() if k in TABLE_KEYS}
        ddb.create_table(TableName=logical_id, BillingMode="PAY_PER_REQUEST", **props)
        names[logical_id] = logical_id
    return names


@contextmanager
def serialised_moto() -> Iterator[None]:
    """Serialise moto's request handling: one AWS API call at a time, as DynamoDB applies each atomically.

    moto checks a condition and then writes in plain Python, so two threads can both pass the same check
    (or one copies a table another is writing: "dictionary changed size during iteration"); real DynamoDB
    never lets them. With each call atomic, our code still runs truly concurrently (threads interleave
    between calls), which is exactly the race surface the product has on AWS.
    """
    from moto.core.botocore_stubber import BotocoreStubber

    lock = threading.RLock()
    original = BotocoreStubber.process_request

    def atomic(self: BotocoreStubber, request: Any) -> Any:
        with lock:
            return original(self, request)

    BotocoreStubber.process_request = atomic  # type: ignore[method-assign]
    try:
        yield
    finally:
        BotocoreStubber.process_request = original  # type: ignore[method-assign]
