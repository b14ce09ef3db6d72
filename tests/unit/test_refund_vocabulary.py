"""The customers' one vocabulary: every state we write has exactly the word docs/PAYMENTS.md gives it."""

from __future__ import annotations

from typing import get_args

import pytest

from support_agent.refunds.vocabulary import CustomerRefundStatus, LedgerStatus, customer_status
from support_agent.store.approvals import STATUSES


@pytest.mark.parametrize(
    ("stored", "word"),
    [
        # approvals
        ("PENDING", "PENDING_APPROVAL"),
        ("APPROVED", "REFUND_IN_PROGRESS"),
        ("SETTLING", "REFUND_IN_PROGRESS"),
        ("REFUNDED", "REFUNDED"),
        ("FAILED", "FAILED"),
        ("REJECTED", "REJECTED"),
        ("EXPIRED", "EXPIRED"),
        ("RELEASED", "RELEASED"),
        # ledger rows (SETTLING and FAILED above mean the same for both)
        ("REQUESTED", "REFUND_IN_PROGRESS"),
        ("SUCCEEDED", "REFUNDED"),
        # an approval request row as the refund tool wrote it
        ("PENDING_APPROVAL", "PENDING_APPROVAL"),
    ],
)
def test_each_state_has_its_word(stored: str, word: str) -> None:
    assert customer_status(stored) == word


def test_every_approval_and_ledger_state_is_covered_and_every_word_is_reachable() -> None:
    words = set(get_args(CustomerRefundStatus))
    states = set(STATUSES) | set(get_args(LedgerStatus))
    mapped = {s: customer_status(s) for s in states}
    assert None not in mapped.values(), mapped
    assert set(mapped.values()) == words
    assert words == {"PENDING_APPROVAL", "REFUND_IN_PROGRESS", "REFUNDED", "REJECTED", "EXPIRED", "FAILED", "RELEASED"}


@pytest.mark.parametrize("stored", [None, "", "pending", "succeeded", "REFUND"])
def test_what_we_never_write_has_no_word(stored: str | None) -> None:
    """Not a guess: the provider's lower-case words or a typo are not the customers' vocabulary."""
    assert customer_status(stored) is None


def test_settling_is_an_approval_state() -> None:
    assert STATUSES.index("APPROVED") < STATUSES.index("SETTLING") < STATUSES.index("REFUNDED")
