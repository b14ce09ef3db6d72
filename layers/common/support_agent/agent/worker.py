"""TurnWorkerFunction's logic: a handed-over turn (agent/handover.py) finished by the same loop.

The message ``{turnId, conversationId, token}`` may arrive twice (SQS delivers at least once; a retried
``SendMessage`` can enqueue twice; the turn sweep sends again when a worker died). The worker takes the lease
from the token to a fresh token of its own in one transaction with a check of the turn record
(``TurnStore.take_over``): a duplicate fails there and stops, before any model call. Every later write is
conditioned on the new token (the loop's appends), so a worker that lost the lease cannot write. A thread
renews the lease while the turn runs (a model call with its retries can outlast the lease). The turn ends by
``TURN_MAX_SECONDS`` from its start (stop reason ``deadline``); its answer goes on its record, as the
synchronous path's would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from support_agent import observability as obs
from support_agent.agent.loop import Agent
from support_agent.api.contract import error_body, status_and_code
from support_agent.api.views import turn_body
from support_agent.auth import Principal
from support_agent.clock import parse_iso, utc_now
from support_agent.config import Settings
from support_agent.errors import ServiceError
from support_agent.ids import ulid
from support_agent.messages import Deadline
from support_agent.store.conversations import ConversationStore
from support_agent.store.turns import TurnStore


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
class TurnWorker:
    settings: Settings
    agent: Agent
    turns: TurnStore
    conversations: ConversationStore
    clock: Callable[[], float] = field(default=time.time)
    now: Callable[[], str] = field(default=utc_now)

    def run(self, message: dict[str, Any], lambda_deadline: Deadline | None = None) -> str:
        """One queue message; what became of it: completed, failed, stale (a duplicate or an ended turn),
        or not_taken (someone still holds the lease: the sweep sends the turn again once it is free)."""
        cid, turn_id, token = str(message["conversationId"]), str(message["turnId"]), str(message["token"])
        obs.logger.append_keys(conversation_id=cid, turn_id=turn_id)
        turn = self.turns.get(cid, turn_id)
        if turn is None or turn.status != "running" or turn.handover_token != token:
            obs.logger.info("turn_message_stale", extra={"event": "turn_message_stale"})
            return "stale"
        mine = f"worker_{ulid()}"
        now = int(self.clock())
        lease = self.settings.lease_seconds
        if not self.turns.take_over(turn, token, mine, now_epoch=now, lease_until=now + lease):
            obs.logger.info("turn_not_taken", extra={"event": "turn_not_taken"})
            return "not_taken"
        started = parse_iso(turn.created_at).timestamp()
        left = started + self.settings.turn_max_seconds - self.clock() - self.settings.persist_reserve_seconds
        deadline = Deadline.after(max(0.0, left))
        if lambda_deadline is not None and lambda_deadline.remaining() < deadline.remaining():
            deadline = lambda_deadline
        principal = Principal(turn.actor, "customer", turn.customer_id)
        with LeaseKeeper(self.conversations, cid, mine, lease) as keeper:
            try:
                result = self.agent.resume_turn(
                    principal,
                    turn.customer_id,
                    cid,
                    mine,
                    turn.message,
                    turn.message_seq,
                    turn.carried,
                    deadline,
                    turn_id=turn.turn_id,
                    lease_lost=lambda: keeper.lost,
                )
            except ServiceError as exc:
                status, _ = status_and_code(exc)
                self.turns.finish(turn, status, error_body(exc), self.now())
                obs.logger.info("turn_failed", extra={"event": "turn_failed", "error": exc.kind})
                return "failed"
        self.turns.finish(turn, 200, turn_body(result, turn_id, self.settings.transparency == "verbose"), self.now())
        return "completed"
