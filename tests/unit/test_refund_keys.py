"""The refund key's grammar has one owner (support_agent/refunds/keys.py), and every origin round-trips through it.

Second review, finding 3: three parsers disagreed (the webhook's knew no MCP key), so the same refund was found
by one reader and lost by another. Here each origin's key is built as its writer builds it and every reader's
mapping (webhook, reconciliation, audit) is the one module's; a static check keeps the grammar out of the rest.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.ids import APPROVAL_ID, CONVERSATION_ID
from support_agent.mcp.our_tools import server_key
from support_agent.refunds import keys
from support_agent.refunds.provider.port import ProviderRefund

PACKAGE = Path(__file__).resolve().parents[2] / "layers" / "common" / "support_agent"
CONVERSATION = "conv_01JZ0000000000000000000000"  # fixed ids: pytest-xdist workers must collect the same names
APPROVAL = "apr_01JZ0000000000000000000001"
MCP_KEY = server_key(7, "client-key-1")


def _refund(key: str, customer: str = "7") -> ProviderRefund:
    metadata = {"refund_key": key, "attempt": "1", "customer_id": customer}
    return ProviderRefund(id="re_1", status="succeeded", amount=100, currency="usd", metadata=metadata)


ORIGINS = {
    "chat_direct": (
        keys.direct_refund_key(CONVERSATION, 12, "toolu_01AbC-x"),
        keys.request_sk(CONVERSATION, 12, "toolu_01AbC-x"),
    ),
    "mcp_keyed": (MCP_KEY, keys.request_sk("mcp", 7, MCP_KEY.rsplit(":", 1)[1])),
    "approved": (APPROVAL, keys.approved_refund_sk(APPROVAL)),
}


@pytest.mark.parametrize("origin", list(ORIGINS))
def test_every_reader_finds_the_row_the_writer_wrote(origin: str) -> None:
    assert CONVERSATION_ID.match(CONVERSATION) and APPROVAL_ID.match(APPROVAL)
    key, sk = ORIGINS[origin]
    parsed = keys.parse(key)
    assert parsed is not None and parsed.key == key and parsed.ledger_sk == sk
    assert keys.ledger_sk(key) == sk
    assert _refund(key).ledger_row == (7, sk)  # the one reader of a refund's row: the webhook's, reconciliation's
    attempt = keys.attempt_key(key, 3)
    assert keys.split_attempt_key(attempt) == (key, 3) and len(attempt) <= keys.MAX_ATTEMPT_KEY_CHARS


def test_the_mcp_key_is_scoped_to_its_customer_and_hashes_the_clients_key() -> None:
    assert MCP_KEY.startswith("mcp:7:") and "client-key-1" not in MCP_KEY
    assert server_key(8, "client-key-1") != MCP_KEY
    parsed = keys.parse(MCP_KEY)
    assert parsed is not None and (parsed.origin, parsed.customer_id) == ("mcp", 7)
    # A refund whose metadata names another customer than its MCP key is none of ours.
    assert keys.ledger_row_of(MCP_KEY, "8") is None
    assert _refund(MCP_KEY, "8").ledger_row is None


@pytest.mark.parametrize(
    "key",
    [
        "",
        "re_dashboard",
        "conv_x:1:toolu_1",  # not a conversation id
        f"{CONVERSATION}:1",
        f"{CONVERSATION}:one:toolu_1",
        f"{CONVERSATION}:1:toolu#1",
        f"{CONVERSATION}:1:toolu_1:extra",
        "mcp:0:abc",  # customer ids start at 1
        "mcp:x:abc",
        "other:7:abc",
        "apr_notaulid",
    ],
)
def test_what_is_not_ours_maps_to_no_row(key: str) -> None:
    assert keys.parse(key) is None and keys.ledger_sk(key) is None
    assert _refund(key).ledger_row is None


def test_no_module_but_refunds_keys_spells_the_grammar() -> None:
    """The ledger row prefix, the key's separators and the attempt suffix are written in refunds/keys.py only."""
    spelled = re.compile(r"""["']REFUND#|\bkey\.split\(|\bkey\.rpartition\(|\{refund_key\}#\{""")
    offenders = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).as_posix() != "refunds/keys.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if spelled.search(line)
    ]
    assert offenders == []


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ULIDS = st.text(_CROCKFORD, min_size=26, max_size=26)
_CALL_IDS = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", min_size=1, max_size=128)


@settings(max_examples=300, deadline=None)
@given(
    origin=st.sampled_from(["direct", "mcp", "approved"]),
    ulid=_ULIDS,
    seq=st.integers(0, 999_999_999),
    customer=st.integers(1, 10**18 - 1),
    call_id=_CALL_IDS,
    client_key=st.text(min_size=1, max_size=255),
    attempt=st.integers(1, 10**6),
)
def test_parse_of_build_is_the_identity_for_every_origin(
    origin: str, ulid: str, seq: int, customer: int, call_id: str, client_key: str, attempt: int
) -> None:
    """parse(build(x)) == x: every origin's key, built as its writer builds it, parses back to its parts, maps to the
    row its writer wrote, and its attempt key splits back to it."""
    if origin == "direct":
        conversation = f"conv_{ulid}"
        key, sk = keys.direct_refund_key(conversation, seq, call_id), keys.request_sk(conversation, seq, call_id)
        expected = keys.RefundKey("direct", key, conversation, seq, call_id)
    elif origin == "mcp":
        key = server_key(customer, client_key)
        digest = key.rsplit(":", 1)[1]
        sk = keys.request_sk(keys.MCP_SCOPE, customer, digest)
        expected = keys.RefundKey("mcp", key, keys.MCP_SCOPE, customer, digest)
    else:
        key = f"apr_{ulid}"
        sk = keys.approved_refund_sk(key)
        expected = keys.RefundKey("approved", key, approval_id=key)
    assert keys.parse(key) == expected
    assert keys.ledger_sk(key) == sk
    assert keys.split_attempt_key(keys.attempt_key(key, attempt)) == (key, attempt)
