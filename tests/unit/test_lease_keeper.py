"""The worker's lease renewal (agent/lifecycle.py LeaseKeeper) against moto: renewed while held, given up once the
lease is someone else's (the worker is fenced: its next write fails on the lease condition)."""

from __future__ import annotations

import time
from collections.abc import Callable

from support_agent.agent.lifecycle import LeaseKeeper
from support_agent.store.dynamo import to_item
from tests.support.harness import Harness

CID = "conv_01JLEASEKEEPERLEASEKEEPER"


def lease(h: Harness) -> tuple[str, int]:
    header = h.conversations.get_header(CID)
    assert header is not None
    return header.lease_owner, header.lease_expires_at


def wait_until(condition: Callable[[], bool], seconds: float = 10) -> bool:
    """Polls: the keeper's thread runs when the machine lets it (no timing is asserted)."""
    until = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > until:
            return False
        time.sleep(0.05)
    return True


def test_the_lease_is_renewed_while_held_and_given_up_once_taken(harness: Harness) -> None:
    h = harness
    item = {"conversation_id": CID, "seq": 0, "customer_id": 7, "next_seq": 1}
    h.ddb.put_item(
        TableName=h.settings.conversations_table,
        Item=to_item({**item, "lease_owner": "worker_1", "lease_expires_at": 1}),
    )
    with LeaseKeeper(h.conversations, CID, "worker_1", seconds=3) as keeper:
        assert wait_until(lambda: lease(h)[1] > 1)  # renewed (every third of the lease)
        assert lease(h)[0] == "worker_1"
        h.ddb.update_item(  # a sweep-restarted worker took the expired lease
            TableName=h.settings.conversations_table,
            Key=to_item({"conversation_id": CID, "seq": 0}),
            UpdateExpression="SET lease_owner = :o",
            ExpressionAttributeValues=to_item({":o": "worker_2"}),
        )
        assert wait_until(lambda: keeper.lost)
    assert lease(h)[0] == "worker_2"  # never taken back
