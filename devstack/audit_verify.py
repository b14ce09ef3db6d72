"""`make audit-verify CONVERSATION=<id>` (or ``APPROVAL=<id>``): the audit chain check of the running `make dev` stack.

It reads what `make dev` wrote (``.devstack/env.json``) and takes ApprovalsFunction's environment (the
function behind ``GET /api/audit/verify``): the tables and the AWS endpoint, pointed at this machine as
`devstack.reconcile` does. It prints one line per stream (``ok``, or ``broken`` with the first break's kind
and event id) and exits 0 when every stream is ok, 1 when one is broken, 2 when it could not run.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from devstack.reconcile import CANNOT_RUN, ENV_FILE, CannotRun, reachable
from devstack.reconcile import local_environment as reconcile_environment

FUNCTION = "ApprovalsFunction"
BROKEN = 1


def local_environment() -> dict[str, str]:
    """ApprovalsFunction's environment as `make dev` deployed it, pointed at this machine."""
    import json

    env = reconcile_environment()  # checks the file and the endpoint; its AWS endpoint, fixed for this machine
    functions = json.loads(ENV_FILE.read_text())
    own = functions.get(FUNCTION)
    if not isinstance(own, dict):
        raise CannotRun(f"{ENV_FILE} has no {FUNCTION}")
    return {**{k: str(v) for k, v in own.items()}, "AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"]} | {
        k: env[k] for k in ("AWS_DEFAULT_REGION", "AWS_REGION", "POWERTOOLS_LOG_LEVEL")
    }


def lines(answer: dict[str, Any]) -> list[str]:
    """One line per stream, the stream asked for first."""
    out = []
    for s in answer["streams"]:
        where = f"  from n={s['chainStartsAt']}" if s["chainStartsAt"] else ""
        before = f"  ({s['unchained']} row(s) before the chain)" if s["unchained"] else ""
        state = s["status"]
        if s["firstBreak"]:
            state += f"  {s['firstBreak']['kind']} at {s['firstBreak']['eventId']}"
        sealed = f"  sealed through n={s['sealedThrough']} at {s['sealedAt']}" if s.get("sealedAt") else "  not sealed"
        # No redaction record authorises a row's redacted_at yet: each such row is also a break.
        claims = f"  redacted_at on {', '.join(s['redacted'])}" if s.get("redacted") else ""
        out.append(f"{s['stream']}: {s['rows']} row(s)  {state}{where}{before}{sealed}{claims}")
    out.append(f"overall: {answer['status']}")
    return out


def run(env: dict[str, str], stream: str, out: Callable[[str], Any] = print) -> dict[str, Any]:
    """The verification with ``env`` as this process's environment (as the function would have it)."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        from support_agent import wiring

        wiring.reset()
        answer = wiring.lead_services().audit.verify_trail(stream)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        wiring.reset()
    for line in lines(answer):
        out(line)
    return answer


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devstack.audit_verify", description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--conversation", help="a conversation id (conv_…)")
    which.add_argument("--approval", help="an approval id (apr_…)")
    args = parser.parse_args(argv)
    stream = args.conversation or f"approval#{args.approval}"
    try:
        env = local_environment()
        if not reachable(env["AWS_ENDPOINT_URL"]):
            raise CannotRun(f"the local stack is not running at {env['AWS_ENDPOINT_URL']}: start it with `make dev`")
        try:
            answer = run(env, stream)
        except Exception as exc:  # the tables gone: it could not run
            raise CannotRun(f"{type(exc).__name__}: {exc}") from None
    except CannotRun as exc:
        print(f"make audit-verify: {exc}", file=sys.stderr)
        raise SystemExit(CANNOT_RUN) from None
    if answer["status"] != "ok":
        raise SystemExit(BROKEN)


if __name__ == "__main__":
    main()
