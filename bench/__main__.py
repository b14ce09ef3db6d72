"""`make bench` (`python -m bench`): every table, printed, and docs/PERFORMANCE.md written.

Environment: BENCH_REPORT_ONLY=1 (rewrite the document from the last run's saved results),
BENCH_RUNS (cold-start runs per variant, default 5), BENCH_TURNS (timed loop turns,
default 30), BENCH_ONLY (comma-separated sections: cold,imports,loop,aws,cache,long,feed,cost,paths,sockets),
BENCH_DRY=1 (print the tables; the document goes to a temporary file and no results are saved: docs/PERFORMANCE.md
and bench/.results.pickle stay as they are).

A partial run (BENCH_ONLY naming fewer than every section) starts from the last run's saved results
(bench/.results.pickle) and replaces only the sections it measures, so the document it writes keeps
every other section as the last run measured it (and says which sections were measured again, when).
Without saved results it writes only what it measured.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import report
from bench.env import ROOT

RESULTS = ROOT / "bench" / ".results.pickle"
SECTIONS = ("cold", "imports", "loop", "aws", "cache", "long", "feed", "cost", "paths", "sockets")


def _start(only: set[str], runs: int, turns: int) -> dict[str, Any]:
    """A full run's fresh results; a partial run's: the last run's, its measured sections to be replaced."""
    fresh: dict[str, Any] = {"machine": report.machine(), "runs": runs, "turns": turns, "started": time.time()}
    if set(SECTIONS) <= only:
        return fresh
    if not RESULTS.exists():
        print(f"no saved results ({RESULTS.name}): the document will hold only {sorted(only)}", file=sys.stderr)
        return fresh
    results: dict[str, Any] = pickle.loads(RESULTS.read_bytes())
    now = time.time()
    results["remeasured"] = {**results.get("remeasured", {}), **dict.fromkeys(only & set(SECTIONS), now)}
    if "cold" in only:
        results["runs"] = runs
    if "loop" in only:
        results["turns"] = turns
    print(f"partial run: {sorted(only)} measured again, the rest kept from {RESULTS.name}", file=sys.stderr)
    return results


def main() -> None:
    if os.environ.get("BENCH_REPORT_ONLY") == "1":
        print(f"wrote {report.write(pickle.loads(RESULTS.read_bytes()))}", file=sys.stderr)
        return
    runs = int(os.environ.get("BENCH_RUNS", "5"))
    turns = int(os.environ.get("BENCH_TURNS", "30"))
    only = set(filter(None, os.environ.get("BENCH_ONLY", ",".join(SECTIONS)).split(",")))
    if only - set(SECTIONS):
        raise SystemExit(f"BENCH_ONLY: unknown sections {sorted(only - set(SECTIONS))}; known: {','.join(SECTIONS)}")
    results = _start(only, runs, turns)
    partial = "remeasured" in results
    devnull = open(os.devnull, "w")  # noqa: SIM115 - the run's log sink
    from bench import aws, cache, coldstart, cost, feed, long, loop
    from bench.env import quiet_logs, world

    with world() as w:
        if "cold" in only:
            print(f"cold starts: {runs} runs per variant, interleaved ...", file=sys.stderr)
            results["cold"] = coldstart.measure(w, runs)
            results["interpreter_ms"] = {
                "ours (bench/.venv-lambda)": coldstart.interpreter_ms(coldstart.OURS),
                "peers (bench/.venv-peers)": coldstart.interpreter_ms(coldstart.PEERS_PYTHON)
                if coldstart.PEERS_PYTHON.exists()
                else None,
            }
            report.show(report.cold_table(results))
        if "imports" in only:
            rows = [coldstart.importtime(w, coldstart.ROOT / "functions/chat/app.py", "ChatFunction") for _ in range(3)]
            results["imports"] = rows
            report.show(report.imports_table(results))
        with contextlib.redirect_stdout(devnull):
            loop.our_agent(w.model_url)[1]()  # builds the package's loggers, then silence them
            quiet_logs()
            if "loop" in only:
                print(f"loop overhead: {turns} turns each ...", file=sys.stderr)
                results["loop"] = loop.measure(w, warmup=5, runs=turns)
            if "aws" in only:
                results["aws"] = aws.measure(w)
            if "cache" in only:
                results["cache"] = cache.measure()
            if "long" in only:
                print("long conversations: 50 turns x 3 budgets ...", file=sys.stderr)
                results["long"] = {b: long.run(w.model_url, 50, b) for b in ("0", "24000", "8000")}
            if "feed" in only:
                print(f"event feed: a minute of waiting, then {feed.SAMPLES} timed writes ...", file=sys.stderr)
                results["feed"] = feed.measure(w)
            if "cost" in only:  # the local stack in a process of its own; the feed's minute prices a waiting page
                print("what a turn costs: three scenarios on the local stack ...", file=sys.stderr)
                results["cost"] = cost.measure(results.get("feed"))
            if "paths" in only:  # refunds, the audit chain and MCP here; the approved path and the hand-over apart
                from bench import paths

                print("the new paths: refunds, the audit chain, MCP, then the local stack ...", file=sys.stderr)
                results["paths"] = paths.measure(w, turns)
            if "sockets" in only:  # beside the feed's long poll: its minute prices the waiting page
                from bench import sockets

                print("the WebSocket beside the long poll: deltas, pushes, an idle page ...", file=sys.stderr)
                results["sockets"] = sockets.measure(w, warmup=5, runs=turns)
        for section, table in (
            ("loop", report.loop_table),
            ("aws", report.aws_table),
            ("cache", report.cache_table),
            ("long", report.long_table),
            ("feed", report.feed_table),
            ("cost", report.cost_table),
            ("paths", report.paths_table),
            ("sockets", report.sockets_table),
        ):
            if section in only and section in results:
                report.show(table(results))
        if not partial:  # the machine's line describes the full run whose sections a partial run keeps
            results["machine"]["load_after"] = os.getloadavg()
        if os.environ.get("BENCH_DRY") == "1":  # a trial run: nothing it measured replaces the committed figures
            path = report.write(results, Path(tempfile.mkdtemp(prefix="bench-dry-")) / "PERFORMANCE.md")
            print(
                f"\nBENCH_DRY=1: wrote {path} only (docs/PERFORMANCE.md and {RESULTS.name} untouched)", file=sys.stderr
            )
            return
        path = report.write(results)  # before the servers stop: nothing measured is lost to a teardown
        for v in results.get("cold", []):
            v.event = None  # closures over this run's servers: not kept
        RESULTS.write_bytes(pickle.dumps(results))  # BENCH_REPORT_ONLY=1 rewrites the doc from it
        print(f"\nwrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
