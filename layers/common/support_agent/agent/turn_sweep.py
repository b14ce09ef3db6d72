"""TurnSweepFunction's logic: handed-over turns that stopped moving are sent again, or ended as failed.

Without it a turn whose worker died would wait for the queue's visibility timeout (six times the worker's
timeout), and a turn whose message went to the DLQ would stay ``running`` forever. Every minute:

* the sparse index ``turns_running`` lists handed-over turns due for a check (``lease_check_at`` passed). If the
  conversation's lease is still held, the check moves on; if it expired (the worker died, or the hand-over died
  between sending and passing the lease), the turn's message is sent again — the worker's take-over accepts an
  expired lease — at most ``MAX_RESTARTS`` times, and never past the turn's ``running_until``: then it ends
  ``failed`` (``turn_failed``).
* messages on ``TurnDLQ`` (failed three times) end their turns ``failed`` and are deleted.

A turn ends here as on every path (agent/finish.py), announced in its conversation's feed: no request waits on it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from support_agent import observability as obs
from support_agent.agent.finish import TurnEnds
from support_agent.clock import utc_now
from support_agent.store.conversations import ConversationStore
from support_agent.store.turns import TurnStore

MAX_RESTARTS = 3


@dataclass
class TurnSweeper:
    turns: TurnStore
    conversations: ConversationStore
    sqs: Any
    queue_url: str
    dlq_url: str
    lease_seconds: int
    clock: Callable[[], float] = field(default=time.time)
    now: Callable[[], str] = field(default=utc_now)

    @property
    def ends(self) -> TurnEnds:
        return TurnEnds(self.turns, self.now)

    def run(self) -> dict[str, int]:
        out = {"checked": 0, "restarted": 0, "failed": 0, "dead_lettered": 0}
        now = int(self.clock())
        for turn in self.turns.running_since(now):
            out["checked"] += 1
            header = self.conversations.get_header(turn.conversation_id)
            if header is not None and header.lease_owner and header.lease_expires_at >= now:
                self.turns.restarted(turn, self.lease_seconds, now, count=False)  # still moving: look later
                continue
            if turn.restarts >= MAX_RESTARTS or now > turn.running_until:
                why = "the turn stopped and was restarted too often" if turn.restarts else "the turn ran out of time"
                out["failed"] += self.ends.given_up(turn, why)
                continue
            body = {"turnId": turn.turn_id, "conversationId": turn.conversation_id, "token": turn.handover_token}
            self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(body))
            self.turns.restarted(turn, 2 * self.lease_seconds, now)
            obs.logger.info("turn_restarted", extra={"event": "turn_restarted", "turn_id": turn.turn_id})
            out["restarted"] += 1
        for message in self.sqs.receive_message(QueueUrl=self.dlq_url, MaxNumberOfMessages=10).get("Messages", []):
            try:
                body = json.loads(message["Body"])
                dead = self.turns.get(str(body["conversationId"]), str(body["turnId"]))
            except (ValueError, KeyError, TypeError):
                dead = None
            if dead is not None and dead.status == "running":
                out["dead_lettered"] += self.ends.given_up(dead, "the turn failed in the worker")
            self.sqs.delete_message(QueueUrl=self.dlq_url, ReceiptHandle=message["ReceiptHandle"])
        return out
