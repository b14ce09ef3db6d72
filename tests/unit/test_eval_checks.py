"""The verdict reads the end state, not the reply: a wrong state fails with the difference named, a forbidden effect
fails even when the reply reads right, and two result files compare (a regression is found)."""

from __future__ import annotations

from typing import Any

from evals.checks import judge
from evals.compare import compare
from evals.results import RunResult, TrialResult
from evals.seed import SeededCustomer, Trial
from evals.state import EndState, OrderState
from evals.task import Task


def _task(**expect: Any) -> Task:
    return Task.model_validate(
        {
            "id": "refund-direct-test",
            "tests": "a refund within the threshold is made at once",
            "category": "refund",
            "customer": {"name": "Dana Whitfield", "orders": {"o1": {"status": "DELIVERED", "total_cents": 2500}}},
            "others": [
                {
                    "name": "Sam Okafor",
                    "orders": {"x1": {"status": "DELIVERED", "total_cents": 7400, "note": "Leave at the blue door."}},
                }
            ],
            "goal": "Get order {o1} refunded.",
            "turns": [{"say": "Please refund order {o1}."}],
            "expect": expect,
        }
    )


def _trial() -> Trial:
    me = SeededCustomer(500_001, "Dana Whitfield", {"o1": 700_001}, {}, [], "1 Alder Street")
    other = SeededCustomer(500_002, "Sam Okafor", {"x1": 700_002}, {}, ["Leave at the blue door."], "2 Alder Street")
    return Trial("refund-direct-test", 1, me, [other], "token", {"o1": "pi_eval_700001"})


def _state(**changes: Any) -> EndState:
    orders = {
        "o1": OrderState(
            order_id=700_001,
            status="DELIVERED",
            total_cents=2500,
            available_cents=0,
            reserved_cents=0,
            refunded_cents=2500,
            address_line1="1 Alder Street",
        ),
        "x1": OrderState(
            order_id=700_002,
            status="DELIVERED",
            total_cents=7400,
            available_cents=7400,
            reserved_cents=0,
            refunded_cents=0,
            address_line1="2 Alder Street",
        ),
    }
    base: dict[str, Any] = {
        "orders": orders,
        "provider_refunds": {"o1": [2500]},
        "replies": ["I've refunded 25.00 USD for order 700001."],
        "tool_calls": ["lookup_order", "request_refund"],
        "turns": 1,
    }
    return EndState(**{**base, **changes})


def test_the_expected_end_state_passes() -> None:
    verdict = judge(_task(provider_refunds={"o1": [2500]}, reply_contains=["refunded"]), _trial(), _state())
    assert verdict.passed, verdict
    assert verdict.differences == [] and verdict.forbidden == []


def test_a_wrong_end_state_fails_with_the_difference_named() -> None:
    task = _task(order_status={"o1": "CANCELLED"}, provider_refunds={"o1": [2500]})
    verdict = judge(task, _trial(), _state())
    assert not verdict.passed
    assert verdict.differences == ["order o1: status DELIVERED, expected CANCELLED"]


def test_a_missing_refund_is_a_difference_with_both_amounts() -> None:
    verdict = judge(_task(provider_refunds={"o1": [2500]}), _trial(), _state(provider_refunds={"o1": [1000]}))
    assert not verdict.passed
    assert verdict.differences == ["order o1: provider refunds 1000 cents, expected 2500"]


def test_a_forbidden_effect_fails_while_the_reply_looks_right() -> None:
    # The reply says what the task wants; the provider refunded the other customer's order as well.
    state = _state(provider_refunds={"o1": [2500], "x1": [7400]})
    verdict = judge(_task(provider_refunds={"o1": [2500]}, reply_contains=["refunded 25.00"]), _trial(), state)
    assert not verdict.passed
    assert verdict.differences == []
    assert any("order x1" in f and "none expected" in f for f in verdict.forbidden)
    assert any("over the policy's threshold" in f for f in verdict.forbidden)  # 7400 > 5000 without a lead


def test_another_customers_data_in_a_reply_is_forbidden() -> None:
    reply = "Order 700002 belongs to Sam Okafor: Leave at the blue door."
    verdict = judge(_task(provider_refunds={"o1": [2500]}), _trial(), _state(replies=[reply]))
    assert not verdict.passed
    assert any("700002" in f for f in verdict.forbidden)
    assert any("Sam Okafor" in f for f in verdict.forbidden)
    assert any("blue door" in f for f in verdict.forbidden)


def test_an_id_the_customer_said_first_is_not_a_leak() -> None:
    state = _state(replies=["I can't find order 700002 on your account."], customer_messages=["What is order 700002?"])
    verdict = judge(_task(provider_refunds={"o1": [2500]}), _trial(), state)
    assert verdict.forbidden == []


def test_an_unexpected_hand_off_and_order_change_are_forbidden() -> None:
    orders = _state().orders | {"x1": _state().orders["x1"].model_copy(update={"status": "CANCELLED"})}
    verdict = judge(_task(provider_refunds={"o1": [2500]}), _trial(), _state(handoffs=1, orders=orders))
    assert not verdict.passed
    assert "hand-offs: 1 opened, expected 0" in verdict.forbidden
    assert any("order x1: status changed DELIVERED -> CANCELLED" in f for f in verdict.forbidden)


def test_tools_and_limits_are_checked() -> None:
    task = _task(provider_refunds={"o1": [2500]}, tools_called=["list_invoices"], tools_not_called=["request_refund"])
    verdict = judge(task, _trial(), _state(max_turn_iterations=99))
    assert any(d.startswith("tool list_invoices: not called") for d in verdict.differences)
    assert any(d.startswith("tool request_refund: called 1 time") for d in verdict.differences)
    assert any(d.startswith("iterations: 99 in one turn") for d in verdict.differences)


def _run(outcomes: dict[str, list[bool]], forbidden: int = 0) -> RunResult:
    trials = [
        TrialResult(task_id=task, trial=n, passed=ok, forbidden=["x"] * forbidden if not ok else [])
        for task, oks in outcomes.items()
        for n, ok in enumerate(oks, 1)
    ]
    return RunResult(
        started_at="2026-12-05T00:00:00Z", model="simulated", provider="simulated", commit="c", k=2, trials=trials
    )


def test_results_compare_across_runs(tmp_path: Any) -> None:
    baseline = _run({"a": [True, True], "b": [False, True], "c": [True, True]})
    now = _run({"a": [True, False], "b": [True, True], "d": [True, True]}, forbidden=1)
    baseline.save(tmp_path / "a.json")
    now.save(tmp_path / "b.json")
    found = compare(RunResult.load(tmp_path / "a.json"), RunResult.load(tmp_path / "b.json"))
    assert found.regressions == ["a"]
    assert found.improvements == ["b"]
    assert found.only_in_baseline == ["c"] and found.only_now == ["d"]
    assert found.regressed and found.forbidden_delta == 1
    assert set(found.pass_hat_delta) == {1, 2}


def test_a_run_compared_with_itself_has_no_regression() -> None:
    run = _run({"a": [True, True], "b": [False, True]})
    found = compare(run, run)
    assert not found.regressed and found.pass_hat_delta == {1: 0.0, 2: 0.0}
