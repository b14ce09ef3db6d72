"""Faults the simulated model can be told to answer with, so a test or an evaluation task sees what a real provider
does on a bad day: a 529 (overloaded), a 500, a 400 that no retry fixes, or an answer so slow the turn outlives the
synchronous request and is handed to the worker.

Armed on a running server (``SimulatedModelServer.model.faults``); each armed fault is used by the next model
requests (either API) whose raw body contains its ``match`` (any request when empty), ``times`` times (``None``:
until ``clear()``), after letting ``skip`` matching requests through. Nothing is armed by default, so a server
nobody arms behaves exactly as before.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from devstack.simulated_model.wire import ApiError

# kind -> (HTTP status, the Messages API's error type, its message)
ERRORS: dict[str, tuple[int, str, str]] = {
    "overloaded": (529, "overloaded_error", "Overloaded (simulated fault)"),
    "server_error": (500, "api_error", "Internal server error (simulated fault)"),
    "refused": (400, "invalid_request_error", "The request was refused (simulated fault)"),
}
SLOW = "slow"
KINDS = (*ERRORS, SLOW)

# The evaluation tasks' names for their faults (evals/task.py `model_faults`) -> how each is armed.
SYNC_TURN_SECONDS, MODEL_CALL_BUDGET_SECONDS = 20.0, 8.0  # the template's defaults (SyncTurnSeconds, …Budget…)


@dataclass
class Fault:
    kind: str
    times: int | None = 1  # None: until cleared
    skip: int = 0  # matching requests let through first
    match: str = ""  # only requests whose raw body contains this
    delay_seconds: float = 0.0  # SLOW: how long the answer waits

    def error(self) -> ApiError | None:
        if self.kind == SLOW:
            return None
        status, error_type, message = ERRORS[self.kind]
        return ApiError(status, error_type, message)


class Faults:
    """The armed faults of one server, used in the order they were armed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: list[Fault] = []
        self.used = 0  # requests answered with a fault: what a test counts

    def arm(
        self, kind: str, times: int | None = 1, *, skip: int = 0, match: str = "", delay_seconds: float = 0.0
    ) -> Fault:
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(KINDS)}")
        if times is not None and times < 1:
            raise ValueError("times: at least 1 (None: until cleared)")
        fault = Fault(kind, times, skip, match, delay_seconds)
        with self._lock:
            self._armed.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._armed.clear()

    def armed(self) -> int:
        with self._lock:
            return len(self._armed)

    def take(self, raw: bytes) -> Fault | None:
        """The fault this request gets (its count used up), or None."""
        with self._lock:
            for fault in self._armed:
                if fault.match and fault.match.encode("utf-8") not in raw:
                    continue
                if fault.skip > 0:
                    fault.skip -= 1
                    return None
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._armed.remove(fault)
                self.used += 1
                return fault
        return None


def slow_seconds(
    sync_turn_seconds: float = SYNC_TURN_SECONDS, budget_seconds: float = MODEL_CALL_BUDGET_SECONDS
) -> float:
    """How late one answer must be for the next model call not to fit in the synchronous request
    (agent/handover.py: a call starts only while ``budget`` of ``sync`` is left), with a margin."""
    return max(0.0, sync_turn_seconds - budget_seconds) + 0.5


def arm_task_faults(
    faults: Faults, names: list[str] | tuple[str, ...], *, match: str = "", slow: float | None = None
) -> None:
    """Arms an evaluation task's ``model_faults`` (evals/task.py) on ``faults``; ``slow``: the delay of
    ``slow_turn`` (default: `slow_seconds()` for the template's defaults). Call ``faults.clear()`` after the task:
    ``overloaded_always`` lasts until then.

    * ``overloaded_once`` / ``server_error_once``: the next model call answers 529 / 500 once (the adapter retries);
    * ``overloaded_always``: every model call answers 529, so the turn's retries run out (503, nothing done);
    * ``refused_once``: the next call answers 400 (502 at once, no retry);
    * ``slow_turn``: the next answer waits past what the synchronous request has left (the turn goes to the queue).
    """
    for name in names:
        if name == "overloaded_once":
            faults.arm("overloaded", match=match)
        elif name == "server_error_once":
            faults.arm("server_error", match=match)
        elif name == "overloaded_always":
            faults.arm("overloaded", None, match=match)
        elif name == "refused_once":
            faults.arm("refused", match=match)
        elif name == "slow_turn":
            faults.arm(SLOW, match=match, delay_seconds=slow_seconds() if slow is None else slow)
        else:
            raise ValueError(f"unknown task fault {name!r}")
