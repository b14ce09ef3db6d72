"""Stored events pushed over the WebSocket (docs/API.md#websocket): what the HTTP feed would answer, sooner.

The Conversations table's stream says which conversations changed (its keys only); for each, every subscription
reads the feed after its stored cursor as its reader reads the HTTP feed (feed.py: the conversation's customer's
events, quiet mode included), so the socket never says more than the feed would.

A subscription's cursor is claimed before anything is posted: one conditional UpdateItem moves it from the value
read to the page's end. Two pushers of one conversation (records of its messages, turns and notifications come
from different shards; a subscribe's backlog runs beside the stream) may read the same page: only the one whose
claim lands posts it, the other reads again from where the winner stopped. So no event is posted twice, and none
is skipped: a post that fails (not a 410) gives the unsent rest back, moving the cursor back to the last event
delivered when nothing moved it since, and the next push sends it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from botocore.exceptions import ClientError

from support_agent import observability as obs
from support_agent.feed import PAGE_EVENTS, Cursor, Feed
from support_agent.ids import ULID_RE
from support_agent.sockets.connections import SUBSCRIPTION_PREFIX, ConnectionStore, Subscription, connection_key
from support_agent.sockets.push import Posted, Poster
from support_agent.store.dynamo import DynamoDBClient, error_code, from_item, to_item, to_values

logger = logging.getLogger(__name__)

CLAIM_ATTEMPTS = 5  # reads of one subscription per push: each lost claim means another pusher moved it on
# The items of a conversation's feed: its header and messages, its turn records, its notifications.
_FEED_KEY = re.compile(rf"^(?:turn#|note#)?(conv_{ULID_RE})$")
_CURSOR = {"#cur": "cursor"}  # a DynamoDB reserved word


def conversation_of(key: str) -> str | None:
    """The conversation a Conversations table key belongs to, when the item is one its feed reads."""
    match = _FEED_KEY.match(key)
    return match.group(1) if match else None


def touched(records: Iterable[dict[str, Any]]) -> list[str]:
    """The conversations a batch of stream records changed, each once, in the order first seen."""
    found: dict[str, None] = {}
    for record in records:
        cid = conversation_of(str(record.get("dynamodb", {}).get("Keys", {}).get("conversation_id", {}).get("S", "")))
        if cid is not None:
            found[cid] = None
    return list(found)


class Pusher:
    def __init__(
        self, connections: ConnectionStore, feed: Feed, poster: Poster, client: DynamoDBClient, table: str
    ) -> None:
        self.connections = connections
        self.poster = poster
        self._feed = feed
        self._db = client
        self._table = table  # ConnectionsTable: the subscriptions' cursors

    def push_conversation(self, conversation_id: str) -> int:
        """Each subscriber's new events; how many were posted. A read that fails (a throttle) raises."""
        subscribers = self.connections.subscribers(conversation_id)
        if not subscribers:
            return 0
        owner = self._feed.owner(conversation_id)
        if owner is None:
            return 0
        return sum(self.push(s, owner) for s in subscribers)

    def catch_up(self, subscription: Subscription) -> int:
        """A new subscription's backlog: the events after its cursor, through the same claims as the stream's."""
        owner = self._feed.owner(subscription.conversation_id)
        return 0 if owner is None else self.push(subscription, owner)

    def push(self, subscription: Subscription, owner: int) -> int:
        """The events after the subscription's cursor, claimed then posted in order; how many were posted."""
        cid, cursor, sent = subscription.conversation_id, subscription.cursor, 0
        for _ in range(CLAIM_ATTEMPTS):
            page = self._feed.read(Cursor.decode(cursor, cid), owner)
            end = page.cursor.encode()
            if end == cursor:
                return sent
            won, current = self._claim(subscription, cursor, end)
            if not won:
                if current is None:  # unsubscribed, or its connection ended
                    return sent
                cursor = current  # another pusher posted up to there: read on from it
                continue
            posted = self._post(subscription, page.events, cursor, end)
            sent += posted
            if posted < len(page.events) or len(page.events) < PAGE_EVENTS:
                return sent
            cursor = end
        return sent

    def _post(self, subscription: Subscription, events: list[dict[str, Any]], start: str, end: str) -> int:
        """Post the claimed events (``start`` to ``end``) in order; stop at a gone connection (marked by the
        poster) or a failed post (the rest given back). How many were posted."""
        cid, delivered = subscription.conversation_id, start
        for index, event in enumerate(events):
            message = {"type": "event", "conversationId": cid, "event": event}
            result = self.poster.post(subscription.connection_id, message)
            if result is Posted.GONE:
                return index
            if result is Posted.FAILED:
                obs.emit(obs.SOCKET_POSTS_FAILED)
                self._claim(subscription, end, delivered)
                return index
            delivered = str(event["cursor"])
        return len(events)

    def _claim(self, subscription: Subscription, old: str, new: str) -> tuple[bool, str | None]:
        """Move the subscription's cursor from ``old`` to ``new`` if it still holds ``old`` and is still followed.
        On a lost claim, also the cursor it holds now (None: no longer followed)."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key=to_item(
                    {
                        "pk": connection_key(subscription.connection_id),
                        "sk": SUBSCRIPTION_PREFIX + subscription.conversation_id,
                    }
                ),
                UpdateExpression="SET #cur = :new",
                ConditionExpression="#cur = :old AND conversation_id = :c",
                ExpressionAttributeNames=_CURSOR,
                ExpressionAttributeValues=to_values({":new": new, ":old": old, ":c": subscription.conversation_id}),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            item = from_item(exc.response.get("Item") or {})  # type: ignore[arg-type]
            if "conversation_id" not in item:
                return False, None
            return False, str(item["cursor"])
        return True, None


class StreamBatch:
    """One invocation's stream records: each conversation pushed once (the first of its records pushes what all of
    them stored), a record whose push raised failed alone (BatchProcessor's partial failure)."""

    def __init__(self, pusher: Pusher) -> None:
        self._pusher = pusher
        self._done: set[str] = set()

    def record(self, record: dict[str, Any]) -> None:
        for cid in touched([record]):
            if cid not in self._done:
                posted = self._pusher.push_conversation(cid)
                self._done.add(cid)
                logger.debug("pushed", extra={"conversation_id": cid, "events": posted})
