"""The Conversations table: a header item (seq 0) and one item per stored message.

The header carries the owner, the lease that serialises turns, the next sequence number and the
token totals. Every append is one TransactWriteItems conditioned on holding the lease and on the
expected sequence, so two writers can never interleave and a lost lease is noticed at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from support_agent.errors import Conflict, NotFound
from support_agent.messages import Message, Usage
from support_agent.store.dynamo import (
    DynamoDBClient,
    dumps,
    from_item,
    is_conditional_failure,
    to_item,
    to_values,
)


@dataclass(frozen=True)
class Header:
    conversation_id: str
    customer_id: int
    created_at: str
    updated_at: str
    next_seq: int
    usage: Usage
    title: str = ""


@dataclass(frozen=True)
class StoredMessage:
    seq: int
    role: str
    content: list[dict[str, Any]]
    created_at: str

    def as_message(self) -> Message:
        return {"role": self.role, "content": self.content}


def _header(values: dict[str, Any]) -> Header:
    return Header(
        conversation_id=values["conversation_id"],
        customer_id=int(values["customer_id"]),
        created_at=values.get("created_at", ""),
        updated_at=values.get("updated_at", ""),
        next_seq=int(values.get("next_seq", 1)),
        usage=Usage(
            int(values.get("input_tokens", 0)),
            int(values.get("output_tokens", 0)),
            int(values.get("cache_read_input_tokens", 0)),
            int(values.get("cache_creation_input_tokens", 0)),
        ),
        title=values.get("title", ""),
    )


class ConversationStore:
    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._db = client
        self._table = table

    def _key(self, conversation_id: str, seq: int = 0) -> dict[str, Any]:
        return to_item({"conversation_id": conversation_id, "seq": seq})

    @staticmethod
    def new_header(conversation_id: str, customer_id: int, now: str) -> Header:
        """A conversation not stored yet: its header is written with its first messages (see append)."""
        return Header(conversation_id, customer_id, now, now, 1, Usage())

    def acquire_lease(
        self, conversation_id: str, customer_id: int, owner: str, now_epoch: int, lease_until: int
    ) -> Header:
        """Take the turn lease. Someone else's conversation answers exactly like a missing one (404)."""
        try:
            out = self._db.update_item(
                TableName=self._table,
                Key=self._key(conversation_id),
                UpdateExpression="SET lease_owner = :owner, lease_expires_at = :until",
                ConditionExpression=(
                    "attribute_exists(conversation_id) AND customer_id = :cid AND "
                    "(attribute_not_exists(lease_owner) OR lease_expires_at < :now)"
                ),
                ExpressionAttributeValues=to_values(
                    {":owner": owner, ":until": lease_until, ":cid": customer_id, ":now": now_epoch}
                ),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            old = from_item(exc.response.get("Item") or {})  # type: ignore[arg-type]
            if not old or int(old.get("customer_id", -1)) != customer_id:
                raise NotFound("conversation not found") from None
            raise Conflict("another turn is in progress on this conversation") from None
        return _header(from_item(out["Attributes"]))

    def release_lease(self, conversation_id: str, owner: str) -> None:
        try:
            self._db.update_item(
                TableName=self._table,
                Key=self._key(conversation_id),
                UpdateExpression="REMOVE lease_owner, lease_expires_at",
                ConditionExpression="lease_owner = :owner",
                ExpressionAttributeValues=to_values({":owner": owner}),
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise

    def get_header(self, conversation_id: str) -> Header | None:
        out = self._db.get_item(TableName=self._table, Key=self._key(conversation_id), ConsistentRead=True)
        item = out.get("Item")
        return _header(from_item(item)) if item else None

    def load(self, conversation_id: str) -> list[StoredMessage]:
        """All messages in order: one strongly consistent query, paginated only when long."""
        messages: list[StoredMessage] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "conversation_id = :c AND seq > :zero",
            "ExpressionAttributeValues": to_values({":c": conversation_id, ":zero": 0}),
            "ConsistentRead": True,
        }
        while True:
            out = self._db.query(**kwargs)
            for raw in out.get("Items", []):
                item = from_item(raw)
                messages.append(
                    StoredMessage(
                        seq=int(item["seq"]),
                        role=item["role"],
                        content=json.loads(item["content"]),
                        created_at=item.get("created_at", ""),
                    )
                )
            if "LastEvaluatedKey" not in out:
                return messages
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def append(
        self,
        conversation_id: str,
        owner: str,
        expected_seq: int,
        messages: list[Message],
        now: str,
        usage: Usage | None = None,
        extra_puts: list[dict[str, Any]] | None = None,
        title: str | None = None,
        create: Header | None = None,
        lease_until: int = 0,
    ) -> list[StoredMessage]:
        """Store messages (and e.g. their audit rows) atomically; returns them with their seqs.

        Conditioned on holding the lease and on ``next_seq == expected_seq``: a writer that lost the
        lease, or raced another, gets 409 and stores nothing. With ``create``, the header is written
        here too, leased to ``owner``: a new conversation exists only once it has messages.
        """
        stored: list[StoredMessage] = []
        items: list[dict[str, Any]] = []
        for offset, message in enumerate(messages):
            seq = expected_seq + offset
            stored.append(StoredMessage(seq, message["role"], message["content"], now))
            items.append(
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": to_item(
                            {
                                "conversation_id": conversation_id,
                                "seq": seq,
                                "role": message["role"],
                                "content": dumps(message["content"]),
                                "created_at": now,
                            }
                        ),
                        "ConditionExpression": "attribute_not_exists(seq)",
                    }
                }
            )
        usage = usage or Usage()
        update = (
            "SET next_seq = :next, updated_at = :now "
            "ADD input_tokens :i, output_tokens :o, cache_read_input_tokens :cr, cache_creation_input_tokens :cc"
        )
        values: dict[str, Any] = {
            ":next": expected_seq + len(messages),
            ":now": now,
            ":expected": expected_seq,
            ":owner": owner,
            ":i": usage.input_tokens,
            ":o": usage.output_tokens,
            ":cr": usage.cache_read_input_tokens,
            ":cc": usage.cache_creation_input_tokens,
        }
        if title is not None:
            update = update.replace("SET ", "SET title = if_not_exists(title, :title), ", 1)
            values[":title"] = title
        if create is not None:
            header = {
                "conversation_id": conversation_id,
                "seq": 0,
                "customer_id": create.customer_id,
                "created_at": create.created_at,
                "updated_at": now,
                "next_seq": expected_seq + len(messages),
                "lease_owner": owner,
                "lease_expires_at": lease_until,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_input_tokens": usage.cache_read_input_tokens,
                "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                "title": title,
            }
            items.append(
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": to_item(header),
                        "ConditionExpression": "attribute_not_exists(conversation_id)",
                    }
                }
            )
        else:
            items.append(
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": self._key(conversation_id),
                        "UpdateExpression": update,
                        "ConditionExpression": "lease_owner = :owner AND next_seq = :expected",
                        "ExpressionAttributeValues": to_values(values),
                    }
                }
            )
        items.extend(extra_puts or [])
        try:
            self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        except ClientError as exc:
            if is_conditional_failure(exc):
                raise Conflict("the conversation changed under this turn; please resend") from None
            raise
        return stored

    def list_for_customer(
        self, customer_id: int, limit: int = 20, start_key: dict[str, Any] | None = None
    ) -> tuple[list[Header], dict[str, Any] | None]:
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "by_customer",
            "KeyConditionExpression": "customer_id = :cid",
            "ExpressionAttributeValues": to_values({":cid": customer_id}),
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if start_key:
            kwargs["ExclusiveStartKey"] = start_key
        out = self._db.query(**kwargs)
        return [_header(from_item(i)) for i in out.get("Items", [])], out.get("LastEvaluatedKey")
