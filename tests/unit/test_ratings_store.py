"""Customer ratings (store/ratings.py) on moto: one item per rated turn, the closing rating at seq 0, erasure that
leaves nothing to count, and the outcome's re-derivation asked for only once an outcome was stored."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from support_agent.ids import new_conversation_id, ulid
from support_agent.store.ratelimit import RateLimiter, counter_key
from support_agent.store.ratings import CLOSING_SEQ, RatingStore, partition
from support_agent.store.turns import turn_ms
from tests.support.aws import create_tables
from tests.support.harness import FakeClock

TABLE = "ConversationsTable"
NOW = "2025-06-01T12:00:00Z"
_MS = iter(range(1_750_000_000_000, 1_760_000_000_000, 1000))


def new_turn_id() -> str:
    """A turn id of its own millisecond, as a conversation's turns are (one at a time, under its lease)."""
    return f"turn_{ulid(next(_MS))}"


@pytest.fixture
def ddb(aws: None) -> Iterator[Any]:
    client = boto3.client("dynamodb")
    create_tables(client)
    yield client


def _items(ddb: Any, cid: str) -> list[dict[str, Any]]:
    out = ddb.query(
        TableName=TABLE,
        KeyConditionExpression="conversation_id = :p",
        ExpressionAttributeValues={":p": {"S": partition(cid)}},
        ConsistentRead=True,
    )
    return list(out["Items"])


def test_a_thumb_is_one_item_per_turn_and_a_changed_vote_replaces_it(ddb: Any) -> None:
    store, cid = RatingStore(ddb, TABLE), new_conversation_id()
    first, second = new_turn_id(), new_turn_id()
    store.put_thumb(cid, first, "up", NOW)
    store.put_thumb(cid, first, "up", NOW)  # resent: still one item
    store.put_thumb(cid, second, "up", NOW)
    store.put_thumb(cid, second, "down", "2025-06-01T12:01:00Z")  # changed: the last one wins
    items = _items(ddb, cid)
    assert sorted(int(i["seq"]["N"]) for i in items) == sorted([turn_ms(first), turn_ms(second)])
    assert store.thumbs(cid) == {first: "up", second: "down"}
    assert store.closing(cid) is None
    assert not any("customer_id" in i or "updated_at" in i for i in items)  # by_customer never lists them


def test_the_closing_rating_is_seq_zero_stripped_and_replaced_by_a_later_one(ddb: Any) -> None:
    store, cid = RatingStore(ddb, TABLE), new_conversation_id()
    stored = store.put_closing(cid, 2, "  slow answers \n", NOW)
    assert (stored.score, stored.comment) == (2, "slow answers")
    store.put_closing(cid, 5, "", "2025-06-01T12:05:00Z")
    closing = store.closing(cid)
    assert closing is not None and (closing.score, closing.comment) == (5, "")
    (item,) = _items(ddb, cid)
    assert int(item["seq"]["N"]) == CLOSING_SEQ and "comment" not in item  # an empty comment is not stored
    with pytest.raises(ValueError):
        store.put_closing(cid, 6, "", NOW)
    with pytest.raises(ValueError):
        store.put_closing(cid, 3, "x" * 501, NOW)


def test_one_query_reads_thumbs_and_closing_of_that_conversation_only(ddb: Any) -> None:
    store, cid, other = RatingStore(ddb, TABLE), new_conversation_id(), new_conversation_id()
    turn = new_turn_id()
    store.put_thumb(cid, turn, "down", NOW)
    store.put_closing(cid, 4, "fine", NOW)
    store.put_thumb(other, new_turn_id(), "up", NOW)
    ratings = store.ratings(cid)
    assert ratings.thumbs == {turn: "down"}
    assert ratings.closing is not None and ratings.closing.score == 4


def test_erasure_removes_every_thumb_score_and_comment_and_is_idempotent(ddb: Any) -> None:
    store, cid = RatingStore(ddb, TABLE), new_conversation_id()
    store.put_thumb(cid, new_turn_id(), "up", NOW)
    store.put_thumb(cid, new_turn_id(), "down", NOW)
    store.put_closing(cid, 1, "my address is 1 Main St", NOW)
    assert store.erase(cid, "2025-06-02T00:00:00Z") == 3
    items = _items(ddb, cid)
    assert len(items) == 3
    for item in items:
        assert not {"thumb", "score", "comment"} & item.keys(), item
        assert item["erased_at"] == {"S": "2025-06-02T00:00:00Z"}
    assert store.ratings(cid).thumbs == {} and store.ratings(cid).closing is None
    assert store.erasure_updates(cid, NOW) == []  # nothing left: a second erasure writes nothing


def _header(ddb: Any, cid: str, **extra: Any) -> None:
    item = {"conversation_id": {"S": cid}, "seq": {"N": "0"}, "customer_id": {"N": "7"}, **extra}
    ddb.put_item(TableName=TABLE, Item=item)


def _get_header(ddb: Any, cid: str) -> dict[str, Any]:
    key = {"conversation_id": {"S": cid}, "seq": {"N": "0"}}
    return dict(ddb.get_item(TableName=TABLE, Key=key, ConsistentRead=True).get("Item", {}))


def test_a_revision_is_asked_only_of_a_conversation_whose_outcome_is_stored(ddb: Any) -> None:
    store, active, settled = RatingStore(ddb, TABLE), new_conversation_id(), new_conversation_id()
    _header(ddb, active)
    _header(ddb, settled, outcome_at={"S": NOW})
    assert store.request_revision(active, 1_750_000_000) is False
    assert not {"outcome_due", "quiet_check_at"} & _get_header(ddb, active).keys()
    assert store.request_revision(settled, 1_750_000_000) is True
    header = _get_header(ddb, settled)
    assert header["outcome_due"] == {"S": "1"} and header["quiet_check_at"] == {"N": "1750000000"}
    missing = new_conversation_id()
    assert store.request_revision(missing, 1_750_000_000) is False
    assert _get_header(ddb, missing) == {}  # never creates a header


def test_ratings_have_their_own_per_customer_counter(ddb: Any) -> None:
    clock = FakeClock()
    limiter = RateLimiter(ddb, TABLE, 2, clock, kind="ratings")
    assert [limiter.take(7), limiter.take(7)] == [1, 2]
    from support_agent.errors import RateLimited

    with pytest.raises(RateLimited):
        limiter.take(7)
    assert limiter.take(8) == 1
    assert counter_key(7, 5, "ratings") == "rate#ratings#7#5"
    assert RateLimiter(ddb, TABLE, 2, clock).take(7) == 1  # turns are counted apart
