"""bench/cost.py's arithmetic: DynamoDB's request units by item size, a scenario's line items, and the outcome sweep's
and the daily rollup's cost scaled to 1,000 conversations (with their table)."""

from __future__ import annotations

from typing import Any

import pytest

from bench import report
from bench.cost import (
    ROLLUP,
    SCHEDULED,
    SWEEP,
    load_prices,
    model_seconds,
    outcome_item_rru,
    per_thousand,
    price,
    priced,
    run_totals,
)
from bench.cost_probe import dynamodb_units, read_units, write_units


def _s(text: str) -> dict[str, Any]:
    return {"S": text}


@pytest.mark.parametrize(
    ("size", "consistent", "transactional", "units"),
    [(0, False, False, 0.5), (0, True, False, 1.0), (4096, True, False, 1.0), (4097, True, False, 2.0),
     (9000, False, False, 1.5), (100, True, True, 2.0)],
)  # fmt: skip
def test_read_units_are_per_4_kb(size: int, consistent: bool, transactional: bool, units: float) -> None:
    assert read_units(size, consistent, transactional) == units


@pytest.mark.parametrize(
    ("size", "transactional", "units"), [(0, False, 1.0), (1024, False, 1.0), (1025, False, 2.0), (3000, True, 6.0)]
)
def test_write_units_are_per_kb(size: int, transactional: bool, units: float) -> None:
    assert write_units(size, transactional) == units


def test_a_query_reads_the_items_it_returns_rounded_up_once() -> None:
    items = [{"k": _s("x" * 3000)}, {"k": _s("y" * 3000)}]  # ~6 KB in all: two 4 KB blocks
    assert dynamodb_units("Query", {"ConsistentRead": True}, {"Items": items}, {}) == 2.0
    assert dynamodb_units("Query", {}, {"Items": []}, {}) == 0.5


def test_a_transaction_bills_each_item_twice_by_its_larger_size() -> None:
    params = {
        "TransactItems": [
            {"Put": {"TableName": "T", "Item": {"k": _s("a" * 1500)}}},  # 2 KB -> 2 units, twice
            {"Update": {"TableName": "T", "Key": {"k": _s("b")}}},  # 300 B after -> 1 unit, twice
            {"ConditionCheck": {"TableName": "T", "Key": {"k": _s("c")}}},
        ]
    }
    assert dynamodb_units("TransactWriteItems", params, {}, {"1": 300, "2": 50}) == 4 + 2 + 2


def test_an_update_bills_the_item_as_it_was_or_is_whichever_is_larger() -> None:
    assert dynamodb_units("UpdateItem", {"Key": {}}, {}, {"0": 2500}) == 3.0


def _scenario(**extra: Any) -> dict[str, Any]:
    fn = {"invocations": 1, "seconds": 0.5, "requests": {}, "rru": 4.0, "wru": 10.0, "sqs": 1, "sns": 0}
    fn |= {"s3_put": 1, "s3_get": 0, "secrets": 0}
    return {
        "name": "t",
        "functions": {"ChatFunction": fn},
        "usage": {"input_tokens": 1000, "output_tokens": 120},
        "model_calls": 2,
        "model_function": "ChatFunction",
        **extra,
    }


def test_a_scenario_is_priced_from_the_prices_file() -> None:
    prices = load_prices()
    per = {k: v["usd_per_million"] / 1e6 for k, v in prices["per_million"].items()}
    row = price(_scenario(), prices, {"ChatFunction": 1024}, "arm64")
    wait = model_seconds(2, 120, prices["assumptions"])
    assert row["model_wait_seconds"] == wait
    assert row["items"]["Lambda duration"] == pytest.approx((0.5 + wait) * per["lambda_gb_second_arm64"])
    assert row["items"]["DynamoDB writes"] == pytest.approx(10 * per["dynamodb_write_request_unit"])
    assert row["items"]["DynamoDB reads"] == pytest.approx(4 * per["dynamodb_read_request_unit"])
    assert row["items"]["API Gateway (HTTP API)"] == pytest.approx(per["http_api_request"])
    assert row["infra"] == pytest.approx(sum(row["items"].values()))
    assert row["model"] == pytest.approx((1000 * 3 + 120 * 15) / 1e6)  # Sonnet: 3 and 15 USD per million
    assert row["share"] == pytest.approx(row["infra"] / (row["infra"] + row["model"]))


def test_a_page_waiting_on_the_feed_costs_the_feed_minute_for_the_model_time() -> None:
    prices = load_prices()
    minute = {"invocations": 3, "held_seconds": 60.0, "rcu": 120.0, "wcu": 3}
    memory = {"TurnWorkerFunction": 512, "EventsFunction": 128}
    scenario = _scenario(model_function="TurnWorkerFunction", feed_wait=minute)
    scenario["functions"] = {"TurnWorkerFunction": scenario["functions"]["ChatFunction"]}
    row = price(scenario, prices, memory, "arm64")
    minutes = row["model_wait_seconds"] / 60
    assert row["counts"]["rru"] == pytest.approx(4 + 120 * minutes)
    assert row["gb_seconds"]["EventsFunction"] == pytest.approx(128 / 1024 * 60 * minutes)


def test_every_price_names_its_source_and_the_file_its_date_and_region() -> None:
    prices = load_prices()
    assert prices["region"] == "us-east-1" and prices["date"]
    for name, entry in prices["per_million"].items():
        assert entry["usd_per_million"] > 0 and entry["source"].startswith("https://aws.amazon.com/"), name


# -- the outcome sweep and the daily rollup per 1,000 conversations ------------------------------------------


def _fn(requests: dict[str, int], rru: float, wru: float, seconds: float = 0.1, invocations: int = 1) -> dict[str, Any]:
    figures = {"invocations": invocations, "seconds": seconds, "requests": requests, "rru": rru, "wru": wru}
    return figures | {"sqs": 0, "sns": 0, "s3_put": 0, "s3_get": 0, "secrets": 0}


def _outcomes() -> dict[str, Any]:
    """10 conversations of 819.2 B outcome items (0.1 RRU each on a Query); a rollup of 8 Queries and 3 updates."""
    return {
        "conversations": 10,
        "final": 10,
        "outcomes": {"resolved_by_agent": 10},
        "waited_seconds": 50.0,
        "sweep": {
            SWEEP: _fn({"dynamodb:Query": 1, "dynamodb:GetItem": 20, "dynamodb:PutItem": 10}, 12.5, 30.0, 0.5),
            "AuditWatcherFunction": _fn({"dynamodb:GetItem": 2}, 1.0, 0.0, 0.2),
        },
        "rollup_before": {ROLLUP: _fn({"dynamodb:Query": 8, "dynamodb:UpdateItem": 2}, 4.0, 2.0, 0.3)},
        "rollup_after": {ROLLUP: _fn({"dynamodb:Query": 8, "dynamodb:UpdateItem": 3}, 5.5, 4.0, 0.3)},
        "outcome_items": 10,
        "outcome_bytes": 8192,
    }


EMPTY_SWEEP = {SWEEP: _fn({"dynamodb:Query": 1}, 0.5, 0.0, 0.1)}


def test_the_sweep_per_1000_conversations_is_its_run_less_an_empty_run_scaled_from_n() -> None:
    sweep = per_thousand(_outcomes(), EMPTY_SWEEP)["sweep"]
    own = sweep[SWEEP]
    assert own["invocations"] == 0  # the runs come at the schedule's rate whatever the traffic: the fixed cost
    assert own["rru"] == pytest.approx((12.5 - 0.5) * 100)
    assert own["wru"] == pytest.approx(30 * 100)
    assert own["seconds"] == pytest.approx((0.5 - 0.1) * 100)
    assert own["requests"] == pytest.approx({"dynamodb:Query": 0, "dynamodb:GetItem": 2000, "dynamodb:PutItem": 1000})
    # what the sweep's writes set off, which an empty run does not, is scaled whole
    assert sweep["AuditWatcherFunction"]["invocations"] == pytest.approx(100)
    assert run_totals(sweep)["requests"] == pytest.approx(3000 + 200)


def test_a_warm_run_quicker_than_the_empty_one_adds_no_negative_time() -> None:
    slow_empty = {SWEEP: _fn({"dynamodb:Query": 1}, 0.5, 0.0, seconds=2.0)}
    assert per_thousand(_outcomes(), slow_empty)["sweep"][SWEEP]["seconds"] == 0


def test_the_rollup_reads_a_day_and_a_half_of_outcome_items_per_hourly_run() -> None:
    o = _outcomes()
    assert outcome_item_rru(o) == pytest.approx(0.1)  # 819.2 B / 4 KB, halved
    scaled = per_thousand(o, EMPTY_SWEEP)
    rollup = scaled["rollup"][ROLLUP]
    assert scaled["items_read"] == 24 * 1.5 * 1000
    assert rollup["rru"] == pytest.approx(24 * 4.0 + 36_000 * 0.1)  # not 24 x the measured 5.5
    assert rollup["wru"] == pytest.approx(24 * 4.0)
    assert rollup["invocations"] == 24
    # 36,000 items of 819.2 B read: 28 further 1 MB Query pages beyond the first of each Query
    assert rollup["requests"] == {"dynamodb:Query": 24 * 8 + 28, "dynamodb:UpdateItem": 24 * 3}


def test_the_sweep_without_an_empty_run_to_subtract_is_scaled_whole() -> None:
    assert per_thousand(_outcomes(), None)["sweep"][SWEEP]["rru"] == pytest.approx(12.5 * 100)


def _cost() -> dict[str, Any]:
    return {
        "scenarios": [],
        "scheduled": {SWEEP: EMPTY_SWEEP},
        "outcomes": _outcomes(),
        "memory": {SWEEP: 256, ROLLUP: 256, "AuditWatcherFunction": 128},
        "architecture": "arm64",
    }


def test_the_outcomes_are_priced_with_the_prices_file() -> None:
    prices = load_prices()
    per = {k: v["usd_per_million"] / 1e6 for k, v in prices["per_million"].items()}
    rollup = priced(_cost(), prices)["outcomes"]["priced"]["rollup"]
    assert rollup["items"]["DynamoDB reads"] == pytest.approx((96 + 3600) * per["dynamodb_read_request_unit"])
    assert rollup["items"]["Lambda requests"] == pytest.approx(24 * per["lambda_request"])
    assert rollup["model"] == 0


def test_the_outcomes_table_has_a_row_each_and_their_sum() -> None:
    c = _cost()
    p = priced(c)
    rows = report.outcomes_rows(p)
    assert [r[0].split(":")[0] for r in rows] == ["outcome sweep", "daily rollup", "**in all**"]
    sweep, rollup, both = rows
    assert sweep[1:5] == ["3,200", "100", "1,300.0", "3,000.0"]  # requests, invocations, RRU, WRU
    assert rollup[1:5] == ["292", "24", "3,696.0", "96.0"]
    assert both[1:5] == ["**3,492**", "**124**", "**4,996.0**", "**3,096.0**"]
    usd = p["outcomes"]["priced"]
    assert both[5] == f"**{usd['sweep']['infra'] + usd['rollup']['infra']:.4f}**"
    table = report.outcomes_table(c, p)
    assert "Outcomes and daily rollup per 1,000 conversations" in table and "0.1000 RRU per item" in table


def test_a_result_measured_before_the_outcomes_has_no_outcomes_table() -> None:
    c = _cost()
    del c["outcomes"]
    p = priced(c)
    assert "outcomes" not in p and report.outcomes_table(c, p) == ""


def test_every_scheduled_function_is_counted_at_its_template_rate() -> None:
    from devstack.stack import load_template

    per_month = {"1 minute": 30 * 24 * 60, "5 minutes": 30 * 24 * 12, "15 minutes": 30 * 24 * 4}
    per_month |= {"1 hour": 30 * 24, "1 day": 30}
    rates = {
        name: per_month[event["Properties"]["Schedule"].removeprefix("rate(").removesuffix(")")]
        for name, resource in load_template()["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
        for event in (resource["Properties"].get("Events") or {}).values()
        if event["Type"] == "Schedule"
    }
    assert rates == SCHEDULED


def test_the_cost_prose_states_the_sweep_per_conversation_and_the_rollups_measured_reads() -> None:
    from bench import narrative

    text = " ".join(narrative.cost({"cost": _cost()}).split())
    assert "3.2 AWS requests, 1.30 RRU and 3.00 WRU" in text  # (the scaled sweep) / 1,000
    assert "The run before the sweep read 4 RRU, the run after it 5.5 (the 10 items, 8,192 B" in text
    del (c := _cost())["outcomes"]
    assert "Outcomes and the daily rollup" not in narrative.cost({"cost": c})
