"""Property (issue 36): whatever turns, disconnects, reconnects, slow posts and delayed pushes happen, a page that
follows its conversations over the WebSocket ends with the stored history, every event once, in the feed's order.

On the deployed template: one customer, one or two conversations; the turns through the chat route (an answer, a
tool step then an answer, with or without text before the tool call, or handed to the worker); SocketFunction's
routes (tickets, $connect, subscribe with the page's last cursor, $disconnect); SocketPushFunction's handler on the
Conversations table's real stream, run only when a step says so (several turns' records pushed at once, a batch
retried); one recording ``@connections`` client for all of them and the turns' text deltas, which can answer 410
for a connection gone without its $disconnect, time out or throttle (`Wire`).

The page (`Page`, docs/API.md#websocket) keeps its last cursor per conversation, applies ``event`` messages in
order (deduplicated by cursor), puts each ``delta`` at its offset and shows the streamed text until the turn's
stored messages replace it, and reads the HTTP feed after its cursor while it has no socket (the fallback).

After every step: what the page applied is a prefix of the feed (nothing skipped, nothing twice, nothing out of
order), and a push of a conversation whose posts to a live, subscribed connection all went through leaves that
connection caught up (pusher.py: a failed post's rest is sent again with the next push). At the end, after a last
reconnect: the page's events are the feed, its transcript the conversation view's messages and tool calls; no
event came twice over the socket; each turn's streamed text, where no post was lost, is its stored text.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError
from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.feed import PAGE_EVENTS, Cursor, Feed
from support_agent.sockets import push as posting
from support_agent.sockets.deltas import CLOSE_SECONDS, DeltaPublisher
from support_agent.sockets.pusher import touched
from tests.integration.conftest import Api
from tests.integration.test_audit_watcher_stream import Stream
from tests.integration.test_long_turns import queue, take_messages, work
from tests.integration.test_socket_push import Push, feed
from tests.integration.test_sockets import Management, Socket
from tests.reliability.conftest import CI, SLOW
from tests.reliability.figures import count
from tests.support.scripted import answer, reply, text, tool_use, tools

ANSWERS = [
    "It shipped on Monday.",
    "Votre commande est partie lundi — merci de votre patience !",
    "📦 On its way: ETA Thursday 🚚",
    "Order 1042 left our warehouse on Monday and the carrier expects to deliver it by Thursday; you will get an "
    "e-mail with the tracking link as soon as it is scanned at the depot.",
]
CUSTOMER = 7  # the default token's
KINDS = ["answer", "tool", "text_then_tool", "worker"]
CONNECTIONS = itertools.count(1)
KEYS = itertools.count(1)


# Each step: its name, how often it comes, what it is given.
STEPS: dict[str, tuple[int, st.SearchStrategy[tuple[Any, ...]]]] = {
    # A chat turn in conversation 0 or 1 (the first turn of 1 creates it), of a kind, with one of the answers.
    "turn": (4, st.tuples(st.integers(0, 1), st.sampled_from(KINDS), st.integers(0, len(ANSWERS) - 1))),
    "push": (3, st.just(())),  # SocketPushFunction on the stream's records since the last push
    "read": (2, st.just(())),  # the page reads what reached its connection
    # The connection's next posts: ``ok`` go through, then ``failing`` time out or are throttled.
    "slow": (3, st.tuples(st.integers(0, 4), st.integers(1, 3), st.sampled_from(["timeout", "throttle"]))),
    "reconnect": (2, st.just(())),  # a new ticket, $connect, subscribe with the last cursors
    "drop": (1, st.tuples(st.integers(0, 3))),  # the network goes: posts answer 410, n unread ones lost in flight
    "close": (1, st.just(())),  # the page closes its socket: $disconnect
    "late_disconnect": (1, st.just(())),  # API Gateway's $disconnect of a dropped connection, late
    "push_again": (1, st.just(())),  # the last batch retried (or a second pusher on the same records)
    "http": (1, st.just(())),  # the fallback while the socket is down: the feed after the page's cursor
}
STEP = st.sampled_from([name for name, (weight, _) in STEPS.items() for _ in range(weight)]).flatmap(
    lambda name: STEPS[name][1].map(lambda args: (name, *args))
)


class Wire(Management):
    """test_sockets' recording ``@connections`` (410 for a connection in ``gone``), plus a plan per connection for its
    next posts: each goes through (None), times out (as botocore raises it after its read timeout) or is throttled
    (429). Shared by the routes, the pusher and the turns' deltas."""

    def __init__(self) -> None:
        super().__init__()
        self.plan: dict[str, list[str | None]] = {}
        self.failed: Counter[str] = Counter()  # failed posts by connection, and by message type (the run's figures)
        self.abandoned: set[str] = set()  # turns whose last deltas their close gave up on (its 200 ms bound)

    def post_to_connection(self, ConnectionId: str, Data: bytes) -> None:
        plan = self.plan.get(ConnectionId)
        how = plan.pop(0) if plan and ConnectionId not in self.gone else None
        if how is not None:
            self.failed[ConnectionId] += 1
            self.failed[f"{json.loads(Data)['type']}_posts_failed"] += 1
        if how == "timeout":
            raise ReadTimeoutError(endpoint_url="https://local-websocket.execute-api.us-east-1.amazonaws.com/dev")
        if how == "throttle":
            self.failing[ConnectionId] = 1
        super().post_to_connection(ConnectionId=ConnectionId, Data=Data)

    def will_fail(self, connection_id: str) -> bool:
        return any(self.plan.get(connection_id, []))


@dataclass
class Streamed:
    """A turn's text as its deltas put it; ``gap``: a post was lost (an offset past the text), the rest waits for
    the stored message."""

    text: str = ""
    gap: bool = False


@dataclass
class Page:
    """The chat page's socket client, as docs/API.md#websocket tells a client to be."""

    cursor: dict[str, str | None] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seen: dict[str, set[str]] = field(default_factory=dict)
    twice: list[dict[str, Any]] = field(default_factory=list)  # events the socket brought again
    errors: list[dict[str, Any]] = field(default_factory=list)
    streams: dict[str, Streamed] = field(default_factory=dict)
    stored: dict[str, str] = field(default_factory=dict)  # a turn's assistant text its message events brought
    ended: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)  # turns whose deltas were lost in flight
    connection: str | None = None
    read: dict[str, int] = field(default_factory=dict)  # posts read per connection

    def follow(self, cid: str) -> None:
        self.cursor.setdefault(cid, None)
        self.events.setdefault(cid, [])
        self.seen.setdefault(cid, set())

    def receive(self, wire: Wire, connection: str, lose: int = 0) -> None:
        """The posts that reached ``connection`` since the last read, less the last ``lose`` of them (in flight
        when the connection went)."""
        posts = wire.posts.get(connection, [])
        unread = posts[self.read.get(connection, 0) :]
        arrived = len(unread) - min(lose, len(unread))
        kept, gone = unread[:arrived], unread[arrived:]
        self.read[connection] = len(posts)
        for message in kept:
            self.apply(message)
        self.lost |= {m["turnId"] for m in gone if m["type"] == "delta"}

    def unread_cursors(self, wire: Wire, connection: str, cid: str) -> list[str]:
        posts = wire.posts.get(connection, [])[self.read.get(connection, 0) :]
        return [m["event"]["cursor"] for m in posts if m["type"] == "event" and m["conversationId"] == cid]

    def apply(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "event":
            self.event(message["conversationId"], message["event"], socket=True)
        elif kind == "delta":
            self.delta(message)
        elif kind == "error":
            self.errors.append(message)

    def event(self, cid: str, event: dict[str, Any], socket: bool) -> None:
        if event["cursor"] in self.seen[cid]:
            if socket:
                self.twice.append(event)
            return
        self.seen[cid].add(event["cursor"])
        self.events[cid].append(event)
        self.cursor[cid] = event["cursor"]
        turn = event.get("turnId")
        if turn and event["type"] == "message" and event["role"] == "assistant":
            self.stored[turn] = self.stored.get(turn, "") + event["text"]
        if turn and event["type"] in ("turn.completed", "turn.failed"):
            self.ended.add(turn)

    def delta(self, message: dict[str, Any]) -> None:
        streamed = self.streams.setdefault(message["turnId"], Streamed())
        if message.get("restart"):
            streamed.text, streamed.gap = "", False
        if streamed.gap or message["offset"] > len(streamed.text):
            streamed.gap = True
            return
        streamed.text = streamed.text[: message["offset"]] + message["text"]

    def showing(self, turn: str) -> str:
        """The streamed text still shown: what the turn's stored messages have not replaced yet."""
        if turn in self.ended:
            return ""
        return self.streams[turn].text[len(self.stored.get(turn, "")) :]


def transcript(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the page shows from the events: each message's role, text and turn; each tool call, with its result."""
    shown: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["type"] == "message":
            shown.append({"role": e["role"], "text": e["text"], "turnId": e["turnId"]})
        elif e["type"] == "tool.requested":
            calls[e["toolUseId"]] = {"name": e["name"], "input": e["input"], "result": None, "isError": False}
            shown.append(calls[e["toolUseId"]])
        elif e["type"] == "tool.finished":
            calls[e["toolUseId"]].update(result=e["result"], isError=e["isError"])  # a KeyError: its request skipped
    return shown


def history(view: dict[str, Any]) -> list[dict[str, Any]]:
    """The same from GET /api/conversations/{id}: the messages with text, each followed by its tool calls."""
    shown: list[dict[str, Any]] = []
    for m in view["messages"]:
        if m["text"]:
            shown.append({"role": m["role"], "text": m["text"], "turnId": m.get("turnId")})
        shown.extend(m.get("toolCalls", []))
    return shown


def whole_feed(api: Api, cid: str, after: str | None = None) -> list[dict[str, Any]]:
    """GET /api/conversations/{id}/events after ``after``, page after page: what the page's fallback reads."""
    found: list[dict[str, Any]] = []
    while True:
        events, after = feed(api, cid, after)
        found.extend(events)
        if len(events) < PAGE_EVENTS:
            return found


def stored_events(reader: Feed, cid: str) -> list[dict[str, Any]]:
    """The same feed from the start, read in process (the checks after every step: no handler to switch to)."""
    found: list[dict[str, Any]] = []
    cursor = Cursor.decode(None, cid)
    while True:
        page = reader.read(cursor, CUSTOMER)
        found.extend(page.events)
        if len(page.events) < PAGE_EVENTS:
            return found
        cursor = page.cursor


def script(kind: str, words: str) -> list[Any]:
    if kind == "answer":
        return [answer(words)]
    if kind == "text_then_tool":
        return [
            reply("tool_use", text("Let me look that up. "), tool_use("lookup_order", {"order_id": 1042})),
            answer(words),
        ]
    return [tools(tool_use("lookup_order", {"order_id": 1042})), answer(words)]


class Scene:
    """One example: the customer's conversations, the page and the template's functions, step by step."""

    def __init__(self, api: Api, socket: Socket, pusher: Push, wire: Wire) -> None:
        self.api, self.socket, self.pusher, self.wire = api, socket, pusher, wire
        self.page = Page()
        self.cids: list[str] = []
        self.opened: list[str] = []  # every connection, $disconnected at the end (the owner's count given back)
        self.dropped: list[str] = []  # gone without their $disconnect (yet)
        self.full: set[str] = set()  # turns that streamed to a live, subscribed connection whose posts all went
        self.batch: dict[str, Any] | None = None
        self.tally: Counter[str] = Counter()  # the run's figures (tests/reliability/figures.py)
        table = api.stack.physical_ids["ConversationsTable"]
        self.stream = Stream(table)
        self.feed = Feed(boto3.client("dynamodb"), table, verbose=True)  # the stack is TRANSPARENCY=verbose

    # -- the steps -------------------------------------------------------------------------------------------

    def turn(self, conversation: int, kind: str, words: int) -> None:
        cid = self.cids[conversation] if conversation < len(self.cids) else None
        connection = self.page.connection
        streams = cid is not None and connection is not None and not self.wire.will_fail(connection)
        self.api.model.script = script(kind, ANSWERS[words])
        body = {"conversationId": cid, "message": f"Where is order 1042? ({kind})"}
        headers = {"idempotency-key": f"socket-property-{next(KEYS)}"}
        if kind == "worker":
            headers["prefer"] = "respond-async"
        status, out, _ = self.api.call("POST", "/api/chat", body, headers=headers)
        # A synchronous turn is handed over too when its next model call would not fit in SYNC_TURN_SECONDS (on a
        # loaded machine): the page follows it the same way.
        assert status == 200 or (status == 202 and out["status"] == "running"), out
        if status == 202:
            self.run_worker()
        turn_id, cid = str(out["turnId"]), str(out["conversationId"])
        assert self.api.model.script == []
        if streams:
            self.full.add(turn_id)
        if cid not in self.cids:  # a new conversation: the page follows it too
            self.cids.append(cid)
            self.page.follow(cid)
            if connection is not None:
                self.subscribe(connection, cid)

    def run_worker(self) -> None:
        """TurnWorkerFunction on the handed-over turn's message, deleted after it as Lambda does on success."""
        messages = take_messages(self.api)
        assert len(messages) == 1 and work(self.api, messages) == {"batchItemFailures": []}
        boto3.client("sqs").delete_message(QueueUrl=queue(self.api), ReceiptHandle=messages[0]["ReceiptHandle"])

    def push(self) -> None:
        batch = self.stream.event()
        if batch["Records"]:  # Lambda invokes the mapping's function with records only
            self.batch = batch
            self.run_push(batch)

    def push_again(self) -> None:
        if self.batch is not None:
            self.run_push(self.batch)

    def read(self) -> None:
        if self.page.connection is not None:
            self.page.receive(self.wire, self.page.connection)

    def drop(self, lose: int) -> None:
        connection = self.page.connection
        if connection is not None:
            self.wire.gone.add(connection)
            self.page.receive(self.wire, connection, lose)
            self.dropped.append(connection)
            self.page.connection = None

    def close(self) -> None:
        connection = self.page.connection
        if connection is not None:
            self.page.receive(self.wire, connection)
            assert self.socket.invoke("$disconnect", connection) == 200
            self.page.connection = None

    def late_disconnect(self) -> None:
        if self.dropped:
            assert self.socket.invoke("$disconnect", self.dropped.pop(0)) == 200

    def reconnect(self) -> None:
        if self.page.connection is not None:
            return
        connection = f"prop-{next(CONNECTIONS)}"
        assert self.socket.connect(connection) == 200
        self.opened.append(connection)
        self.page.connection = connection
        for cid in self.cids:
            self.subscribe(connection, cid)

    def slow(self, ok: int, failing: int, how: str) -> None:
        if self.page.connection is not None:
            self.wire.plan[self.page.connection] = [None] * ok + [how] * failing

    def http(self) -> None:
        if self.page.connection is None:
            for cid in self.cids:
                for event in whole_feed(self.api, cid, self.page.cursor[cid]):
                    self.page.event(cid, event, socket=False)

    # -- what they do ----------------------------------------------------------------------------------------

    def subscribe(self, connection: str, cid: str) -> None:
        frame = {"action": "subscribe", "conversationId": cid, "after": self.page.cursor[cid]}
        assert self.socket.invoke("subscribe", connection, frame) == 200

    def run_push(self, batch: dict[str, Any]) -> None:
        """SocketPushFunction on ``batch``; then pusher.py's promise: each conversation it pushed is caught up on a
        live connection none of whose posts failed in this push."""
        connection = self.page.connection
        before = None if connection is None else self.wire.failed[connection]
        assert self.pusher.run(batch) == {"batchItemFailures": []}
        if connection is None or connection in self.wire.gone or self.wire.failed[connection] != before:
            return
        for cid in touched(batch["Records"]):
            if cid in self.page.cursor:
                applied = [e["cursor"] for e in self.page.events[cid]]
                has = applied + self.page.unread_cursors(self.wire, connection, cid)
                assert has == [e["cursor"] for e in stored_events(self.feed, cid)], f"{cid} not caught up by its push"

    # -- checks ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        """The page opens the customer's first conversation (its first turn streams to nobody) and its socket."""
        self.turn(0, "answer", 0)
        self.reconnect()

    def check(self) -> None:
        """What the page applied so far is the feed's beginning: nothing skipped, nothing twice, in order."""
        for cid in self.cids:
            applied = self.page.events[cid]
            assert applied == stored_events(self.feed, cid)[: len(applied)], cid
        assert self.page.twice == [] and self.page.errors == []

    def finish(self) -> None:
        """The page catches up: on its socket, by the next push of each conversation (what a failed post left is
        sent then: pusher.py); then after closing it and connecting again (a reload), with nothing twice."""
        connection = self.page.connection
        if connection is not None:
            self.wire.plan.pop(connection, None)
            self.push()
            pusher = self.pusher.pusher()
            for cid in self.cids:  # what the conversation's next stream record would do
                pusher.push_conversation(cid)
            self.read()
            for cid in self.cids:
                assert self.page.events[cid] == stored_events(self.feed, cid), f"{cid} not caught up by the next push"
        self.close()
        self.reconnect()
        self.read()
        for cid in self.cids:
            assert self.page.events[cid] == whole_feed(self.api, cid), cid
            status, view, _ = self.api.call("GET", f"/api/conversations/{cid}")
            assert status == 200, view
            assert transcript(self.page.events[cid]) == history(view), cid
            self.check_deltas(view)
        assert self.page.twice == [] and self.page.errors == []
        posts = [m for c in self.opened for m in self.wire.posts.get(c, [])]
        count(
            "socket-property",
            examples=1,
            **self.tally,
            events_posted=sum(m["type"] == "event" for m in posts),
            deltas_posted=sum(m["type"] == "delta" for m in posts),
            turns_streamed_whole=len(self.full - self.page.lost - self.wire.abandoned),
            **{kind: n for kind, n in self.wire.failed.items() if kind.endswith("_posts_failed")},
        )
        self.wire.failed.clear()

    def check_deltas(self, view: dict[str, Any]) -> None:
        """Each turn's streamed text is its stored text (a prefix of it where a post was lost), and is replaced."""
        stored: dict[str, str] = {}
        for m in view["messages"]:
            if m["role"] == "assistant" and m.get("turnId"):
                stored[m["turnId"]] = stored.get(m["turnId"], "") + m["text"]
        for turn, whole in stored.items():
            streamed = self.page.streams.get(turn)
            if turn in self.full - self.page.lost - self.wire.abandoned:
                assert streamed is not None and not streamed.gap and streamed.text == whole, turn
            if streamed is not None:
                assert streamed.gap or whole.startswith(streamed.text), turn
                assert self.page.showing(turn) == "", turn

    def end(self) -> None:
        """API Gateway's $disconnect of every connection the example opened: the customer's count given back."""
        for connection in self.opened:
            self.socket.invoke("$disconnect", connection)


def run(api: Api, socket: Socket, pusher: Push, wire: Wire, steps: list[tuple[Any, ...]]) -> None:
    scene = Scene(api, socket, pusher, wire)
    try:
        scene.start()
        for name, *args in steps:
            scene.tally[name] += 1
            getattr(scene, name)(*args)
            scene.check()
        scene.finish()
    finally:
        scene.end()


@pytest.fixture
def world(api: Api, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Api, Socket, Push, Wire]]:
    """One recording ``@connections`` for SocketFunction, SocketPushFunction and the turns' deltas."""
    api.overrides.update(SOCKET_CONNECTIONS_PER_OWNER="100", READS_PER_MINUTE="10000")
    api.current = ""
    api.use_function("ChatFunction")
    socket = Socket(api, monkeypatch)
    wire = socket.management = Wire()
    monkeypatch.setattr(posting, "management_client", lambda endpoint_url: wire)
    close = DeltaPublisher.close

    def closing(publisher: DeltaPublisher, timeout: float = CLOSE_SECONDS) -> bool:
        """A loaded machine may keep the posting thread past the bound: that turn's deltas may be cut short."""
        done = close(publisher, timeout)
        if not done:
            wire.abandoned.add(publisher._message["turnId"])
        return done

    monkeypatch.setattr(DeltaPublisher, "close", closing)
    yield api, socket, Push(socket, monkeypatch), wire


def _property(world: tuple[Api, Socket, Push, Wire]) -> Any:
    @given(steps=st.lists(STEP, min_size=4, max_size=16))
    def prop(steps: list[tuple[Any, ...]]) -> None:
        run(*world, steps)

    return prop


def test_the_page_ends_with_the_stored_history(world: tuple[Api, Socket, Push, Wire]) -> None:
    settings(parent=CI, max_examples=max(4, CI.max_examples // 10))(_property(world))()


@pytest.mark.slow
def test_the_page_ends_with_the_stored_history_long(world: tuple[Api, Socket, Push, Wire]) -> None:
    settings(parent=SLOW, max_examples=SLOW.max_examples // 10)(_property(world))()
