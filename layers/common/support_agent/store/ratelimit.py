"""Per-customer rate limits: one DynamoDB counter per customer, per kind, per clock minute.

The counters live in the Conversations table (no extra table, and the chat role already holds
UpdateItem there) under ``conversation_id = "rate#<customer_id>#<epoch minute>"`` for chat turns and
``"rate#reads#<customer_id>#<epoch minute>"`` for conversation reads (``rate#mcp#…`` for MCP tool
calls, ``rate#ratings#…`` for customer ratings), ``seq = 0``: separate keys, so reading a conversation never
costs a turn. A counter carries neither ``customer_id`` nor ``updated_at``, so the ``by_customer`` index (the
conversation list) never sees it, and ``expires_at`` lets the table's TTL remove it. One conditional ``ADD`` both
checks and counts, so concurrent requests cannot overshoot the limit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Literal

from botocore.exceptions import ClientError

from support_agent.errors import RateLimited
from support_agent.store.dynamo import DynamoDBClient, is_conditional_failure, to_item, to_values

KEY_PREFIX = "rate#"
# How long a window's counter outlives the window (TTL deletes lazily, within days; reads never see it).
KEEP_SECONDS = 3600

Kind = Literal["turns", "reads", "mcp", "ratings"]
_SCOPE: dict[Kind, str] = {"turns": "", "reads": "reads#", "mcp": "mcp#", "ratings": "ratings#"}


def counter_key(customer_id: int | str, minute: int, kind: Kind = "turns") -> str:
    """A customer's counter (their id), or a staff member's reads (``staff:<sub>``, api/events_routes.py)."""
    return f"{KEY_PREFIX}{_SCOPE[kind]}{customer_id}#{minute}"


def retry_after(now: float) -> int:
    """Whole seconds until the next minute starts: at least 1, at most 60."""
    return max(1, math.ceil((math.floor(now / 60) + 1) * 60 - now))


class RateLimiter:
    """At most ``per_minute`` requests of one ``kind`` per customer per clock minute."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        per_minute: int,
        clock: Callable[[], float] = time.time,
        *,
        kind: Kind = "turns",
    ) -> None:
        self._db = client
        self._table = table
        self.per_minute = per_minute
        self._clock = clock
        self.kind = kind

    def take(self, customer_id: int | str) -> int:
        """Count one request for the customer in this minute; returns the count, or raises 429 ``rate_limited``."""
        now = self._clock()
        minute = math.floor(now / 60)
        try:
            out = self._db.update_item(
                TableName=self._table,
                Key=to_item({"conversation_id": counter_key(customer_id, minute, self.kind), "seq": 0}),
                UpdateExpression="ADD #n :one SET expires_at = if_not_exists(expires_at, :exp)",
                ConditionExpression="attribute_not_exists(#n) OR #n < :limit",
                ExpressionAttributeNames={"#n": "count"},
                ExpressionAttributeValues=to_values(
                    {":one": 1, ":limit": self.per_minute, ":exp": (minute + 1) * 60 + KEEP_SECONDS}
                ),
                ReturnValues="UPDATED_NEW",
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            raise RateLimited(
                f"more than {self.per_minute} {self.kind} in a minute; try again shortly", retry_after=retry_after(now)
            ) from None
        return int(out["Attributes"]["count"]["N"])
