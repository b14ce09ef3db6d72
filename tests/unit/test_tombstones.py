"""Tombstones: content erased, structure kept, so any valid history stays valid."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.agent.history import problems
from support_agent.store.dynamo import from_item
from support_agent.store.erasure import CHUNK_MESSAGES, ERASED, ConversationEraser, tombstone
from tests.support.recording import RecordingDynamo, cancelled

SECRET = "Dana, 12 Elm Street"
CID = "conv_01JTESTTESTTESTTESTTESTTE"


def test_each_block_kind() -> None:
    content = [
        {"type": "thinking", "thinking": SECRET, "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": SECRET},
        {"type": "tool_use", "id": "toolu_01", "name": "lookup_order", "input": {"order_id": 1042, "note": SECRET}},
    ]
    assert tombstone(content) == [
        {"type": "text", "text": ERASED},
        {"type": "tool_use", "id": "toolu_01", "name": "lookup_order", "input": {}},
    ]
    results = [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": f"<data>{SECRET}</data>", "is_error": True},
        {"type": "tool_result", "tool_use_id": "toolu_02", "content": [{"type": "text", "text": SECRET}]},
    ]
    assert tombstone(results) == [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": ERASED, "is_error": True},
        {"type": "tool_result", "tool_use_id": "toolu_02", "content": ERASED},
    ]


def test_a_message_is_never_left_empty_and_tombstones_are_fixed_points() -> None:
    only_thinking = [{"type": "thinking", "thinking": SECRET, "signature": "s"}]
    assert tombstone(only_thinking) == [{"type": "text", "text": ERASED}]
    once = tombstone([{"type": "text", "text": SECRET}, {"type": "image", "source": {"data": SECRET}}])
    assert SECRET not in json.dumps(once)
    assert tombstone(once) == once  # erasing again changes nothing: the eraser counts only new work


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid Messages API sequences: user text, then assistant turns with tool calls answered in the next message."""
    words = st.text(min_size=1, max_size=20)
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": draw(words)}]}]
    n = 0
    for _ in range(draw(st.integers(0, 5))):
        uses = []
        for _ in range(draw(st.integers(0, 3))):
            n += 1
            use = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "lookup_order", "input": {"q": draw(words)}}
            uses.append(use)
        thinking = [{"type": "thinking", "thinking": draw(words), "signature": "s"}] if draw(st.booleans()) else []
        messages.append({"role": "assistant", "content": [*thinking, {"type": "text", "text": draw(words)}, *uses]})
        results = [
            {"type": "tool_result", "tool_use_id": u["id"], "content": draw(words), "is_error": draw(st.booleans())}
            for u in uses
        ]
        follow_up = [{"type": "text", "text": draw(words)}] if draw(st.booleans()) or not results else []
        messages.append({"role": "user", "content": results + follow_up})
    return messages


@settings(max_examples=60, deadline=None)
@given(histories())
def test_tombstoned_valid_histories_stay_valid(history: list[dict[str, Any]]) -> None:
    assert problems(history) == []
    erased = [{"role": m["role"], "content": tombstone(m["content"])} for m in history]
    assert problems(erased) == []
    for before, after in zip(history, erased, strict=True):
        ids = [(b.get("id"), b.get("tool_use_id")) for b in before["content"] if b["type"].startswith("tool_")]
        assert ids == [(b.get("id"), b.get("tool_use_id")) for b in after["content"] if b["type"].startswith("tool_")]
        assert all(b.get("text", ERASED) == ERASED for b in after["content"])


def a_conversation(messages: int) -> RecordingDynamo:
    content = json.dumps([{"type": "text", "text": SECRET}])
    rows = [{"conversation_id": CID, "seq": s, "role": "user", "content": content} for s in range(1, messages + 1)]
    header = {"conversation_id": CID, "seq": 0, "customer_id": 7}  # the lease answers with it
    return RecordingDynamo(items={"Conversations": header}, queries={"by_customer": [header], "Conversations": rows})


def eraser(db: RecordingDynamo) -> ConversationEraser:
    return ConversationEraser(db, "Conversations", "Audit", lambda: 1_800_000_000.0, lambda: "2026-12-03T00:00:00Z")


def test_every_tombstone_transaction_carries_the_lease_check_and_its_own_audit_row() -> None:
    """A crash between two transactions must leave no tombstone without a row saying who wrote it."""
    n = 2 * CHUNK_MESSAGES + 5
    db = a_conversation(n)
    report = eraser(db).erase_customer(7, "lead-1", "req-1", "request #5")
    assert (report.conversations, report.messages, report.complete) == (1, n, True)
    assert len(db.transactions) == 4  # three chunks, then the run's summary
    covered: list[int] = []
    for items in db.transactions[:-1]:
        assert len(items) <= 100
        updates = [i["Update"] for i in items if "Update" in i]
        seqs = [int(u["Key"]["seq"]["N"]) for u in updates if u["Key"]["seq"] != {"N": "0"}]
        (header,) = [u for u in updates if u["Key"]["seq"] == {"N": "0"}]
        # The lease, and the conversation's audit head as the previous chunk left it (none before the first).
        assert header["ConditionExpression"].startswith("lease_owner = :owner AND ")
        (put,) = [i["Put"] for i in items if "Put" in i]
        assert (put["TableName"], put["ConditionExpression"]) == ("Audit", "attribute_not_exists(event_id)")
        row = from_item(put["Item"])
        assert (row["action"], row["actor"], row["request_id"], row["stream"]) == (
            "conversation_erased",
            "lead-1",
            "req-1",
            CID,
        )
        assert json.loads(row["input"]) == {"reason": "request #5"}
        assert json.loads(row["output"]) == {"messages": len(seqs), "seqs": seqs}
        covered += seqs
    assert covered == list(range(1, n + 1))
    assert SECRET not in json.dumps(db.transactions)
    summary = from_item(db.transactions[-1][1]["Put"]["Item"])
    assert summary["stream"].startswith("erasure#") and summary["n"] == 1
    assert (summary["action"], summary["outcome"], json.loads(summary["output"])["messages"]) == (
        "customer_erased",
        "erased",
        n,
    )


def test_a_lease_lost_between_chunks_is_skipped_with_what_was_written_counted() -> None:
    db = a_conversation(CHUNK_MESSAGES + 1)
    # The second chunk finds the header leased by a turn (ours expired): DynamoDB cancels on the header item.
    db.fail = lambda items: (
        cancelled(["None"] * (len(items) - 2) + ["ConditionalCheckFailed", "None"])
        if db.transactions and len(items) > 2  # a chunk (the run's summary is 2 items)
        else None
    )
    report = eraser(db).erase_customer(7, "lead-1", "req-2")
    assert (report.skipped, report.conversations, report.messages) == ([CID], 0, CHUNK_MESSAGES)
    summary = from_item(db.transactions[-1][1]["Put"]["Item"])
    assert (summary["outcome"], json.loads(summary["output"])["messages"]) == ("partial", CHUNK_MESSAGES)
    assert not [u for u in db.updates if "erased_at" in u["UpdateExpression"]], "the header is not marked erased"
