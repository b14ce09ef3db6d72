"""SnapStart: the after-restore hook reseeds what a snapshot would otherwise share; ids need nothing."""

from __future__ import annotations

import random
import sys
import types
from collections.abc import Callable, Iterator

import pytest

from support_agent import ids, snapstart
from support_agent.agent.untrusted import fence


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    snapstart._registered = False
    state = random.getstate()
    yield
    snapstart._registered = False
    random.setstate(state)


def test_outside_lambda_registering_is_a_no_op() -> None:
    assert "snapshot_restore_py" not in sys.modules
    assert snapstart.register() is False


def test_the_runtime_hook_module_is_used_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    after: list[Callable[[], None]] = []
    before: list[Callable[[], object]] = []
    fake = types.ModuleType("snapshot_restore_py")
    fake.register_after_restore = after.append  # type: ignore[attr-defined]
    fake.register_before_snapshot = before.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", fake)
    prime = object  # any callable
    assert snapstart.register(prime) is True
    assert snapstart.register(prime) is True  # once per process, however often it is called
    assert after == [snapstart.reseed] and before == [prime]


def test_the_chat_handler_primes_its_services_before_the_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the handler registers: building the services touches no network (moto is not even running)."""
    import importlib.util
    from pathlib import Path

    from support_agent import wiring

    before: list[Callable[[], object]] = []
    fake = types.ModuleType("snapshot_restore_py")
    fake.register_after_restore = lambda hook: None  # type: ignore[attr-defined]
    fake.register_before_snapshot = before.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", fake)
    monkeypatch.setenv("ANTHROPIC_API_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:1:secret:k")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("JWT_SECRET", "unit-test-secret-at-least-32-bytes-long!")
    path = Path(__file__).resolve().parents[2] / "functions" / "chat" / "app.py"
    spec = importlib.util.spec_from_file_location("chat_app_snapstart", path)
    assert spec and spec.loader
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert len(before) == 1  # every API-facing handler's: tests/unit/test_snapstart_functions.py
    wiring.reset()
    before[0]()  # no AWS call, no secret fetched: the key waits for the first model call
    assert "chat_services" in vars(wiring._root) and "authenticator" in vars(wiring._root)
    wiring.reset()


def test_restored_environments_draw_different_jitter() -> None:
    """Two environments resumed from one snapshot share the random module's state until reseeded."""
    random.seed(1234)  # the state frozen in the snapshot
    snapshot = random.getstate()
    shared = [random.random() for _ in range(3)]
    random.setstate(snapshot)
    assert [random.random() for _ in range(3)] == shared  # what a second environment would draw
    draws = []
    for _ in range(2):
        random.setstate(snapshot)
        snapstart.reseed()
        draws.append([random.random() for _ in range(3)])
    assert draws[0] != shared and draws[1] != shared and draws[0] != draws[1]


def test_ids_and_fences_do_not_depend_on_the_random_module() -> None:
    """They read os.urandom on every call, so a shared random state cannot repeat them."""
    random.seed(7)
    a = (ids.ulid(0), fence({"x": 1}, 100))
    random.seed(7)
    b = (ids.ulid(0), fence({"x": 1}, 100))
    assert a[0] != b[0] and a[1] != b[1]
