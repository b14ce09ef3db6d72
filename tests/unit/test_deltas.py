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
        self.threads: list[threading.Thread] = []  # the thread of each post

    def post(self, connection_id: str, message: dict[str, Any]) -> Posted:
        self.posts.setdefault(connection_id, []).append(message)
        self.threads.append(threading.current_thread())
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
    assert p._done.wait(LONG_WAIT)  # its thread let it go
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


def test_a_conversation_without_subscribers_gets_a_publisher_that_reads_them_only_once_text_flows() -> None:
    asked: list[str] = []

    def subscribers(conversation_id: str) -> list[Subscription]:
        asked.append(conversation_id)
        return []

    poster = Recorder()
    streams = DeltaStreams(subscribers, poster, clock=Clock())
    assert streams("conv_1", "") is None  # no turn id: nothing a client could place
    quiet = streams("conv_1", "turn_0")
    assert quiet is not None and quiet.close() is True
    assert asked == []  # no text, no read
    p = streams("conv_1", "turn_1")
    assert p is not None
    p.delta("x" * 64)
    assert p.close() is True
    assert asked == ["conv_1"] and poster.posts == {}


def test_subscribers_that_cannot_be_read_mean_no_stream_not_a_failed_turn() -> None:
    def subscribers(conversation_id: str) -> list[Subscription]:
        raise RuntimeError("AccessDenied")

    poster = Recorder()
    p = DeltaStreams(subscribers, poster, clock=Clock())("conv_1", "turn_1")
    assert p is not None
    p.delta("y" * 70)
    assert p.close() is True
    assert poster.posts == {}


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


# ------------------------------------------------------------------ a subscriber that comes late


class Following:
    """The conversation's followers as the index answers them, changed by the test; each read's clock time kept."""

    def __init__(self, clock: Clock, *connections: str) -> None:
        self.clock = clock
        self.connections = list(connections)
        self.reads: list[float] = []

    def __call__(self) -> list[str]:
        self.reads.append(self.clock.t)
        return list(self.connections)


def until(condition: Any) -> None:
    """Waits for the posting thread (a liveness guard, never a measure)."""
    deadline = threading.Event()
    timer = threading.Timer(LONG_WAIT, deadline.set)
    timer.start()
    try:
        while not condition():
            assert not deadline.wait(0.001), "the posting thread did not post"
    finally:
        timer.cancel()


def posted(poster: Recorder, connection: str) -> int:
    return len(poster.posts.get(connection, []))


def assembled(posts: list[dict[str, Any]]) -> str:
    """What a page holds after these posts: each text put at its offset, what followed dropped (a restart: all)."""
    text = ""
    for m in posts:
        assert m["offset"] <= len(text) or m.get("restart"), f"a gap before {m}"
        text = ("" if m.get("restart") else text[: m["offset"]]) + m["text"]
    return text


def late_publisher(poster: Recorder, clock: Clock, following: Following, offset: int = 0) -> DeltaPublisher:
    return DeltaPublisher("conv_1", "turn_1", (), poster, offset=offset, clock=clock, subscribers=following)


def test_a_late_subscriber_gets_the_text_so_far_at_offset_0_then_the_rest() -> None:
    poster, clock = Recorder(), Clock()
    following = Following(clock, "c1")
    p = late_publisher(poster, clock, following)
    p.delta("a" * 64)
    until(lambda: posted(poster, "c1") == 1)
    following.connections.append("c2")  # subscribes now: the next read sees it
    clock.t += 0.5
    p.delta("b" * 64)  # not yet read again
    until(lambda: posted(poster, "c1") == 2)
    assert "c2" not in poster.posts
    clock.t += 0.5
    p.delta("c" * 64)
    p.delta("tail")
    assert p.close() is True
    late = [(m["offset"], m["text"], m.get("restart")) for m in poster.posts["c2"]]
    assert late[:2] == [(0, "a" * 64 + "b" * 64, None), (128, "c" * 64, None)]
    assert assembled(poster.posts["c2"]) == assembled(poster.posts["c1"]) == "a" * 64 + "b" * 64 + "c" * 64 + "tail"
    assert texts(poster.posts["c1"]) == "a" * 64 + "b" * 64 + "c" * 64 + "tail"  # never sent anything twice


def test_a_resumed_turns_late_subscriber_is_caught_up_from_the_turns_offset() -> None:
    poster, clock = Recorder(), Clock()
    following = Following(clock)
    p = late_publisher(poster, clock, following, offset=12)
    p.delta("a" * 64)
    until(lambda: len(following.reads) == 1)
    following.connections.append("c2")
    clock.t += 1
    p.delta("b" * 64)
    assert p.close() is True
    assert [(m["offset"], m["text"]) for m in poster.posts["c2"]] == [(12, "a" * 64), (76, "b" * 64)]


def test_a_subscriber_joining_after_a_restart_gets_only_the_text_written_since() -> None:
    poster, clock = Recorder(), Clock()
    following = Following(clock, "c1")
    p = late_publisher(poster, clock, following)
    p.delta("v" * 64)
    until(lambda: posted(poster, "c1") == 1)
    p.restart()
    p.delta("w" * 64)
    until(lambda: posted(poster, "c1") == 2)
    following.connections.append("c2")
    clock.t += 1
    p.delta("x" * 64)
    assert p.close() is True
    assert [(m["offset"], m["text"], m.get("restart")) for m in poster.posts["c1"]] == [
        (0, "v" * 64, None),
        (0, "w" * 64, True),
        (64, "x" * 64, None),
    ]
    assert [(m["offset"], m["text"], m.get("restart")) for m in poster.posts["c2"]] == [
        (0, "w" * 64, True),  # the voided text never reaches it
        (64, "x" * 64, None),
    ]


def test_the_subscribers_are_read_at_most_once_a_second_and_only_while_text_flows() -> None:
    poster, clock = Recorder(), Clock()
    following = Following(clock, "c1")
    p = late_publisher(poster, clock, following)
    clock.t += 5  # no text yet: no read
    assert following.reads == []
    for n in range(12):  # a post every 0.25 s for 3 s
        p.delta(str(n % 10) * 64)
        until(lambda n=n: posted(poster, "c1") == n + 1)
        clock.t += 0.25
    clock.t += 30  # the model thinks, or runs a tool: no text, no read
    p.delta("z" * 64)
    assert p.close() is True
    assert following.reads == [105.0, 106.0, 107.0, 138.0]  # 12 posts in 3 s: 3 reads


def test_a_gone_connection_still_in_the_index_is_not_posted_to_again() -> None:
    poster, clock = Recorder(), Clock()
    poster.gone.add("c1")
    following = Following(clock, "c1", "c2")
    p = late_publisher(poster, clock, following)
    p.delta("a" * 64)
    until(lambda: posted(poster, "c2") == 1)
    clock.t += 1
    p.delta("b" * 64)
    assert p.close() is True
    assert len(following.reads) == 2
    assert posted(poster, "c1") == 1 and texts(poster.posts["c2"]) == "a" * 64 + "b" * 64


# ------------------------------------------------------------------ the posting threads, kept for the next turns


def _posting_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "text-deltas"}


def test_a_turn_that_writes_no_text_takes_no_thread() -> None:
    poster, clock = Recorder(gated=True), Clock()  # a post would hang: none is made
    before = _posting_threads()
    p = publisher(poster, clock)
    p.delta("")  # an empty piece is no text
    assert p.close(timeout=LONG_WAIT) is True
    assert _posting_threads() == before and poster.posts == {}
    assert not p._done.is_set()  # no thread ever served it


def test_the_next_turns_reuse_the_posting_thread() -> None:
    poster, clock = Recorder(), Clock()
    first = publisher(poster, clock)
    first.delta("one")
    assert first.close(timeout=LONG_WAIT)
    for n in range(5):
        p = DeltaPublisher("conv_1", f"turn_{n}", ("c1",), poster, clock=clock)
        p.delta(f"turn {n}")
        assert p.close(timeout=LONG_WAIT)
    assert [m["text"] for m in poster.posts["c1"]] == ["one"] + [f"turn {n}" for n in range(5)]
    assert len(set(poster.threads)) == 1 and poster.threads[0].daemon  # one thread made, kept for the next turns


def test_a_turn_held_by_a_stalled_post_does_not_hold_the_next() -> None:
    stalled, clock = Recorder(gated=True), Clock()
    held = publisher(stalled, clock)
    held.delta("a" * 64)
    assert stalled.entered.wait(LONG_WAIT)
    assert held.close(timeout=0.01) is False
    poster = Recorder()
    p = publisher(poster, clock)
    p.delta("next turn")
    assert p.close(timeout=LONG_WAIT)  # a thread of its own while the other is held
    assert texts(poster.posts["c1"]) == "next turn"
    assert poster.threads[0] is not stalled.threads[0]
    stalled.gate.set()
    assert held._done.wait(LONG_WAIT)
    assert [m["text"] for m in stalled.posts["c1"]] == ["a" * 64]
