"""A handed-over turn's worker crashed at every step, then recovered by the turn sweep alone.

A refund turn is handed over at once (the chat function's part: claim, hand-over record, message, lease
passed), then TurnWorkerFunction's logic runs it. A probe run records every AWS call the worker makes (the
turn record read, the take-over, the lease, the history, write-ahead, the refund, the results, the answer,
the release). Then, for each call, the worker is killed before it, and after it for writes, with the process
alive (handlers and `finally` run) or dead (nothing after the crash runs; its lease stays until it expires).
The clock then moves past the lease and the check; the turn sweep must send the turn again (or find it ended),
and one more worker must finish it: the turn `completed`, duplicates of the first message acted on by nobody;
then the customer's next request is served, with a valid history, exactly one money effect and the money
invariant.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

from support_agent.agent.handover import HandedOver, HandOver
from support_agent.agent.lifecycle import TurnLifecycle
from support_agent.agent.turn_sweep import TurnSweeper
from support_agent.agent.worker import TurnWorker
from support_agent.auth import Principal
from support_agent.clock import iso
from support_agent.messages import Deadline
from support_agent.store.turns import TurnStore, fingerprint
from tests.reliability.checks import MotoSnapshot, World
from tests.reliability.figures import count
from tests.reliability.test_crash_everywhere import (
    WRITES,
    Crash,
    Died,
    Faults,
    RefundModel,
    faults,
    retry_until_served,
    verify,
)
from tests.support.harness import Harness

CID = "conv_01JWORKERCRASHWORKERCRASH"


def hand_over(h: Harness, turns: TurnStore, queue_url: str) -> tuple[str, dict[str, Any]]:
    """The chat function's part of a turn asked with `Prefer: respond-async`: (turn id, the queue message)."""
    now = h.clock()
    claim = turns.claim(
        7,
        "customer-7",
        None,
        fingerprint(None, "please refund it"),
        CID,
        True,
        "please refund it",
        now=iso_at(now),
        now_epoch=int(now),
        running_seconds=400,
    )
    assert claim.turn is not None
    handover = HandOver(
        turns,
        h.conversations,
        h.sqs,
        queue_url,
        claim.turn,
        Deadline.after(20, h.clock),
        8.0,
        at_once=True,
        lease_seconds=h.settings.lease_seconds,
        running_seconds=400,
        clock=h.clock,
    )
    with pytest.raises(HandedOver):
        h.agent.run_turn(
            Principal("customer-7", "customer", 7),
            7,
            None,
            "please refund it",
            "req-1",
            Deadline.after(27, h.clock),
            new_id=CID,
            handover=handover,
        )
    return claim.turn.turn_id, drain(h, queue_url)[0]


def iso_at(epoch: float) -> str:
    from datetime import UTC, datetime

    return iso(datetime.fromtimestamp(epoch, UTC))


def drain(h: Harness, queue_url: str) -> list[dict[str, Any]]:
    out = []
    while msgs := h.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
        for m in msgs:
            out.append(json.loads(m["Body"]))
            h.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
    return out


def rig(h: Harness) -> tuple[RefundModel, str, TurnStore, TurnSweeper, TurnWorker]:
    """A direct refund's model, TurnQueue (and its DLQ), the turn store, the sweep and a worker, on the clock."""
    model = RefundModel(1043, 2500)
    h.agent.llm = model
    queue_url = h.sqs.create_queue(QueueName="TurnQueue")["QueueUrl"]
    dlq_url = h.sqs.create_queue(QueueName="TurnDLQ")["QueueUrl"]
    turns = TurnStore(h.ddb, h.settings.conversations_table)
    sweeper = TurnSweeper(turns, h.conversations, h.sqs, queue_url, dlq_url, h.settings.lease_seconds, clock=h.clock)
    worker = TurnWorker(TurnLifecycle(h.settings, h.agent, turns, h.conversations, clock=h.clock))
    return model, queue_url, turns, sweeper, worker


def test_a_worker_crashed_at_every_step_is_finished_by_the_sweep_exactly_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness
    model, queue_url, turns, sweeper, worker = rig(h)
    world = World.of_settings(h.ddb, h.settings)
    snapshot = MotoSnapshot()

    def fresh() -> tuple[str, dict[str, Any]]:
        snapshot.restore()
        drain(h, queue_url)
        return hand_over(h, turns, queue_url)

    _, message = fresh()
    probe = Faults()
    with faults(h, probe):
        assert worker.run(message) == "completed"
    plan = [
        (i, name, w)
        for i, name in enumerate(probe.calls)
        for w in ("before", "after")
        if w == "before" or name in WRITES
    ]
    tried = 0
    for index, call, when in plan:
        for alive in (True, False):
            turn_id, message = fresh()
            with monkeypatch.context() as m:
                if not alive:
                    m.setattr(h.conversations, "release_lease", lambda *_a, **_k: None)
                with (
                    faults(h, Faults(at=index, when=when, fault=Crash if alive else Died)),
                    contextlib.suppress(Crash, Died),
                ):
                    worker.run(message)
            # No new delivery of the message (SQS would wait out its visibility timeout): the sweep alone.
            for _ in range(3):
                h.clock.advance(2 * h.settings.lease_seconds + 1)
                sweeper.run()
                for again in drain(h, queue_url):
                    worker.run(again)
                assert worker.run(message) in ("stale", "not_taken")  # a late duplicate of the first message
            turn = turns.get(CID, turn_id)
            assert turn is not None and turn.status == "completed", (call, when, alive, turn)
            # The customer's next request is served (after the dead worker's lease expired, if it was left).
            how = retry_until_served(h, CID, lease_may_remain=True)
            try:
                verify(h, world, CID, model, direct=True)
            except AssertionError as exc:
                raise AssertionError(f"crash {when} call {index} ({call}), alive={alive}: {exc}") from None
            count("3-crash-everywhere", **{f"worker_next_request_{how}": 1})
            tried += 1
            count("3-crash-everywhere", worker_crashes=1)
    assert tried == 2 * len(plan)
    count("3-crash-everywhere", worker_aws_calls=len(probe.calls), worker_points=len(plan))


@pytest.mark.parametrize("step", ["hand_over", "send_message", "pass_lease"])
def test_a_hand_over_that_dies_midway_is_finished_by_the_sweep(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The chat function dies after recording the hand-over, after sending the message, or after passing the
    lease (before answering): the turn is finished once, by the worker and the sweep."""
    h = harness
    model, queue_url, turns, sweeper, worker = rig(h)
    targets = {"hand_over": (turns, "hand_over"), "send_message": (h.sqs, "send_message")}
    targets["pass_lease"] = (h.conversations, "pass_lease")
    owner, name = targets[step]
    real = getattr(owner, name)

    def dies_after(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise Died(f"after {step}")

    monkeypatch.setattr(owner, name, dies_after)
    monkeypatch.setattr(h.conversations, "release_lease", lambda *_a, **_k: None)  # a dead process frees nothing
    with pytest.raises(Died):
        hand_over(h, turns, queue_url)
    monkeypatch.undo()
    sent = drain(h, queue_url)
    turn_id = (turns.turns_of(CID) or [None])[0]
    assert turn_id is not None
    for message in sent:  # delivered at once: the request's lease is still live, so nobody takes it yet
        assert worker.run(message) == ("not_taken" if step == "send_message" else "completed")
    for _ in range(3):
        h.clock.advance(2 * h.settings.lease_seconds + 1)
        sweeper.run()
        for again in drain(h, queue_url):
            worker.run(again)
    turn = turns.get(CID, turn_id.turn_id)
    assert turn is not None and turn.status == "completed", (step, turn)
    retry_until_served(h, CID, lease_may_remain=True)
    verify(h, World.of_settings(h.ddb, h.settings), CID, model, direct=True)
