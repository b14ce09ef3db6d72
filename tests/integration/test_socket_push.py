"""Stored events pushed over the WebSocket, on the deployed template: SocketPushFunction's handler fed the
Conversations table's real stream records (moto's, read as the event source mapping would), its posts caught by
test_sockets' recording `@connections` client. What is pushed is what GET /api/conversations/{id}/events answers
for the same cursors: in order, quiet mode included, never twice, never to another customer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from support_agent import wiring
from support_agent.config import get_settings
from support_agent.sockets.connections import Subscription
from support_agent.sockets.pusher import Pusher, conversation_of, touched
from tests.integration.conftest import Api
from tests.integration.test_audit_watcher_stream import Stream
from tests.integration.test_sockets import Socket, item
from tests.integration.test_sockets import socket as socket
from tests.support.scripted import answer, tool_use, tools


class Push:
    """The pusher as SocketPushFunction builds it, on the socket's recording `@connections`, and the stream."""

    def __init__(self, socket: Socket, monkeypatch: pytest.MonkeyPatch) -> None:
        self.socket, self.api = socket, socket.api
        self.stream = Stream(self.api.stack.physical_ids["ConversationsTable"])
        self._monkeypatch = monkeypatch

    def pusher(self) -> Pusher:
        self.api.current = ""  # the environment again: a test may have changed api.overrides
        self.api.use_function("SocketPushFunction")
        built = wiring.build_socket_pusher(get_settings(), management=self.socket.management)
        self._monkeypatch.setattr(wiring, "socket_pusher", lambda: built)
        return built

    def run(self, event: dict[str, Any]) -> dict[str, Any]:
        self.pusher()
        return dict(self.api.handlers["SocketPushFunction"](event, None))


@pytest.fixture
def push(socket: Socket, monkeypatch: pytest.MonkeyPatch) -> Iterator[Push]:
    yield Push(socket, monkeypatch)


def events(socket: Socket, connection_id: str) -> list[dict[str, Any]]:
    posted = socket.management.posts.get(connection_id, [])
    assert all(m["type"] != "event" or set(m) == {"type", "conversationId", "event"} for m in posted)
    return [m["event"] for m in posted if m["type"] == "event"]


def feed(api: Api, cid: str, after: str | None = None) -> tuple[list[dict[str, Any]], str]:
    path = f"/api/conversations/{cid}/events" + (f"?after={after}" if after else "")
    status, body, _ = api.call("GET", path)
    assert status == 200, body
    return body["events"], body["nextCursor"]


def turn(api: Api, cid: str | None, message: str = "Where is order 1042?") -> str:
    """A turn with a tool step (its name, input and result are what quiet mode hides)."""
    api.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("It shipped on Monday.")]
    status, body, _ = api.call("POST", "/api/chat", {"conversationId": cid, "message": message})
    assert status == 200, body
    return str(body["conversationId"])


def subscribed(socket: Socket, connection_id: str, cid: str, after: str | None, token: str = "default") -> None:
    assert socket.connect(connection_id, token) == 200
    frame = {"action": "subscribe", "conversationId": cid, "after": after}
    assert socket.invoke("subscribe", connection_id, frame) == 200
    assert socket.answers(connection_id)[0]["type"] == "subscribed"


# ------------------------------------------------------------------ what the stream says


def test_only_a_conversations_feed_items_name_it() -> None:
    cid = "conv_01JF3R0000000000000000000Z"
    assert [conversation_of(k) for k in (cid, f"turn#{cid}", f"note#{cid}")] == [cid] * 3
    for other in ("rate#reads#7#1", "poll#7", f"outcome#{cid}", f"rating#{cid}", f"idem#{cid}", "conv_x"):
        assert conversation_of(other) is None, other
    records = [{"dynamodb": {"Keys": {"conversation_id": {"S": k}}}} for k in (f"turn#{cid}", "poll#7", cid)]
    assert touched(records) == [cid]


# ------------------------------------------------------------------ a turn's events pushed


def test_a_turns_events_are_pushed_in_order_as_the_feed_reads_them_and_once(socket: Socket, push: Push) -> None:
    cid = turn(socket.api, None)
    _, end = feed(socket.api, cid)
    subscribed(socket, "p-turn", cid, end)
    assert events(socket, "p-turn") == []  # nothing after the cursor yet
    push.stream = Stream(socket.api.stack.physical_ids["ConversationsTable"])
    turn(socket.api, cid, "And order 1043?")
    record_batch = push.stream.event()
    assert cid in touched(record_batch["Records"])
    assert push.run(record_batch) == {"batchItemFailures": []}
    pushed = events(socket, "p-turn")
    expected, _ = feed(socket.api, cid, end)
    assert pushed == expected and pushed  # same events, same order, same cursors
    kinds = [e["type"] for e in pushed]
    assert kinds[0] == "turn.started" and kinds[-1] == "turn.completed" and "tool.finished" in kinds
    (requested,) = [e for e in pushed if e["type"] == "tool.requested"]
    assert requested["name"] == "lookup_order" and requested["input"] == {"order_id": 1042}  # verbose here
    # The same records again (a retried batch, a second pusher): the cursor is claimed, nothing is sent twice.
    assert push.run(record_batch) == {"batchItemFailures": []}
    assert events(socket, "p-turn") == expected


def test_a_pusher_that_loses_the_claim_sends_nothing_twice(socket: Socket, push: Push) -> None:
    cid = turn(socket.api, None)
    subscribed(socket, "p-race", cid, None)
    delivered = events(socket, "p-race")  # the backlog, claimed by the subscribe
    assert delivered == feed(socket.api, cid)[0]
    pusher = push.pusher()
    # A pusher that read the subscription before the backlog was claimed: its claim from the old cursor fails, it
    # reads on from the cursor the winner stored and finds nothing new.
    assert pusher.push(Subscription("p-race", cid, ""), 7) == 0
    assert events(socket, "p-race") == delivered
    # The same, with new events stored since: it posts exactly those (no duplicate, no gap).
    turn(socket.api, cid, "And order 1043?")
    assert pusher.push(Subscription("p-race", cid, ""), 7) > 0
    assert events(socket, "p-race") == feed(socket.api, cid)[0]


def test_subscribe_with_a_cursor_in_the_middle_gets_exactly_the_rest(socket: Socket, push: Push) -> None:
    cid = turn(socket.api, None)
    cid = turn(socket.api, cid, "And order 1043?")
    everything, _ = feed(socket.api, cid)
    middle = len(everything) // 2
    subscribed(socket, "p-resume", cid, everything[middle - 1]["cursor"])
    assert events(socket, "p-resume") == everything[middle:]
    # A push of the same conversation now has nothing new for it: no gap, no duplicate.
    push.pusher().push_conversation(cid)
    assert events(socket, "p-resume") == everything[middle:]


def test_a_gone_connection_is_marked_and_skipped_next_time(socket: Socket, push: Push) -> None:
    cid = turn(socket.api, None)
    _, end = feed(socket.api, cid)
    subscribed(socket, "p-gone", cid, end)
    subscribed(socket, "p-here", cid, end)
    socket.management.gone.add("p-gone")
    turn(socket.api, cid, "And order 1043?")
    assert push.pusher().push_conversation(cid) > 0
    assert events(socket, "p-gone") == [] and events(socket, "p-here")
    connection = item(socket.api, "conn#p-gone", "conn")
    assert connection is not None and "gone_at" in connection
    assert [s.connection_id for s in socket.store().subscribers(cid)] == ["p-here"]
    socket.management.gone.discard("p-gone")  # were it posted to again, it would be recorded now
    turn(socket.api, cid, "And order 1044?")
    push.pusher().push_conversation(cid)
    assert events(socket, "p-gone") == []
    assert events(socket, "p-here") == feed(socket.api, cid, end)[0]


def test_quiet_mode_hides_tool_data_in_pushed_events_as_in_the_feed(socket: Socket, push: Push) -> None:
    socket.api.overrides["TRANSPARENCY"] = "quiet"
    socket.api.current = ""
    cid = turn(socket.api, None)
    subscribed(socket, "p-quiet", cid, None)  # the backlog: SocketFunction's feed, quiet too
    backlog = events(socket, "p-quiet")
    turn(socket.api, cid, "And order 1043?")
    push.pusher().push_conversation(cid)
    pushed = events(socket, "p-quiet")
    assert pushed == feed(socket.api, cid)[0] and len(pushed) > len(backlog)
    tool_events = [e for e in pushed if e["type"].startswith("tool.")]
    assert len(tool_events) == 4
    for event in tool_events:
        assert not {"name", "input", "result"} & set(event), event


def test_another_customers_conversation_is_never_pushed_to(socket: Socket, push: Push) -> None:
    theirs = turn(socket.api, None)  # customer 7's
    stranger = socket.api.token("customer-8", customer_id=8)
    assert socket.connect("p-8", stranger) == 200
    socket.invoke("subscribe", "p-8", {"action": "subscribe", "conversationId": theirs})
    assert [m.get("code") for m in socket.answers("p-8")] == ["not_found"]
    turn(socket.api, theirs, "And order 1043?")
    push.pusher().push_conversation(theirs)
    assert events(socket, "p-8") == []


def test_a_failed_post_gives_the_rest_back_and_the_next_push_sends_it(
    socket: Socket, push: Push, capsys: pytest.CaptureFixture[str]
) -> None:
    cid = turn(socket.api, None)
    _, end = feed(socket.api, cid)
    subscribed(socket, "p-slow", cid, end)
    push.stream = Stream(socket.api.stack.physical_ids["ConversationsTable"])
    turn(socket.api, cid, "And order 1043?")
    expected, _ = feed(socket.api, cid, end)
    batch = push.stream.event()
    posts = socket.management.posts
    # The third event's post is throttled once (botocore's own retry is bypassed by the recording client).
    original = socket.management.post_to_connection

    def third_fails(ConnectionId: str, Data: bytes) -> None:
        if ConnectionId == "p-slow" and len([m for m in posts.get("p-slow", []) if m["type"] == "event"]) == 2:
            socket.management.failing["p-slow"] = 1
            push._monkeypatch.setattr(socket.management, "post_to_connection", original)
        original(ConnectionId, Data)

    push._monkeypatch.setattr(socket.management, "post_to_connection", third_fails)
    capsys.readouterr()
    assert push.run(batch) == {"batchItemFailures": []}  # a client's failed post is no record's failure
    assert events(socket, "p-slow") == expected[:2]
    assert '"SocketPostsFailed":[1.0]' in capsys.readouterr().out.replace(" ", "")  # SocketPushFailuresAlarm's
    # The conversation's next push (any record of it) sends the rest, once.
    assert push.run(batch) == {"batchItemFailures": []}
    assert events(socket, "p-slow") == expected and len(expected) > 3


def test_a_throttled_conversation_fails_its_record_alone(socket: Socket, push: Push) -> None:
    first = turn(socket.api, None)
    second = turn(socket.api, None)
    subscribed(socket, "p-one", first, feed(socket.api, first)[1])
    subscribed(socket, "p-two", second, feed(socket.api, second)[1])
    push.stream = Stream(socket.api.stack.physical_ids["ConversationsTable"])
    turn(socket.api, first, "Again?")
    turn(socket.api, second, "Again?")
    batch = push.stream.event()
    pusher = push.pusher()
    read = pusher._feed.read

    def throttled(cursor: Any, owner: int) -> Any:
        if cursor.conversation_id == first:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "Query")
        return read(cursor, owner)

    push._monkeypatch.setattr(pusher._feed, "read", throttled)
    out = push.api.handlers["SocketPushFunction"](batch, None)
    failed = {f["itemIdentifier"] for f in out["batchItemFailures"]}
    first_records = [r["dynamodb"]["SequenceNumber"] for r in batch["Records"] if touched([r]) == [first]]
    assert failed and failed <= set(first_records)
    assert events(socket, "p-one") == []
    assert events(socket, "p-two") == feed(socket.api, second, socket.answers("p-two")[0]["cursor"])[0]
