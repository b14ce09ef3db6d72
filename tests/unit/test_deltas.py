"""The reply's text deltas (sockets/deltas.py): coalescing by size and by time (a fake clock), offsets, restarts,
the bounded flush at close, and a poster that fails or blocks never reaching the model's thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from support_agent.sockets.connections import Subscription
from support_agent.sockets.deltas import Chunk, Coalescer, DeltaPublisher, DeltaStreams
from support_agent.sockets.push import Posted

LONG_WAIT = 30.0  # a liveness guard against a deadlock, never a measure


class _Any:
    def __eq__(self, other: object) -> bool:
        return True


ANY: Any = _Any()


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Recorder:
    """A Poster: records each post per connection; ``gate`` (when set up) holds every post until opened; a connection
    in ``gone`` answers GONE, one in ``failing`` raises."""

    def __init__(self, gated: bool = False) -> None:
        self.posts: dict[str, list[dict[str, Any]]] = {}
        self.gone: set[str] = set()
        self.failing: set[str] = set()
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.entered = threading.Event()

    def post(self, connection_id: str, message: dict[str, Any]) -> Posted:
        self.posts.setdefault(connection_id, []).append(message)
        self.entered.set()
        self.gate.wait()
        if connection_id in self.failing:
            raise RuntimeError("the poster broke")
        return Posted.GONE if connection_id in self.gone else Posted.SENT


def publisher(poster: Recorder, clock: Clock, *connections: str, **kw: Any) -> DeltaPublisher:
    return DeltaPublisher("conv_1", "turn_1", connections or ("c1",), poster, clock=clock, **kw)


def texts(posts: list[dict[str, Any]]) -> str:
    return "".join(p["text"] for p in posts)


# ------------------------------------------------------------------ the coalescing rule


def test_pieces_are_posted_once_64_characters_are_pending() -> None:
    c = Coalescer()
    assert c.add("a" * 40, 0.0) is None
    assert c.add("", 0.0) is None
    assert c.add("b" * 23, 0.01) is None  # 63
    assert c.add("c", 0.02) == Chunk(0, "a" * 40 + "b" * 23 + "c")
    assert c.add("d" * 100, 0.03) == Chunk(64, "d" * 100)  # one long piece is one post, not split
    assert c.idle and c.seal() is None


def test_pieces_are_posted_50_ms_after_the_first_pending_one() -> None:
    c = Coalescer()
    assert c.add("Hel", 10.0) is None
    assert c.due_in(10.0) == pytest.approx(0.05)
    assert c.add("lo", 10.04) is None
    assert c.due_in(10.049) == pytest.approx(0.001)
    assert c.add(", w", 10.05) == Chunk(0, "Hello, w")
    assert c.due_in(10.05) is None  # nothing pending: no timer
    assert c.add("orld", 10.2) is None  # the window starts again with this piece
    assert c.due_in(10.26) is not None and c.due_in(10.26) < 0  # due: the posting thread seals it
    assert c.seal() == Chunk(8, "orld")


def test_a_restart_posts_from_offset_0_and_says_so_even_without_text() -> None:
    c = Coalescer(offset=5)  # a resumed turn's text goes on after what was stored
    assert c.add("a" * 64, 0.0) == Chunk(5, "a" * 64)
    c.add("void", 0.01)
    c.restart(0.02)
    assert not c.idle and c.due_in(0.02) == pytest.approx(0.05)
    assert c.add("again", 0.03) is None
    assert c.seal() == Chunk(0, "again", restart=True)
    assert c.add("b" * 64, 0.1) == Chunk(5, "b" * 64)  # only the first post after it says restart
    c.restart(0.2)
    assert c.seal() == Chunk(0, "", restart=True)


def test_merged_posts_keep_the_first_offset_and_a_restart_voids_what_it_follows() -> None:
    assert Chunk(3, "ab").then(Chunk(5, "cd")) == Chunk(3, "abcd")
    assert Chunk(0, "ab", restart=True).then(Chunk(2, "cd")) == Chunk(0, "abcd", restart=True)
    assert Chunk(3, "ab").then(Chunk(0, "x", restart=True)) == Chunk(0, "x", restart=True)


# ------------------------------------------------------------------ the publisher


def test_close_flushes_what_is_pending_and_posts_in_order_to_every_subscriber() -> None:
    poster, clock = Recorder(), Clock()
    p = publisher(poster, clock, "c1", "c2")
    pieces = [f"word{n} " for n in range(40)]
    for piece in pieces[:5]:
        p.delta(piece)  # 30 characters, the clock stands still: not due
    assert poster.posts == {}
    for piece in pieces[5:]:
        p.delta(piece)
    assert p.close() is True
    first, second = poster.posts["c1"], poster.posts["c2"]
    assert first == second and texts(first) == "".join(pieces)
    offsets = [m["offset"] for m in first]
    assert offsets == [sum(len(m["text"]) for m in first[:i]) for i in range(len(first))]
    assert all(len(m["text"]) >= 64 for m in first[:-1])  # coalesced
    assert first[0] == {"type": "delta", "conversationId": "conv_1", "turnId": "turn_1", "offset": 0, "text": ANY}
    assert not any("restart" in m for m in first)
    p.delta("late")  # after close: nothing
    assert texts(poster.posts["c1"]) == "".join(pieces)


def test_the_posting_thread_posts_a_full_chunk_before_close() -> None:
    poster, clock = Recorder(), Clock()
    p = publisher(poster, clock)
    p.delta("x" * 70)
    assert poster.entered.wait(LONG_WAIT)
    assert poster.posts["c1"][0]["text"] == "x" * 70
    p.close()


def test_a_restart_voids_the_queued_text_and_the_next_post_says_restart() -> None:
    poster, clock = Recorder(gated=True), Clock()
    p = publisher(poster, clock)
    p.delta("a" * 64)
    assert poster.entered.wait(LONG_WAIT)  # the thread holds the first post: what follows waits in the queue
    p.delta("b" * 64)
    p.restart()
    p.delta("hello ")
    p.delta("!" * 64)
    poster.gate.set()
    assert p.close() is True
    assert [(m["offset"], m["text"], m.get("restart")) for m in poster.posts["c1"]] == [
        (0, "a" * 64, None),
        (0, "hello " + "!" * 64, True),
    ]


def test_a_stalled_poster_never_blocks_delta_and_a_full_queue_merges_without_dropping() -> None:
    poster, clock = Recorder(gated=True), Clock()
    p = publisher(poster, clock, queue_size=4)
    pieces = [f"{n:03d}" * 22 for n in range(200)]  # 66 characters each: every piece is a post
    done = threading.Event()

    def write() -> None:
        for piece in pieces:
            p.delta(piece)
        done.set()

    threading.Thread(target=write, daemon=True).start()
    assert done.wait(LONG_WAIT), "delta() waited for the poster"
    poster.gate.set()
    assert p.close(timeout=LONG_WAIT) is True
    posts = poster.posts["c1"]
    assert texts(posts) == "".join(pieces)
    assert len(posts) <= 1 + 4  # the one held, then the bounded queue's merged posts
    assert [m["offset"] for m in posts] == [sum(len(m["text"]) for m in posts[:i]) for i in range(len(posts))]


def test_close_is_bounded_and_then_nothing_more_is_posted() -> None:
    poster, clock = Recorder(gated=True), Clock()
    p = publisher(poster, clock)
    p.delta("a" * 64)
    assert poster.entered.wait(LONG_WAIT)
    p.delta("b" * 64)
    p.delta("tail")
    assert p.close(timeout=0.01) is False  # the thread is still held: the turn goes on without it
    poster.gate.set()
    p._thread.join(LONG_WAIT)
    assert not p._thread.is_alive()
    assert [m["text"] for m in poster.posts["c1"]] == ["a" * 64]


def test_a_failing_or_gone_connection_does_not_stop_the_others() -> None:
    poster, clock = Recorder(), Clock()
    poster.failing.add("broken")
    poster.gone.add("gone")
    p = publisher(poster, clock, "broken", "gone", "ok")
    for _ in range(3):
        p.delta("y" * 64)
    assert p.close() is True
    assert texts(poster.posts["ok"]) == "y" * 192
    assert len(poster.posts["broken"]) == len(poster.posts["ok"])  # tried each time: a failure is not a 410
    assert len(poster.posts["gone"]) == 1  # 410: posted to no more


# ------------------------------------------------------------------ opening a turn's publisher


def test_a_conversation_without_subscribers_gets_no_publisher() -> None:
    asked: list[str] = []

    def subscribers(conversation_id: str) -> list[Subscription]:
        asked.append(conversation_id)
        return []

    assert DeltaStreams(subscribers, Recorder())("conv_1", "turn_1") is None
    assert asked == ["conv_1"]


def test_subscribers_that_cannot_be_read_mean_no_stream_not_a_failed_turn() -> None:
    def subscribers(conversation_id: str) -> list[Subscription]:
        raise RuntimeError("AccessDenied")

    assert DeltaStreams(subscribers, Recorder())("conv_1", "turn_1") is None


def test_a_followed_conversation_gets_a_publisher_from_the_given_offset() -> None:
    poster = Recorder()
    streams = DeltaStreams(lambda cid: [Subscription("c9", cid, "cur")], poster, clock=Clock())
    p = streams("conv_1", "turn_1", 12)
    assert p is not None
    p.delta("more")
    assert p.close() is True
    assert poster.posts == {
        "c9": [{"type": "delta", "conversationId": "conv_1", "turnId": "turn_1", "offset": 12, "text": "more"}]
    }
