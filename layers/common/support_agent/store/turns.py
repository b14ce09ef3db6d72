"""Turn records and idempotency keys: what a resent ``POST /api/chat`` is answered from.

Not Powertools' idempotency utility: it deletes its record when the handler raises (no role here holds
``DeleteItem``, on purpose) and would keep a 202 as the final answer. Two items, both in the Conversations
table under key prefixes of their own (neither carries ``updated_at``, so ``by_customer`` never lists them):

* the **turn record** ``turn#<conversation id>`` / ``seq`` = the turn id's millisecond: the turn's status
  (``running`` → ``completed`` | ``failed``, or ``refused`` when it was turned away before anything was
  stored, or ``delivered`` when a person answers the conversation and the message was kept for them), the
  customer's message, the request's fingerprint, and the answer it ended with (status and
  body). Partitioned by conversation so that erasure finds a conversation's turns with one Query, and
  removes the message and the answer with the conversation's messages (docs/RETENTION.md).
* the **key** ``idem#<customer id>#<SHA-256 of the Idempotency-Key>`` / 0: which turn the key started and
  the fingerprint of the body it came with; ``expires_at`` (the table's TTL) 25 hours on.

A resend is answered from its key before the rate limit takes a token; a new key is claimed with its turn in one
transaction, before the lease: two requests with one key at once make one turn. It is free again when absent,
past ``expires_at`` (DynamoDB's TTL removes items late), or released: a turn refused before anything was
stored (409 lease held, 503 before the first write) leaves the key as if it had never been used.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from botocore.exceptions import ClientError

from support_agent.errors import Conflict, IdempotencyKeyReused
from support_agent.ids import ulid
from support_agent.store.dynamo import (
    DynamoDBClient,
    cancellation_as,
    from_item,
    is_conditional_failure,
    to_item,
    to_values,
    update_if,
)
from support_agent.store.notifications import Notification, NotificationStore
from support_agent.store.records import Codec, Record, optional, stored

REPLY_MAX_BYTES = 256 * 1024  # a stored answer, compressed; DynamoDB's items end at 400 KB
KEY_SECONDS = 25 * 3600  # kept at least 24 hours, as the draft asks of a server that names its window
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # 1 to 255 visible ASCII characters
TURN_ID = re.compile(r"^turn_[0-9A-HJKMNP-TV-Z]{26}$")
TurnStatus = Literal["running", "completed", "failed", "refused", "delivered"]
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# A turn's end: its answer stored, and out of the sparse index of handed-over turns still running.
_ENDED = "SET #st = :st, reply_status = :code, reply_body = :body, finished_at = :now REMOVE #run, lease_check_at"


def fingerprint(conversation_id: str | None, message: str) -> str:
    """What makes two requests "the same": the body's fields, canonically encoded (not its bytes)."""
    body = {"conversationId": conversation_id, "message": message}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def new_turn_id() -> str:
    return f"turn_{ulid()}"


def turn_ms(turn_id: str) -> int:
    """The millisecond a turn id was made at (its ULID's first 48 bits): the record's sort key."""
    value = 0
    for c in turn_id.removeprefix("turn_")[:10]:
        value = value * 32 + _ALPHABET.index(c)
    return value


def _pack(body: dict[str, Any]) -> bytes:
    """An answer (or a hand-over's carried state) as stored: JSON, zlib-compressed. A verbose trace of many large
    tool results that would not fit even so is left out of the stored copy (``traceOmitted``); the reply itself
    always fits."""
    packed = zlib.compress(json.dumps(body).encode(), 6)
    if len(packed) > REPLY_MAX_BYTES and "trace" in body:
        trimmed = {k: v for k, v in body.items() if k != "trace"} | {"traceOmitted": True}
        packed = zlib.compress(json.dumps(trimmed).encode(), 6)
    return packed


PACKED = Codec(lambda raw: json.loads(zlib.decompress(bytes(raw))), _pack)


@dataclass(frozen=True, kw_only=True)
class Turn(Record):
    """A turn record. Its key (``turn#<conversation id>`` / the id's millisecond) is not a field; the stored
    names that differ from the fields' are declared beside them."""

    KIND: ClassVar[str] = "turn"

    turn_id: str
    conversation_id: str = stored("conversation")  # the key's ``conversation_id`` is ``turn#<id>``
    customer_id: int
    status: TurnStatus
    fingerprint: str
    new_conversation: bool = False
    created_at: str
    running_until: int = 0  # epoch seconds: a turn still `running` after this was interrupted (its function died)
    response_status: int | None = stored("reply_status", default=None)
    response: dict[str, Any] | None = stored("reply_body", codec=PACKED, default=None)
    actor: str = ""  # the JWT's sub: the worker acts (and audits) as the customer who asked
    message: str | None = stored("message_text", default=None)  # the customer's message (None once erased)
    idempotency_key: bool = optional(False)  # it came with one (the key item names the turn)
    handover_token: str | None = None  # set when the turn was handed to the worker (the lease passed to it)
    message_seq: int | None = None  # where the message goes if it was not stored before the hand-over
    carried: dict[str, Any] | None = stored(codec=PACKED, default=None)  # the synchronous part: iterations, usage
    restarts: int = optional(0)  # times the turn sweep sent the turn to the queue again
    finished_at: str = optional("")  # when it ended (completed, failed or refused)
    announced: bool = optional(False)  # its failure was announced by a notification (the sweep's), not the record

    def interrupted(self, now_epoch: int) -> bool:
        return self.status == "running" and now_epoch > self.running_until


@dataclass(frozen=True)
class Claim:
    """A claim's outcome: ``turn`` is ours to run, or ``existing`` is the turn the key already names."""

    turn: Turn | None = None
    existing: Turn | None = None


class TurnStore:
    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._db = client
        self._table = table
        self._notes = NotificationStore(client, table)  # the sweep's turn.failed

    @staticmethod
    def _turn_key(conversation_id: str, turn_id: str) -> dict[str, Any]:
        return {"conversation_id": f"turn#{conversation_id}", "seq": turn_ms(turn_id)}

    @staticmethod
    def _key_key(customer_id: int, key: str) -> dict[str, Any]:
        digest = hashlib.sha256(key.encode("ascii")).hexdigest()
        return {"conversation_id": f"idem#{customer_id}#{digest}", "seq": 0}

    # -- reads -------------------------------------------------------------------------------------

    def get(self, conversation_id: str, turn_id: str) -> Turn | None:
        if not TURN_ID.match(turn_id):
            return None
        out = self._db.get_item(
            TableName=self._table, Key=to_item(self._turn_key(conversation_id, turn_id)), ConsistentRead=True
        )
        item = from_item(out["Item"]) if "Item" in out else None
        return Turn.from_item(item) if item and item.get("turn_id") == turn_id else None

    def by_key(self, customer_id: int, key: str, print_: str, now_epoch: int) -> Turn | None:
        """The turn ``key`` names, if the key is in use; IdempotencyKeyReused when it came with another body."""
        out = self._db.get_item(
            TableName=self._table, Key=to_item(self._key_key(customer_id, key)), ConsistentRead=True
        )
        item = from_item(out["Item"]) if "Item" in out else None
        if not item or item.get("released") or int(item.get("expires_at") or 0) < now_epoch:
            return None
        if item["fingerprint"] != print_:
            raise IdempotencyKeyReused("this Idempotency-Key was used with another request body")
        return self.get(str(item["conversation"]), str(item["turn_id"]))

    def turns_of(self, conversation_id: str) -> list[Turn]:
        """Every turn record of a conversation (erasure)."""
        out = self._db.query(
            TableName=self._table,
            KeyConditionExpression="conversation_id = :c",
            ExpressionAttributeValues=to_values({":c": f"turn#{conversation_id}"}),
            ConsistentRead=True,
        )
        return [Turn.from_item(from_item(i)) for i in out.get("Items", [])]

    # -- writes ------------------------------------------------------------------------------------

    def claim(
        self,
        customer_id: int,
        actor: str,
        key: str | None,
        print_: str,
        conversation_id: str,
        new_conversation: bool,
        message: str,
        *,
        now: str,
        now_epoch: int,
        running_seconds: int,
    ) -> Claim:
        """A running turn for this request, with its key (if any) claimed in the same transaction. When the key
        was claimed first by a concurrent request, the turn it names (``existing``)."""
        turn = Turn(
            turn_id=new_turn_id(),
            conversation_id=conversation_id,
            customer_id=customer_id,
            status="running",
            fingerprint=print_,
            new_conversation=new_conversation,
            created_at=now,
            running_until=now_epoch + running_seconds,
            actor=actor,
            message=message,
            idempotency_key=key is not None,
        )
        record = {**self._turn_key(conversation_id, turn.turn_id), **turn.item()}
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": to_item(record),
                    "ConditionExpression": "attribute_not_exists(conversation_id)",
                }
            }
        ]
        if key is not None:
            claim = {
                **self._key_key(customer_id, key),
                "turn_id": turn.turn_id,
                "conversation": conversation_id,
                "fingerprint": print_,
                "expires_at": now_epoch + KEY_SECONDS,
            }
            items.append(
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": to_item(claim),
                        "ConditionExpression": "attribute_not_exists(conversation_id) OR expires_at < :now "
                        "OR released = :yes",
                        "ExpressionAttributeValues": to_values({":now": now_epoch, ":yes": True}),
                    }
                }
            )
        lost = Conflict("another turn on this conversation started in the same millisecond; please resend")
        try:
            with cancellation_as(lambda _codes: lost):
                self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        except Conflict:
            if key is None:
                raise
            existing = self.by_key(customer_id, key, print_, now_epoch)
            if existing is None:  # the first holder released it meanwhile: the client may resend
                raise
            return Claim(existing=existing)
        return Claim(turn=turn)

    def finish(self, turn: Turn, status: int, body: dict[str, Any], now: str, *, announce: bool = False) -> bool:
        """The answer the turn ended with: ``completed`` (200) or ``failed`` (an error after something was
        stored). A resend with its key gets exactly this answer. ``announce`` (the turn sweep's, which no request
        waits on): the failure is also a ``turn.failed`` notification, in the same transaction (the record says
        ``announced``), and a turn that ended meanwhile is left as it is (False)."""
        # 202: the message was kept for the person who answers the conversation (no model ran: store/takeover.py)
        state = {200: "completed", 202: "delivered"}.get(status, "failed")
        values = {":st": state, ":code": status, ":body": _pack(body), ":now": now}
        if not announce:
            self._set(turn, _ENDED, values)
            return True
        update = self._update(turn, _ENDED.replace("SET ", "SET announced = :yes, ", 1), {**values, ":yes": True})
        note = Notification(
            conversation_id=turn.conversation_id,
            type="turn.failed",
            at=now,
            data={"error": body["error"]},
            turn_id=turn.turn_id,
        )
        try:
            self._notes.transact([{"Update": update}], note)
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False  # it ended meanwhile
            raise
        return True

    def release(self, turn: Turn, key: str | None, status: int, body: dict[str, Any], now: str) -> None:
        """Refused before anything was stored: the turn says so, and its key is free for the resend. Its message
        goes: the turn never ran, and a turn refused for a conversation that is not the caller's is in a
        partition the caller's erasure would never reach."""
        self._set(
            turn,
            _ENDED + ", message_text",
            {":st": "refused", ":code": status, ":body": _pack(body), ":now": now},
        )
        if key is not None:
            update_if(  # the key another turn's already: nothing to release
                self._db,
                TableName=self._table,
                Key=to_item(self._key_key(turn.customer_id, key)),
                UpdateExpression="SET released = :yes",
                ConditionExpression="turn_id = :t",
                ExpressionAttributeValues=to_values({":yes": True, ":t": turn.turn_id}),
            )

    # -- the hand-over (agent/handover.py) and the worker's take-over (agent/lifecycle.py) -------------

    def hand_over(
        self,
        turn: Turn,
        token: str,
        message_seq: int | None,
        carried: dict[str, Any],
        *,
        now_epoch: int,
        check_after: int,
        running_seconds: int,
    ) -> None:
        """Record that the turn goes to the worker with ``token``: before the message is sent and the lease
        passed, so a crash in between leaves a turn the sweep can send again (``running``, ``lease_check_at``:
        the sparse index ``turns_running``)."""
        update = (
            "SET handover_token = :token, carried = :carried, #run = :one, lease_check_at = :check, "
            "running_until = :until"
        )
        values: dict[str, Any] = {
            ":token": token,
            ":carried": _pack(carried),
            ":one": "1",
            ":check": now_epoch + check_after,
            ":until": now_epoch + running_seconds,
        }
        if message_seq is not None:
            update += ", message_seq = :mseq"
            values[":mseq"] = message_seq
        self._set(turn, update, values, also="attribute_not_exists(handover_token)")

    def take_over(self, turn: Turn, handed: str, mine: str, *, now_epoch: int, lease_until: int) -> bool:
        """The worker takes the conversation's lease from the handed-over token (or, once that lease expired: a
        worker or the hand-over died, from whoever held it) to a token of its own, in one transaction with a
        check that the turn is still running with that hand-over. False when it was not taken: a duplicate
        delivery, a turn already ended, or a lease someone still holds (the sweep sends the turn again once
        it is free)."""
        try:
            self._db.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": to_item({"conversation_id": turn.conversation_id, "seq": 0}),
                            "UpdateExpression": "SET lease_owner = :mine, lease_expires_at = :until",
                            "ConditionExpression": "attribute_exists(conversation_id) AND "
                            "(lease_owner = :handed OR lease_expires_at < :now OR attribute_not_exists(lease_owner))",
                            "ExpressionAttributeValues": to_values(
                                {":mine": mine, ":until": lease_until, ":handed": handed, ":now": now_epoch}
                            ),
                        }
                    },
                    {
                        "ConditionCheck": {
                            "TableName": self._table,
                            "Key": to_item(self._turn_key(turn.conversation_id, turn.turn_id)),
                            "ConditionExpression": "handover_token = :handed AND #st = :running",
                            "ExpressionAttributeNames": {"#st": "status"},
                            "ExpressionAttributeValues": to_values({":handed": handed, ":running": "running"}),
                        }
                    },
                ]
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "TransactionCanceledException":
                return False
            raise
        return True

    def running_since(self, now_epoch: int, limit: int = 50) -> list[Turn]:
        """Handed-over turns still running whose lease is due for a check (the sweep), oldest first."""
        out = self._db.query(
            TableName=self._table,
            IndexName="turns_running",
            KeyConditionExpression="#run = :one AND lease_check_at < :now",
            ExpressionAttributeNames={"#run": "running"},
            ExpressionAttributeValues=to_values({":one": "1", ":now": now_epoch}),
            Limit=limit,
        )
        return [Turn.from_item(from_item(i)) for i in out.get("Items", [])]

    def restarted(self, turn: Turn, check_after: int, now_epoch: int, *, count: bool = True) -> None:
        """The sweep sent the turn again (``count``) or found it moving: not checked again for ``check_after``
        seconds. A turn that ended meanwhile is left as it is."""
        update_if(
            self._db,
            TableName=self._table,
            Key=to_item(self._turn_key(turn.conversation_id, turn.turn_id)),
            UpdateExpression="SET lease_check_at = :check ADD restarts :n",
            ConditionExpression="#st = :running",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues=to_values(
                {":check": now_epoch + check_after, ":n": int(count), ":running": "running"}
            ),
        )

    def _set(self, turn: Turn, update: str, values: dict[str, Any], also: str = "") -> None:
        """An update of a running turn's record (and ``also``, a further condition)."""
        self._db.update_item(**self._update(turn, update, values, also))

    def _update(self, turn: Turn, update: str, values: dict[str, Any], also: str = "") -> dict[str, Any]:
        return {
            "TableName": self._table,
            "Key": to_item(self._turn_key(turn.conversation_id, turn.turn_id)),
            "UpdateExpression": update,
            "ConditionExpression": "turn_id = :t AND #st = :running" + (f" AND {also}" if also else ""),
            "ExpressionAttributeNames": {"#st": "status", "#run": "running"},
            "ExpressionAttributeValues": to_values({**values, ":t": turn.turn_id, ":running": "running"}),
        }

    def erasure_update(self, turn: Turn, erased_at: str) -> dict[str, Any]:
        """The UpdateItem that removes a turn record's message text, answer and the synchronous part's trace
        of a handed-over turn (erasure)."""
        return {
            "TableName": self._table,
            "Key": to_item(self._turn_key(turn.conversation_id, turn.turn_id)),
            "UpdateExpression": "SET erased_at = :now REMOVE message_text, reply_body, carried",
            "ExpressionAttributeValues": to_values({":now": erased_at}),
        }
