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
from support_agent.payments.flow import ApprovalNotFound


def payments_app() -> Any:
    spec = importlib.util.spec_from_file_location("payments_app", REPO_ROOT / "functions" / "payments" / "app.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_deadline_leaves_the_margin_before_lambdas_timeout() -> None:
    app = payments_app()
    deadline = app.deadline_of(SimpleNamespace(get_remaining_time_in_millis=lambda: 60_000))
    assert 60 - app.MARGIN_MS / 1000 - 1 < deadline.remaining() <= 60 - app.MARGIN_MS / 1000
    assert app.deadline_of(SimpleNamespace(get_remaining_time_in_millis=lambda: 1_000)).expired()
    assert app.deadline_of(None) is None and app.deadline_of(SimpleNamespace()) is None


@pytest.mark.parametrize("event", [{}, {"approvalId": None}, {"approvalId": "apr_short"}, {"approvalId": 7}, []])
def test_an_event_without_an_approval_id_is_approval_not_found(event: Any) -> None:
    """Raised before any AWS call: Step Functions fails the execution with this error type."""
    with pytest.raises(ApprovalNotFound):
        payments_app().handler(event, None)
