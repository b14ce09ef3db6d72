"""pass^k and the per-task figures of a run.

pass^k is τ²-bench's (src/tau2/metrics/agent_metrics.py): the chance that k trials of a task drawn from its n
all succeed, estimated without bias from c successes as C(c, k) / C(n, k), then averaged over the tasks. pass^1 is
the mean success rate; pass^k falls with k unless every trial of every task passes. A task with fewer than k trials
has no pass^k and is left out of that k's average.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from math import comb
from typing import TYPE_CHECKING

from pydantic import BaseModel

if TYPE_CHECKING:
    from evals.results import TrialResult


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k): the chance that k of n trials, c of which succeeded, all succeeded."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass^{k} needs 1 <= k <= n and 0 <= c <= n (n={n}, c={c})")
    return comb(c, k) / comb(n, k)


def pass_hat_ks(outcomes: dict[str, Sequence[bool]], max_k: int | None = None) -> dict[int, float]:
    """pass^1 … pass^max_k (default: the fewest trials of any task), each averaged over the tasks."""
    counts = {task: (len(trials), sum(bool(t) for t in trials)) for task, trials in outcomes.items() if trials}
    if not counts:
        return {}
    top = max_k if max_k is not None else min(n for n, _ in counts.values())
    out: dict[int, float] = {}
    for k in range(1, top + 1):
        values = [pass_hat_k(n, c, k) for n, c in counts.values() if n >= k]
        if values:
            out[k] = sum(values) / len(values)
    return out


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0..1), linear between the closest ranks; 0 for no values."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class TaskSummary(BaseModel):
    task_id: str
    category: str
    trials: int
    successes: int
    pass_hat: dict[int, float]  # this task's pass^k, k = 1..trials
    forbidden: int  # forbidden effects found over its trials
    iterations: float  # mean model calls per trial
    tokens: float  # mean tokens per trial
    model_usd: float | None  # mean model cost per trial (list price; None: no price for the model)
    aws_usd: float | None  # mean AWS cost per trial (bench/cost.py's model; None: not measured)
    latency_median: float  # seconds per trial
    latency_p95: float


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    """The mean when every trial has a figure; None when any lacks one (a partial mean would mislead)."""
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known and len(known) == len(values) else None


def summarize(task_id: str, category: str, trials: Sequence[TrialResult]) -> TaskSummary:
    """A task's row from its trials' results."""
    n, c = len(trials), sum(t.passed for t in trials)
    latencies = [t.latency_seconds for t in trials]
    return TaskSummary(
        task_id=task_id,
        category=category,
        trials=n,
        successes=c,
        pass_hat={k: pass_hat_k(n, c, k) for k in range(1, n + 1)},
        forbidden=sum(len(t.forbidden) for t in trials),
        iterations=_mean([t.iterations for t in trials]),
        tokens=_mean([t.tokens for t in trials]),
        model_usd=_mean_or_none([t.model_usd for t in trials]),
        aws_usd=_mean_or_none([t.aws_usd for t in trials]),
        latency_median=percentile(latencies, 0.5),
        latency_p95=percentile(latencies, 0.95),
    )
