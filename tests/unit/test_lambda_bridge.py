"""devstack.lambda_bridge and the local Lambda workers: what Step Functions would see of a function's answer.

Step Functions' Retry and Catch match a Lambda task's failure on ``errorType``, the exception's class name.
The bridge must hand moto exactly that (and the answer itself otherwise), whether the function ran
in-process (tests) or in a worker process (``make dev``), and must never run a function under settings
it is not deployed with.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from moto.awslambda.models import LambdaFunction

from devstack.functions import FunctionError, FunctionPool
from devstack.lambda_bridge import EnvironmentMismatch, bridged, in_process, invoked_by_state_machines
from devstack.stack import REPO_ROOT, load_template

HANDLER = """
class PaymentOutcomeUnknown(Exception):
    pass

def handler(event, context):
    if event.get("fail"):
        raise PaymentOutcomeUnknown("outcome unknown: " + event["fail"])
    return {"echo": event, "left_ms": context.get_remaining_time_in_millis()}
"""


def invoke(function_name: str, event: Any) -> tuple[str, bool, str]:
    """What moto's Lambda.Invoke calls, on a function of that name."""
    return LambdaFunction._invoke_lambda(SimpleNamespace(function_name=function_name), event)  # type: ignore[arg-type]


class Refused(Exception):
    pass


def test_an_answer_and_a_raised_exception_as_lambda_reports_them() -> None:
    def target(event: Any) -> Any:
        if event.get("refuse"):
            raise Refused("no")
        return {"status": "REFUNDED", "event": event}

    original = LambdaFunction.__dict__["_invoke_lambda"]
    with bridged({"fn-1": target}):
        payload, errored, _ = invoke("fn-1", {"approvalId": "apr_1"})
        assert (json.loads(payload), errored) == ({"status": "REFUNDED", "event": {"approvalId": "apr_1"}}, False)
        assert json.loads(invoke("fn-1", "{}")[0])["event"] == {}  # moto's body for an empty payload
        payload, errored, _ = invoke("fn-1", {"refuse": True})
        assert errored and json.loads(payload) == {"errorType": "Refused", "errorMessage": "no"}
        # A worker's failure carries the type its handler raised, not FunctionError.
        worker_failure = FunctionError("PaymentOutcomeUnknown: later", "PaymentOutcomeUnknown")
        with bridged({"fn-2": lambda _: (_ for _ in ()).throw(worker_failure)}):
            assert json.loads(invoke("fn-2", {})[0])["errorType"] == "PaymentOutcomeUnknown"
        assert LambdaFunction.__dict__["_invoke_lambda"] is not original  # the outer bridge is still on
    assert LambdaFunction.__dict__["_invoke_lambda"] is original


def test_a_function_without_a_target_keeps_motos_behaviour(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(LambdaFunction, "_invoke_lambda", lambda self, event=None: calls.append(event) or ("x", 0, ""))
    with bridged({"fn-1": lambda e: e}):
        assert invoke("other", {"a": 1}) == ("x", 0, "")
    assert calls == [{"a": 1}]


def test_in_process_refuses_to_run_under_other_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def handler(event: Any, context: Any) -> str:
        seen.append((event, context.function_name, context.get_remaining_time_in_millis()))
        return "ok"

    deployed = {"PAYMENT_PROVIDER": "stripe", "STRIPE_API_BASE": "http://sim", "POWERTOOLS_SERVICE_NAME": "payments"}
    target = in_process(handler, "PaymentsFunction", 60, deployed)
    monkeypatch.setenv("PAYMENT_PROVIDER", "none")
    monkeypatch.setenv("STRIPE_API_BASE", "http://sim")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "chat")  # not a setting: the chat function's name is fine
    with pytest.raises(EnvironmentMismatch, match="PAYMENT_PROVIDER") as raised:
        target({"approvalId": "apr_1"})
    assert "stripe" not in str(raised.value)  # names, never values (some are secrets)
    assert seen == []
    monkeypatch.setenv("PAYMENT_PROVIDER", "stripe")
    assert target({"approvalId": "apr_1"}) == "ok"
    ((event, name, left_ms),) = seen
    assert (event, name) == ({"approvalId": "apr_1"}, "PaymentsFunction") and 55_000 < left_ms <= 60_000


def test_a_worker_reports_the_exception_type(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(HANDLER))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *sys.path])}
    pool = FunctionPool("PaymentsFunction", tmp_path, "app.handler", 30, env, max_workers=1)
    try:
        answer = pool.invoke({"approvalId": "apr_1"})
        assert answer["echo"] == {"approvalId": "apr_1"} and 0 < answer["left_ms"] <= 30_000
        with pytest.raises(FunctionError) as raised:
            pool.invoke({"fail": "timeout"})
        assert raised.value.error_type == "PaymentOutcomeUnknown"
        assert "outcome unknown: timeout" in str(raised.value)
        assert pool.invoke({"again": 1})["echo"] == {"again": 1}  # the instance lives on, as Lambda's does
    finally:
        pool.close()


def test_the_bridged_functions_are_the_ones_state_machines_invoke() -> None:
    assert invoked_by_state_machines(load_template()) == ["PaymentsFunction"]
