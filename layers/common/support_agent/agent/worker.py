"""TurnWorkerFunction's logic: a TurnQueue message → the worker's part of a handed-over turn (agent/handover.py),
run by the turn's lifecycle (agent/lifecycle.py) with the same loop.

The message ``{turnId, conversationId, token}`` may arrive twice (SQS delivers at least once; a retried
``SendMessage`` can enqueue twice; the turn sweep sends again when a worker died). The worker takes the lease
from the token to a fresh token of its own in one transaction with a check of the turn record
(``TurnStore.take_over``): a duplicate fails there and stops, before any model call. Every later write is
conditioned on the new token (the loop's appends), so a worker that lost the lease cannot write. A thread
renews the lease while the turn runs (``LeaseKeeper``: a model call with its retries can outlast the lease). The
turn ends by ``TURN_MAX_SECONDS`` from its start (stop reason ``deadline``); its answer goes on its record, as the
synchronous path's would (agent/finish.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from support_agent import observability as obs
from support_agent.agent.lifecycle import TurnLifecycle
from support_agent.messages import Deadline


@dataclass
class TurnWorker:
    """The worker's side of the turn's lifecycle (its stores and clocks are the lifecycle's)."""

    lifecycle: TurnLifecycle

    def run(self, message: dict[str, Any], lambda_deadline: Deadline | None = None) -> str:
        """One queue message; what became of it: completed, failed, stale (a duplicate or an ended turn),
        or not_taken (someone still holds the lease: the sweep sends the turn again once it is free)."""
        cid, turn_id, token = str(message["conversationId"]), str(message["turnId"]), str(message["token"])
        obs.logger.append_keys(conversation_id=cid, turn_id=turn_id)
        return self.lifecycle.resume(cid, turn_id, token, lambda_deadline)
