"""Two result files side by side: what got worse, what got better, and how pass^k moved.

A regression is a task that passed in the baseline (every trial) and fails now (any trial); an improvement the
reverse. Tasks in only one run are listed apart: a renamed task is neither.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from evals.results import RunResult


class Comparison(BaseModel):
    regressions: list[str] = Field(default_factory=list)
    improvements: list[str] = Field(default_factory=list)
    pass_hat_delta: dict[int, float] = Field(default_factory=dict)  # now - baseline, for the k both have
    forbidden_delta: int = 0
    only_in_baseline: list[str] = Field(default_factory=list)
    only_now: list[str] = Field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return bool(self.regressions) or self.forbidden_delta > 0


def _passed(run: RunResult) -> dict[str, bool]:
    return {task: all(t.passed for t in trials) for task, trials in run.by_task().items()}


def compare(baseline: RunResult, now: RunResult) -> Comparison:
    before, after = _passed(baseline), _passed(now)
    both = sorted(set(before) & set(after))
    was, is_ = baseline.pass_hat(), now.pass_hat()
    return Comparison(
        regressions=[t for t in both if before[t] and not after[t]],
        improvements=[t for t in both if not before[t] and after[t]],
        pass_hat_delta={k: is_[k] - was[k] for k in sorted(set(was) & set(is_))},
        forbidden_delta=now.forbidden_total - baseline.forbidden_total,
        only_in_baseline=sorted(set(before) - set(after)),
        only_now=sorted(set(after) - set(before)),
    )


def lines(c: Comparison, baseline: RunResult, now: RunResult) -> list[str]:
    out = [f"baseline: {baseline.model} {baseline.commit or '?'}  now: {now.model} {now.commit or '?'}"]
    out += [f"REGRESSION {t}" for t in c.regressions] or ["no regression"]
    out += [f"improvement {t}" for t in c.improvements]
    out += [f"pass^{k}: {d:+.3f}" for k, d in c.pass_hat_delta.items()]
    out.append(f"forbidden effects: {c.forbidden_delta:+d}")
    out += [f"only in the baseline: {t}" for t in c.only_in_baseline]
    out += [f"new task: {t}" for t in c.only_now]
    return out
