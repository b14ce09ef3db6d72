"""The audit chain against tampering: random streams of audited actions, one random tampering each.

The streams are built as the writers build them (`AuditRecord` → `chain` → the Put's item → a read), so the
rows verified are the rows a query returns. Each tampering is what someone holding PutItem (or a backup
restore) could do to the stored rows while the owner item's head stays as the writer left it, or — someone who
can write both tables — to the rows and the owner's head together, with the sealed head (S3, Object Lock) out
of reach; `verify` must find every one, with its kind, and must find nothing in an untouched stream.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.audit.chain import Head, chain, link_hash, payload_hash, verify
from support_agent.store.audit import AuditRecord
from support_agent.store.dynamo import from_item
from tests.reliability.conftest import CI

EXAMPLES = CI.max_examples * 10  # pure functions: 600 examples take a few seconds (docs/RELIABILITY.md)

ACTIONS = {  # what each kind of stream holds, as the writers write it
    "conversation": ["tool_call", "conversation_erased"],
    "approval": ["refund_requested", "approval_approved", "approval_rejected", "refund_failed"],
    "refund": ["refund", "refund_started", "payment_refund", "refund_failed_late", "refund_new_attempt"],
    "handoff": ["handoff_opened", "handoff_closed"],
    "erasure": ["customer_erased"],
}
texts = st.text(min_size=0, max_size=12)


def event_id(i: int) -> str:
    """Time-ordered keys with room between them for an inserted row (``i * 10 + 5``)."""
    return f"01J{i * 10:023d}"


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[dict[str, Any]], Head]:
    kind = draw(st.sampled_from(sorted(ACTIONS)))
    stream = {"conversation": "conv_01JX", "erasure": "erasure#01JX"}.get(kind, f"{kind}#k1")
    records = []
    for i in range(draw(st.integers(1, 12))):
        records.append(
            AuditRecord(
                stream=stream,
                action=draw(st.sampled_from(ACTIONS[kind])),
                actor=draw(st.sampled_from(["customer-7", "lead-1", "refund-flow", "stripe-webhook"])),
                outcome=draw(st.sampled_from(["ok", "error", "SUCCEEDED", "FAILED", "OPEN"])),
                customer_id=draw(st.none() | st.integers(1, 2**31)),
                created_at=f"2026-12-03T00:00:{i:02d}Z",
                tool=draw(st.none() | st.sampled_from(["request_refund", "lookup_order"])),
                input=draw(st.none() | st.dictionaries(st.sampled_from("abc"), texts | st.integers(), max_size=3)),
                output=draw(st.none() | st.dictionaries(st.sampled_from("xyz"), texts | st.integers(), max_size=3)),
                conversation_id=draw(st.none() | st.just("conv_01JX")),
                approval_id=draw(st.none() | st.just("apr_1")),
                refund_key=draw(st.none() | st.just("apr_1")),
                event_id=event_id(i),
            )
        )
    chained, head = chain(Head(), records)
    return [from_item(r.put("Audit")["Put"]["Item"]) for r in chained], head


def rehash(rows: list[dict[str, Any]], start: int) -> None:
    """Recompute the chain from ``rows[start]`` on, as a forger would (valid hashes, links and n)."""
    prev = rows[start - 1]["hash"] if start else ""
    for row in rows[start:]:
        row["payload_hash"] = payload_hash(row)
        row["prev_hash"] = prev
        row["hash"] = prev = link_hash(row["n"], row["payload_hash"], prev)


# the rows, the kind expected, the event id (if exact); and the owner's head and the sealed head verified against
Tampering = tuple[list[dict[str, Any]], str, str | None, Head, Head | None]


def head_of(row: dict[str, Any]) -> Head:
    return Head(int(row["n"]), str(row["hash"]), str(row["event_id"]))


@st.composite
def tamperings(draw: st.DrawFn, rows: list[dict[str, Any]], head: Head) -> Tampering:
    """A tampering of the rows alone (the owner's head as the writer left it; any seal, or none), or of the rows
    *and* the owner's head (someone who can write both tables), which only a seal at or past the first
    touched row can show."""
    last = len(rows) - 1
    seal = draw(st.none() | st.integers(0, last))
    sealed = None if seal is None else head_of(rows[seal])
    what = draw(st.sampled_from(["rewrite_with_head", "truncate_with_head", "rows"]))
    if what == "rewrite_with_head":  # a row changed, the chain recomputed from it on, and the head moved
        rows = [dict(r) for r in rows]
        i = draw(st.integers(0, last))
        at = draw(st.integers(i, last))  # the newest seal was taken when row `at` was the head
        sealed = head_of(rows[at])
        rows[i]["outcome"] = str(rows[i]["outcome"]) + "!"
        rehash(rows, i)
        return rows, "changed", rows[at]["event_id"], head_of(rows[-1]), sealed
    if what == "truncate_with_head":  # the tail cut off and the head moved back to what is left
        cut = draw(st.integers(1, len(rows)))
        at = draw(st.integers(len(rows) - cut, last))  # a sealed head among the rows cut
        kept = rows[:-cut]
        return kept, "missing", None, head_of(kept[-1]) if kept else Head(), head_of(rows[at])
    changed, kind, where = draw(row_tamperings(rows, head))
    return changed, kind, where, head, sealed


@st.composite
def row_tamperings(
    draw: st.DrawFn, rows: list[dict[str, Any]], head: Head
) -> tuple[list[dict[str, Any]], str, str | None]:
    rows = [dict(r) for r in rows]
    last = len(rows) - 1
    what = draw(st.sampled_from(["change", "delete", "insert", "swap", "truncate", "rewrite"]))
    if what == "swap" and len(rows) < 2:
        what = "change"
    if what == "change":
        i = draw(st.integers(0, last))
        field = draw(
            st.sampled_from(
                ["outcome", "actor", "output", "customer_id", "n", "prev_hash", "refund_key", "redacted_at"]
            )
        )
        if field == "n":
            rows[i]["n"] += draw(st.sampled_from([-1, 1, 7]))
        elif field == "customer_id":
            rows[i]["customer_id"] = int(rows[i].get("customer_id") or 0) + 1
        elif field == "prev_hash":
            rows[i]["prev_hash"] = "0" * 64
        elif field != "redacted_at":
            rows[i][field] = str(rows[i].get(field)) + draw(st.sampled_from(["x", " ", "0"]))
        if field == "redacted_at" or draw(st.booleans()):  # a redaction no record authorises (finding 5)
            rows[i]["redacted_at"] = draw(texts)
        return rows, "changed", rows[i]["event_id"]
    if what == "delete":
        del rows[draw(st.integers(0, last))]
        return rows, "missing", None
    if what == "truncate":
        cut = draw(st.integers(1, len(rows)))
        return rows[:-cut], "missing", None
    if what == "swap":
        i, j = sorted(draw(st.lists(st.integers(0, last), min_size=2, max_size=2, unique=True)))
        keys = ("stream", "event_id")
        a, b = rows[i], rows[j]
        rows[i] = {**{k: v for k, v in b.items() if k not in keys}, **{k: a[k] for k in keys}}
        rows[j] = {**{k: v for k, v in a.items() if k not in keys}, **{k: b[k] for k in keys}}
        return rows, "reordered", rows[i]["event_id"]
    if what == "rewrite":  # a row changed and the chain recomputed from it on; the head is out of reach
        i = draw(st.integers(0, last))
        rows[i]["outcome"] = str(rows[i]["outcome"]) + "!"
        rehash(rows, i)
        return rows, "changed", rows[-1]["event_id"]
    # insert: a bare row after the chain began, a forged twin of some position, or a forged row past the head
    how = draw(st.sampled_from(["bare", "twin", "past_head"]))
    after = draw(st.integers(0, last))
    forged = {**rows[after], "event_id": event_id(after)[:-1] + "5", "outcome": "forged", "actor": "mallory"}
    if how == "bare":
        for name in ("n", "v", "payload_hash", "prev_hash", "hash"):
            forged.pop(name)
    elif how == "twin":  # claims the position of a row, linked to the row before it
        at = draw(st.integers(0, last))
        forged["n"] = rows[at]["n"]
        forged["prev_hash"] = rows[at - 1]["hash"] if at else ""
        forged["payload_hash"] = payload_hash(forged)
        forged["hash"] = link_hash(forged["n"], forged["payload_hash"], forged["prev_hash"])
    else:
        forged["event_id"] = event_id(len(rows) + 1)
        forged["n"] = head.n + 1
        forged["prev_hash"] = head.hash
        forged["payload_hash"] = payload_hash(forged)
        forged["hash"] = link_hash(forged["n"], forged["payload_hash"], forged["prev_hash"])
    return [*rows, forged], "inserted", forged["event_id"]


@settings(parent=CI, max_examples=EXAMPLES)
@given(st.data())
def test_every_tampering_is_found_with_its_kind_and_untouched_streams_are_ok(data: st.DataObject) -> None:
    rows, head = data.draw(streams())
    untouched = verify(rows, head)
    assert (untouched["status"], untouched["firstBreak"], untouched["chainStartsAt"]) == ("ok", None, 1)
    sealed_row = rows[data.draw(st.integers(0, len(rows) - 1))]  # a seal the stream went through agrees
    assert verify(rows, head, head_of(sealed_row))["status"] == "ok"
    tampered, kind, where, tampered_head, sealed = data.draw(tamperings(rows, head))
    answer = verify(tampered, tampered_head, sealed)
    assert answer["status"] == "broken", (kind, answer)
    assert answer["firstBreak"]["kind"] == kind, (kind, answer)
    if where is not None:
        assert answer["firstBreak"]["eventId"] == where, (kind, answer)


def test_rows_before_the_chain_are_reported_not_verified() -> None:
    """A stream written before the chain: its old rows (no n) come first, and the chain starts at n = 1 after them."""
    old = [{"stream": "conv_01JX", "event_id": event_id(i), "action": "tool_call", "outcome": "ok"} for i in range(3)]
    new = [
        AuditRecord("conv_01JX", "tool_call", "customer-7", "ok", 7, "t", event_id=event_id(5 + i)) for i in range(2)
    ]
    chained, head = chain(Head(), new)
    answer = verify([*old, *(from_item(r.put("Audit")["Put"]["Item"]) for r in chained)], head)
    assert (answer["status"], answer["chainStartsAt"], answer["unchained"], answer["rows"]) == ("ok", 1, 3, 5)


def test_a_row_claiming_a_redaction_is_changed_and_listed() -> None:
    """Issue 30 finding 5: ``redacted_at`` once made verify skip the row's payload, and no writer sets it, so one
    PutItem with a changed outcome and ``redacted_at`` read ``ok``. No redaction record exists yet to authorise
    one: a row carrying ``redacted_at`` is ``changed``, whatever its payload, and ``redacted`` names it."""
    chained, head = chain(Head(), [AuditRecord("conv_01JX", "tool_call", "c", "ok", 7, "t", input={"card": "4242"})])
    row = from_item(chained[0].put("Audit")["Put"]["Item"])
    changed = {"eventId": row["event_id"], "kind": "changed"}
    for claimed in (
        {**row, "outcome": "error", "redacted_at": "x"},  # the reproduction: a changed payload hidden
        {**row, "input": "[redacted]", "redacted_at": "t2"},  # an operator's redaction, unauthorised
        {**row, "redacted_at": ""},  # the payload intact: still a write no writer makes
    ):
        answer = verify([claimed], head)
        assert (answer["status"], answer["firstBreak"]) == ("broken", changed)
        assert answer["redacted"] == [row["event_id"]]
    assert verify([row], head)["redacted"] == []


def test_the_encoding_is_pinned() -> None:
    """Version 1, byte for byte: keys sorted, no spaces, UTF-8, key and chain fields left out, absent not null."""
    record = AuditRecord("approval#apr_1", "approval_approved", "lead-1", "APPROVED", 7, "2026-12-03T00:00:00Z")
    record = dataclasses.replace(record, output={"amount_cents": 9000, "note": "é"}, event_id="01J0")
    (row,), head = chain(Head(), [record])
    from support_agent.audit.chain import canonical

    stored = from_item(row.put("Audit")["Put"]["Item"])
    assert (
        canonical(stored)
        == (
            '{"action":"approval_approved","actor":"lead-1","created_at":"2026-12-03T00:00:00Z","customer_id":7,'
            '"outcome":"APPROVED","output":"{\\"amount_cents\\":9000,\\"note\\":\\"é\\"}"}'
        ).encode()
    )
    assert (stored["n"], stored["v"], stored["prev_hash"]) == (1, 1, "")
    assert stored["hash"] == link_hash(1, stored["payload_hash"], "") == head.hash


def test_a_row_given_its_neighbours_n_is_changed_not_an_inserted_twin() -> None:
    """Found by the property: row 2's `n` set to 1 made rows 1 and 2 twins, reported `inserted` at row 1. A row
    that does not hash as it says is `changed`, and only intact rows count as twins."""
    records = [
        AuditRecord("approval#k1", "refund_requested", "c", "ok", None, f"t{i}", event_id=event_id(i)) for i in range(2)
    ]
    chained, head = chain(Head(), records)
    rows = [from_item(r.put("Audit")["Put"]["Item"]) for r in chained]
    rows[1]["n"] = 1
    assert verify(rows, head)["firstBreak"] == {"eventId": rows[1]["event_id"], "kind": "changed"}
