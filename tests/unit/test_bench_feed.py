"""The arithmetic of `make bench`'s event-feed section (bench/feed.py): what a request is for, the capacity a read
consumes, the percentile, GB-seconds, and what the template's defaults allow."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench.feed import FakeClock, gb_seconds, limits, parameter_default, percentile, purpose, read_units


def _query(partition: str) -> dict[str, Any]:
    return {"KeyConditionExpression": "conversation_id = :c", "ExpressionAttributeValues": {":c": {"S": partition}}}


def test_each_request_of_a_poll_is_named_by_what_it_reads_or_writes() -> None:
    assert purpose("Query", _query("turn#c_1")) == "Query: turn records"
    assert purpose("Query", _query("note#c_1")) == "Query: notifications"
    assert purpose("Query", _query("c_1")) == "Query: messages"
    assert purpose("GetItem", {"Key": {"conversation_id": {"S": "c_1"}, "seq": {"N": "0"}}}) == (
        "GetItem: conversation header (owner check)"
    )
    rate = {"Key": {"conversation_id": {"S": "rate#reads#7#29000000"}, "seq": {"N": "0"}}}
    assert purpose("UpdateItem", rate) == "UpdateItem: the reader's rate counter"
    slot = {"Key": {"conversation_id": {"S": "poll#7"}, "seq": {"N": "1"}}}
    assert purpose("UpdateItem", slot) == "UpdateItem: the waiting slot (taken, released)"
    assert purpose("GetItem", {"Key": {"conversation_id": {"S": "note#c_1"}}}) == "GetItem: other"
    assert purpose("PutItem", {"Item": {}}) == "PutItem: other"


@pytest.mark.parametrize(
    ("read_bytes", "consistent", "units"),
    [(0, True, 1.0), (1, True, 1.0), (4096, True, 1.0), (4097, True, 2.0), (0, False, 0.5), (9000, False, 1.5)],
)
def test_a_read_consumes_a_unit_per_4_kb_and_at_least_one(read_bytes: int, consistent: bool, units: float) -> None:
    assert read_units(read_bytes, consistent) == units


def test_percentile_is_a_measured_value_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]  # 1..20
    assert percentile(values, 95) == 19.0
    assert percentile(values, 50) == 10.0
    assert percentile(values, 100) == 20.0
    assert percentile([3.0], 95) == 3.0
    assert percentile(list(reversed(values)), 95) == 19.0


def test_gb_seconds() -> None:
    assert gb_seconds(128, 60) == 7.5
    assert gb_seconds(512, 60) == 30.0


def test_the_fake_clock_moves_only_when_slept_on() -> None:
    clock = FakeClock(100.0)
    clock.sleep(0.25)
    clock.sleep(2)
    assert clock.time() == 102.25


def test_limits_come_from_the_templates_defaults(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    got = limits(sam, cfn, polls_per_minute=3)
    params = sam["Parameters"]
    assert got["concurrency_parameter"] == "EventsReservedConcurrency"
    assert got["concurrency"] == params["EventsReservedConcurrency"]["Default"]
    assert got["rate"] == params["ApiThrottlingRateLimit"]["Default"]
    assert got["burst"] == params["ApiThrottlingBurstLimit"]["Default"]
    assert got["reads_per_minute"] == params["ReadsPerMinute"]["Default"]
    assert got["events_memory_mb"] == sam["Resources"]["EventsFunction"]["Properties"]["MemorySize"]
    assert got["chat_memory_mb"] == sam["Globals"]["Function"]["MemorySize"]  # ChatFunction sets none of its own
    assert got["idle_clients_by_rate"] == got["rate"] * 60 / 3
    assert got["busy_clients_by_rate"] == got["rate"] * 60 / got["reads_per_minute"]
    assert got["waiting_clients_rate_per_second"] == got["concurrency"] * 3 / 60
    assert got["per_route_throttle"] is False


def test_a_changed_default_changes_what_is_allowed(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    changed = copy.deepcopy(sam)
    changed["Parameters"]["EventsReservedConcurrency"]["Default"] = 7
    changed["Parameters"]["ApiThrottlingRateLimit"]["Default"] = 5
    got = limits(changed, cfn, polls_per_minute=3)
    assert (got["concurrency"], got["rate"], got["idle_clients_by_rate"]) == (7, 5.0, 100.0)


def test_a_literal_property_is_its_own_value() -> None:
    template = {"Parameters": {"P": {"Default": 3}}}
    assert parameter_default(template, {"Ref": "P"}) == 3
    assert parameter_default(template, 12) == 12
