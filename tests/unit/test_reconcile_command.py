"""`make reconcile`'s plumbing: the local stack's environment read from `make dev`'s file, the printed report,
and the exit code when there is no stack to reconcile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devstack import reconcile
from devstack.simulated_stripe import TEST_KEY


def test_the_function_environment_is_pointed_at_this_machine(tmp_path: Path) -> None:
    env_file = tmp_path / "env.json"
    deployed = {
        "CUSTOMER_DATA_TABLE": "stack-CustomerDataTable-1",
        "PAYMENT_PROVIDER": "stripe",
        "STRIPE_API_BASE": "http://127.0.0.1:40123",
        "RECONCILE_WINDOW_DAYS": "7",
        "AWS_ENDPOINT_URL": "http://host.docker.internal:4599",
    }
    env_file.write_text(json.dumps({"ChatFunction": {}, "ReconcileFunction": deployed}))

    env = reconcile.local_environment(env_file, shell={})
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:4599"
    assert (env["CUSTOMER_DATA_TABLE"], env["STRIPE_API_BASE"]) == (
        "stack-CustomerDataTable-1",
        "http://127.0.0.1:40123",
    )
    assert env["STRIPE_API_KEY"] == TEST_KEY  # the simulated Stripe's
    assert reconcile.local_environment(env_file, shell={"STRIPE_API_KEY": "sk_test_real"})["STRIPE_API_KEY"] == (
        "sk_test_real"
    )


def test_no_stack_is_exit_code_2_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(reconcile, "ENV_FILE", tmp_path / "missing.json")
    with pytest.raises(SystemExit) as exited:
        reconcile.main([])
    assert exited.value.code == 2
    assert "make dev" in capsys.readouterr().err

    stale = tmp_path / "env.json"
    stale.write_text(json.dumps({"ChatFunction": {}}))  # a make dev from before reconciliation
    with pytest.raises(reconcile.CannotRun, match="ReconcileFunction"):
        reconcile.local_environment(stale)


def test_the_report_prints_one_line_per_difference_or_none() -> None:
    base = {"since": "2026-01-01T00:00:00.000Z", "until": "2026-01-08T00:00:00.000Z", "provider": "stripe"}
    clean = reconcile.report_lines({**base, "rows": 3, "provider_refunds": 3, "differences": [], "skipped": ""})
    assert clean[1:] == ["no differences"]
    difference = {
        "kind": "amount_mismatch",
        "refund_key": "apr_1",
        "refund_ids": ["re_1"],
        "customer_id": 7,
        "payment_intent": "pi_1",
        "ledger_status": "SUCCEEDED",
        "provider_status": "succeeded",
        "ledger_amount": 2500,
        "provider_amount": 2000,
        "detail": "",
    }
    lines = reconcile.report_lines(
        {**base, "rows": 1, "provider_refunds": 1, "differences": [difference], "skipped": ""}
    )
    assert lines[1] == "1 difference(s):"
    assert lines[2].split() == [
        "amount_mismatch",
        "key=apr_1",
        "refund=re_1",
        "on",
        "pi_1",
        "customer",
        "7",
        "ledger",
        "SUCCEEDED",
        "2500",
        "provider",
        "succeeded",
        "2000",
    ]
