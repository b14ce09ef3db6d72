"""functions/payments/app.py, RefundFlow's task: its deadline, and an input that names no approval.

The handler's whole path (moto's Step Functions -> the bridge -> this handler -> the provider) runs in
tests/integration/test_refund_flow.py; these are the parts decided before the refund step runs.
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace
from typing import Any

import pytest

from devstack.stack import REPO_ROOT
from support_agent.messages import Deadline
from support_agent.refunds.step import ApprovalNotFound


def payments_app() -> Any:
    spec = importlib.util.spec_from_file_location("payments_app", REPO_ROOT / "functions" / "payments" / "app.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_deadline_leaves_the_margin_before_lambdas_timeout() -> None:
    margin = payments_app().MARGIN_MS / 1000

    def of(context: object) -> Deadline | None:
        return Deadline.of_lambda(context, margin)

    deadline = of(SimpleNamespace(get_remaining_time_in_millis=lambda: 60_000))
    assert deadline is not None and 60 - margin - 1 < deadline.remaining() <= 60 - margin
    short = of(SimpleNamespace(get_remaining_time_in_millis=lambda: 1_000))
    assert short is not None and short.expired()
    assert of(None) is None and of(SimpleNamespace()) is None


@pytest.mark.parametrize("event", [{}, {"approvalId": None}, {"approvalId": "apr_short"}, {"approvalId": 7}, []])
def test_an_event_without_an_approval_id_is_approval_not_found(event: Any) -> None:
    """Raised before any AWS call: Step Functions fails the execution with this error type."""
    with pytest.raises(ApprovalNotFound):
        payments_app().handler(event, None)
