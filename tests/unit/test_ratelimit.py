"""The per-customer turn limit: a conditional DynamoDB counter per customer per clock minute."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from support_agent.contract import status_and_code
from support_agent.errors import RateLimited
from support_agent.store.ratelimit import KEEP_SECONDS, RateLimiter, counter_key, retry_after
from tests.support.aws import create_tables
from tests.support.harness import FakeClock, Harness
from tests.support.scripted import answer

MINUTE = 1_800_000_000 // 60  # the harness clock starts on a minute boundary (1_800_000_000 = 60 * 30_000_000)


@dataclass
class Tables:
    """Just the template's tables on moto and a fake clock: cheaper than the whole turn harness."""

    ddb: Any
    clock: FakeClock
    conversations_table: str = "ConversationsTable"


@pytest.fixture
def tables(aws: None) -> Iterator[Tables]:
    ddb = boto3.client("dynamodb")
    create_tables(ddb)
    yield Tables(ddb, FakeClock())


def limiter(t: Tables | Harness, limit: int = 3) -> RateLimiter:
    table = t.settings.conversations_table if isinstance(t, Harness) else t.conversations_table
    return RateLimiter(t.ddb, table, limit, t.clock)


def counter(t: Tables, customer_id: int, minute: int) -> dict[str, Any] | None:
    key = {"conversation_id": {"S": counter_key(customer_id, minute)}, "seq": {"N": "0"}}
    return t.ddb.get_item(TableName=t.conversations_table, Key=key, ConsistentRead=True).get("Item")


def test_counts_up_to_the_limit_then_refuses(tables: Tables) -> None:
    rl = limiter(tables, 3)
    tables.clock.advance(15)
    assert [rl.take(7) for _ in range(3)] == [1, 2, 3]
    with pytest.raises(RateLimited) as err:
        rl.take(7)
    assert (*status_and_code(err.value), err.value.retry_after) == (429, "rate_limited", 45)
    item = counter(tables, 7, MINUTE)
    assert item is not None
    assert item["count"] == {"N": "3"}  # a refused turn is not counted
    assert item["expires_at"] == {"N": str((MINUTE + 1) * 60 + KEEP_SECONDS)}
    # Nothing that would put it in the by_customer index (the conversation list).
    assert "customer_id" not in item and "updated_at" not in item


def test_a_new_minute_starts_a_new_counter(tables: Tables) -> None:
    rl = limiter(tables, 2)
    tables.clock.advance(59.5)
    rl.take(7)
    rl.take(7)
    with pytest.raises(RateLimited) as err:
        rl.take(7)
    assert err.value.retry_after == 1  # half a second left: rounded up, never 0
    tables.clock.advance(0.5)  # exactly the next minute's first instant
    assert rl.take(7) == 1
    assert counter(tables, 7, MINUTE + 1) is not None


def test_other_customers_are_unaffected(tables: Tables) -> None:
    rl = limiter(tables, 1)
    rl.take(7)
    with pytest.raises(RateLimited):
        rl.take(7)
    assert rl.take(8) == 1
    assert rl.take(9) == 1


@pytest.mark.parametrize(
    ("now", "expected"),
    [(600.0, 60), (600.001, 60), (629.5, 31), (659.0, 1), (659.999, 1), (1_800_000_059.2, 1)],
)
def test_retry_after_is_the_seconds_to_the_next_minute(now: float, expected: int) -> None:
    assert retry_after(now) == expected
    assert 1 <= retry_after(now) <= 60


def test_counters_never_show_up_as_conversations(harness: Harness) -> None:
    rl = limiter(harness, 3)
    rl.take(7)
    harness.model.script = [answer("Hello Dana.")]
    result = harness.turn("hi")
    rl.take(7)
    headers, _ = harness.conversations.list_for_customer(7)
    assert [h.conversation_id for h in headers] == [result.conversation_id]


def test_fake_clock_starts_on_a_minute_boundary() -> None:
    assert FakeClock().t == MINUTE * 60
