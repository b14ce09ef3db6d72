"""The HTML report is one self-contained file (no script, nothing fetched) holding its SVG charts and their
numbers, and the failing trials with their differences."""

from __future__ import annotations

import re
from pathlib import Path

from evals import report
from evals.results import RunResult, TrialResult


def _run() -> RunResult:
    trials = [
        TrialResult(task_id="refund-direct", category="refund", trial=1, passed=True, model_usd=0.02, aws_usd=0.0001),
        TrialResult(task_id="refund-direct", category="refund", trial=2, passed=True, model_usd=0.02, aws_usd=0.0001),
        TrialResult(
            task_id="approval-full",
            category="approval",
            trial=1,
            passed=False,
            differences=["order o1: approvals none, expected PENDING"],
            model_usd=0.03,
            aws_usd=0.0002,
        ),
        TrialResult(
            task_id="approval-full",
            category="approval",
            trial=2,
            passed=False,
            forbidden=["order o1: provider refund(s) 18900 cents, none expected"],
            model_usd=0.03,
            aws_usd=0.0002,
        ),
    ]
    return RunResult(
        started_at="2026-12-05T00:00:00Z", model="simulated", provider="simulated", commit="abc", k=2, trials=trials
    )


def test_the_html_is_self_contained_and_holds_the_charts_and_numbers(tmp_path: Path) -> None:
    md, page = report.write(_run(), tmp_path)
    text = page.read_text(encoding="utf-8")
    assert text.count("<svg") == 2  # pass^k against k, cost per task
    assert "<polyline" in text and "<rect" in text
    assert "<script" not in text.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)  # nothing fetched
    assert "pass^k against k" in text
    # One task of two passes every trial: pass^1 = pass^2 = 0.5, under the chart and on the points.
    assert "<td>1</td><td>0.500</td>" in text and "<td>2</td><td>0.500</td>" in text
    assert "$0.030200" in text  # approval-full's cost per trial, model + AWS
    assert "order o1: approvals none, expected PENDING" in text
    assert "FORBIDDEN: order o1: provider refund(s) 18900 cents, none expected" in text
    assert "forbidden effects: 1 (must be 0)" in text
    assert "| 1 | 0.500 |" in md.read_text(encoding="utf-8")


def test_the_pass_hat_points_are_plotted_in_order() -> None:
    page = report.html(_run())
    points = re.search(r'<polyline points="([^"]+)"', page)
    assert points is not None
    xs = [float(p.split(",")[0]) for p in points.group(1).split()]
    assert len(xs) == 2 and xs[0] < xs[1]


def test_a_report_is_written_again_from_the_result_file(tmp_path: Path) -> None:
    _run().save(tmp_path / "results.json")
    again = RunResult.load(tmp_path / "results.json")
    assert report.markdown(again) == report.markdown(_run())
