"""AWS requests per chat turn, counted with botocore event hooks on the deployed template (ARCHITECTURE.md).

Per turn: the turn record claimed (one TransactWriteItems) and its answer stored (one UpdateItem), one lease
update and one lease release, one query for the history, at most two TransactWriteItems per iteration (the
write-ahead and the results), one read per read-only tool call — and no item anywhere near DynamoDB's
400 KB limit, whatever the tools return.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from bench.calls import DYNAMODB_ITEM_LIMIT, Call, CallCounter, bytes_written, kinds, largest_item
from support_agent.store.dynamo import to_item
from tests.integration.conftest import Api
from tests.support.scripted import answer, tool_use, tools
from tests.support.shop_rows import invoice_item

THREE_ITERATIONS = "Where is my order 1042, and what did you bill me for it?"


@pytest.fixture
def counted(api: Api) -> Iterator[tuple[Api, CallCounter]]:
    api.overrides["TURNS_PER_MINUTE"] = "1000"  # 20 turns in a few seconds are not what is measured here
    api.current = ""
    api.use_function("ChatFunction")  # fresh singletons: their clients are made after the hooks
    counter = CallCounter().attach(boto3._get_default_session().events)
    yield api, counter
    counter.detach()


def script_three(api: Api, n: int = 0) -> None:
    api.model.script = [
        tools(tool_use("lookup_order", {"order_id": 1042})),
        tools(tool_use("list_invoices", {"order_id": 1042})),
        answer(f"Order 1042 was delivered; invoice 5001 is paid ({n})."),
    ]


def chat(api: Api, cid: str | None, message: str = THREE_ITERATIONS) -> dict[str, Any]:
    status, body, _ = api.call("POST", "/api/chat", {"conversationId": cid, "message": message})
    assert status == 200, body
    return dict(body)


def check_turn(calls: list[Call], iterations: int, read_only_tool_calls: int, new: bool) -> None:
    k = kinds(calls)
    if new:  # a new conversation's header may be born in its first write-ahead instead of a lease call
        assert k["lease_acquire"] <= 1
    else:
        assert k["lease_acquire"] == 1
    assert k["lease_release"] == 1
    assert k["history_query"] == 1
    assert iterations <= k["transact_write"] <= 2 * iterations
    tool_reads = [c for c in calls if c.kind.startswith("read:") and "CustomerData" in c.table]
    assert len(tool_reads) == read_only_tool_calls
    assert k["rate_limit"] <= 1
    assert (k["turn_claim"], k["turn_record"]) == (1, 1)  # the turn's record claimed, then its answer stored
    known = {"lease_acquire", "lease_release", "history_query", "transact_write", "rate_limit"}
    known |= {"turn_claim", "turn_record"}
    others = {kind: n for kind, n in k.items() if kind not in known and not kind.startswith("read:")}
    assert others == {}, f"unexpected AWS calls in a read-only turn: {others}"
    assert not [c for c in calls if c.operation == "Scan"]


def test_a_three_iteration_turn(counted: tuple[Api, CallCounter]) -> None:
    api, counter = counted
    script_three(api)
    body = chat(api, None)
    assert body["iterations"] == 3
    first = counter.since(0)
    check_turn(first, iterations=3, read_only_tool_calls=2, new=True)
    assert kinds(first)["transact_write"] == 5  # three write-aheads, two result writes

    mark = counter.mark()
    script_three(api, 1)
    chat(api, body["conversationId"])
    second = counter.since(mark)
    check_turn(second, iterations=3, read_only_tool_calls=2, new=False)
    assert kinds(second)["transact_write"] == 5
    # a few KB per iteration; the largest item is a small fraction of the limit
    assert bytes_written(second) < 3 * 8 * 1024
    assert largest_item(second) < DYNAMODB_ITEM_LIMIT // 50


def test_a_twenty_turn_conversation(counted: tuple[Api, CallCounter]) -> None:
    api, counter = counted
    cid = None
    per_turn: list[list[Call]] = []
    for n in range(20):
        mark = counter.mark()
        api.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer(f"Delivered ({n}).")]
        cid = chat(api, cid, f"Turn {n}: where is order 1042?")["conversationId"]
        per_turn.append(counter.since(mark))
    for n, calls in enumerate(per_turn):
        check_turn(calls, iterations=2, read_only_tool_calls=1, new=n == 0)
        assert kinds(calls)["transact_write"] == 3
    # the history query stays one request (one page) at 20 turns: 80 messages
    assert all(kinds(c)["history_query"] == 1 for c in per_turn)
    assert max(largest_item(c) for c in per_turn) < DYNAMODB_ITEM_LIMIT // 50
    # what a turn writes does not grow with the conversation's length
    assert bytes_written(per_turn[-1]) < 1.5 * bytes_written(per_turn[1])


def test_huge_tool_output_stays_far_below_the_item_limit(counted: tuple[Api, CallCounter]) -> None:
    """75 invoices with long memos (~80 KB of output each time), asked for by 8 tool calls in one message."""
    api, counter = counted
    table = api.stack.function_env("ChatFunction")["CUSTOMER_DATA_TABLE"]
    invoices = [invoice_item(9, 90000 + i, 9000, 100, "m" * 1000) for i in range(75)]
    ddb = boto3.client("dynamodb")
    for start in range(0, len(invoices), 25):
        batch = [{"PutRequest": {"Item": to_item(i)}} for i in invoices[start : start + 25]]
        ddb.batch_write_item(RequestItems={table: batch})
    mark = counter.mark()
    api.model.script = [
        tools(*[tool_use("list_invoices", {}) for _ in range(8)]),
        answer("You have many invoices."),
    ]
    status, body, _ = api.call(
        "POST",
        "/api/chat",
        {"conversationId": None, "message": "All my invoices?"},
        token=api.token("c9", customer_id=9),
    )
    assert status == 200, body
    calls = counter.since(mark)
    results = [c for c in calls if c.kind == "transact_write"][1]  # the second after the claim: the results
    # 8 results of ~80 KB each, fenced and truncated to 4000 characters; audit rows clipped likewise
    assert 8 * 4000 < largest_item([results]) == largest_item(calls) < 48 * 1024
    assert results.wire_bytes < 160 * 1024
