"""The reply's text as the model writes it, posted to the conversation's subscribed connections (docs/API.md#websocket).

A turn with a turn id opens one `DeltaPublisher` (`DeltaStreams`), followed or not: a page that subscribes a moment
after the turn began (a new conversation's first turn, sent with ``Prefer: respond-async``) must still see it
written. The loop hands it to each model call as the call's `TextSink`. Pieces are coalesced (a post once
COALESCE_CHARS are pending, or COALESCE_SECONDS after the first of them) and posted from a bounded queue by a
thread that serves this turn alone, from the first piece to `close`: the model's thread only appends under a lock,
so a slow, failing or gone connection costs the turn nothing. A full queue merges the next post into the last
queued one; no text is dropped. The threads are kept for the next turns (`_Workers`): making one per turn was
most of what streaming added to a turn's own time (bench/loop.py's ``streaming``); a turn that writes no text
takes none.

Who follows is read by that thread, only while text flows: on the first post, then again at most once every
REFRESH_SECONDS before a post. So a turn costs one Query on the ``subscribers`` index when its text starts and at
most one a second while it flows, none when the model writes no text. A connection first seen by such a read is
sent the text posted so far in one post (at the turn's offset, 0 unless a resumed turn; ``restart`` when a restart
voided what came before), then the rest as the others get it: its transcript ends with the whole text.

`close` flushes what is pending, bounded, before the turn returns: Lambda freezes a background thread once the
handler has answered, and a thawed one must not post an old turn's text. Nothing here is stored: the stored message
(its ``message`` event) is the truth the client replaces the streamed text with.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from support_agent.sockets.connections import Subscription
from support_agent.sockets.push import Posted

logger = logging.getLogger(__name__)

COALESCE_CHARS = 64
COALESCE_SECONDS = 0.05
QUEUE_SIZE = 16  # posts waiting at most; then merged, so a stalled connection holds a bounded memory
CLOSE_SECONDS = 0.2  # the longest a turn waits for its last deltas
REFRESH_SECONDS = 1.0  # the subscribers are read again at most this often, and only while text flows


class _Workers:
    """Daemon threads that each serve one publisher at a time and are kept for the next: a thread is started only
    when none is idle, so their number is the most publishers ever open at once in this process (one in a Lambda
    execution environment). Daemons, as the per-turn thread was: a post stuck past a turn's end never holds up the
    process's exit."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def run(self, job: Callable[[], None]) -> None:
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # that idle thread will take a job: this one, or one put just before it
        self._jobs.put(job)
        if start:
            threading.Thread(target=self._serve, name="text-deltas", daemon=True).start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # a publisher's own fault; the thread stays for the next
                logger.exception("a text delta publisher failed")
            del job  # an idle thread holds no finished turn's publisher
            with self._lock:
                self._idle += 1


_workers = _Workers()


def _after_fork() -> None:
    """A forked child has none of its parent's threads: it starts its own."""
    global _workers
    _workers = _Workers()


os.register_at_fork(after_in_child=_after_fork)


class Posts(Protocol):
    """`sockets.push.Poster`: never raises for a connection's fault, says GONE for a 410."""

    def post(self, connection_id: str, message: dict[str, Any]) -> Posted: ...


@dataclass(frozen=True)
class Chunk:
    """One post: ``text`` at ``offset`` of the turn's text; ``restart``: what came before it is void."""

    offset: int
    text: str
    restart: bool = False

    def then(self, later: Chunk) -> Chunk:
        """One post for both: a restart voids this one."""
        return later if later.restart else Chunk(self.offset, self.text + later.text, self.restart)


class Coalescer:
    """Pieces into posts, by size and by time; ``now`` is given (no thread, no clock: tested step by step)."""

    def __init__(self, offset: int = 0, chars: int = COALESCE_CHARS, seconds: float = COALESCE_SECONDS) -> None:
        self.offset = offset  # characters of the turn's text sealed into posts so far
        self._chars, self._seconds = chars, seconds
        self._pending: list[str] = []
        self._size = 0
        self._since: float | None = None  # when the first pending piece (or a restart) came
        self._restart = False

    def add(self, piece: str, now: float) -> Chunk | None:
        """The post ``piece`` completes, if any."""
        if not piece:
            return None
        if self._since is None:
            self._since = now
        self._pending.append(piece)
        self._size += len(piece)
        if self._size >= self._chars or now - self._since >= self._seconds:
            return self.seal()
        return None

    def restart(self, now: float) -> None:
        """A retried model call writes the text again: the pending pieces are void, the next post says so (even an
        empty one, so a page drops the void text though the retry writes none)."""
        self._pending, self._size, self.offset, self._restart = [], 0, 0, True
        self._since = now

    @property
    def idle(self) -> bool:
        """Nothing pending (and no restart to say)."""
        return self._since is None

    def due_in(self, now: float) -> float | None:
        """Seconds until the pending pieces are due (0 or less: now); None when nothing is pending."""
        return None if self._since is None else self._since + self._seconds - now

    def seal(self) -> Chunk | None:
        """What is pending, as one post."""
        if self._since is None:
            return None
        chunk = Chunk(self.offset, "".join(self._pending), self._restart)
        self.offset += self._size
        self._pending, self._size, self._since, self._restart = [], 0, None, False
        return chunk


class DeltaPublisher:
    """One turn's `TextSink` (llm/base.py) posting to ``connections``, and to those ``subscribers`` names later (read
    by the posting thread: see the module's docstring); `close` it before the turn returns."""

    def __init__(
        self,
        conversation_id: str,
        turn_id: str,
        connections: Sequence[str],
        poster: Posts,
        *,
        offset: int = 0,
        clock: Callable[[], float] = time.monotonic,
        queue_size: int = QUEUE_SIZE,
        subscribers: Callable[[], Iterable[str]] | None = None,
        refresh_seconds: float | None = None,
    ) -> None:
        self._message = {"type": "delta", "conversationId": conversation_id, "turnId": turn_id}
        self._connections = list(dict.fromkeys(connections))
        self._poster = poster
        self._clock = clock
        self._queue_size = queue_size
        self._cond = threading.Condition()
        self._coalescer = Coalescer(offset)
        self._queue: deque[Chunk] = deque()
        self._closing = False
        self._abandoned = False  # close's bound passed: post nothing more
        # The posting thread's own: who to read, when last read, who was ever seen (a gone connection may stay in
        # the eventually consistent index a while: never posted to again), and the text posted so far from
        # ``_sent_offset`` (a restart voids it), which a connection seen late is sent first.
        self._subscribers = subscribers
        self._refresh_seconds = REFRESH_SECONDS if refresh_seconds is None else refresh_seconds
        self._refreshed_at: float | None = None
        self._seen = set(self._connections)
        self._sent: list[str] = []
        self._sent_offset = offset
        self._restarted = False
        self._started = False  # a thread serves this publisher (from its first piece or restart)
        self._done = threading.Event()  # that thread has finished with it

    # the model's thread ------------------------------------------------------------------------------------

    def delta(self, piece: str) -> None:
        with self._cond:
            if self._closing:
                return
            started = self._coalescer.idle
            chunk = self._coalescer.add(piece, self._clock())
            if chunk is not None:
                self._enqueue(chunk)
            elif started:
                self._cond.notify()  # the thread's timer starts with the first pending piece
            if piece:
                self._start()

    def restart(self) -> None:
        with self._cond:
            if not self._closing:
                self._coalescer.restart(self._clock())
                self._cond.notify()
                self._start()

    def _start(self) -> None:
        """Under the lock: a thread for this publisher, once there is something to post."""
        if not self._started:
            self._started = True
            _workers.run(self._work)

    def close(self, timeout: float = CLOSE_SECONDS) -> bool:
        """Post what is pending, waiting at most ``timeout`` seconds; False when some was left unposted."""
        with self._cond:
            if not self._closing:
                chunk = self._coalescer.seal()
                if chunk is not None:
                    self._enqueue(chunk)
                self._closing = True
                self._cond.notify()
            if not self._started:  # no text came: nothing was pending, no thread to wait for
                return True
        if self._done.wait(timeout):
            return True
        with self._cond:
            self._abandoned = True
            self._queue.clear()
        logger.warning("text deltas left unposted at the end of the turn", extra={"timeout": timeout})
        return False

    def _enqueue(self, chunk: Chunk) -> None:
        """Under the lock. A restart voids what waits; a full queue takes the post into its last one."""
        if chunk.restart:
            self._queue.clear()
        if len(self._queue) >= self._queue_size:
            self._queue[-1] = self._queue[-1].then(chunk)
        else:
            self._queue.append(chunk)
        self._cond.notify()

    # the posting thread ------------------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            while True:
                with self._cond:
                    chunk = self._next()
                if chunk is None:
                    return
                self._post(chunk)
        finally:
            self._done.set()

    def _next(self) -> Chunk | None:
        """Under the lock: the next post, waiting for one; None once closed and drained, or abandoned."""
        while not self._abandoned:
            if self._queue:
                return self._queue.popleft()
            if self._closing:
                return None
            wait = self._coalescer.due_in(self._clock())
            if wait is not None and wait <= 0:
                chunk = self._coalescer.seal()
                if chunk is not None:
                    return chunk
                continue
            self._cond.wait(wait)
        return None

    def _post(self, chunk: Chunk) -> None:
        if chunk.restart:
            self._sent, self._sent_offset, self._restarted = [], 0, True
        for connection_id in self._refresh():
            text = "".join(self._sent)
            if text:  # what it missed, in one post, before this one
                self._send(connection_id, Chunk(self._sent_offset, text, self._restarted))
        for connection_id in list(self._connections):
            self._send(connection_id, chunk)
        self._sent.append(chunk.text)

    def _refresh(self) -> list[str]:
        """The connections following now that were never seen, when a read is due (then they are posted to from
        now on); a read that fails leaves the followers as they were."""
        now = self._clock()
        if self._subscribers is None or (
            self._refreshed_at is not None and now - self._refreshed_at < self._refresh_seconds
        ):
            return []
        self._refreshed_at = now
        try:
            new = [c for c in dict.fromkeys(self._subscribers()) if c not in self._seen]
        except Exception:
            logger.warning("could not read the conversation's subscribers; posting to those known", exc_info=True)
            return []
        self._seen.update(new)
        self._connections.extend(new)
        return new

    def _send(self, connection_id: str, chunk: Chunk) -> None:
        if self._abandoned or connection_id not in self._connections:
            return
        message: dict[str, Any] = {**self._message, "offset": chunk.offset, "text": chunk.text}
        if chunk.restart:
            message["restart"] = True
        try:
            posted = self._poster.post(connection_id, message)
        except Exception:  # the poster never raises for a connection; anything else is still not the turn's
            logger.exception("posting a text delta failed", extra={"connection_id": connection_id})
            return
        if posted is Posted.GONE:  # its subscription leaves the index with the connection (the pusher's)
            self._connections.remove(connection_id)


class DeltaStreams:
    """Opens a turn's `DeltaPublisher`, which reads who follows the conversation itself, only while text flows."""

    def __init__(
        self,
        subscribers: Callable[[str], list[Subscription]],
        poster: Posts,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._subscribers = subscribers
        self._poster = poster
        self._clock = clock

    def __call__(self, conversation_id: str, turn_id: str, offset: int = 0) -> DeltaPublisher | None:
        """``offset``: the characters of the turn's text its earlier model calls stored (a resumed turn). None for a
        turn without an id: no client could tell its deltas from another turn's."""
        if not turn_id:
            return None

        def following() -> list[str]:
            return [s.connection_id for s in self._subscribers(conversation_id)]

        return DeltaPublisher(
            conversation_id, turn_id, (), self._poster, offset=offset, clock=self._clock, subscribers=following
        )
