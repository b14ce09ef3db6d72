"""`make reconcile` against the running local stack: nothing after the demo, then the refund a test plants."""

from __future__ import annotations

import os
import subprocess
import sys

from devstack import reconcile
from devstack.demo import run as demo
from devstack.local import LocalStack
from devstack.stack import REPO_ROOT


def test_make_reconcile_reports_no_difference_after_the_demo_and_the_one_a_test_plants(
    seeded_stack: LocalStack,
) -> None:
    assert seeded_stack.stripe is not None
    outcome = demo(seeded_stack, lambda _line: None)
    assert outcome["approval"]["status"] == "REFUNDED"
    env = reconcile.local_environment(seeded_stack.env_file)

    printed: list[str] = []
    report = reconcile.run(env, out=printed.append)
    assert printed[-1] == "no differences", printed
    assert (report["provider"], report["rows"], report["provider_refunds"]) == ("stripe", 1, 1)

    made = seeded_stack.stripe.stripe.refund_outside("pi_demo_1043", 300)  # "from the dashboard"
    # `make reconcile` itself: a fresh process that finds the stack through .devstack/env.json.
    assert seeded_stack.env_file == reconcile.ENV_FILE
    done = subprocess.run(
        [sys.executable, "-m", "devstack.reconcile"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": f"{REPO_ROOT / 'layers' / 'common'}{os.pathsep}{REPO_ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "1 difference(s):", done.stdout
    assert "unknown_provider_refund" in lines[2] and made["id"] in lines[2] and "pi_demo_1043" in lines[2]
