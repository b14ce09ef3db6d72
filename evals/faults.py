"""A task's model faults (``model_faults``), armed on the local stack's simulated model for one trial.

devstack/simulated_model/faults.py says what each fault does; here they are armed before the customer's first turn
and cleared after its last (``overloaded_always`` lasts until then), with ``slow_turn``'s delay sized from the
stack's own SyncTurnSeconds and ModelCallBudgetSeconds. Trials run one at a time, so a fault meets its own trial's
model calls. A real model cannot be faulted: the block yields False and the runner notes the trial.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any


def slow_turn_seconds(local: Any) -> float:
    from devstack.simulated_model.faults import MODEL_CALL_BUDGET_SECONDS, SYNC_TURN_SECONDS, slow_seconds

    params = local.stack.parameters
    return slow_seconds(
        float(params.get("SyncTurnSeconds", SYNC_TURN_SECONDS)),
        float(params.get("ModelCallBudgetSeconds", MODEL_CALL_BUDGET_SECONDS)),
    )


@contextlib.contextmanager
def model_faults(local: Any, faults: Sequence[str]) -> Iterator[bool]:
    """``faults`` armed on ``local``'s simulated model while the block runs; yields whether they could be."""
    server = getattr(local, "model", None)
    if not faults:
        yield True
        return
    if server is None:
        yield False
        return
    from devstack.simulated_model.faults import arm_task_faults

    armed = server.model.faults
    arm_task_faults(armed, list(faults), slow=slow_turn_seconds(local))
    try:
        yield True
    finally:
        armed.clear()
