"""The feed's cursor: opaque, bound to its conversation, and refused when it is not one of ours; and which
cancellations of a notifying transaction are a lost number (retried) rather than the writer's own failure."""

from __future__ import annotations

import base64
import json

import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.errors import InvalidRequest
from support_agent.feed import Cursor
from support_agent.store.dynamo import to_values
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


HUGE = 10**40  # more digits than a DynamoDB number holds: boto3's serializer raised decimal.Inexact (a bare 500)


@pytest.mark.parametrize("field", range(4))  # seq, index, ended, note
@pytest.mark.parametrize("value", [HUGE, 2**53, -HUGE])
def test_a_cursor_number_out_of_bounds_is_a_400(field: int, value: int) -> None:
    numbers = [1, 0, 0, 0]
    numbers[field] = value
    with pytest.raises(InvalidRequest, match="not a cursor of this feed"):
        Cursor.decode(_token([1, CID, *numbers]), CID)


def _queried(cursor: Cursor) -> None:
    """What the feed's reads put in DynamoDB expressions from a cursor: each must serialize (feed.py)."""
    to_values({":seq": max(cursor.seq - 1, 1), ":after": cursor.ended, ":note": max(cursor.note, 0)})


NUMBER = st.integers(min_value=-(2**140), max_value=2**140) | st.sampled_from([-1, 0, 1, 2**53 - 1, 2**53, HUGE])
FORGED = st.one_of(
    st.tuples(st.just(1), st.just(CID), NUMBER, NUMBER, NUMBER, NUMBER).map(list),
    st.lists(st.one_of(NUMBER, st.text(max_size=8), st.none(), st.booleans(), st.floats()), max_size=7),
).map(_token) | st.text(max_size=80)


@given(token=FORGED)
@settings(max_examples=300, deadline=None)
def test_any_forged_cursor_decodes_to_one_the_feed_can_query_or_is_a_400(token: str) -> None:
    try:
        cursor = Cursor.decode(token, CID)
    except InvalidRequest:
        return
    _queried(cursor)  # no decimal.Inexact / Rounded, nothing but a cursor the reads can use
    assert Cursor.decode(cursor.encode(), CID) == cursor


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
