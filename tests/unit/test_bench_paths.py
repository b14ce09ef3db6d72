"""bench/paths.py's and bench/paths_stack.py's arithmetic: the chain's bytes and write units, the hand-over's
split, and what handing a turn over adds in requests."""

from __future__ import annotations

from typing import Any

import pytest

from bench.paths import POLLER, ROW_CHAIN, chain_bytes, handover_added, transaction_units
from bench.paths_stack import split_handover


def test_chain_bytes_count_only_the_chain_attributes_names_and_values() -> None:
    item = {
        "stream": {"S": "conv_1"},
        "n": {"N": "12"},  # 1 + (2 digits + 1) // 2 + 1 = 3
        "hash": {"S": "a" * 64},  # 4 + 64
        "payload_hash": {"S": "b" * 64},  # 12 + 64
        "action": {"S": "tool_call"},
    }
    assert chain_bytes(item, ROW_CHAIN) == 3 + 68 + 76
    assert chain_bytes({"stream": {"S": "x"}}, ROW_CHAIN) == 0


@pytest.mark.parametrize(
    ("entries", "units"),
    [
        ([(700, 220)], (2.0, 2.0)),  # one KB either way, twice in a transaction
        ([(1100, 220)], (4.0, 2.0)),  # the chain takes the row over a KB
        ([(500, 0), (1030, 10)], (6.0, 4.0)),
        ([], (0.0, 0.0)),
    ],
)
def test_transaction_units_with_and_without_the_chain(
    entries: list[tuple[int, int]], units: tuple[float, float]
) -> None:
    assert transaction_units(entries) == units


def test_the_handover_is_split_at_the_worker_invocation_after_its_own_send() -> None:
    sends = [(0.5, "TurnQueue"), (1.0, "ApprovalQueue"), (1.010, "TurnQueue"), (2.0, "TurnQueue")]
    split = split_handover(1.0, sends, "TurnQueue", invokes=[0.9, 1.015], model_calls=[0.95, 1.115, 1.2])
    assert split == pytest.approx({"poller_ms": 5.0, "worker_ms": 100.0, "total_ms": 105.0})


def test_a_handover_never_seen_fails_loudly() -> None:
    with pytest.raises(StopIteration):
        split_handover(3.0, [(1.0, "TurnQueue")], "TurnQueue", [], [])


def _fn(invocations: int, **requests: int) -> dict[str, Any]:
    return {"invocations": invocations, "requests": {k.replace("_", ":"): v for k, v in requests.items()}}


def test_what_the_handover_adds_sums_chat_and_worker_and_counts_lambdas_poller() -> None:
    sync = {"ChatFunction": _fn(1, dynamodb_Query=2, dynamodb_TransactWriteItems=4), "AuditSealFunction": _fn(1)}
    handed = {
        "ChatFunction": _fn(1, dynamodb_TransactWriteItems=2, sqs_SendMessage=1),
        "TurnWorkerFunction": _fn(1, dynamodb_Query=3, dynamodb_TransactWriteItems=4),
        "EventsFunction": _fn(5, dynamodb_Query=15),  # the page's, not the turn's
    }
    rows = {api: (before, after) for api, before, after in handover_added(sync, handed)}
    assert rows == {
        "dynamodb:Query": (2, 3),
        "dynamodb:TransactWriteItems": (4, 6),
        "sqs:SendMessage": (0, 1),
        POLLER: (0, 2),
        "Lambda invocations": (1, 2),
    }
