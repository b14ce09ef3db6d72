"""The hash chain of an audit stream: canonical encoding (version 1), chaining and verification.

Each stream (a conversation, ``approval#…``, ``handoff#…``, ``refund#…``, ``erasure#…``, ``mcp#…``) has one
owner item, which carries the stream's head (``audit_n``, ``audit_hash``, ``audit_event``). A writer chains its
new rows onto the head it read (`chain`) and advances the head in the same TransactWriteItems as the rows,
conditioned on that head: two writers racing cannot fork a stream, one transaction fails. That splice is
written once, by store/audited_write.py (`AuditedWrite`), which every writer uses; this module is the pure part.

Encoding, version 1 (``v: 1`` on every row):

* the payload is every attribute of the stored row except its key (``stream``, ``event_id``) and the
  chain fields (``n``, ``v``, ``payload_hash``, ``prev_hash``, ``hash``) and ``redacted_at``;
* it is serialised as JSON: keys sorted, UTF-8 (no ``\\u`` escapes), separators ``,`` and ``:`` with no
  spaces; integers as JSON integers, strings as they are (``input``/``output`` are the stored JSON text,
  not re-parsed); absent attributes are left out, and a DynamoDB NULL is written ``null`` (writers never
  store NULL: `to_item` leaves ``None`` fields out, so every optional field — ``tool``, ``input``,
  ``output``, ``customer_id``, ``conversation_id``, ``approval_id``, ``handoff_id``, ``refund_key``,
  ``request_id``, ``tool_use_id`` — is absent, not null, when it has no value);
* ``payload_hash`` = SHA-256 (hex) of those bytes;
* ``hash`` = SHA-256 (hex) of the ASCII text ``f"{n}:{payload_hash}:{prev_hash}"``, where ``prev_hash`` is
  the previous row's ``hash`` and ``""`` for ``n = 1``.

The key is left out so that a row's position is its ``n`` alone: rows moved under other keys read as
``reordered``. Chaining the payload's hash (not the payload) leaves room for redacting a payload (the row
keeping its ``payload_hash``, marked ``redacted_at``), but a redaction is valid only when a redaction record
on the same stream authorises it, and nothing writes one yet: a row carrying ``redacted_at`` is ``changed``,
whatever its payload (it skipped the payload check once, and one PutItem hid a changed outcome behind it),
and verification lists such rows (``redacted``). Rows written before the chain (no ``n``) precede the first
hashed row; the chain starts there and verification says so (``chainStartsAt``, ``unchained``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from support_agent.store.audit import AuditRecord  # the rows' type only: nothing here imports a store

VERSION = 1
KEY_FIELDS = frozenset({"stream", "event_id"})
CHAIN_FIELDS = frozenset({"n", "v", "payload_hash", "prev_hash", "hash", "redacted_at"})
BreakKind = Literal["changed", "missing", "inserted", "reordered"]


def canonical(row: Mapping[str, Any]) -> bytes:
    """Version 1 of the canonical encoding of a row's payload (see the module docstring)."""
    payload = {k: v for k, v in row.items() if k not in KEY_FIELDS and k not in CHAIN_FIELDS}
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def payload_hash(row: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(row)).hexdigest()


def link_hash(n: int, payload: str, prev: str) -> str:
    return hashlib.sha256(f"{n}:{payload}:{prev}".encode("ascii")).hexdigest()


@dataclass(frozen=True)
class Head:
    """A stream's head as its owner item holds it: the last row's ``n`` and ``hash`` (0 and "" when empty), and
    its ``event_id`` (``audit_event``), so the next row's key sorts after it whichever clock wrote it."""

    n: int = 0
    hash: str = ""
    event_id: str = ""

    @classmethod
    def of(cls, item: Mapping[str, Any] | None) -> Head:
        item = item or {}
        return cls(int(item.get("audit_n") or 0), str(item.get("audit_hash") or ""), str(item.get("audit_event") or ""))

    def attributes(self) -> dict[str, Any]:
        """The owner item's attributes for a new item written with its stream's first rows."""
        return {"audit_n": self.n, "audit_hash": self.hash, "audit_event": self.event_id} if self.n else {}


def chain(head: Head, records: Sequence[AuditRecord]) -> tuple[list[AuditRecord], Head]:
    """``records`` numbered and hashed in order after ``head``; the new head. Pure: nothing is written.

    A stream's keys sort in chain order: a record whose ``event_id`` does not sort after the one before it (two
    ULIDs of one millisecond, or another function's clock behind) gets the next id after it."""
    out: list[AuditRecord] = []
    n, prev, last_id = head.n, head.hash, head.event_id
    for record in records:
        n += 1
        if record.event_id <= last_id:
            record = replace(record, event_id=_next_id(last_id))
        digest = payload_hash(record.payload())
        link = link_hash(n, digest, prev)
        out.append(replace(record, n=n, payload_hash=digest, prev_hash=prev, hash=link))
        prev, last_id = link, record.event_id
    return out, Head(n, prev, last_id)


_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # ULIDs' (support_agent.ids)


def _next_id(event_id: str) -> str:
    """The ULID right after ``event_id`` (its last base-32 digit plus one, carried)."""
    digits = [_ALPHABET.index(c) for c in event_id]
    for i in range(len(digits) - 1, -1, -1):
        if digits[i] < 31:
            digits[i] += 1
            return "".join(_ALPHABET[d] for d in digits)
        digits[i] = 0
    raise ValueError(f"no ULID after {event_id}")


def _intact(row: Mapping[str, Any]) -> bool:
    """The row hashes as it says (its payload and its link) and claims no redaction: no record authorises one."""
    digest = str(row.get("payload_hash", ""))
    if "redacted_at" in row or payload_hash(row) != digest:
        return False
    return row.get("n") is not None and link_hash(int(row["n"]), digest, str(row.get("prev_hash", ""))) == row.get(
        "hash"
    )


def _broken(row: Mapping[str, Any] | None, kind: BreakKind) -> dict[str, Any]:
    return {"eventId": None if row is None else str(row.get("event_id")), "kind": kind}


def verify(rows: Sequence[Mapping[str, Any]], head: Head, sealed: Head | None = None) -> dict[str, Any]:
    """Recompute a stream (all its rows, any order) against its owner's head and its latest sealed head.

    ``{"rows", "status": "ok" | "broken", "firstBreak": {"eventId", "kind"} | None, "chainStartsAt",
    "unchained", "redacted"}``. Rows are read in key (``event_id``) order; the first break found is reported:
    a payload or link that does not hash to what the row says, or a row carrying ``redacted_at`` (listed in
    ``redacted``, whatever the first break) → ``changed``; a gap in ``n``, or a head
    beyond the last row (the tail cut off) → ``missing``; a duplicate ``n``, a row without ``n`` after
    the chain started, or a row beyond the head → ``inserted``; ``n`` out of key order → ``reordered``;
    the last row's hash not the head's (the chain rewritten from some row on) → ``changed``.

    ``sealed`` (audit/seal.py) is out of reach of whoever can write the table: a chain rewritten from
    some row on *with* its owner's head still fails there — the sealed position's row hashing otherwise →
    ``changed`` (reported at that row: the rewrite began at or before it), no row at that position →
    ``missing``. Rows after the sealed head are covered by the owner's head alone until they are sealed.
    """
    ordered = sorted(rows, key=lambda r: str(r.get("event_id")))
    first = next((i for i, r in enumerate(ordered) if r.get("n") is not None), None)
    result: dict[str, Any] = {
        "rows": len(ordered),
        "status": "ok",
        "firstBreak": None,
        "chainStartsAt": None if first is None else int(ordered[first]["n"]),
        "unchained": len(ordered) if first is None else first,
        "redacted": [str(r.get("event_id")) for r in ordered if "redacted_at" in r],
    }

    def broken(row: Mapping[str, Any] | None, kind: BreakKind) -> dict[str, Any]:
        return {**result, "status": "broken", "firstBreak": _broken(row, kind)}

    sealed = sealed or Head()
    if first is None:
        return broken(ordered[-1] if ordered else None, "missing") if head.n or sealed.n else result
    chained = ordered[first:]
    later_ns = [r.get("n") for r in chained]
    expected, prev, last = 1, "", None
    for i, row in enumerate(chained):
        if row.get("n") is None:
            return broken(row, "inserted")
        n = int(row["n"])
        if not _intact(row):
            return broken(row, "changed")
        twins = [r for r in chained if r.get("n") == n and _intact(r)]  # a row that does not hash is `changed`
        if len(twins) > 1:
            # Two rows claim one position: the inserted one is the one neither the next row nor the head links to.
            nxt = next((r for r in chained if r.get("n") == n + 1), None)
            genuine = nxt.get("prev_hash") if nxt is not None else (head.hash if head.n == n else None)
            return broken(next((t for t in twins if t.get("hash") != genuine), row), "inserted")
        if n > head.n:
            return broken(row, "inserted")
        if n < expected:
            return broken(row, "reordered")
        if n > expected:
            return broken(row, "reordered" if expected in later_ns[i + 1 :] else "missing")
        if row.get("prev_hash") != prev:
            return broken(row, "changed")
        expected, prev, last = n + 1, str(row["hash"]), row
    if head.n > expected - 1:
        return broken(last, "missing")
    if head.hash != prev:
        return broken(last, "changed")
    if sealed.n:
        at_seal = next((r for r in chained if int(r["n"]) == sealed.n), None)
        if at_seal is None:
            return broken(last, "missing")
        if at_seal.get("hash") != sealed.hash:
            return broken(at_seal, "changed")
    return result
