"""The WebSocket's state in ConnectionsTable: tickets, connections, their subscriptions and per-owner counts.

Every item expires by TTL (``expires_at``) and none is ever deleted (no role holds DeleteItem): a used ticket keeps
``used_at``, an ended connection ``ended`` (with ``disconnected_at`` or ``gone_at``), an ended subscription loses
its ``conversation_id`` and with it its place in the sparse ``subscribers`` index. A connection is counted against
its owner once and given back once (the ``ended`` condition), whether $disconnect or a 410 ends it first.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from support_agent.auth import Principal
from support_agent.store.dynamo import DynamoDBClient, error_code, from_item, to_item, to_values

TICKET_SECONDS = 60  # a ticket is worth nothing once a logged URL could be replayed
CONNECTION_SECONDS = 2 * 3600 + 300  # API Gateway closes a connection at 2 h; its items outlive it a little
CONNECTION_SK = "conn"
TICKET_SK = "ticket"
OWNER_SK = "connections"
SUBSCRIPTION_PREFIX = "sub#"
INDEX = "subscribers"


class TooManyConnections(Exception):
    """The owner holds SocketConnectionsPerOwner open connections already."""


class TooManySubscriptions(Exception):
    """The connection follows SocketSubscriptionsPerConnection conversations already."""


class NotConnected(Exception):
    """The connection is not stored, or has ended."""


def ticket_key(ticket: str) -> str:
    """Only the ticket's hash is stored: a table read never yields a ticket that could still be used."""
    return "ticket#" + hashlib.sha256(ticket.encode()).hexdigest()


def connection_key(connection_id: str) -> str:
    return f"conn#{connection_id}"


def owner_key(owner: str) -> str:
    return f"owner#{owner}"


def owner_of(principal: Principal) -> str:
    """Whose connections count together: a customer's across their devices, a person's by their sub."""
    if principal.role == "customer":
        return f"customer:{principal.customer_id}"
    return f"staff:{principal.sub}"


@dataclass(frozen=True)
class Connection:
    connection_id: str
    principal: Principal
    owner: str
    connected_at: int
    expires_at: int
    subscriptions: int = 0
    ended: bool = False


@dataclass(frozen=True)
class Subscription:
    connection_id: str
    conversation_id: str
    cursor: str


class ConnectionStore:
    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        connections_per_owner: int = 5,
        subscriptions_per_connection: int = 10,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = client
        self._table = table
        self._per_owner = connections_per_owner
        self._per_connection = subscriptions_per_connection
        self._clock = clock

    def _now(self) -> int:
        return int(self._clock())

    def _update(self, pk: str, sk: str, expression: str, condition: str, values: dict[str, Any], **kw: Any) -> bool:
        """One conditional UpdateItem; False when its condition failed."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key=to_item({"pk": pk, "sk": sk}),
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeValues=to_values(values),
                **kw,
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    # -- tickets ---------------------------------------------------------------------------------------------

    def issue_ticket(self, principal: Principal) -> str:
        """A single-use ticket for ``principal``, good for TICKET_SECONDS: 43 URL-safe characters (256 bits)."""
        ticket = secrets.token_urlsafe(32)
        now = self._now()
        item = {
            "pk": ticket_key(ticket),
            "sk": TICKET_SK,
            "sub": principal.sub,
            "role": principal.role,
            "customer_id": principal.customer_id,
            "name": principal.name or None,
            "issued_at": now,
            "expires_at": now + TICKET_SECONDS,
        }
        self._db.put_item(TableName=self._table, Item=to_item(item), ConditionExpression="attribute_not_exists(pk)")
        return ticket

    def consume_ticket(self, ticket: str | None) -> Principal | None:
        """The principal a ticket was issued to, once: None for a missing, unknown, expired or used one."""
        if not ticket or len(ticket) > 128:
            return None
        now = self._now()
        try:
            out = self._db.update_item(
                TableName=self._table,
                Key=to_item({"pk": ticket_key(ticket), "sk": TICKET_SK}),
                UpdateExpression="SET used_at = :now",
                ConditionExpression="attribute_exists(pk) AND attribute_not_exists(used_at) AND expires_at > :now",
                ExpressionAttributeValues=to_values({":now": now}),
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return None
            raise
        values = from_item(out["Attributes"])
        customer_id = values.get("customer_id")
        return Principal(
            str(values["sub"]),
            values["role"],
            None if customer_id is None else int(customer_id),
            values.get("name", ""),
        )

    # -- connections -----------------------------------------------------------------------------------------

    def connect(self, connection_id: str, principal: Principal) -> Connection:
        """Store the connection, counted against its owner; TooManyConnections over the limit."""
        now = self._now()
        connection = Connection(connection_id, principal, owner_of(principal), now, now + CONNECTION_SECONDS)
        self._take_slot(connection.owner, now, connection.expires_at)
        item = {
            "pk": connection_key(connection_id),
            "sk": CONNECTION_SK,
            "owner": connection.owner,
            "sub": principal.sub,
            "role": principal.role,
            "customer_id": principal.customer_id,
            "name": principal.name or None,
            "connected_at": now,
            "subscriptions": 0,
            "expires_at": connection.expires_at,
        }
        try:
            self._db.put_item(TableName=self._table, Item=to_item(item), ConditionExpression="attribute_not_exists(pk)")
        except Exception:
            self._give_slot(connection.owner)  # the count follows what is stored
            raise
        return connection

    def _take_slot(self, owner: str, now: int, expires_at: int) -> None:
        """One more of the owner's connections, under the limit. A count whose ``expires_at`` has passed counts
        connections API Gateway has closed by now (a lost $disconnect): it starts again at one."""
        key, counted = owner_key(owner), {":one": 1, ":exp": expires_at}
        if self._update(
            key,
            OWNER_SK,
            "SET #n = if_not_exists(#n, :zero) + :one, expires_at = :exp",
            "attribute_not_exists(#n) OR #n < :limit",
            {**counted, ":zero": 0, ":limit": self._per_owner},
            ExpressionAttributeNames={"#n": "count"},
        ):
            return
        if not self._update(
            key,
            OWNER_SK,
            "SET #n = :one, expires_at = :exp",
            "expires_at < :now",
            {**counted, ":now": now},
            ExpressionAttributeNames={"#n": "count"},
        ):
            raise TooManyConnections(owner)

    def _give_slot(self, owner: str) -> None:
        self._update(
            owner_key(owner),
            OWNER_SK,
            "ADD #n :minus",
            "#n > :zero",
            {":minus": -1, ":zero": 0},
            ExpressionAttributeNames={"#n": "count"},
        )

    def get(self, connection_id: str) -> Connection | None:
        out = self._db.get_item(
            TableName=self._table,
            Key=to_item({"pk": connection_key(connection_id), "sk": CONNECTION_SK}),
            ConsistentRead=True,
        )
        if "Item" not in out:
            return None
        v = from_item(out["Item"])
        customer_id = v.get("customer_id")
        principal = Principal(
            str(v["sub"]), v["role"], None if customer_id is None else int(customer_id), v.get("name", "")
        )
        return Connection(
            connection_id,
            principal,
            str(v["owner"]),
            int(v["connected_at"]),
            int(v["expires_at"]),
            int(v.get("subscriptions", 0)),
            bool(v.get("ended", False)),
        )

    def disconnect(self, connection_id: str) -> None:
        """$disconnect: the connection ends, its owner's count freed, its subscriptions out of the index."""
        self._end(connection_id, "disconnected_at")

    def mark_gone(self, connection_id: str) -> None:
        """A post answered 410: the client is gone though $disconnect may not have arrived (it is best effort)."""
        self._end(connection_id, "gone_at")

    def _end(self, connection_id: str, mark: str) -> None:
        try:
            out = self._db.update_item(
                TableName=self._table,
                Key=to_item({"pk": connection_key(connection_id), "sk": CONNECTION_SK}),
                UpdateExpression=f"SET ended = :true, {mark} = :now",
                ConditionExpression="attribute_exists(pk) AND attribute_not_exists(ended)",
                ExpressionAttributeValues=to_values({":true": True, ":now": self._now()}),
                ReturnValues="ALL_NEW",
            )
            self._give_slot(str(from_item(out["Attributes"])["owner"]))
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
        for sk in self._subscription_keys(connection_id):  # again after an earlier end: a racing subscribe's
            self._drop(connection_id, sk)

    # -- subscriptions ---------------------------------------------------------------------------------------

    def subscribe(self, connection: Connection, conversation_id: str, cursor: str) -> None:
        """Follow ``conversation_id`` from ``cursor``; following it again moves the cursor and counts nothing."""
        pk, sk = connection_key(connection.connection_id), SUBSCRIPTION_PREFIX + conversation_id
        now = self._now()
        values = {":c": conversation_id, ":cursor": cursor, ":now": now}
        if self._update(pk, sk, "SET #cur = :cursor, subscribed_at = :now", "conversation_id = :c", values, **_CURSOR):
            return
        if not self._update(
            pk,
            CONNECTION_SK,
            "ADD subscriptions :one",
            "attribute_exists(pk) AND attribute_not_exists(ended) AND subscriptions < :limit",
            {":one": 1, ":limit": self._per_connection},
        ):
            current = self.get(connection.connection_id)
            if current is None or current.ended:
                raise NotConnected(connection.connection_id)
            raise TooManySubscriptions(connection.connection_id)
        item = {
            "pk": pk,
            "sk": sk,
            "conversation_id": conversation_id,
            "cursor": cursor,
            "subscribed_at": now,
            "expires_at": connection.expires_at,
        }
        try:
            self._db.put_item(
                TableName=self._table, Item=to_item(item), ConditionExpression="attribute_not_exists(conversation_id)"
            )
        except ClientError as exc:  # a racing subscribe of the same conversation stored it: one count is enough
            self._uncount(pk)
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    def unsubscribe(self, connection_id: str, conversation_id: str) -> bool:
        """Stop following; False when it was not followed."""
        if not self._drop(connection_id, SUBSCRIPTION_PREFIX + conversation_id):
            return False
        self._uncount(connection_key(connection_id))
        return True

    def _drop(self, connection_id: str, sk: str) -> bool:
        return self._update(
            connection_key(connection_id),
            sk,
            "REMOVE conversation_id SET unsubscribed_at = :now",
            "attribute_exists(conversation_id)",
            {":now": self._now()},
        )

    def _uncount(self, pk: str) -> None:
        self._update(pk, CONNECTION_SK, "ADD subscriptions :minus", "subscriptions > :zero", {":minus": -1, ":zero": 0})

    def _subscription_keys(self, connection_id: str) -> Iterator[str]:
        query: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :sub)",
            "FilterExpression": "attribute_exists(conversation_id)",
            "ProjectionExpression": "sk",
            "ExpressionAttributeValues": to_values({":pk": connection_key(connection_id), ":sub": SUBSCRIPTION_PREFIX}),
        }
        while True:
            out = self._db.query(**query)
            yield from (str(from_item(item)["sk"]) for item in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return
            query["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def subscribers(self, conversation_id: str) -> list[Subscription]:
        """The live connections following ``conversation_id``: an ended one's subscriptions have left the index."""
        query: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": INDEX,
            "KeyConditionExpression": "conversation_id = :c",
            "ExpressionAttributeValues": to_values({":c": conversation_id}),
        }
        found: list[Subscription] = []
        while True:
            out = self._db.query(**query)
            for item in out.get("Items", []):
                v = from_item(item)
                found.append(Subscription(str(v["pk"]).removeprefix("conn#"), conversation_id, str(v["cursor"])))
            if "LastEvaluatedKey" not in out:
                return found
            query["ExclusiveStartKey"] = out["LastEvaluatedKey"]


_CURSOR = {"ExpressionAttributeNames": {"#cur": "cursor"}}  # `cursor` is a DynamoDB reserved word
