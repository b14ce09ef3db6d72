"""pass^k as τ²-bench defines it (C(c, k) / C(n, k), averaged over tasks), against values worked out by hand."""

from __future__ import annotations

import pytest

from evals.metrics import pass_hat_k, pass_hat_ks, percentile


def test_one_task_four_trials_two_successes() -> None:
    # C(2,1)/C(4,1) = 2/4; C(2,2)/C(4,2) = 1/6; C(2,3) = 0.
    assert pass_hat_k(4, 2, 1) == pytest.approx(0.5)
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)
    assert pass_hat_k(4, 2, 3) == 0.0
    assert pass_hat_k(4, 2, 4) == 0.0


def test_averaged_over_tasks() -> None:
    outcomes = {
        "a": [True, False, True, False],  # 2 of 4: 1/2, 1/6, 0, 0
        "b": [True, True, True, True],  # 4 of 4: 1 at every k
        "c": [True, True, True, False],  # 3 of 4: 3/4, 3/6, 1/4, 0
    }
    found = pass_hat_ks(outcomes)
    assert list(found) == [1, 2, 3, 4]
    assert found[1] == pytest.approx((0.5 + 1 + 0.75) / 3)
    assert found[2] == pytest.approx((1 / 6 + 1 + 0.5) / 3)
    assert found[3] == pytest.approx((0 + 1 + 0.25) / 3)
    assert found[4] == pytest.approx(1 / 3)


def test_pass_hat_1_is_the_mean_success_rate_and_never_rises_with_k() -> None:
    outcomes = {"a": [True, False, True], "b": [False, False, True]}
    found = pass_hat_ks(outcomes)
    assert found[1] == pytest.approx(3 / 6)
    assert found[1] >= found[2] >= found[3]


def test_a_task_with_fewer_trials_than_k_is_left_out_of_that_k() -> None:
    found = pass_hat_ks({"a": [True, True], "b": [False]}, max_k=2)
    assert found[1] == pytest.approx(0.5)
    assert found[2] == pytest.approx(1.0)  # only "a" has two trials


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        pass_hat_k(2, 3, 1)
    with pytest.raises(ValueError):
        pass_hat_k(2, 1, 3)


def test_percentile() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == pytest.approx(4.8)
    assert percentile([], 0.5) == 0.0
