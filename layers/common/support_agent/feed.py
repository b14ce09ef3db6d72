"""A conversation's event feed, read from what is already stored: nothing here writes.

Two sources, each totally ordered by its own writer, so a cursor that holds a position in each can never miss
an event committed late:

* **the turns**: the messages by ``seq`` (a turn writes them under the conversation's lease, each naming its
  ``turn_id``) give ``turn.started`` (before a turn's first stored message), ``tool.requested`` (the stored
  tool_use, before it runs), ``tool.finished`` and ``message``; the turn records give ``turn.completed`` and
  ``turn.failed``, in turn order, once every earlier turn has ended too (turns hold the lease one at a time; a
  turn record is read before the messages, so a turn read as ended has all its messages in the read).
* **the notifications** (store/notifications.py): ``approval.decided``, ``refund.settled``, ``turn.failed`` from
  the sweep, the hand-off's, and ``proposal.created``/``confirmed``/``declined``/``expired`` (an action the
  customer confirms: store/proposals.py), by number.

The two are merged by time (``at``); each event carries the cursor that resumes right after it. The cursor is
opaque (base64url JSON) and names its conversation: it cannot be used on another one. A read model, no HTTP:
api/events_routes.py is its edge (EventsFunction).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from support_agent.agent.untrusted import unfence
from support_agent.clock import iso
from support_agent.errors import InvalidRequest
from support_agent.store.conversations import ConversationStore, StoredMessage
from support_agent.store.dynamo import DynamoDBClient, from_item, to_values
from support_agent.store.notifications import Notification, NotificationStore
from support_agent.store.turns import Turn, turn_ms

PAGE_EVENTS = 200  # events per answer; the client asks again at once for the rest
MAX_READS_PER_POLL = 14  # each read: the turn records, the messages and the notifications since the cursor
BACKOFF = (0.25, 0.5, 1.0, 2.0)  # seconds between reads of one poll; the last repeats
# Every number a cursor holds (a message's seq, an event's index, a turn's millisecond, a notification's number)
# is far below this; a forged one above it would reach a Query as more digits than DynamoDB's 38 (decimal.Inexact).
MAX_CURSOR_NUMBER = 2**53 - 1
INTERRUPTED = {"code": "turn_interrupted", "message": "the turn did not finish; send it again"}
# What TRANSPARENCY=quiet keeps out of every body a customer reads: which tool ran, what it was given, what it
# answered. The feed leaves these fields out of its tool events; the conversation view (api/views.py) leaves out
# its toolCalls whole (these and isError), the chat answer its trace. One declaration, so the view and the feed
# cannot disagree again (tests/integration/test_quiet.py).
QUIET_HIDES = ("name", "input", "result")
# What the feed needs of a turn record (its stored answer only for the totals; the message and what a hand-over
# carried never): the fields a turn record must have, and those the feed's events are made of.
_TURN_FIELDS = (
    "turn_id",
    "conversation_id",
    "customer_id",
    "status",
    "fingerprint",
    "new_conversation",
    "created_at",
    "running_until",
    "response_status",
    "response",
    "finished_at",
    "handover_token",
    "announced",
)


@dataclass(frozen=True)
class Cursor:
    """Where a reader is: the message (``seq``) and how many of its events it has (``index`` + 1), the turn
    (its id's millisecond) whose end it has last, and the number of the last notification."""

    conversation_id: str
    seq: int = 0
    index: int = -1
    ended: int = 0
    note: int = 0

    def encode(self) -> str:
        raw = json.dumps([1, self.conversation_id, self.seq, self.index, self.ended, self.note], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str | None, conversation_id: str) -> Cursor:
        """The cursor ``token`` holds, for ``conversation_id`` (none: the start); a 400 when it is not one of ours
        (any number out of bounds included: the client may forge one) or belongs to another conversation."""
        if not token:
            return cls(conversation_id)
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            version, cid, seq, index, ended, note = json.loads(raw)
        except (ValueError, TypeError, binascii.Error):
            raise InvalidRequest("after: not a cursor of this feed") from None
        numbers = (seq, index, ended, note)
        if (
            version != 1
            or not all(type(n) is int for n in numbers)
            or min(seq, ended, note) < 0
            or index < -1
            or max(numbers) > MAX_CURSOR_NUMBER
        ):
            raise InvalidRequest("after: not a cursor of this feed")
        if cid != conversation_id:
            raise InvalidRequest("after: this cursor belongs to another conversation")
        return cls(conversation_id, seq, index, ended, note)


@dataclass(frozen=True)
class Page:
    events: list[dict[str, Any]]
    cursor: Cursor


def tool_fields(fields: dict[str, Any], *, verbose: bool) -> dict[str, Any]:
    """A tool call's fields as a customer reads them: all when verbose, none of QUIET_HIDES when quiet."""
    return dict(fields) if verbose else {k: v for k, v in fields.items() if k not in QUIET_HIDES}


def _text(content: list[dict[str, Any]]) -> str:
    return "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")


class Feed:
    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        *,
        verbose: bool,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._db = client
        self._table = table
        self._conversations = ConversationStore(client, table)
        self._notes = NotificationStore(client, table)
        self._turn_projection = Turn.projection(*_TURN_FIELDS)  # the same for every read
        self._verbose = verbose
        self._clock = clock
        self._sleep = sleep

    # -- who may read -------------------------------------------------------------------------------

    def owner(self, conversation_id: str) -> int | None:
        """The conversation's customer: its header's, or, for a new conversation whose first turn has not stored
        anything yet, the customer whose turn started it."""
        header = self._conversations.get_header(conversation_id)
        if header is not None:
            return header.customer_id
        first = next((t for t in self._turns(conversation_id, 0) if t.new_conversation), None)
        return first.customer_id if first is not None else None

    # -- one read, and the long poll ----------------------------------------------------------------

    def read(self, cursor: Cursor, owner: int) -> Page:
        """The events after ``cursor`` as stored now (at most PAGE_EVENTS)."""
        cid = cursor.conversation_id
        turns = [t for t in self._turns(cid, cursor.ended) if t.customer_id == owner]  # before the messages
        # From the message before the cursor's: whether the cursor's message started its turn, and the tool names
        # of the results that follow it, are known as they were when its events were first counted.
        messages = self._conversations.load(cid, from_seq=max(cursor.seq - 1, 1))
        notes = self._notes.since(cid, cursor.note, PAGE_EVENTS)
        stream = self._turn_stream(cursor, turns, messages)
        merged, end = _merge(stream, [(self._note_event(n), replace(cursor, note=n.n)) for n in notes], cursor)
        if len(merged) > PAGE_EVENTS:
            merged, end = merged[:PAGE_EVENTS], merged[PAGE_EVENTS - 1][1]
        return Page([event for event, _ in merged], end)

    def poll(self, cursor: Cursor, owner: int, wait_seconds: float) -> Page:
        """``read`` until it finds an event or ``wait_seconds`` pass (at most MAX_READS_PER_POLL reads, backing off
        between them): a waiting client costs a few reads a minute and answers within BACKOFF[-1] of an event."""
        deadline = self._clock() + wait_seconds
        delays = _backoff()
        for _ in range(MAX_READS_PER_POLL - 1):
            page = self.read(cursor, owner)
            left = deadline - self._clock()
            if page.events or left <= 0:
                return page
            self._sleep(min(next(delays), left))
        return self.read(cursor, owner)

    # -- the turns' events ----------------------------------------------------------------------------

    def _turns(self, conversation_id: str, after_ms: int) -> list[Turn]:
        projection, names = self._turn_projection
        query: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "conversation_id = :c AND seq > :after",
            "ExpressionAttributeValues": to_values({":c": f"turn#{conversation_id}", ":after": after_ms}),
            "ProjectionExpression": projection,
            "ExpressionAttributeNames": names,
            "ConsistentRead": True,
        }
        out: list[Turn] = []
        while True:
            page = self._db.query(**query)
            out.extend(Turn.from_item(from_item(i)) for i in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return out
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _turn_stream(
        self, cursor: Cursor, turns: list[Turn], messages: list[StoredMessage]
    ) -> list[tuple[dict[str, Any], Cursor]]:
        """The turns' events after ``cursor``, in order, each with the cursor after it."""
        ends = list(self._ends(turns))  # (turn ms, event or None), in turn order
        names: dict[str, str] = {}  # tool_use id -> tool name, for tool.finished
        out: list[tuple[dict[str, Any], Cursor]] = []
        position = cursor  # moves with each event, and past ends that are no event
        previous_turn: str | None = None
        for m in messages:
            events = self._message_events(m, previous_turn, names)
            previous_turn = m.turn_id
            m_ms = turn_ms(m.turn_id) if m.turn_id else 0
            while ends and ends[0][0] < m_ms:  # an earlier turn's end comes before a later turn's first event
                position = _emit_end(out, ends.pop(0), position)
            for index, event in enumerate(events):
                if (m.seq, index) <= (cursor.seq, cursor.index):
                    continue  # delivered already
                position = replace(position, seq=m.seq, index=index)
                out.append((event, position))
        while ends:
            position = _emit_end(out, ends.pop(0), position)
        if position != (out[-1][1] if out else cursor):
            out.append(({}, position))  # only silent moves after the last event: kept as a marker, not an event
        return out

    def _ends(self, turns: list[Turn]) -> Iterator[tuple[int, dict[str, Any] | None]]:
        """Each turn's end, in turn order, stopping at the first turn still running: ends are delivered in the
        order turns ran. None for an end that is no event (a turn refused before it ran, or one whose failure a
        notification announces)."""
        now = int(self._clock())
        for turn in sorted(turns, key=lambda t: turn_ms(t.turn_id)):
            ms = turn_ms(turn.turn_id)
            if turn.status == "running":
                if turn.handover_token or not turn.interrupted(now):
                    return  # the worker, or the sweep that fails it (with a notification), has the last word
                yield ms, self._event("turn.failed", turn.turn_id, _at(turn.running_until), error=INTERRUPTED)
            elif turn.status in ("refused", "delivered") or turn.announced:
                yield ms, None
            elif turn.status == "completed":
                body = turn.response or {}
                totals = {k: body.get(k) for k in _COMPLETED}
                yield ms, self._event("turn.completed", turn.turn_id, turn.finished_at, **totals)
            else:
                error = (turn.response or {}).get("error") or {"code": "internal_error", "message": ""}
                yield ms, self._event("turn.failed", turn.turn_id, turn.finished_at, error=error)

    def _message_events(
        self, m: StoredMessage, previous_turn: str | None, names: dict[str, str]
    ) -> list[dict[str, Any]]:
        """What one stored message says, in block order (its text as one ``message``)."""
        events: list[dict[str, Any]] = []
        if m.turn_id and m.turn_id != previous_turn:
            events.append(self._event("turn.started", m.turn_id, m.created_at))
        text = _text(m.content)
        if text:
            author = {"author": m.author_name or m.author} if m.role == "person" else {}
            events.append(self._event("message", m.turn_id, m.created_at, role=m.role, text=text, **author))
        for block in m.content:
            if block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name", ""))
                detail = self._tool(name=block.get("name"), input=block.get("input"))
                events.append(
                    self._event("tool.requested", m.turn_id, m.created_at, toolUseId=block.get("id"), **detail)
                )
            elif block.get("type") == "tool_result":
                use_id = str(block.get("tool_use_id"))
                detail = self._tool(name=names.get(use_id), result=unfence(block.get("content")))
                is_error = bool(block.get("is_error", False))
                events.append(
                    self._event("tool.finished", m.turn_id, m.created_at, toolUseId=use_id, isError=is_error, **detail)
                )
        return events

    def _tool(self, **fields: Any) -> dict[str, Any]:
        """A tool event's own fields, as the conversation view shows a tool call: none of QUIET_HIDES when quiet."""
        return tool_fields(fields, verbose=self._verbose)

    # -- notifications ------------------------------------------------------------------------------

    def _note_event(self, note: Notification) -> dict[str, Any]:
        return self._event(note.type, note.turn_id, note.at, **note.data)

    @staticmethod
    def _event(kind: str, turn_id: str | None, at: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "at": at, "turnId": turn_id, **fields}


_COMPLETED = (
    "stopReason",
    "iterations",
    "inputTokens",
    "outputTokens",
    "cacheReadInputTokens",
    "cacheCreationInputTokens",
)


def _at(epoch: int) -> str:
    return iso(datetime.fromtimestamp(epoch, UTC))


def _emit_end(
    out: list[tuple[dict[str, Any], Cursor]], end: tuple[int, dict[str, Any] | None], position: Cursor
) -> Cursor:
    """A turn's end: the cursor moves past it (an end that is no event moves it silently, with the next one)."""
    ms, event = end
    position = replace(position, ended=ms)
    if event is not None:
        out.append((event, position))
    return position


def _merge(
    stream: list[tuple[dict[str, Any], Cursor]], notes: list[tuple[dict[str, Any], Cursor]], start: Cursor
) -> tuple[list[tuple[dict[str, Any], Cursor]], Cursor]:
    """The turns' events and the notifications in time order (each list keeps its own order); each event's cursor
    holds both positions as they stand after it. Also the cursor after everything (past silent moves too)."""
    out: list[tuple[dict[str, Any], Cursor]] = []
    i = j = 0
    turns_at, note_at = start, start.note
    while i < len(stream) or j < len(notes):
        take_turn = j >= len(notes) or (i < len(stream) and stream[i][0].get("at", "") <= notes[j][0]["at"])
        if take_turn:
            event, turns_at = stream[i]
            i += 1
        else:
            event, moved = notes[j]
            note_at = moved.note
            j += 1
        cursor = replace(turns_at, note=note_at)
        if event:  # not the marker of silent moves
            out.append(({**event, "cursor": cursor.encode()}, cursor))
    return out, replace(turns_at, note=note_at)


def _backoff() -> Iterator[float]:
    yield from BACKOFF
    while True:
        yield BACKOFF[-1]
