"""Fixtures for the adversarial suite: hypothesis profiles, atomic moto, the deployed template, the local stack.

Profiles: ``reliability-ci`` (the default, sized so this directory stays within a few minutes on two cores)
and ``reliability-slow`` (thousands of examples, used by the ``slow``-marked variants). Profiles are applied
per test with ``settings(parent=...)``, never loaded globally, so other directories keep their own settings.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, Phase, settings

# The template deployed into moto and its API Gateway v2 driver (module-scoped `stack`, function-scoped `api`).
from tests.integration.conftest import api, stack  # noqa: F401
from tests.support.aws import serialised_moto

RELIABILITY_DIR = Path(__file__).resolve().parent
# RELIABILITY_NO_SHRINK=1 reports the first failing example as found (shrinking a turn-level failure is slow).
_PHASES = tuple(p for p in Phase if not (os.environ.get("RELIABILITY_NO_SHRINK") and p == Phase.shrink))

for _profile, _variable, _examples in [
    ("reliability-ci", "RELIABILITY_EXAMPLES", "60"),
    ("reliability-slow", "RELIABILITY_SLOW_EXAMPLES", "2000"),
]:
    settings.register_profile(
        _profile,
        max_examples=int(os.environ.get(_variable, _examples)),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
        phases=_PHASES,
    )
CI = settings.get_profile("reliability-ci")
SLOW = settings.get_profile("reliability-slow")


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    """Thousands of turns: info-level JSON lines would cost more than the turns (warnings still show)."""
    from support_agent import observability

    package = logging.getLogger("support_agent")
    before = (observability.logger.log_level, package.level)
    observability.logger.setLevel(logging.WARNING)
    package.setLevel(logging.WARNING)
    yield
    observability.logger.setLevel(before[0])
    package.setLevel(before[1])


# -- moto, made as atomic as DynamoDB ------------------------------------------------------------------------


@pytest.fixture
def atomic_moto() -> Iterator[None]:
    with serialised_moto():
        yield


# -- the whole local stack over HTTP (property 6 and 9) ------------------------------------------------------


class _SharedLocalStack:
    """One local stack for this directory, started on first use and stopped as soon as the run leaves it.

    Like tests/e2e: the stack's moto server serves moto's global backends, which the in-process `mock_aws`
    of other tests resets, so it must not outlive these tests.
    """

    def __init__(self) -> None:
        self.local: Any = None
        self.saved_env: dict[str, str] | None = None
        self.started_in = 0.0

    def get(self) -> Any:
        if self.local is None:
            from devstack import local

            self.saved_env = dict(os.environ)
            began = time.monotonic()
            try:
                environ = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
                # Its env file (unread here) goes to a directory of its own: .devstack/env.json is the e2e stack's,
                # which `make reconcile` reads in tests/e2e/test_reconcile_local.py, maybe on another xdist worker.
                with tempfile.TemporaryDirectory() as state, mock.patch.object(local, "STATE_DIR", Path(state)):
                    self.local = local.start(port=0, moto_port=0, environ=environ, schedule_seconds=3600)
            except BaseException:
                self.restore()
                raise
            self.started_in = time.monotonic() - began
        return self.local

    def stop(self) -> None:
        if self.local is not None:
            local, self.local = self.local, None
            local.stop()
        self.restore()

    def restore(self) -> None:
        if self.saved_env is not None:
            os.environ.clear()
            os.environ.update(self.saved_env)
            self.saved_env = None


_shared = _SharedLocalStack()


def _uses_local_stack(item: pytest.Item | None) -> bool:
    return item is not None and "local_stack" in getattr(item, "fixturenames", ())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    try:
        yield
    finally:
        if not _uses_local_stack(nextitem):
            _shared.stop()


@pytest.fixture(scope="session")
def _local_stack_owner() -> Iterator[_SharedLocalStack]:
    yield _shared
    _shared.stop()


@pytest.fixture
def local_stack(_local_stack_owner: _SharedLocalStack) -> Any:
    """The running local stack (`make dev` with the simulated model): `.url`, `.moto_url`, `.tokens`, `.stack`."""
    return _local_stack_owner.get()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.reliability.figures import lines

    found = lines()
    if found:
        terminalreporter.section("reliability figures")
        for line in found:
            terminalreporter.write_line(line)
