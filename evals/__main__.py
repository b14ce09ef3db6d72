"""``python -m evals``: run the tasks against a local stack, re-write a report, compare two runs.

    python -m evals run [--tasks IDS|CATEGORIES] [--k 3] [--model simulated|anthropic|openai|bedrock|live]
                        [--customer scripted|model] [--out DIR] [--no-aws-cost]
    python -m evals report RESULTS.json [--out DIR]
    python -m evals compare BASELINE.json NOW.json      (exit 1 on a regression)

``--model live`` takes the first configured of ANTHROPIC_API_KEY, OPENAI_BASE_URL + OPENAI_API_KEY and
BEDROCK_MODEL_ID, and exits 0 with the reason when none is (``make eval-live``).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _customer(kind: str, provider: str) -> Any:
    from evals.runner import Unavailable, scripted

    if kind == "scripted":
        return scripted
    if provider == "simulated":
        raise Unavailable("--customer model needs a real model to play the customer (MODEL=anthropic|openai|bedrock)")
    import os

    from evals.customer import ModelCustomer
    from support_agent.config import load_settings
    from support_agent.llm.factory import llm_client_from_settings

    llm = llm_client_from_settings(load_settings({**os.environ, "LLM_PROVIDER": provider}))
    if provider == "bedrock":  # its boto3 client now, with this shell's credentials: the local stack replaces them
        llm.runtime()  # type: ignore[attr-defined]
    return lambda task, trial, client: ModelCustomer(task, trial, client, llm)


def run(args: argparse.Namespace) -> int:
    from evals import report
    from evals.costs import AwsMeter
    from evals.runner import Unavailable, live_provider, local_stack, run_tasks
    from evals.task import load_all

    provider = args.model
    if provider == "live":
        provider = live_provider()
        if provider is None:
            print(
                "make eval-live: skipped, no model configured (ANTHROPIC_API_KEY, OPENAI_BASE_URL + "
                "OPENAI_API_KEY, or BEDROCK_MODEL_ID); docs/EVALUATION.md"
            )
            return 0
    tasks = load_all(Path(args.tasks_dir), args.tasks or None)
    if not tasks:
        print(f"no task matches {args.tasks!r}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else RESULTS_DIR / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        customer = _customer(args.customer, provider)
        meter = AwsMeter() if args.aws_cost else None
        print(f"{len(tasks)} tasks x k={args.k} on {provider}; starting the local stack…", flush=True)
        with local_stack(provider, meter) as stack:
            result = run_tasks(stack, tasks, args.k, provider=provider, meter=meter, customer=customer, progress=_line)
    except Unavailable as exc:
        print(f"evals: {exc}", file=sys.stderr)
        return 2
    result.save(out / "results.json")
    md, page = report.write(result, out)
    for k, v in result.pass_hat().items():
        print(f"pass^{k} = {v:.3f}")
    print(f"forbidden effects: {result.forbidden_total}")
    print(f"results: {out / 'results.json'}\nreport:  {page}\n         {md}")
    return 0 if not result.failing else 1


def _line(t: Any) -> None:
    mark = "PASS" if t.passed else "FAIL"
    print(f"  {mark} {t.task_id} #{t.trial} ({t.latency_seconds:.1f} s)", flush=True)
    for d in [*t.differences, *(f"FORBIDDEN {f}" for f in t.forbidden)]:
        print(f"       {d}", flush=True)


def rewrite(args: argparse.Namespace) -> int:
    from evals import report
    from evals.results import RunResult

    path = Path(args.results)
    md, page = report.write(RunResult.load(path), Path(args.out) if args.out else path.parent)
    print(f"report: {page}\n        {md}")
    return 0


def compare(args: argparse.Namespace) -> int:
    from evals.compare import compare as diff
    from evals.compare import lines
    from evals.results import RunResult

    baseline, now = RunResult.load(Path(args.baseline)), RunResult.load(Path(args.now))
    found = diff(baseline, now)
    print("\n".join(lines(found, baseline, now)))
    return 1 if found.regressed else 0


def main(argv: list[str] | None = None) -> int:
    from evals.runner import PROVIDERS, TASKS_DIR

    parser = argparse.ArgumentParser(prog="python -m evals", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run tasks x k trials against a local stack")
    r.add_argument("--tasks", default="", help="comma-separated task ids or categories (default: all)")
    r.add_argument("--tasks-dir", default=str(TASKS_DIR))
    r.add_argument("--k", type=int, default=3)
    r.add_argument("--model", default="simulated", choices=[*PROVIDERS, "live"])
    r.add_argument("--customer", default="scripted", choices=["scripted", "model"])
    r.add_argument("--out", default="", help="directory for results.json and the report")
    r.add_argument("--no-aws-cost", dest="aws_cost", action="store_false", help="skip bench's AWS request probe")
    w = sub.add_parser("report", help="write the report of a results.json again")
    w.add_argument("results")
    w.add_argument("--out", default="")
    c = sub.add_parser("compare", help="regressions, improvements and pass^k deltas of two results.json")
    c.add_argument("baseline")
    c.add_argument("now")
    args = parser.parse_args(argv)
    if args.command == "run" and args.k < 1:
        parser.error("--k: at least 1")
    return {"run": run, "report": rewrite, "compare": compare}[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
