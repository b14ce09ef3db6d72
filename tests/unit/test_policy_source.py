"""Where the support policy is read from (policy/source.py), against moto's SSM: the version applied is SSM's,
a malformed newest version is refused (logged, counted) and the newest valid one applied, the answer is cached."""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

import boto3
import pytest

from support_agent import observability as obs
from support_agent.config import Settings
from support_agent.policy.model import SupportPolicy, default_policy
from support_agent.policy.source import PolicySource, PolicyUnavailable, StaticPolicy, policy_source

NAME = "/support-agent/support-policy"


class CountingClient:
    """An SSM client that counts the calls made through it (pagination included)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: Counter[str] = Counter()
        client.meta.events.register("before-call.ssm.*", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        self.calls[model.name] += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.fixture
def ssm(aws: None) -> Any:
    return boto3.client("ssm")


@pytest.fixture(autouse=True)
def _no_metrics() -> Any:
    obs.metrics.clear_metrics()
    yield
    obs.metrics.clear_metrics()


def publish(ssm: Any, document: dict[str, Any] | str) -> int:
    value = document if isinstance(document, str) else json.dumps(document)
    return int(ssm.put_parameter(Name=NAME, Value=value, Type="String", Overwrite=True)["Version"])


def policy(threshold: int) -> dict[str, Any]:
    return default_policy(threshold).model_dump(mode="json")


def refusals() -> list[float]:
    metric = obs.metrics.metric_set.get(obs.POLICY_REFUSED)
    return list(metric["Value"]) if metric else []


def source(ssm: Any, max_age: int = 60) -> tuple[PolicySource, CountingClient]:
    client = CountingClient(ssm)
    return PolicySource(NAME, lambda: client, max_age), client


def test_version_one_is_read_with_ssms_version(ssm: Any) -> None:
    assert publish(ssm, policy(5000)) == 1
    applied = source(ssm)[0].current()
    assert applied.version == 1
    assert applied.policy == default_policy(5000)


def test_the_version_is_ssms_not_the_documents(ssm: Any) -> None:
    publish(ssm, policy(5000))
    publish(ssm, policy(6000))
    applied = source(ssm)[0].current()
    assert (applied.version, applied.policy.rule("request_refund").approval_threshold_cents) == (2, 6000)


def test_a_malformed_newer_version_is_refused_and_the_newest_valid_one_applied(
    ssm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    publish(ssm, policy(5000))
    publish(ssm, policy(7000))
    bad = policy(9000)
    bad["actions"]["cancel_order"]["approval_threshold_cents"] = None
    assert publish(ssm, bad) == 3
    with caplog.at_level(logging.ERROR):
        applied = source(ssm)[0].current()
    assert applied.version == 2  # the newest that validates, not the first
    assert applied.policy.rule("request_refund").approval_threshold_cents == 7000
    assert refusals() == [1.0]
    (record,) = [r for r in caplog.records if r.getMessage() == "support_policy_refused"]
    assert record.version == 3  # type: ignore[attr-defined]
    assert "approval_threshold_cents is required" in record.error  # type: ignore[attr-defined]
    assert record.applied_version == 2  # type: ignore[attr-defined]


def test_not_json_is_refused_too(ssm: Any) -> None:
    publish(ssm, policy(5000))
    publish(ssm, '{"countries": ["US"],')
    assert source(ssm)[0].current().version == 1
    assert refusals() == [1.0]


def test_older_malformed_versions_are_walked_past(ssm: Any) -> None:
    publish(ssm, policy(5000))
    for _ in range(3):
        publish(ssm, {"extra": True})
    assert source(ssm)[0].current().version == 1


def test_the_walk_reads_every_page_of_the_history(ssm: Any) -> None:
    publish(ssm, policy(5000))
    for _ in range(60):  # more than one page of GetParameterHistory (50)
        publish(ssm, "not a policy")
    reader, client = source(ssm)
    assert reader.current().version == 1
    assert client.calls["GetParameterHistory"] >= 2


def test_what_was_resolved_is_cached_a_bad_version_is_not_walked_again(ssm: Any) -> None:
    publish(ssm, policy(5000))
    publish(ssm, "not a policy")
    reader, client = source(ssm, max_age=60)
    assert [reader.current().version for _ in range(5)] == [1] * 5
    assert client.calls == Counter({"GetParameter": 1, "GetParameterHistory": 1})
    assert refusals() == [1.0]


def test_a_newer_version_is_not_seen_within_the_cache_age(ssm: Any) -> None:
    publish(ssm, policy(5000))
    reader, client = source(ssm, max_age=60)
    assert reader.current().version == 1
    publish(ssm, policy(8000))
    assert reader.current().version == 1
    assert client.calls["GetParameter"] == 1


def test_a_newer_valid_version_is_applied_after_the_cache_age(ssm: Any) -> None:
    publish(ssm, policy(5000))
    publish(ssm, "not a policy")
    reader, client = source(ssm, max_age=0)  # every call is past the cache age
    assert reader.current().version == 1
    assert publish(ssm, policy(8000)) == 3
    applied = reader.current()
    assert (applied.version, applied.policy.rule("cancel_order").approval_threshold_cents) == (3, 8000)
    assert client.calls["GetParameterHistory"] == 1  # a valid newest needs no walk


def test_nothing_valid_is_unavailable_with_the_reason(ssm: Any) -> None:
    publish(ssm, {"countries": ["usa"]})
    publish(ssm, "not a policy")
    reader, client = source(ssm, max_age=60)
    with pytest.raises(PolicyUnavailable, match=r"version 2 of /support-agent/support-policy is refused"):
        reader.current()
    with pytest.raises(PolicyUnavailable):
        reader.current()
    assert client.calls == Counter({"GetParameter": 1, "GetParameterHistory": 1})  # the answer is cached too


def test_a_missing_parameter_is_unavailable(ssm: Any) -> None:
    with pytest.raises(PolicyUnavailable, match="could not be read"):
        source(ssm)[0].current()


def test_an_unreadable_store_keeps_the_version_applied_so_far(ssm: Any) -> None:
    publish(ssm, policy(5000))
    reader, _ = source(ssm, max_age=0)
    assert reader.current().version == 1
    ssm.delete_parameter(Name=NAME)  # GetParameter now fails
    assert reader.current().version == 1


def test_the_client_is_built_on_the_first_read_only(ssm: Any) -> None:
    publish(ssm, policy(5000))
    built: list[Any] = []

    def factory() -> Any:
        built.append(ssm)
        return ssm

    reader = policy_source(Settings(SUPPORT_POLICY_PARAMETER=NAME, POLICY_CACHE_SECONDS=0), factory)
    assert isinstance(reader, PolicySource) and built == []
    reader.current()
    reader.current()
    assert len(built) == 1


def test_without_a_parameter_the_built_in_policy_is_version_zero() -> None:
    def factory() -> Any:
        raise AssertionError("no parameter: no SSM client")

    reader = policy_source(Settings(REFUND_THRESHOLD_CENTS=12_345), factory)
    assert isinstance(reader, StaticPolicy)
    applied = reader.current()
    assert applied.version == 0
    assert applied.policy == default_policy(12_345)
    assert isinstance(applied.policy, SupportPolicy)
