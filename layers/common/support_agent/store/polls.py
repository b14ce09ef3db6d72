"""Waiting polls of the event feed, bounded per customer: the feed's concurrency is everyone's.

A poll with ``waitSeconds`` holds one EventsFunction execution for up to that long, and the function's reserved
concurrency (``EventsReservedConcurrency``) is shared by every customer: READS_PER_MINUTE alone let one customer
keep all of it waiting (60 polls a minute x 20 s = 20 at once). So a poll that would wait first takes one of its
customer's ``WAITS_PER_CUSTOMER`` **slots**, items ``poll#<customer id>`` / ``seq`` = 0 … WAITS_PER_CUSTOMER - 1 in
the Conversations table, by one conditional UpdateItem that succeeds only while the slot is free (never taken,
released, or past its ``expires_at``). A poll that finds every slot taken does not wait: it answers what is there
at once. The slot is released when its poll answers; one whose poll died (a timeout, a crash) frees itself at
``expires_at`` — the poll's wait plus HOLD_MARGIN, so a live poll never loses its slot — which is also the table's
TTL attribute, so released slots are deleted. No item here carries ``customer_id`` or ``updated_at`` (the
conversation list never shows one); EventsFunction may update only ``poll#`` and ``rate#reads#`` items
(LeadingKeys).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from botocore.exceptions import ClientError

from support_agent import observability as obs
from support_agent.store.dynamo import DynamoDBClient, is_conditional_failure, to_item, to_values, update_if

KEY_PREFIX = "poll#"
WAITS_PER_CUSTOMER = 2  # a customer's page and one more (another tab or device) wait at once
# How long a slot outlives its poll's wait: the last read after the wait's end, and the answer. 20 s (the longest
# wait) + 5 = EventsFunction's timeout, past which no poll holds its slot.
HOLD_MARGIN = 5


def partition(customer_id: int | str) -> str:
    """A customer's slots (their id), or a staff member's (``staff:<sub>``, api/events_routes.py)."""
    return f"{KEY_PREFIX}{customer_id}"


@dataclass(frozen=True)
class Slot:
    customer_id: int | str
    index: int
    holder: str  # this poll's own token: only it releases the slot


class PollSlots:
    """At most ``per_customer`` waiting polls per customer."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        per_customer: int = WAITS_PER_CUSTOMER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = client
        self._table = table
        self.per_customer = per_customer
        self._clock = clock

    def take(self, customer_id: int | str, wait_seconds: float) -> Slot | None:
        """A free slot of the customer's, held until the wait (plus HOLD_MARGIN) has passed; None when every one
        is held (the poll must not wait)."""
        now = self._clock()
        holder = uuid.uuid4().hex
        for index in range(self.per_customer):
            if update_if(
                self._db,
                TableName=self._table,
                Key=to_item({"conversation_id": partition(customer_id), "seq": index}),
                UpdateExpression="SET holder = :me, expires_at = :until",
                ConditionExpression="attribute_not_exists(expires_at) OR expires_at <= :now",
                ExpressionAttributeValues=to_values(
                    {":me": holder, ":until": math.ceil(now + wait_seconds + HOLD_MARGIN), ":now": math.floor(now)}
                ),
            ):
                return Slot(customer_id, index, holder)
            # held by another poll of the customer's: the next one
        return None

    def release(self, slot: Slot) -> None:
        """Free ``slot`` now, if it is still this poll's (past its expiry another poll may hold it). A release that
        fails is only logged: the slot frees itself at its ``expires_at``."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key=to_item({"conversation_id": partition(slot.customer_id), "seq": slot.index}),
                UpdateExpression="SET expires_at = :now REMOVE holder",
                ConditionExpression="holder = :me",
                ExpressionAttributeValues=to_values({":me": slot.holder, ":now": math.floor(self._clock())}),
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                obs.logger.warning("poll_slot_not_released", extra={"event": "poll_slot_not_released"})

    @contextmanager
    def waiting(self, customer_id: int | str, wait_seconds: float) -> Iterator[float]:
        """The seconds a poll may wait: ``wait_seconds`` while it holds a slot (released when the block ends), 0
        when the customer's slots are all held. A poll that does not wait takes none."""
        slot = self.take(customer_id, wait_seconds) if wait_seconds > 0 else None
        try:
            yield wait_seconds if slot is not None else 0
        finally:
            if slot is not None:
                self.release(slot)

    def held(self, customer_id: int | str) -> int:
        """How many of the customer's slots are held now (tests, operations)."""
        now = self._clock()
        out = self._db.query(
            TableName=self._table,
            KeyConditionExpression="conversation_id = :c",
            ExpressionAttributeValues=to_values({":c": partition(customer_id)}),
            ConsistentRead=True,
        )
        return sum(1 for i in out.get("Items", []) if "holder" in i and int(i["expires_at"]["N"]) > now)
