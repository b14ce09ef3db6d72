"""The paths section's part on the local stack: the approved refund path and the long turn's hand-over.

``python -m bench.paths_stack --child OUT`` (a process of its own, as bench/cost.py's child: the local stack sets
this process's AWS environment) starts the local stack with bench/cost.py's request counting (`Recorder`: every
function's AWS requests, every invocation timed) and plays, over HTTP:

* **the approved path**: a refund over the threshold asked in a turn; once that is quiet, the lead's approval,
  RefundFlow, the provider's refund and its webhooks, to REFUNDED: the AWS requests of each function from the
  approval on, the state transitions, and the simulated Stripe's requests (its own log);
* **the hand-over**: a turn with ``Prefer: respond-async`` (the chat function hands it to the worker at once), the
  turn's record read directly from DynamoDB until it completes (no feed, no view: only the turn's own requests),
  beside the same turn answered synchronously. Its time is cut in two by clocks in this process: the ``SendMessage``
  reaching moto's queue → the local poller invoking TurnWorkerFunction (the poller's wait: a local artefact, on AWS
  Lambda's SQS event source) → the worker's first request to the simulated model (the worker's own start).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.cost import READ_ONLY, Client, Recorder, _tools, _transitions, run_child

HANDOVER_SAMPLES = 9


class Clocks:
    """perf_counter stamps of what the hand-over is timed by, taken in this process (moto and the model run here)."""

    def __init__(self) -> None:
        self.sends: list[tuple[float, str]] = []  # (when, queue name): a SendMessage reaching moto
        self.model_calls: list[float] = []  # a request reaching the simulated model
        self._lock = threading.Lock()

    def patch(self) -> None:
        from moto.sqs.models import SQSBackend

        from devstack.simulated_model.server import SimulatedModel

        clocks, send, post = self, SQSBackend.send_message, SimulatedModel.post

        def send_message(backend: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
            with clocks._lock:
                clocks.sends.append((time.perf_counter(), queue_name))
            return send(backend, queue_name, *args, **kwargs)

        def model_post(model: Any, *args: Any, **kwargs: Any) -> Any:
            with clocks._lock:
                clocks.model_calls.append(time.perf_counter())
            return post(model, *args, **kwargs)

        SQSBackend.send_message = send_message  # type: ignore[method-assign,assignment]
        SimulatedModel.post = model_post  # type: ignore[method-assign,assignment]


def split_handover(
    began: float, sends: list[tuple[float, str]], queue: str, invokes: list[float], model_calls: list[float]
) -> dict[str, float]:
    """One hand-over's milliseconds: SendMessage → the worker's invocation (the poller) → its first model call."""
    sent = next(t for t, q in sends if t >= began and q == queue)
    invoked = next(t for t in invokes if t >= sent)
    first_call = next(t for t in model_calls if t >= invoked)
    return {
        "poller_ms": (invoked - sent) * 1000,
        "worker_ms": (first_call - invoked) * 1000,
        "total_ms": (first_call - sent) * 1000,
    }


class Paths:
    def __init__(self, local: Any, recorder: Recorder, clocks: Clocks) -> None:
        self.local, self.recorder, self.clocks = local, recorder, clocks
        self.client = Client(local, recorder)

    def _wait(self, done: Callable[[], bool], what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(what)
            time.sleep(0.05)

    def handed_over(self, counted: bool) -> dict[str, Any]:
        """A turn handed to the worker at once; its record read from DynamoDB (this process's client, uncounted)."""
        mark, began = self.recorder.mark(), time.perf_counter()
        r = self.client.http.post(
            "/api/chat",
            json={"conversationId": None, "message": READ_ONLY},
            headers={**self.client.customer, "Prefer": "respond-async"},
        )
        assert r.status_code == 202, r.text
        cid, tid = r.json()["conversationId"], r.json()["turnId"]
        table = self.local.stack.physical_ids["ConversationsTable"]
        key = {"conversation_id": {"S": cid}, "seq": {"N": "0"}}

        from support_agent.store.turns import TurnStore

        turns = TurnStore(self.client.ddb, table)

        def completed() -> bool:
            turn = turns.get(cid, tid)
            return turn is not None and turn.status == "completed"

        self._wait(completed, "the handed-over turn did not complete")
        response = (turns.get(cid, tid) or SimpleNamespace(response={})).response or {}
        self._wait(lambda: "lease_owner" not in self.client.ddb.get_item(TableName=table, Key=key)["Item"], "lease")
        queue = self.local.stack.physical_ids["TurnQueue"].rsplit("/", 1)[-1]

        def invokes() -> list[float]:
            return [s for fn, s, _ in self.recorder.invocations[mark[0] :] if fn == "TurnWorkerFunction"]

        # The recorder notes an invocation when it returns, a moment after the worker released the lease.
        self._wait(lambda: any(t >= began for t in invokes()), "the worker's invocation was not recorded")
        out: dict[str, Any] = split_handover(began, self.clocks.sends, queue, invokes(), self.clocks.model_calls)
        if counted:
            self.recorder.wait_quiet()
            out.update(
                functions=self.recorder.since(mark),
                what=" → ".join(_tools(response)),
                model_calls=response["iterations"],
            )
        return out

    def read_only(self) -> dict[str, Any]:
        return self.client.read_only()

    def approved(self, order: int) -> dict[str, Any]:
        """A refund over the threshold: the turn (not counted), then from the lead's approval to REFUNDED."""
        body, approval = self.client.ask_refund(order)
        stripe = self.local.stripe.stripe
        mark, provider_mark, began = self.recorder.mark(), len(stripe.requests), time.time()
        self.client.approve(approval)
        table = self.local.stack.physical_ids["ApprovalsTable"]

        def status() -> str:
            item = self.client.ddb.get_item(TableName=table, Key={"approval_id": {"S": approval}})["Item"]
            return str(item["status"]["S"])

        self._wait(lambda: status() in ("REFUNDED", "FAILED"), "the approved refund did not settle")
        assert status() == "REFUNDED", status()
        self.recorder.wait_quiet()
        provider = [f"{q.method} {q.path.split('?', 1)[0]}" for q in stripe.requests[provider_mark:]]
        return {
            "what": " → ".join(_tools(body)),
            "functions": self.recorder.since(mark),
            "transitions": _transitions(self.client.sfn, self.local.stack.state_machine_arn("RefundFlow"), began - 1),
            "provider_requests": provider,
        }


def child(out_path: str) -> None:
    from devstack.local import start

    recorder = Recorder(Path(tempfile.mkdtemp(prefix="bench-paths-calls-")))
    recorder.patch()
    clocks = Clocks()
    clocks.patch()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "STRIPE_"))}
    for name in ("SIMULATED_MODEL_DELAY_SECONDS", "LLM_PROVIDER", "TOOL_MODE"):
        environ.pop(name, None)
    # More turns than a customer's default 10 a minute: the hand-over is timed over several.
    local = start(port=0, moto_port=0, environ=environ, schedule_seconds=86_400, parameters={"TurnsPerMinute": "1000"})
    try:
        paths = Paths(local, recorder, clocks)
        recorder.wait_quiet()
        # Every function's first invocation builds its clients: each path played once unmeasured (order 1044 is
        # refundable over the threshold too), so the measured round is what a warm function does.
        paths.read_only(), paths.handed_over(counted=False), paths.approved(1044)
        recorder.wait_quiet()
        read_only = paths.read_only()
        counted = paths.handed_over(counted=True)
        timings = [counted] + [paths.handed_over(counted=False) for _ in range(HANDOVER_SAMPLES - 1)]
        approved = paths.approved(1042)
        out = {
            "read_only": {k: read_only[k] for k in ("functions", "what", "model_calls")},
            "handover": {
                **{k: counted[k] for k in ("functions", "what", "model_calls")},
                "samples": [{k: t[k] for k in ("poller_ms", "worker_ms", "total_ms")} for t in timings],
                "median": {k: statistics.median(t[k] for t in timings) for k in ("poller_ms", "worker_ms", "total_ms")},
            },
            "approved": approved,
        }
        Path(out_path).write_text(json.dumps(out, default=str), encoding="utf-8")
    finally:
        local.stop()


def measure() -> dict[str, Any]:
    return run_child("bench.paths_stack")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"] and len(sys.argv) == 3:
        child(sys.argv[2])
    else:
        print(json.dumps(measure(), indent=2))
