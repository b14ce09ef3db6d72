"""Shared fixtures: fake AWS credentials everywhere, moto where a test asks for AWS."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

from support_agent import wiring


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield
    wiring.reset()


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


@pytest.fixture
def harness(aws: None):  # type: ignore[no-untyped-def]
    from tests.support.harness import make_harness

    return make_harness()
