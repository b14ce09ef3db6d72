"""The event feed's waiting slots (store/polls.py): at most WAITS_PER_CUSTOMER waiting polls per customer, each
slot freed when its poll answers or, when the poll died holding it, once its wait is over."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from support_agent.store.polls import HOLD_MARGIN, WAITS_PER_CUSTOMER, PollSlots, Slot, partition
from tests.support.aws import create_tables, serialised_moto
from tests.support.harness import FakeClock
from tests.support.threads import run_together
from tests.unit.test_ratelimit import Tables


@pytest.fixture
def tables(aws: None) -> Iterator[Tables]:
    """The template's tables on moto and a fake clock."""
    ddb = boto3.client("dynamodb")
    create_tables(ddb)
    yield Tables(ddb, FakeClock())


def slots(t: Tables, per_customer: int = WAITS_PER_CUSTOMER) -> PollSlots:
    return PollSlots(t.ddb, t.conversations_table, per_customer, t.clock)


def item(t: Tables, slot: Slot) -> dict[str, Any]:
    key = {"conversation_id": {"S": partition(slot.customer_id)}, "seq": {"N": str(slot.index)}}
    return dict(t.ddb.get_item(TableName=t.conversations_table, Key=key, ConsistentRead=True)["Item"])


def test_a_customer_holds_at_most_its_slots_and_another_customer_has_its_own(tables: Tables) -> None:
    s = slots(tables)
    held = [s.take(7, 20) for _ in range(WAITS_PER_CUSTOMER)]
    assert all(held) and len({h.index for h in held if h}) == WAITS_PER_CUSTOMER
    assert s.take(7, 20) is None  # every slot held: this poll must not wait
    assert s.take(8, 20) is not None  # another customer still waits
    assert (s.held(7), s.held(8)) == (WAITS_PER_CUSTOMER, 1)
    first = held[0]
    assert first is not None
    s.release(first)
    assert s.held(7) == WAITS_PER_CUSTOMER - 1 and s.take(7, 20) is not None


def test_a_dead_polls_slot_frees_itself_once_its_wait_is_over(tables: Tables) -> None:
    """A poll that crashed (or timed out) never releases: its slot expires at the wait plus HOLD_MARGIN, a time
    that is also the table's TTL attribute; not a second earlier, so a live poll never loses it."""
    s = slots(tables, per_customer=1)
    dead = s.take(7, 20)
    assert dead is not None
    row = item(tables, dead)
    assert int(row["expires_at"]["N"]) == int(tables.clock()) + 20 + HOLD_MARGIN
    assert "customer_id" not in row and "updated_at" not in row  # never in the conversation list
    tables.clock.advance(20 + HOLD_MARGIN - 1)
    assert s.take(7, 20) is None
    tables.clock.advance(1)
    alive = s.take(7, 20)
    assert alive is not None
    s.release(dead)  # the dead poll's late release does not free the slot another poll now holds
    assert s.held(7) == 1 and s.take(7, 20) is None
    s.release(alive)
    assert s.held(7) == 0


def test_waiting_gives_the_wait_with_a_slot_and_none_without(tables: Tables) -> None:
    s = slots(tables, per_customer=1)
    with s.waiting(7, 20) as first:
        assert first == 20 and s.held(7) == 1
        with s.waiting(7, 20) as second:
            assert second == 0 and s.held(7) == 1  # answers at once, takes nothing
        with s.waiting(7, 0) as no_wait:
            assert no_wait == 0
    assert s.held(7) == 0
    with pytest.raises(RuntimeError), s.waiting(7, 20):
        raise RuntimeError("the poll failed")
    assert s.held(7) == 0  # released on the way out of a failure too


def test_concurrent_polls_take_each_slot_once(tables: Tables) -> None:
    s = slots(tables)
    got: list[Slot | None] = []
    with serialised_moto():
        run_together([lambda: got.append(s.take(7, 20))] * 8, timeout=None)
    taken = [g for g in got if g is not None]
    assert len(got) == 8 and sorted(g.index for g in taken) == list(range(WAITS_PER_CUSTOMER))


def test_the_slots_expiry_is_the_tables_ttl_attribute(sam: dict[str, Any]) -> None:
    ttl = sam["Resources"]["ConversationsTable"]["Properties"]["TimeToLiveSpecification"]
    assert ttl == {"AttributeName": "expires_at", "Enabled": True}
