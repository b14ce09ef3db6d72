"""`make reconcile`: the reconciliation run against the local stack `make dev` is running, its report printed.

It reads what `make dev` wrote (``.devstack/env.json``: each function's deployed environment, for ``sam
local``) and takes ReconcileFunction's: the tables, ``PAYMENT_PROVIDER``, ``STRIPE_API_BASE`` (the simulated
Stripe's address unless a real one was configured) and the window. The AWS endpoint there is the one a
Docker container reaches (``host.docker.internal``); from this machine it is 127.0.0.1 on the same port.
The Stripe key is ``STRIPE_API_KEY`` from this shell when set (a real Stripe), else the simulated Stripe's.

One line per difference, or "no differences"; exit 0 either way, 2 when it could not run (no stack, the
provider unreadable).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from devstack.simulated_stripe import TEST_KEY
from devstack.stack import REPO_ROOT

ENV_FILE = REPO_ROOT / ".devstack" / "env.json"  # devstack.local.write_env_file
FUNCTION = "ReconcileFunction"
CANNOT_RUN = 2


class CannotRun(Exception):
    pass


def local_environment(env_file: Path | None = None, shell: dict[str, str] | None = None) -> dict[str, str]:
    """ReconcileFunction's environment as `make dev` deployed it (``env_file``, default `ENV_FILE`), pointed
    at this machine; ``shell``: this shell's environment (for a real Stripe's key)."""
    env_file = ENV_FILE if env_file is None else env_file
    shell = dict(os.environ if shell is None else shell)
    try:
        functions = json.loads(env_file.read_text())
    except FileNotFoundError:
        raise CannotRun(f"{env_file} not found: start the local stack with `make dev` first") from None
    env = functions.get(FUNCTION)
    if not isinstance(env, dict):
        raise CannotRun(f"{env_file} has no {FUNCTION}: restart `make dev` (it predates reconciliation)")
    endpoint = urlsplit(str(env.get("AWS_ENDPOINT_URL", "")))
    if not endpoint.port:
        raise CannotRun(f"{env_file} names no local AWS endpoint")
    env = {k: str(v) for k, v in env.items()}
    env["AWS_ENDPOINT_URL"] = urlunsplit((endpoint.scheme or "http", f"127.0.0.1:{endpoint.port}", "", "", ""))
    env.update(AWS_DEFAULT_REGION=shell.get("AWS_DEFAULT_REGION", "us-east-1"), AWS_REGION="us-east-1")
    env["STRIPE_API_KEY"] = shell.get("STRIPE_API_KEY") or TEST_KEY
    env["POWERTOOLS_LOG_LEVEL"] = "ERROR"  # the report is printed; its log lines would repeat it
    return env


def reachable(endpoint: str) -> bool:
    import httpx

    try:
        httpx.get(f"{endpoint}/moto-api/", timeout=3)
    except httpx.HTTPError:
        return False
    return True


def report_lines(report: dict[str, Any]) -> list[str]:
    """The report as a person reads it: a header, then one line per difference or "no differences"."""
    from support_agent.refunds import Difference

    head = (
        f"reconciliation {report['since']} .. {report['until']}  provider={report['provider']}  "
        f"ledger rows={report['rows']}  provider refunds={report['provider_refunds']}"
    )
    if report.get("skipped"):
        return [head, f"skipped: {report['skipped']}"]
    diffs = [Difference(**{**d, "refund_ids": tuple(d["refund_ids"])}) for d in report["differences"]]
    if not diffs:
        return [head, "no differences"]
    return [head, f"{len(diffs)} difference(s):", *(f"  {d.line()}" for d in diffs)]


def run(env: dict[str, str], window_days: int | None = None, out: Callable[[str], Any] = print) -> dict[str, Any]:
    """The reconciliation with ``env`` as this process's environment (as the function would have it)."""
    from datetime import timedelta

    saved = dict(os.environ)
    os.environ.update(env)  # before support_agent is imported: its logger reads the level once
    try:
        from support_agent import wiring

        wiring.reset()
        report = wiring.reconciler().run(timedelta(days=window_days) if window_days else None)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        wiring.reset()
    result = report.as_dict()
    for line in report_lines(result):
        out(line)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.reconcile", description="Reconcile the local stack's refund ledger with Stripe."
    )
    parser.add_argument("--days", type=int, default=None, help="window in days (default: ReconcileWindowDays)")
    args = parser.parse_args(argv)
    try:
        env = local_environment()
        if not reachable(env["AWS_ENDPOINT_URL"]):
            raise CannotRun(f"the local stack is not running at {env['AWS_ENDPOINT_URL']}: start it with `make dev`")
        try:
            run(env, args.days)
        except Exception as exc:  # ReconciliationIncomplete, the tables gone: it could not run
            raise CannotRun(f"{type(exc).__name__}: {exc}") from None
    except CannotRun as exc:
        print(f"make reconcile: {exc}", file=sys.stderr)
        raise SystemExit(CANNOT_RUN) from None


if __name__ == "__main__":
    main()
