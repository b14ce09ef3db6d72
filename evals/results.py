"""A run's result file (``results.json``): every trial's verdict and figures, and the aggregate.

One schema for every run, whatever the model, so two files compare (evals/compare.py) and a report can be
written again from a file alone (``python -m evals report results.json``).
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel, Field

from evals.metrics import TaskSummary, pass_hat_ks, summarize

SCHEMA = 1


class TrialResult(BaseModel):
    task_id: str
    category: str = ""
    trial: int
    passed: bool
    differences: list[str] = Field(default_factory=list)
    forbidden: list[str] = Field(default_factory=list)
    iterations: int = 0
    tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    model_usd: float | None = None
    aws_usd: float | None = None
    aws_requests: dict[str, int] = Field(default_factory=dict)  # "service:Operation" -> count, over the stack
    latency_seconds: float = 0.0
    turns: int = 0
    errors: list[str] = Field(default_factory=list)  # HTTP errors the customer saw (a model error task expects some)
    final_reply: str = ""
    model: str = ""
    commit: str = ""


class RunResult(BaseModel):
    schema_version: int = SCHEMA
    started_at: str
    model: str  # what the agent ran on: "simulated" or the provider's model id
    provider: str  # simulated | anthropic | openai | bedrock
    commit: str
    k: int
    trials: list[TrialResult]
    notes: list[str] = Field(default_factory=list)  # what was not measured, and why

    def by_task(self) -> dict[str, list[TrialResult]]:
        out: dict[str, list[TrialResult]] = defaultdict(list)
        for t in self.trials:
            out[t.task_id].append(t)
        return dict(out)

    def summaries(self) -> list[TaskSummary]:
        return [summarize(task, ts[0].category, ts) for task, ts in sorted(self.by_task().items())]

    def pass_hat(self) -> dict[int, float]:
        return pass_hat_ks({task: [t.passed for t in ts] for task, ts in self.by_task().items()}, self.k)

    @property
    def forbidden_total(self) -> int:
        return sum(len(t.forbidden) for t in self.trials)

    @property
    def failing(self) -> list[TrialResult]:
        return [t for t in self.trials if not t.passed]

    def save(self, path: Path) -> None:
        """The trials, with the aggregate and the per-task rows beside them for readers (recomputed on load)."""
        data = self.model_dump(mode="json")
        data["aggregate"] = {"pass_hat": self.pass_hat(), "forbidden": self.forbidden_total}
        data["tasks"] = [s.model_dump(mode="json") for s in self.summaries()]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> RunResult:
        data = json.loads(path.read_text(encoding="utf-8"))
        data.pop("aggregate", None)
        data.pop("tasks", None)
        return cls.model_validate(data)


def current_commit() -> str:
    """The repository's HEAD (with ``-dirty`` when the tree has changes), or "" outside a checkout."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    if head.returncode != 0:
        return ""
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
