"""Shared fixtures: fake AWS credentials everywhere, moto where a test asks for AWS."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from support_agent import wiring

E2E_UNIT = "tests/e2e"

# The shared helpers assert too (the SDK's request judge, the agent loop): their failures explain themselves as a
# test's own do. Registered before any test module imports them.
pytest.register_assert_rewrite("tests.support")


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook, run in the controller
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make test`'s `-n 2 --dist loadfile`: each module runs whole on one worker (module-scoped fixtures such as
    the deployed stack are set up once, a module's tests run in file order), and all of tests/e2e is one unit,
    so that one local stack serves every e2e module on one worker, started once as in a serial run
    (tests/e2e/conftest.py stops it whenever the run leaves tests/e2e; a start costs ~15 s).

    That unit also goes first, to a fresh worker, as tests/e2e comes first in a serial run: once a test has used
    moto's DynamoDB in a process, moto.dynamodb.urls holds the unpatched handler, and the stack's moto server no
    longer serialises DynamoDB requests (devstack.local._one_request_at_a_time); two concurrent conditional writes
    could then both pass (test_payments_local's ten concurrent approvals failed so). The longest unit starting
    first also evens the workers' ends.

    Not `--dist loadgroup` with xdist_group marks: with pytest 9.2 and pytest-xdist 3.8 loadgroup silently
    stops grouping (pytest-dev/pytest-xdist#1386).
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class E2eAsOneFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return E2E_UNIT if nodeid.startswith(f"{E2E_UNIT}/") else super()._split_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if E2E_UNIT in self.workqueue:  # the first unit handed out (to the first worker)
                self.workqueue.move_to_end(E2E_UNIT, last=False)
            super()._assign_work_unit(node)

    return E2eAsOneFile(config, log)


# The reliability figures (tests/reliability/figures.py) under pytest-xdist: each worker hands its counts over at
# the end of its session, and the controller prints their sum, as tests/reliability/conftest.py does in a serial run.
def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        from tests.reliability.figures import FIGURES

        workeroutput["reliability_figures"] = {prop: dict(values) for prop, values in FIGURES.items()}


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook, run in the controller
def pytest_testnodedown(node: Any, error: Any) -> None:
    from tests.reliability.figures import count

    for prop, values in getattr(node, "workeroutput", {}).get("reliability_figures", {}).items():
        count(prop, **values)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin("dsession"):  # the xdist controller (the workers' summaries are not shown)
        from tests.reliability.figures import lines

        found = lines()
        if found:
            terminalreporter.section("reliability figures")
            for line in found:
                terminalreporter.write_line(line)


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
def tool_mode() -> str:
    """How the harness's loop reaches our tools; modules setting ``BOTH_TOOL_MODES = True`` run in both."""
    return "registry"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if getattr(metafunc.module, "BOTH_TOOL_MODES", False) and "harness" in metafunc.fixturenames:
        metafunc.parametrize("tool_mode", ["registry", "mcp"])


@pytest.fixture
def harness(aws: None, tool_mode: str):  # type: ignore[no-untyped-def]
    from tests.support.harness import make_harness

    return make_harness(TOOL_MODE=tool_mode)
