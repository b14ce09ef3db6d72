"""bench/cost.py's arithmetic: DynamoDB's request units by item size, and a scenario's line items."""

from __future__ import annotations

from typing import Any

import pytest

from bench.cost import load_prices, model_seconds, price
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
