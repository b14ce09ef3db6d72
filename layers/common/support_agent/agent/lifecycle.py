"""A turn's lifecycle, from its claim to its end, on both paths that run one.

* **The chat request** (api/chat_routes.py keeps only HTTP): a resend is answered from the turn its
  Idempotency-Key names; then the customer's rate limit; then the turn record is claimed, with its key, in one
  transaction; the loop runs, and hands the turn to the worker (agent/handover.py) when its next model call
  would not fit in the synchronous time; else the turn ends in the request.
* **The worker** (agent/worker.py reads the queue's message): the record is read, the conversation's lease taken
  over from the hand-over's token (a duplicate stops there), the loop resumed under a kept lease, and the turn
  ended the same way.

Every end goes through agent/finish.py, as the turn sweep's does (agent/turn_sweep.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from support_agent import observability as obs
from support_agent.agent.finish import TurnEnds
from support_agent.agent.handover import HandedOver, HandOver
from support_agent.agent.loop import KeptForPerson
from support_agent.auth import Principal
from support_agent.clock import parse_iso, utc_now
from support_agent.config import Settings
from support_agent.errors import Conflict, ServiceError
from support_agent.ids import new_conversation_id, ulid
from support_agent.messages import Deadline
from support_agent.store.conversations import ConversationStore
from support_agent.store.turns import Turn, TurnStore, fingerprint

if TYPE_CHECKING:
    from support_agent.agent.loop import Agent
    from support_agent.store.ratelimit import RateLimiter


@dataclass(frozen=True)
class Ask:
    """A customer's message as the edge read it: who asks, about which conversation, and how they want it answered."""

    principal: Principal
    customer_id: int
    conversation_id: str | None  # None: a new conversation
    message: str
    request_id: str
    key: str | None = None  # the Idempotency-Key, well-formed
    at_once: bool = False  # Prefer: respond-async (heeded only where a queue is configured)


@dataclass(frozen=True)
class Answered:
    """The turn ended in the request: ``body`` is its answer, exactly as its record keeps it."""

    turn: Turn
    body: dict[str, Any]


@dataclass(frozen=True)
class Kept:
    """No turn ran: a person answers the conversation and the message was kept for them; ``body`` is the 202's."""

    turn: Turn
    body: dict[str, Any]


@dataclass(frozen=True)
class Running:
    """The turn goes on in the worker; its record says when it ends. ``asked``: at the client's request."""

    turn: Turn
    asked: bool = False


@dataclass(frozen=True)
class Replayed:
    """A resend: the turn its key names, still running or ended with the answer its record keeps."""

    turn: Turn


class LeaseKeeper:
    """Renews ``owner``'s lease every third of its length until stopped, or until it is someone else's."""

    def __init__(self, conversations: ConversationStore, conversation_id: str, owner: str, seconds: int) -> None:
        self._store, self._cid, self._owner, self._seconds = conversations, conversation_id, owner, seconds
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="lease-keeper")

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self._seconds / 3):
            try:
                if not self._store.renew_lease(self._cid, self._owner, int(time.time()) + self._seconds):
                    self.lost = True  # the loop runs no more tools; its writes fail on their lease condition
                    return
            except Exception:  # a throttle or timeout: the next renewal tries again, well before expiry
                obs.logger.warning("lease_renewal_failed", extra={"event": "lease_renewal_failed"})


@dataclass
class TurnLifecycle:
    settings: Settings
    agent: Agent
    turns: TurnStore
    conversations: ConversationStore
    limiter: RateLimiter | None = None  # the request's path: turns per customer per minute
    sqs: Any = None  # the hand-over's queue client
    clock: Callable[[], float] = field(default=time.time)
    now: Callable[[], str] = field(default=utc_now)

    @property
    def ends(self) -> TurnEnds:
        return TurnEnds(self.turns, self.now)

    # -- the chat request's path ----------------------------------------------------------------------------

    def start(self, ask: Ask, sync: Deadline, deadline: Deadline) -> Answered | Kept | Running | Replayed:
        """Claim → run → end, or a resend's turn. ``sync``: what is left of SYNC_TURN_SECONDS from the request's
        start; ``deadline``: the turn's in this function. A domain error propagates once the turn record says
        how it ended."""
        assert self.limiter is not None, "the request's path takes a rate limiter"
        s = self.settings
        print_ = fingerprint(ask.conversation_id, ask.message)
        now_epoch = int(self.clock())
        if ask.key is not None:  # before the rate limit: a resend costs no token and runs nothing
            existing = self.turns.by_key(ask.customer_id, ask.key, print_, now_epoch)
            if existing is not None:
                return self._replayed(existing, now_epoch)
        self.limiter.take(ask.customer_id)  # before the lease and the model: a refused turn costs nothing
        new_id = None if ask.conversation_id else new_conversation_id()
        claim = self.turns.claim(
            ask.customer_id,
            ask.principal.sub,
            ask.key,
            print_,
            ask.conversation_id or str(new_id),
            new_id is not None,
            ask.message,
            now=self.now(),
            now_epoch=now_epoch,
            running_seconds=int(s.turn_deadline_seconds) + s.lease_seconds,
        )
        if claim.turn is None:  # a concurrent request with this key claimed it first
            assert claim.existing is not None
            return self._replayed(claim.existing, now_epoch)
        return self._run(ask, claim.turn, new_id, sync, deadline)

    def _replayed(self, turn: Turn, now_epoch: int) -> Replayed:
        """The turn a resend is answered from; one whose function died mid-turn cannot be (the next turn's repair
        answers what it left open)."""
        if turn.interrupted(now_epoch):
            raise Conflict("the turn with this Idempotency-Key was interrupted; send the message again with a new key")
        return Replayed(turn)

    def _run(
        self, ask: Ask, turn: Turn, new_id: str | None, sync: Deadline, deadline: Deadline
    ) -> Answered | Kept | Running:
        stored: list[bool] = []
        handover = self._handover(turn, sync, ask.at_once)
        try:
            result = self.agent.run_turn(
                ask.principal,
                ask.customer_id,
                ask.conversation_id,
                ask.message,
                ask.request_id,
                deadline,
                new_id=new_id,
                stored=lambda: stored.append(True),
                handover=handover,
                turn_id=turn.turn_id,
            )
        except HandedOver:  # the worker finishes it
            return Running(turn, asked=ask.at_once)
        except ServiceError as exc:
            if stored:  # the history moved: a resend gets this answer, not a second turn
                self.ends.failed(turn, exc)
            else:  # refused before anything was stored: the key is free again
                self.ends.refused(turn, ask.key, exc)
            raise
        if isinstance(result, KeptForPerson):
            return Kept(turn, self.ends.kept(turn, result))
        return Answered(turn, self.ends.completed(turn, result, verbose=self.settings.transparency == "verbose"))

    def _handover(self, turn: Turn, sync: Deadline, at_once: bool) -> HandOver | None:
        """How this turn is handed to the worker when its next model call would not fit (None: no queue)."""
        s = self.settings
        if not s.turn_queue_url:
            return None
        return HandOver(
            self.turns,
            self.conversations,
            self.sqs,
            s.turn_queue_url,
            turn,
            sync,
            s.model_call_budget_seconds,
            at_once=at_once,
            lease_seconds=s.lease_seconds,
            running_seconds=int(s.turn_max_seconds) + 2 * s.lease_seconds,
            clock=self.clock,
        )

    # -- the worker's path ----------------------------------------------------------------------------------

    def resume(self, conversation_id: str, turn_id: str, token: str, lambda_deadline: Deadline | None = None) -> str:
        """Take over → run → end a handed-over turn; what became of it: completed, failed, stale (a duplicate or
        an ended turn), or not_taken (someone still holds the lease: the sweep sends the turn again once free)."""
        turn = self.turns.get(conversation_id, turn_id)
        if turn is None or turn.status != "running" or turn.handover_token != token:
            obs.logger.info("turn_message_stale", extra={"event": "turn_message_stale"})
            return "stale"
        mine = f"worker_{ulid()}"
        now = int(self.clock())
        if not self.turns.take_over(turn, token, mine, now_epoch=now, lease_until=now + self.settings.lease_seconds):
            obs.logger.info("turn_not_taken", extra={"event": "turn_not_taken"})
            return "not_taken"
        return self._resumed(turn, mine, self._worker_deadline(turn, lambda_deadline))

    def _worker_deadline(self, turn: Turn, lambda_deadline: Deadline | None) -> Deadline:
        """TURN_MAX_SECONDS from the turn's start, less the time to persist; sooner if Lambda ends first."""
        s = self.settings
        left = parse_iso(turn.created_at).timestamp() + s.turn_max_seconds - self.clock() - s.persist_reserve_seconds
        deadline = Deadline.after(max(0.0, left))
        if lambda_deadline is not None and lambda_deadline.remaining() < deadline.remaining():
            return lambda_deadline
        return deadline

    def _resumed(self, turn: Turn, owner: str, deadline: Deadline) -> str:
        """The loop from the stored history, as the customer who asked, under ``owner``'s kept lease."""
        principal = Principal(turn.actor, "customer", turn.customer_id)
        try:
            with LeaseKeeper(self.conversations, turn.conversation_id, owner, self.settings.lease_seconds) as keeper:
                try:
                    result = self.agent.resume_turn(
                        principal,
                        turn.customer_id,
                        turn.conversation_id,
                        owner,
                        turn.message,
                        turn.message_seq,
                        turn.carried,
                        deadline,
                        turn_id=turn.turn_id,
                        lease_lost=lambda: keeper.lost,
                    )
                except ServiceError as exc:
                    self.ends.failed(turn, exc)
                    obs.logger.info("turn_failed", extra={"event": "turn_failed", "error": exc.kind})
                    return "failed"
                self.ends.completed(turn, result, verbose=self.settings.transparency == "verbose")
                return "completed"
        finally:
            # Only once the record says how the turn ended: a duplicate delivery that takes the lease over meanwhile
            # would find the turn still running and run it again (its take-over checks the record).
            self.conversations.release_lease(turn.conversation_id, owner)
