"""Issue 17's "done when", through `make dev`'s stack: with the simulated model slowed to 12 s a call, a
three-iteration turn answers 202 (the chat function hands it to TurnQueue before the third call) and then
completes through TurnWorkerFunction (run by the local stack's queue poller) with the model's answer; resending
the original POST with its Idempotency-Key returns the same turn without a model call, and another message with
that key gets 422."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devstack.local import LocalStack
from tests.e2e.test_payments_local import Stack

DELAY_SECONDS = 12.0
MESSAGE = "Where is my order 1042? Also refund it."  # the simulated model's three-iteration turn


@pytest.fixture
def slow(seeded_stack: LocalStack) -> Iterator[Stack]:
    assert seeded_stack.model is not None, "the simulated model"
    seeded_stack.model.model.delay_seconds = DELAY_SECONDS
    try:
        with httpx.Client(base_url=seeded_stack.url, timeout=90) as http:
            yield Stack(seeded_stack, http)
    finally:
        seeded_stack.model.model.delay_seconds = 0.0


def test_a_slow_three_iteration_turn_answers_202_then_completes(slow: Stack) -> None:
    assert slow.local.model is not None
    model = slow.local.model.model
    headers = {**slow.customer(7), "Idempotency-Key": "e2e-long-turn-1"}
    began = time.monotonic()
    first = slow.http.post("/api/chat", json={"message": MESSAGE}, headers=headers)
    answered_in = time.monotonic() - began
    assert first.status_code == 202, first.text
    assert answered_in < 29, answered_in  # within API Gateway's limit, whatever the turn still has to do
    running = first.json()
    location = first.headers["location"]
    assert location == f"/api/conversations/{running['conversationId']}/turns/{running['turnId']}"

    done: dict[str, Any] = {}
    until = time.monotonic() + 90
    while time.monotonic() < until:
        done = slow.http.get(location, headers=slow.customer(7)).json()
        if done["status"] != "running":
            break
        time.sleep(1)
    assert done["status"] == "completed", done
    reply = done["response"]
    assert reply["iterations"] == 3 and reply["stopReason"] == "end_turn" and reply["reply"], reply
    assert reply["turnId"] == running["turnId"]

    calls = model.requests
    again = slow.http.post("/api/chat", json={"message": MESSAGE}, headers=headers)
    assert (again.status_code, again.json(), again.headers.get("idempotent-replayed")) == (200, reply, "true")
    other = slow.http.post("/api/chat", json={"message": "something else"}, headers=headers)
    assert (other.status_code, other.json()["error"]["code"]) == (422, "idempotency_key_reused")
    assert model.requests == calls  # neither resend reached the model
