"""The refund key's grammar: the one module that builds, parses and maps it (every other module calls these).

A refund key is the identity of one refund, made from server-side values only; the payment provider stores it
(``metadata[refund_key]``) and the ledger row that owns it is found from it with one GetItem:

=============  ==============================================  ==========================================
origin         refund key                                       ledger row (CustomerData ``sk``)
=============  ==============================================  ==========================================
chat, direct   ``<conversation_id>:<seq>:<tool_use_id>``        ``REFUND#<conversation_id>#<seq>#<tool_use_id>``
MCP, keyed     ``mcp:<customer_id>:<sha256 of the client key>``  ``REFUND#mcp#<customer_id>#<sha256>``
approved       the approval id ``apr_<ULID>`` (chat or MCP)     ``REFUND#<approval id>``
=============  ==============================================  ==========================================

An MCP call's keys are ("mcp", customer id, hashed key) where the chat's are (conversation, seq, tool_use_id),
so one grammar serves both. The attempt key — the provider's ``Idempotency-Key`` — is ``<refund key>#<n>``.
Nothing here reads a table or imports the rest of the package: any layer may use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from support_agent.ids import APPROVAL_ID, CONVERSATION_ID

MCP_SCOPE = "mcp"  # the "conversation" part of an MCP call's keys
MAX_ATTEMPT_KEY_CHARS = 255  # Stripe's Idempotency-Key limit
LEDGER_PREFIX = "REFUND#"

Origin = Literal["direct", "mcp", "approved"]

_SEQ = re.compile(r"[0-9]{1,9}")
_CUSTOMER = re.compile(r"[1-9][0-9]{0,17}")
_CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")  # a tool_use id, or an MCP call's hashed key or fresh id


@dataclass(frozen=True)
class RefundKey:
    """A parsed refund key. ``scope``/``seq``/``call_id`` are a direct (chat or MCP) refund's call keys."""

    origin: Origin
    key: str
    scope: str = ""  # the conversation id, or "mcp"
    seq: int = 0  # the assistant message's seq, or (MCP) the customer id
    call_id: str = ""
    approval_id: str = ""

    @property
    def customer_id(self) -> int | None:
        """The customer an MCP key names (its seq part); None for the others, whose key names none."""
        return self.seq if self.origin == "mcp" else None

    @property
    def ledger_sk(self) -> str:
        if self.origin == "approved":
            return approved_refund_sk(self.approval_id)
        return request_sk(self.scope, self.seq, self.call_id)


def direct_refund_key(conversation_id: str, seq: int, tool_use_id: str) -> str:
    """A direct refund's key from its call's keys: the chat's (conversation, seq, tool_use_id), or an MCP call's
    ("mcp", customer id, hashed key) — see `mcp_refund_key`."""
    return f"{conversation_id}:{seq}:{tool_use_id}"


def mcp_refund_key(customer_id: int, key_digest: str) -> str:
    """``mcp:<customer_id>:<sha256 of the client's idempotency key>``: scoped to the customer, never the raw key."""
    return direct_refund_key(MCP_SCOPE, customer_id, key_digest)


def request_sk(scope: str, seq: int, call_id: str) -> str:
    """The CustomerData sort key of one refund tool call (its request row, and a direct refund's ledger row)."""
    return f"{LEDGER_PREFIX}{scope}#{seq}#{call_id}"


def requests_prefix(scope: str) -> str:
    """The sort-key prefix of every refund call of one conversation (or an MCP customer's, scope "mcp")."""
    return f"{LEDGER_PREFIX}{scope}#"


def approved_refund_sk(approval_id: str) -> str:
    """An approved refund's ledger row: its refund key is the approval id."""
    return f"{LEDGER_PREFIX}{approval_id}"


def parse(refund_key: str) -> RefundKey | None:
    """The refund key's parts, or None when it is none of ours (a dashboard refund, a forged metadata value)."""
    if not refund_key or "#" in refund_key:
        return None
    if APPROVAL_ID.match(refund_key):
        return RefundKey("approved", refund_key, approval_id=refund_key)
    parts = refund_key.split(":")
    if len(parts) != 3 or not _CALL_ID.fullmatch(parts[2]):
        return None
    scope, number, call_id = parts
    if scope == MCP_SCOPE:  # the number is the customer id (any the JWT may carry), not a message's seq
        return RefundKey("mcp", refund_key, scope, int(number), call_id) if _CUSTOMER.fullmatch(number) else None
    if CONVERSATION_ID.match(scope) and _SEQ.fullmatch(number):
        return RefundKey("direct", refund_key, scope, int(number), call_id)
    return None


def ledger_sk(refund_key: str) -> str | None:
    """The sort key of the ledger row owning ``refund_key`` (and its audit stream ``refund#<key>``), or None."""
    parsed = parse(refund_key)
    return parsed.ledger_sk if parsed else None


def ledger_row_of(refund_key: str, customer: str) -> tuple[int, str] | None:
    """(customer id, sort key) of the row a provider refund's metadata names — its ``refund_key`` and
    ``customer_id`` — or None when it names none of ours. An MCP key names its customer: a metadata customer
    that disagrees is none of ours."""
    parsed = parse(refund_key)
    if parsed is None or not _CUSTOMER.fullmatch(customer):
        return None
    if parsed.customer_id is not None and parsed.customer_id != int(customer):
        return None
    return int(customer), parsed.ledger_sk


def attempt_key(refund_key: str, attempt: int) -> str:
    """``<refund key>#<n>``: the idempotency key of attempt ``n`` (from 1) of a refund."""
    if not refund_key or "#" in refund_key:
        raise ValueError("a refund key is non-empty and has no '#'")
    if attempt < 1:
        raise ValueError("attempts count from 1")
    key = f"{refund_key}#{attempt}"
    if len(key) > MAX_ATTEMPT_KEY_CHARS:
        raise ValueError(f"an attempt key is at most {MAX_ATTEMPT_KEY_CHARS} characters")
    return key


def split_attempt_key(key: str) -> tuple[str, int]:
    """The refund key and attempt number of an attempt key; ValueError when it is not one."""
    refund_key, _, n = key.rpartition("#")
    if not n.isdigit() or not n.isascii():
        raise ValueError(f"not an attempt key: {key!r}")
    attempt_key(refund_key, int(n))  # validates the parts and the length
    return refund_key, int(n)
