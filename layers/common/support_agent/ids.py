"""Server-generated identifiers: ULIDs, so keys sort by time and never come from the model."""

from __future__ import annotations

import os
import re
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ULID_RE = r"[0-9A-HJKMNP-TV-Z]{26}"
CONVERSATION_ID = re.compile(rf"^conv_{ULID_RE}$")
APPROVAL_ID = re.compile(rf"^apr_{ULID_RE}$")


def ulid(now_ms: int | None = None) -> str:
    """A 26-character ULID: 48 bits of milliseconds, 80 random bits from the OS."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    out = []
    for _ in range(26):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_conversation_id() -> str:
    return f"conv_{ulid()}"


def new_approval_id() -> str:
    return f"apr_{ulid()}"


def new_request_id() -> str:
    return f"req_{ulid()}"
