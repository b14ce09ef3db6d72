"""The evaluation suite in `make test` (issue 34): every task of evals/tasks once (K=1) against the local stack, with
the agent on devstack's simulated model, and each must pass with no forbidden effect. Then the suite is shown able
to fail: with the refund threshold lifted by a published policy version, and with request_refund's input schema
broken in the chat function, tasks that should fail do.
"""

from __future__ import annotations

import json
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.local import LocalStack
from evals import runner
from evals.report import write
from evals.results import RunResult, TrialResult
from evals.task import Task, load_all

TASKS_DIR = runner.TASKS_DIR
SUITE_SECONDS = 90.0  # the budget for the whole suite on two cores (printed, not asserted: no timing here)
# The functions whose code a breaking test changes (the chat path: a turn runs in either).
CHAT_FUNCTIONS = ("ChatFunction", "TurnWorkerFunction")


def _statuses(trial: TrialResult) -> list[int]:
    return [int(e.split()[0]) for e in trial.errors if e[:3].isdigit()]


def _failures(tasks: list[Task], run: RunResult) -> list[str]:
    """Each failing trial with why: the runner's verdict, and the turns' errors against `expect.turn_errors`."""
    wanted = {t.id: t.expect.turn_errors for t in tasks}
    out = []
    for trial in run.trials:
        why = trial.differences + [f"FORBIDDEN {f}" for f in trial.forbidden]
        if _statuses(trial) != wanted[trial.task_id]:
            why.append(f"turn errors {trial.errors}, expected statuses {wanted[trial.task_id]}")
        if why or not trial.passed:
            out.append(f"{trial.task_id}: {'; '.join(why)}")
    return out


def run(local: LocalStack, only: str | None = None) -> tuple[list[Task], RunResult]:
    tasks = load_all(TASKS_DIR, only)
    return tasks, runner.run_tasks(local, tasks, 1)


def test_every_task_passes_once_with_no_forbidden_effect(local_stack: LocalStack) -> None:
    began = time.monotonic()
    tasks, result = run(local_stack)
    took = time.monotonic() - began
    assert len(tasks) >= 30 and len(result.trials) == len(tasks)
    slowest = sorted(result.trials, key=lambda t: -t.latency_seconds)[:3]
    print(f"\neval suite: {len(tasks)} tasks in {took:.1f} s (budget ~{SUITE_SECONDS:.0f} s); slowest turns: ", end="")
    print(", ".join(f"{t.task_id} {t.latency_seconds:.1f} s" for t in slowest))
    assert result.forbidden_total == 0, [f for t in result.trials for f in t.forbidden]
    assert _failures(tasks, result) == []
    global _RESULT
    _RESULT = result


_RESULT: RunResult | None = None  # the full run, for the report's browser check


def test_the_report_opens_in_chromium(browser: Any, screenshot: Any, tmp_path: Path) -> None:
    if _RESULT is None:
        pytest.skip("the suite's run did not complete")
    _, page_path = write(_RESULT, tmp_path)
    page = browser.new_page()
    try:
        page.goto(page_path.as_uri())
        assert page.locator("h1").inner_text() == "Evaluation report"
        assert page.locator("figure svg").count() >= 1  # the pass^k chart
        assert page.locator("figure svg polyline, figure svg path, figure svg circle").count() >= 1
        screenshot(page, "report")
    finally:
        page.close()


# -- the suite can fail ----------------------------------------------------------------------------------------


def _restart(local: LocalStack, names: tuple[str, ...]) -> None:
    """Cold starts for ``names``: their warm processes (and what they cached, the policy) are dropped."""
    for name in names:
        local.pools[name].close()


def _ssm(local: LocalStack) -> tuple[object, str]:
    import boto3

    ssm = boto3.client(
        "ssm",
        endpoint_url=local.moto_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="x",
    )
    return ssm, local.stack.physical_ids["SupportPolicyParameter"]


@pytest.fixture
def no_threshold(local_stack: LocalStack) -> Iterator[None]:
    """A policy version whose refund threshold is 1,000,000.00: every refund direct (the threshold rule broken)."""
    from devstack.policy import publish

    ssm, name = _ssm(local_stack)
    original = ssm.get_parameter(Name=name)["Parameter"]["Value"]  # type: ignore[attr-defined]
    broken = json.loads(original)
    for action in ("request_refund", "cancel_order"):
        broken["actions"][action]["approval_threshold_cents"] = 100_000_000
    publish(ssm, name, json.dumps(broken))
    _restart(local_stack, (*CHAT_FUNCTIONS, "ApprovalsFunction"))
    try:
        yield
    finally:
        publish(ssm, name, original)  # a rollback is a new version with the old document
        _restart(local_stack, (*CHAT_FUNCTIONS, "ApprovalsFunction"))


def test_the_suite_fails_when_the_threshold_rule_is_broken(local_stack: LocalStack, no_threshold: None) -> None:
    _, result = run(local_stack, "approval-full-refund,split-two-turns")
    assert [t.passed for t in result.trials] == [False, False], result.trials
    # the refund a lead should have decided was made directly: a forbidden effect, whatever the reply says
    assert any(t.forbidden for t in result.trials), result.trials


# A sitecustomize on the functions' PYTHONPATH replaces request_refund's input model before the handler imports it
# (support_agent/tools/refunds.py names the model the registry offers): the amount is now `amount` in dollars.
BROKEN_SCHEMA = textwrap.dedent(
    """
    from pydantic import BaseModel, ConfigDict, Field

    import support_agent.tools.refunds as refunds


    class BrokenRefundInput(BaseModel):
        model_config = ConfigDict(extra="forbid")
        order_id: int = Field(..., ge=1)
        amount: float = Field(..., gt=0, description="Amount to refund in dollars.")
        reason: str


    refunds.RequestRefundInput = BrokenRefundInput
    """
)


@pytest.fixture
def broken_schema(local_stack: LocalStack) -> Iterator[None]:
    with tempfile.TemporaryDirectory() as hook:
        Path(hook, "sitecustomize.py").write_text(BROKEN_SCHEMA)
        saved = {name: dict(local_stack.pools[name]._env) for name in CHAT_FUNCTIONS}
        for name in CHAT_FUNCTIONS:
            env = local_stack.pools[name]._env
            env["PYTHONPATH"] = hook + ":" + env.get("PYTHONPATH", "")
        _restart(local_stack, CHAT_FUNCTIONS)
        try:
            yield
        finally:
            for name in CHAT_FUNCTIONS:
                local_stack.pools[name]._env = saved[name]
            _restart(local_stack, CHAT_FUNCTIONS)


def test_the_suite_fails_when_a_tool_schema_is_broken(local_stack: LocalStack, broken_schema: None) -> None:
    _, result = run(local_stack, "refund-direct-full,approval-full-refund")
    assert [t.passed for t in result.trials] == [False, False], result.trials
    assert all(t.differences for t in result.trials)  # no refund, no approval where one was expected
