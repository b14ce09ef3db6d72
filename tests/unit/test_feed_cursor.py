"""The feed's cursor: opaque, bound to its conversation, and refused when it is not one of ours; and which
cancellations of a notifying transaction are a lost number (retried) rather than the writer's own failure."""

from __future__ import annotations

import base64
import json

import pytest
from botocore.exceptions import ClientError

from support_agent.api.feed import Cursor
from support_agent.errors import InvalidRequest
from support_agent.store.notifications import counter_only

CID = "conv_01JTESTTESTTESTTESTTESTTE"


def test_a_cursor_round_trips_and_names_its_conversation() -> None:
    cursor = Cursor(CID, seq=7, index=2, ended=1_800_000_000_123, note=4)
    assert Cursor.decode(cursor.encode(), CID) == cursor
    assert Cursor.decode(None, CID) == Cursor(CID) and Cursor.decode("", CID) == Cursor(CID)
    with pytest.raises(InvalidRequest, match="another conversation"):
        Cursor.decode(cursor.encode(), "conv_01JOTHEROTHEROTHEROTHEROT")


def _token(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "token",
    [
        "not base64 at all!",
        _token({"seq": 1}),
        _token([2, CID, 1, 0, 0, 0]),  # another version
        _token([1, CID, -1, 0, 0, 0]),
        _token([1, CID, 1, -2, 0, 0]),
        _token([1, CID, 1, 0, 0, -1]),
        _token([1, CID, "1", 0, 0, 0]),
        _token([1, CID, True, 0, 0, 0]),
        _token([1, CID, 1.5, 0, 0, 0]),
        _token([1, CID, 1, 0, 0]),
    ],
)
def test_anything_else_is_a_400(token: str) -> None:
    with pytest.raises(InvalidRequest):
        Cursor.decode(token, CID)


def _cancelled(*codes: str) -> ClientError:
    reasons = [{"Code": c} for c in codes]
    return ClientError(
        {"Error": {"Code": "TransactionCanceledException"}, "CancellationReasons": reasons}, "TransactWriteItems"
    )


def test_only_a_lost_number_is_retried() -> None:
    # The writer's two items, then the counter and the notification's put.
    assert counter_only(_cancelled("None", "None", "ConditionalCheckFailed", "None"), 2)
    assert counter_only(_cancelled("None", "None", "ConditionalCheckFailed", "ConditionalCheckFailed"), 2)
    assert not counter_only(_cancelled("ConditionalCheckFailed", "None", "ConditionalCheckFailed", "None"), 2)
    assert not counter_only(_cancelled("None", "None", "None", "ConditionalCheckFailed"), 2)
    assert not counter_only(_cancelled("None", "TransactionConflict", "ConditionalCheckFailed", "None"), 2)
    assert not counter_only(_cancelled(), 2)
    throttled = ClientError({"Error": {"Code": "ThrottlingException"}}, "TransactWriteItems")
    assert not counter_only(throttled, 0)
