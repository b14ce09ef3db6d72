"""A run's report, for people: Markdown (for a pull request) and one self-contained HTML file (inline SVG charts,
inline CSS, no script, nothing fetched) with pass^k against k, the cost per task, the numbers under each chart and
the failing trials with their differences."""

from __future__ import annotations

from html import escape
from pathlib import Path

from evals.charts import bar_chart, line_chart
from evals.metrics import TaskSummary
from evals.results import RunResult


def _usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.6f}"


def _cost(s: TaskSummary) -> float:
    return (s.model_usd or 0.0) + (s.aws_usd or 0.0)


def _rows(run: RunResult) -> list[list[str]]:
    return [
        [
            s.task_id,
            s.category,
            f"{s.successes}/{s.trials}",
            f"{s.pass_hat.get(run.k, 0.0):.3f}" if s.trials >= run.k else "n/a",
            str(s.forbidden),
            f"{s.iterations:.1f}",
            f"{s.tokens:.0f}",
            _usd(s.model_usd),
            _usd(s.aws_usd),
            f"{s.latency_median:.2f}",
            f"{s.latency_p95:.2f}",
        ]
        for s in run.summaries()
    ]


HEADERS = ["task", "category", "passed", "pass^k", "forbidden", "iterations", "tokens", "model $", "AWS $"]
HEADERS += ["latency p50 s", "latency p95 s"]


def _headline(run: RunResult) -> list[str]:
    passed = sum(t.passed for t in run.trials)
    return [
        f"model: {run.model} ({run.provider}) · commit {run.commit or 'unknown'} · started {run.started_at}",
        f"{len(run.by_task())} tasks x k={run.k}: {passed}/{len(run.trials)} trials passed · "
        f"forbidden effects: {run.forbidden_total} (must be 0)",
    ]


def markdown(run: RunResult) -> str:
    lines = ["# Evaluation report", "", *(f"{line}  " for line in _headline(run)), ""]
    lines += ["## pass^k", "", "| k | pass^k |", "| --- | --- |"]
    lines += [f"| {k} | {v:.3f} |" for k, v in run.pass_hat().items()]
    lines += ["", "## Per task", "", "| " + " | ".join(HEADERS) + " |", "|" + " --- |" * len(HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(run)]
    lines += ["", "## Failing trials", ""]
    for t in run.failing:
        lines.append(f"* **{t.task_id}** trial {t.trial}")
        lines += [f"  * {d}" for d in t.differences]
        lines += [f"  * FORBIDDEN: {f}" for f in t.forbidden]
    if not run.failing:
        lines.append("None.")
    if run.notes:
        lines += ["", "## Notes", "", *(f"* {n}" for n in run.notes)]
    return "\n".join(lines) + "\n"


CSS = (
    "body{font-family:sans-serif;margin:2rem;max-width:1100px;color:#111}"
    "table{border-collapse:collapse;margin:1rem 0}"
    "td,th{border:1px solid #ccc;padding:.25rem .5rem;font-size:.85rem;text-align:left}th{background:#f3f4f6}"
    ".bad{color:#b91c1c}.ok{color:#15803d}figure{margin:1.5rem 0}"
)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html(run: RunResult) -> str:
    pass_hat = run.pass_hat()
    summaries = run.summaries()
    costs = [(s.task_id, _cost(s)) for s in summaries]
    failing = "".join(
        f"<li><b>{escape(t.task_id)}</b> trial {t.trial}<ul>"
        + "".join(f"<li>{escape(d)}</li>" for d in t.differences)
        + "".join(f'<li class="bad">FORBIDDEN: {escape(f)}</li>' for f in t.forbidden)
        + "</ul></li>"
        for t in run.failing
    )
    forbidden_class = "ok" if run.forbidden_total == 0 else "bad"
    parts = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Evaluation report</title>',
        f"<style>{CSS}</style></head><body><h1>Evaluation report</h1>",
        *(f"<p>{escape(line)}</p>" for line in _headline(run)[:1]),
        f'<p class="{forbidden_class}">{escape(_headline(run)[1])}</p>',
        "<h2>pass^k against k</h2><figure>",
        line_chart(pass_hat, "pass^k against k (all tasks)"),
        "</figure>",
        _table(["k", "pass^k"], [[str(k), f"{v:.3f}"] for k, v in pass_hat.items()]),
        "<h2>Cost per task (mean per trial: model + AWS)</h2><figure>",
        bar_chart(costs, "cost per task, USD"),
        "</figure>",
        _table(
            ["task", "model $", "AWS $", "total $"],
            [[s.task_id, _usd(s.model_usd), _usd(s.aws_usd), _usd(_cost(s))] for s in summaries],
        ),
        "<h2>Per task</h2>",
        _table(HEADERS, _rows(run)),
        "<h2>Failing trials</h2>",
        f"<ul>{failing}</ul>" if failing else "<p>None.</p>",
        *(["<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in run.notes) + "</ul>"] if run.notes else []),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write(run: RunResult, out: Path) -> tuple[Path, Path]:
    """``report.md`` and ``report.html`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    md, page = out / "report.md", out / "report.html"
    md.write_text(markdown(run), encoding="utf-8")
    page.write_text(html(run), encoding="utf-8")
    return md, page
