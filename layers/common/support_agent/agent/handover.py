"""Handing a turn to the worker when its next model call will not fit in the synchronous request.

API Gateway ends an HTTP API request at 30 seconds. Before each model call the chat function compares what is
left of ``SYNC_TURN_SECONDS`` with what a call usually takes (``MODEL_CALL_BUDGET_SECONDS``; ``Prefer:
respond-async`` asks for the hand-over at once). If it does not fit, three steps, in this order:

1. the turn record says who takes it (``handover_token``), what the synchronous part did (``carried``) and,
   when the customer's message was not stored yet, where it goes (``message_seq``); it enters the sparse index
   of running handed-over turns, so a crash after this step is found by the turn sweep;
2. the message ``{turnId, conversationId, token}`` goes to ``TurnQueue``;
3. the lease passes from the request to the token (conditioned on still holding it).

The request then answers 202. The worker takes the lease from the token to one of its own in a transaction that
checks the turn record, so a duplicate delivery stops there (agent/lifecycle.py runs both paths); a crash between
2 and 3 leaves the request's lease to expire, after which the worker (or the sweep's resend) takes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from support_agent.ids import ulid
from support_agent.messages import Deadline
from support_agent.store.conversations import ConversationStore
from support_agent.store.turns import Turn, TurnStore


class HandedOver(Exception):
    """The turn was handed to the worker: the request answers 202 with its record."""

    def __init__(self, turn: Turn) -> None:
        super().__init__(turn.turn_id)
        self.turn = turn


@dataclass
class HandOver:
    turns: TurnStore
    conversations: ConversationStore
    sqs: Any
    queue_url: str
    turn: Turn
    sync: Deadline  # what is left of SYNC_TURN_SECONDS, from the request's start
    budget_seconds: float  # MODEL_CALL_BUDGET_SECONDS: what a model call usually takes
    at_once: bool  # Prefer: respond-async
    lease_seconds: int
    running_seconds: int  # how long the turn may stay running before the sweep calls it interrupted
    clock: Callable[[], float] = field(default=time.time)

    def due(self) -> bool:
        """The next model call does not fit in what is left of the synchronous time (or the client asked)."""
        return self.at_once or self.sync.remaining() < self.budget_seconds

    def pass_on(self, conversation_id: str, owner: str, message_seq: int | None, carried: dict[str, Any]) -> NoReturn:
        token = f"handed_{ulid()}"
        now = int(self.clock())
        self.turns.hand_over(
            self.turn,
            token,
            message_seq,
            carried,
            now_epoch=now,
            check_after=self.lease_seconds,
            running_seconds=self.running_seconds,
        )
        body = {"turnId": self.turn.turn_id, "conversationId": conversation_id, "token": token}
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(body))
        self.conversations.pass_lease(conversation_id, owner, token, now + self.lease_seconds)
        raise HandedOver(self.turn)
