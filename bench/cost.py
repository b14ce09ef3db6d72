"""What a turn costs: every AWS request of every function it reaches, priced, beside the model's tokens.

``python -m bench.cost --child OUT`` (a process of its own: the local stack sets this process's AWS
environment) starts the local stack (devstack/local.py: every function in its own processes with its deployed
environment, the template's queues, stream and state machine wired as on AWS, moto, the simulated model and
Stripe) and plays, over HTTP as a client would:

* **read-only turn**: a new conversation's turn that looks an order up and lists its invoices;
* **seed scenario** (`make demo`): a turn that asks for a refund over the threshold (an approval, its queue
  and the leads' notification), the lead's approval, RefundFlow, the provider's refund and its webhook, to
  REFUNDED;
* **long turn**: a turn handed over to the worker (``Prefer: respond-async``), the page waiting on the event
  feed until it completes, then reading the turn's record.

Each function's process counts its own requests (bench/cost_probe.py, loaded by bench/cost_hook): DynamoDB
request units by item size, SQS and SNS requests, S3, anything else. Every invocation is timed. Step Functions'
state transitions come from the executions' histories. Each scenario ends when nothing has run for
``QUIET`` seconds. One scheduled run of each swept function gives the stack's fixed cost.

Then what a conversation's outcome and the daily rollup cost (issue 35): ``OUTCOME_EXTRA`` more read-only
conversations, every conversation's quiet check left to pass (the stack deploys ``ConversationQuietMinutes=1``),
one rollup run, one outcome sweep over them all, one rollup run again; scaled to 1,000 conversations by
`per_thousand` (the sweep is linear in the conversations it finds; the rollup's reads grow with the outcome
items its Queries return, per the items' size on the index).

Prices (bench/aws_prices.json: us-east-1, on-demand, the date and the pages they come from) are applied when the
report is written (`price`), with the model's list price from support_agent/pricing.py. Lambda is billed for
the time a function waits on the model, which the simulated model does not take: the model's time per turn is
added to the functions that call it from the file's stated assumption (seconds to first token, output tokens
per second), and a page waiting on the feed for that time costs what the feed section measured per minute.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench.cost_probe import READ_BLOCK
from bench.env import ROOT, run_module

PRICES = ROOT / "bench" / "aws_prices.json"
HOOK_DIR = ROOT / "bench" / "cost_hook"
QUIET = 3.0  # seconds with no invocation and no AWS request: the scenario's work is done
HTTP_FUNCTIONS = ("ChatFunction", "EventsFunction", "ApprovalsFunction", "McpFunction", "PaymentsWebhookFunction")
SQS_FUNCTIONS = ("TurnWorkerFunction", "ApprovalNotifierFunction")  # behind an SQS event source mapping
SCHEDULED = {  # function: runs per 30-day month (the template's Schedule rates)
    "TurnSweepFunction": 30 * 24 * 60,
    "PaymentSweepFunction": 30 * 24 * 12,
    "ApprovalSweepFunction": 30 * 24 * 4,
    "ReconcileFunction": 30,
    "OutcomeSweepFunction": 30 * 24 * 12,
    "DailyRollupFunction": 30 * 24,
}
SWEEP, ROLLUP = "OutcomeSweepFunction", "DailyRollupFunction"
# A one-minute quiet (also make dev's default) so the conversations' outcomes come within the run; the turn limit
# raised so the extra conversations are not refused (it changes no request a turn makes).
PARAMETERS = {"ConversationQuietMinutes": "1", "TurnsPerMinute": "1000"}
OUTCOME_EXTRA = 10  # read-only conversations played for the outcome sweep, beside the scenarios' six
CONVERSATIONS = 1000  # the outcome figures are per this many conversations
ROLLUP_RUNS_PER_DAY = 24  # rate(1 hour)
# Each hourly run reads yesterday's outcome items whole and today's so far: half a day's on average.
DAYS_READ_PER_RUN = 1.5
QUERY_PAGE = 1024 * 1024  # a Query returns at most 1 MB: each further MB of a day's items is one more request
READ_ONLY = "Where is my order 1042, and what did you bill me for it?"
SEED = "Where is my order 1042? Also refund it."


# -- pricing (pure; tests/unit/test_bench_cost.py) ---------------------------------------------------------


def load_prices(path: Path = PRICES) -> dict[str, Any]:
    prices: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return prices


def model_seconds(calls: int, output_tokens: int, assumptions: dict[str, Any]) -> float:
    """The time a function waits on the model for ``calls`` calls producing ``output_tokens`` in all."""
    return calls * float(assumptions["model_first_token_seconds"]) + output_tokens / float(
        assumptions["model_output_tokens_per_second"]
    )


def model_usd(usage: dict[str, int], model: str) -> float:
    from support_agent.messages import Usage
    from support_agent.pricing import DEFAULT_PRICES, estimate_usd

    cost = estimate_usd(model, Usage(**usage), DEFAULT_PRICES)
    assert cost is not None, f"no list price for {model} in support_agent/pricing.py"
    return cost


def price(scenario: dict[str, Any], prices: dict[str, Any], memory: dict[str, int], arch: str) -> dict[str, Any]:
    """One scenario's line items in USD, with the model's time added to the functions that wait on it."""
    per = {k: v["usd_per_million"] / 1e6 for k, v in prices["per_million"].items()}
    a = prices["assumptions"]
    wait = model_seconds(scenario["model_calls"], scenario["usage"]["output_tokens"], a)
    gb_seconds: dict[str, float] = {}
    for fn, f in scenario["functions"].items():
        seconds = f["seconds"] + (wait if fn == scenario["model_function"] else 0.0)
        gb_seconds[fn] = memory[fn] / 1024 * seconds
    counts = _counts(scenario)
    feed = scenario.get("feed_wait")  # a page waiting on the feed while the model works (the long turn)
    if feed:
        minutes = wait / 60
        counts["events_polls"] = feed["invocations"] * minutes
        counts["rru"] += feed["rcu"] * minutes
        counts["wru"] += feed["wcu"] * minutes
        counts["api_requests"] += feed["invocations"] * minutes
        counts["lambda_requests"] += feed["invocations"] * minutes
        gb_seconds["EventsFunction"] = gb_seconds.get("EventsFunction", 0.0) + memory["EventsFunction"] / 1024 * (
            feed["held_seconds"] * minutes
        )
    items = {
        "Lambda duration": sum(gb_seconds.values()) * per[f"lambda_gb_second_{arch}"],
        "Lambda requests": counts["lambda_requests"] * per["lambda_request"],
        "API Gateway (HTTP API)": counts["api_requests"] * per["http_api_request"],
        "DynamoDB reads": counts["rru"] * per["dynamodb_read_request_unit"],
        "DynamoDB writes": counts["wru"] * per["dynamodb_write_request_unit"],
        "SQS": counts["sqs"] * per["sqs_request"],
        "SNS": counts["sns"] * per["sns_publish"],
        "Step Functions": counts["transitions"] * per["sfn_state_transition"],
        "S3": counts["s3_put"] * per["s3_put"] + counts["s3_get"] * per["s3_get"],
        "Secrets Manager": counts["secrets"] * per["secretsmanager_request"],
    }
    infra = sum(items.values())
    model = model_usd(scenario["usage"], a["model"]) if scenario["model_calls"] else 0.0
    return {
        "items": items,
        "infra": infra,
        "model": model,
        "share": infra / (infra + model) if infra + model else 0.0,
        "gb_seconds": gb_seconds,
        "model_wait_seconds": wait,
        "counts": counts,
    }


def _counts(scenario: dict[str, Any]) -> dict[str, float]:
    c: dict[str, float] = defaultdict(float)
    for fn, f in scenario["functions"].items():
        c["lambda_requests"] += f["invocations"]
        if fn in HTTP_FUNCTIONS:
            c["api_requests"] += f["invocations"]
        if fn in SQS_FUNCTIONS:  # Lambda's poller: a receive and a batch delete per batch it hands over
            c["sqs"] += 2 * f["invocations"]
        c["rru"] += f["rru"]
        c["wru"] += f["wru"]
        c["sqs"] += f["sqs"]
        c["sns"] += f["sns"]
        c["s3_put"] += f["s3_put"]
        c["s3_get"] += f["s3_get"]
        c["secrets"] += f["secrets"]
    c["transitions"] += scenario.get("transitions", 0)
    return c


def run_totals(functions: dict[str, dict[str, Any]]) -> dict[str, float]:
    """A measured window's AWS requests, request units, invocations and seconds over every function it reached."""
    return {
        "requests": sum(sum(f["requests"].values()) for f in functions.values()),
        "rru": sum(f["rru"] for f in functions.values()),
        "wru": sum(f["wru"] for f in functions.values()),
        "invocations": sum(f["invocations"] for f in functions.values()),
        "seconds": sum(f["seconds"] for f in functions.values()),
    }


_FIGURES = ("invocations", "seconds", "rru", "wru", "sqs", "sns", "s3_put", "s3_get", "secrets")


def scaled(
    functions: dict[str, dict[str, Any]], factor: float, minus: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """Each function's figures less ``minus``'s (a run that found nothing: the part that does not grow), times
    ``factor``; never below zero (a warm run can be quicker than the empty one it is compared with)."""
    out: dict[str, dict[str, Any]] = {}
    for fn, f in functions.items():
        base = (minus or {}).get(fn, {})
        row = {k: max(0.0, f.get(k, 0) - base.get(k, 0)) * factor for k in _FIGURES}
        asked = base.get("requests", {})
        row["requests"] = {op: max(0.0, n - asked.get(op, 0)) * factor for op, n in f["requests"].items()}
        out[fn] = row
    return out


def outcome_item_rru(outcomes: dict[str, Any]) -> float:
    """Read units per outcome item a rollup Query returns: its mean size on the index per 4 KB, halved (the
    Query is eventually consistent). At 1,000 items a day the rounding to whole 4 KB blocks vanishes."""
    return outcomes["outcome_bytes"] / outcomes["outcome_items"] / READ_BLOCK * 0.5


def per_thousand(outcomes: dict[str, Any], empty_sweep: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """The outcome sweep's and the daily rollup's functions scaled to ``CONVERSATIONS`` conversations a day.

    * sweep: (the run over n conversations - a run that found none) * CONVERSATIONS / n;
    * rollup, a day of runs: ROLLUP_RUNS_PER_DAY * the run after the sweep, its reads replaced by
      ROLLUP_RUNS_PER_DAY * (the run before the sweep: no outcome item) + ROLLUP_RUNS_PER_DAY * DAYS_READ_PER_RUN
      * CONVERSATIONS * `outcome_item_rru`, plus a Query request per further MB of items read.
    """
    n, item = outcomes["conversations"], outcome_item_rru(outcomes)
    sweep = scaled(outcomes["sweep"], CONVERSATIONS / n, empty_sweep)
    rollup = scaled(outcomes["rollup_after"], ROLLUP_RUNS_PER_DAY)
    items_read = ROLLUP_RUNS_PER_DAY * DAYS_READ_PER_RUN * CONVERSATIONS
    r = rollup[ROLLUP]
    r["rru"] = ROLLUP_RUNS_PER_DAY * outcomes["rollup_before"][ROLLUP]["rru"] + items_read * item
    pages = int(items_read * outcomes["outcome_bytes"] / outcomes["outcome_items"] // QUERY_PAGE)
    r["requests"]["dynamodb:Query"] = r["requests"].get("dynamodb:Query", 0) + pages
    return {"sweep": sweep, "rollup": rollup, "rru_per_item": item, "items_read": items_read}


# -- the child: the local stack, the scenarios, the counts ----------------------------------------------------


class Recorder:
    """Invocations timed in this process; AWS requests read from the files the functions' probes append to."""

    def __init__(self, calls_dir: Path) -> None:
        self.calls_dir = calls_dir
        self.invocations: list[tuple[str, float, float]] = []  # (function, started, seconds)
        self._lock = threading.Lock()
        self._running = 0

    def patch(self) -> None:
        import devstack.local
        from devstack import functions

        original_pools_for, original_invoke = devstack.local.pools_for, functions.FunctionPool.invoke
        recorder = self

        def pools_for(stack: Any, base_env: Any, overrides: Any) -> dict[str, Any]:
            pools = original_pools_for(stack, base_env, overrides)
            for name, pool in pools.items():
                pool._env.update(
                    PYTHONPATH=f"{HOOK_DIR}{os.pathsep}{pool._env['PYTHONPATH']}",
                    BENCH_COST_CALLS=str(recorder.calls_dir / f"{name}.jsonl"),
                    BENCH_COST_FUNCTION=name,
                )
            return pools

        def invoke(pool: Any, event: Any) -> Any:
            started = time.perf_counter()
            with recorder._lock:
                recorder._running += 1
            try:
                return original_invoke(pool, event)
            finally:
                with recorder._lock:
                    recorder._running -= 1
                    recorder.invocations.append((pool.name, started, time.perf_counter() - started))

        devstack.local.pools_for = pools_for  # type: ignore[assignment]
        functions.FunctionPool.invoke = invoke  # type: ignore[method-assign]

    def _lines(self) -> dict[str, list[str]]:
        return {p.name: p.read_text(encoding="utf-8").splitlines() for p in sorted(self.calls_dir.glob("*.jsonl"))}

    def mark(self) -> tuple[int, dict[str, int]]:
        """Where each record stands now: invocations so far, and lines so far in each function's file."""
        return len(self.invocations), {name: len(lines) for name, lines in self._lines().items()}

    def wait_quiet(self, timeout: float = 120) -> None:
        deadline, last, since = time.monotonic() + timeout, self.mark(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.25)
            now = self.mark()
            if now != last or self._running:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= QUIET:
                return
        raise TimeoutError("the stack did not go quiet")

    def since(self, mark: tuple[int, dict[str, int]]) -> dict[str, dict[str, Any]]:
        functions: dict[str, dict[str, Any]] = defaultdict(
            lambda: {
                "invocations": 0,
                "seconds": 0.0,
                "requests": Counter(),
                "rru": 0.0,
                "wru": 0.0,
                "sqs": 0,
                "sns": 0,
                "s3_put": 0,
                "s3_get": 0,
                "secrets": 0,
            }
        )
        for name, _started, seconds in self.invocations[mark[0] :]:
            functions[name]["invocations"] += 1
            functions[name]["seconds"] += seconds
        calls = [json.loads(line) for name, lines in self._lines().items() for line in lines[mark[1].get(name, 0) :]]
        for call in calls:
            f = functions[call["function"]]
            f["requests"][f"{call['service']}:{call['operation']}"] += 1
            if call["service"] == "dynamodb":
                f["wru" if call.get("write") else "rru"] += call.get("units", 0.0)
            elif call["service"] == "sqs":
                f["sqs"] += call.get("chunks", 1)
            elif call["service"] == "sns":
                f["sns"] += call.get("chunks", 1)
            elif call["service"] == "s3":
                f["s3_put" if call["operation"] in ("PutObject", "CopyObject", "ListObjectsV2") else "s3_get"] += 1
            elif call["service"] == "secretsmanager":
                f["secrets"] += 1
        return {fn: {**f, "requests": dict(f["requests"])} for fn, f in functions.items()}


def _usage(body: dict[str, Any]) -> dict[str, int]:
    return {
        "input_tokens": int(body.get("inputTokens", 0)),
        "output_tokens": int(body.get("outputTokens", 0)),
        "cache_read_input_tokens": int(body.get("cacheReadInputTokens", 0)),
        "cache_creation_input_tokens": int(body.get("cacheCreationInputTokens", 0)),
    }


def _tools(body: dict[str, Any]) -> list[str]:
    return [c["name"] for it in body.get("trace") or [] for c in it["toolCalls"]]


def _scenario(
    name: str, then: str, body: dict[str, Any], functions: Any, model_function: str = "ChatFunction", **more: Any
) -> dict[str, Any]:
    """A scenario's row: the turn's tools in order and ``then``, what each function did, the turn's tokens."""
    return {
        "name": name,
        "what": " → ".join(_tools(body)) + then,
        "functions": functions,
        "usage": _usage(body),
        "model_calls": body["iterations"],
        "model_function": model_function,
        **more,
    }


def _transitions(sfn: Any, arn: str, since: float) -> int:
    """State transitions (AWS bills each state entered) of the executions started after ``since``."""
    total = 0
    for ex in sfn.list_executions(stateMachineArn=arn)["executions"]:
        if ex["startDate"].timestamp() < since:
            continue
        events = sfn.get_execution_history(executionArn=ex["executionArn"], maxResults=1000)["events"]
        total += sum(1 for e in events if e["type"].endswith("StateEntered"))
    return total


class Client:
    """The scenarios, over HTTP as a page and a lead would play them."""

    def __init__(self, local: Any, recorder: Recorder) -> None:
        import boto3
        import httpx

        self.local, self.recorder = local, recorder
        self.customer = {"Authorization": f"Bearer {local.tokens['customers'][0]['token']}"}
        self.lead = {"Authorization": f"Bearer {local.tokens['leads'][0]['token']}"}
        self.http = httpx.Client(base_url=local.url, timeout=120)
        session = boto3.Session(region_name="us-east-1")  # this process's: no probe counts its reads
        self.ddb = session.client("dynamodb", endpoint_url=local.moto_url)
        self.sfn = session.client("stepfunctions", endpoint_url=local.moto_url)

    def read_only(self) -> dict[str, Any]:
        mark = self.recorder.mark()
        r = self.http.post("/api/chat", json={"conversationId": None, "message": READ_ONLY}, headers=self.customer)
        body = r.json()
        assert r.status_code == 200 and body["iterations"] >= 2, body
        self.recorder.wait_quiet()
        return _scenario("read-only turn", " → answer", body, self.recorder.since(mark))

    def converse(self) -> None:
        """A new conversation's read-only turn, not measured: one more conversation for the outcome sweep."""
        r = self.http.post("/api/chat", json={"conversationId": None, "message": READ_ONLY}, headers=self.customer)
        assert r.status_code == 200, r.text

    def ask_refund(self, order: int) -> tuple[dict[str, Any], str]:
        """A turn asking for a refund over the threshold: its answer and the approval it opened, once quiet."""
        message = SEED.replace("1042", str(order))
        r = self.http.post("/api/chat", json={"conversationId": None, "message": message}, headers=self.customer)
        body = r.json()
        assert r.status_code == 200, body
        approval = next(
            c["result"]["approval_id"]
            for it in body["trace"]
            for c in it["toolCalls"]
            if isinstance(c["result"], dict) and c["result"].get("approval_id")
        )
        self.recorder.wait_quiet()
        return body, approval

    def approve(self, approval: str) -> None:
        decided = self.http.post(f"/api/approvals/{approval}/approve", headers=self.lead)
        assert decided.status_code in (200, 202), decided.text

    def seed(self, order: int) -> dict[str, Any]:
        """A refund over the threshold: the turn, the approval's queue and the leads' notification, the lead's
        approval, RefundFlow, the provider's refund and its webhooks, to REFUNDED."""
        mark, began = self.recorder.mark(), time.time()
        body, approval = self.ask_refund(order)
        self.approve(approval)
        table, deadline = self.local.stack.physical_ids["ApprovalsTable"], time.monotonic() + 120
        status = ""
        while status not in ("REFUNDED", "FAILED") and time.monotonic() < deadline:
            time.sleep(0.5)
            item = self.ddb.get_item(TableName=table, Key={"approval_id": {"S": approval}})["Item"]
            status = item["status"]["S"]
        assert status == "REFUNDED", status
        self.recorder.wait_quiet()
        return _scenario(
            "seed scenario (refund over the threshold, approved, REFUNDED)",
            " → answer; approve; RefundFlow; refund; webhooks",
            body,
            self.recorder.since(mark),
            transitions=_transitions(self.sfn, self.local.stack.state_machine_arn("RefundFlow"), began - 1),
        )

    def long(self) -> dict[str, Any]:
        """A turn handed over to the worker at once; the page waits on the feed, then reads the turn's record."""
        mark = self.recorder.mark()
        r = self.http.post(
            "/api/chat",
            json={"conversationId": None, "message": READ_ONLY},
            headers={**self.customer, "Prefer": "respond-async"},
        )
        assert r.status_code == 202, r.text
        events_url = r.json()["eventsUrl"]
        cursor, done, polls = None, False, 0
        while not done and polls < 20:
            query = {"waitSeconds": "20", **({"after": cursor} if cursor else {})}
            page = self.http.get(events_url, params=query, headers=self.customer).json()
            polls, cursor = polls + 1, page["nextCursor"]
            done = any(e["type"] in ("turn.completed", "turn.failed") for e in page["events"])
        record = self.http.get(r.headers["Location"], headers=self.customer).json()
        assert record["status"] == "completed", record
        self.recorder.wait_quiet()
        return _scenario(
            "long turn (handed over to the worker)",
            " → answer, in TurnWorkerFunction",
            record["response"],
            self.recorder.since(mark),
            "TurnWorkerFunction",
            feed_polls=polls,
        )


def _invoke(local: Any, recorder: Recorder, fn: str) -> tuple[Any, dict[str, dict[str, Any]]]:
    """One scheduled run of ``fn``: its answer, and every function it reached until the stack is quiet again."""
    from devstack.events import scheduled_event

    mark = recorder.mark()
    result = local.pools[fn].invoke(scheduled_event(fn, "us-east-1"))
    recorder.wait_quiet()
    return result, recorder.since(mark)


def _query_all(ddb: Any, **query: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while True:
        out = ddb.query(**query)
        items.extend(out.get("Items", []))
        if "LastEvaluatedKey" not in out:
            return items
        query["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def _wait_until_due(ddb: Any, table: str, limit: float = 90.0) -> tuple[int, float]:
    """Sleeps until every header waiting for its outcome is due: (how many, seconds waited)."""
    headers = _query_all(
        ddb,
        TableName=table,
        IndexName="outcomes_due",
        KeyConditionExpression="outcome_due = :one",
        ExpressionAttributeValues={":one": {"S": "1"}},
    )
    wait = max(int(h["quiet_check_at"]["N"]) for h in headers) + 1 - time.time()
    assert wait <= limit, f"a quiet check {wait:.0f} s away: ConversationQuietMinutes is not 1"
    time.sleep(max(0.0, wait))
    return len(headers), max(0.0, wait)


def _outcome_items(ddb: Any, table: str) -> tuple[int, int]:
    """The outcome items the rollup's Queries return (today's and yesterday's, UTC): (how many, bytes in all)."""
    from datetime import UTC, datetime, timedelta

    from bench.calls import item_size

    today = datetime.now(UTC).date()
    items = [
        item
        for day in (today - timedelta(days=1), today)
        for item in _query_all(
            ddb,
            TableName=table,
            IndexName="outcomes_by_day",
            KeyConditionExpression="quiet_day = :d",
            ExpressionAttributeValues={":d": {"S": day.isoformat()}},
        )
    ]
    return len(items), sum(item_size(i) for i in items)


def outcomes(local: Any, client: Client, recorder: Recorder) -> dict[str, Any]:
    """``OUTCOME_EXTRA`` more conversations; once all are quiet, a rollup run (no outcome item yet), the outcome
    sweep over them all, a rollup run again; and the outcome items' size on the index."""
    for _ in range(OUTCOME_EXTRA):
        client.converse()
    recorder.wait_quiet()
    table = local.stack.physical_ids["ConversationsTable"]
    due, waited = _wait_until_due(client.ddb, table)
    _, before = _invoke(local, recorder, ROLLUP)
    summary, sweep = _invoke(local, recorder, SWEEP)
    _, after = _invoke(local, recorder, ROLLUP)
    items, size = _outcome_items(client.ddb, table)
    assert summary["stored"] == due == items, (summary, due, items)
    return {
        "conversations": summary["stored"],
        "final": summary["final"],
        "outcomes": summary["outcomes"],
        "waited_seconds": waited,
        "sweep": sweep,
        "rollup_before": before,
        "rollup_after": after,
        "outcome_items": items,
        "outcome_bytes": size,
    }


def child(out_path: str) -> None:
    from devstack.local import start

    recorder = Recorder(Path(tempfile.mkdtemp(prefix="bench-cost-calls-")))
    recorder.patch()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "STRIPE_"))}
    for name in ("SIMULATED_MODEL_DELAY_SECONDS", "LLM_PROVIDER", "TOOL_MODE"):
        environ.pop(name, None)
    local = start(port=0, moto_port=0, environ=environ, schedule_seconds=86_400, parameters=PARAMETERS)
    try:
        client = Client(local, recorder)
        recorder.wait_quiet()
        for fn in (SWEEP, ROLLUP):  # their clients built while nothing is due, so the measured runs are warm
            _invoke(local, recorder, fn)
        # Every function's first invocation builds its clients: played once unmeasured (order 1044 is refundable
        # over the threshold too), so the measured round is what a warm function does.
        client.read_only(), client.seed(1044), client.long()
        scenarios = [client.read_only(), client.seed(1042), client.long()]
        measured_outcomes = outcomes(local, client, recorder)
        # The fixed cost: one run of each on the quiet stack (the outcome sweep finds nothing left to do).
        scheduled = {fn: _invoke(local, recorder, fn)[1] for fn in SCHEDULED}
        resources = local.stack.template["Resources"]
        memory = {
            fn: int(r["Properties"]["MemorySize"])
            for fn, r in resources.items()
            if r["Type"] == "AWS::Lambda::Function"
        }
        arch = local.stack.sam_template["Parameters"]["Architecture"]["Default"]
        out = {
            "scenarios": scenarios,
            "scheduled": scheduled,
            "outcomes": measured_outcomes,
            "memory": memory,
            "architecture": arch,
        }
        Path(out_path).write_text(json.dumps(out, default=str), encoding="utf-8")
    finally:
        local.stop()


def run_child(module: str) -> dict[str, Any]:
    """``python -m <module> --child <file>`` in a fresh interpreter without this process's AWS/moto environment
    (its own local stack); what it wrote to the file."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = Path(fh.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
    env["PYTHONPATH"] = f"{ROOT / 'layers' / 'common'}{os.pathsep}{ROOT}"
    run_module(module, ["--child", str(out)], env, timeout=900)
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    return result


def measure(feed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The child's counts, with the feed section's minute of waiting (if measured) for the long turn's page."""
    result = run_child("bench.cost")
    if feed is not None:
        for s in result["scenarios"]:
            if s["model_function"] == "TurnWorkerFunction":
                s["feed_wait"] = feed["minute"]
    return result


def priced(cost: dict[str, Any], prices: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every scenario priced, what one run of each scheduled function costs a month at its rate, and (when measured)
    the outcome sweep and the daily rollup per ``CONVERSATIONS`` conversations."""
    prices = prices or load_prices()
    memory, arch = cost["memory"], cost["architecture"]
    rows = {s["name"]: price(s, prices, memory, arch) for s in cost["scenarios"]}
    monthly = {
        fn: price(_idle(functions), prices, memory, arch)["infra"] * SCHEDULED[fn]
        for fn, functions in cost["scheduled"].items()
    }
    out = {"scenarios": rows, "monthly": monthly, "prices": prices}
    if "outcomes" in cost:
        scaled_runs = per_thousand(cost["outcomes"], cost["scheduled"].get(SWEEP))
        out["outcomes"] = {
            **scaled_runs,
            "priced": {name: price(_idle(scaled_runs[name]), prices, memory, arch) for name in ("sweep", "rollup")},
        }
    return out


def _idle(functions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A run of no turn (no model call), for `price`."""
    return {
        "usage": {"input_tokens": 0, "output_tokens": 0},
        "model_calls": 0,
        "model_function": "",
        "functions": functions,
    }


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"] and len(argv) == 2:
        child(argv[1])
        return
    print(json.dumps(priced(measure()), indent=2, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
