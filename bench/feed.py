"""The event feed: what a page waiting on it costs, and how fast it hears (GET /api/conversations/{id}/events).

Everything runs through EventsFunction's real handler (functions/events/app.py) with an API Gateway v2 event, in a
child process of its own (``python -m bench.feed``) with the function's deployed environment (World.env), against
the stack in the moto server:

* **a minute of waiting**: one client long-polls a quiet conversation (waitSeconds=20, nothing new) for a minute
  with the feed's clock and sleep faked, so the minute is instant and exact. botocore hooks count every DynamoDB
  request by purpose and size what each read returns (for the capacity it would consume on DynamoDB);
* **latency**: real time. The client waits with waitSeconds=20 while a thread writes a notification after a
  random delay; the time from the write's commit (its TransactWriteItems answered) to the poll's return;
* **what the limits allow**, from template.yaml's defaults (never restated here).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.calls import item_size
from bench.env import ROOT, World, run_module

MINUTE = 60.0
WAIT_SECONDS = 20  # what a waiting page asks for: the route's longest wait (checked against it in the child)
# Latency samples (BENCH_FEED_SAMPLES): each waits 0-10 s for its write, so the section stays around 2 minutes.
SAMPLES = int(os.environ.get("BENCH_FEED_SAMPLES", "20"))
MAX_DELAY = 10.0
SEED = 18  # the write delays are random, but the same from run to run


# -- pure helpers (tests/unit/test_bench_feed.py) ----------------------------------------------------


def purpose(operation: str, params: dict[str, Any]) -> str:
    """What one of the feed's DynamoDB requests is for (params as the low-level client takes them)."""
    if operation == "Query":
        partition = str(params.get("ExpressionAttributeValues", {}).get(":c", {}).get("S", ""))
        if partition.startswith("turn#"):
            return "Query: turn records"
        if partition.startswith("note#"):
            return "Query: notifications"
        return "Query: messages"
    key = str((params.get("Key") or {}).get("conversation_id", {}).get("S", ""))
    if operation == "GetItem" and not key.startswith(("rate#", "note#", "turn#")):
        return "GetItem: conversation header (owner check)"
    if operation == "UpdateItem" and key.startswith("rate#"):
        return "UpdateItem: the reader's rate counter"
    if operation == "UpdateItem" and key.startswith("poll#"):
        return "UpdateItem: the waiting slot (taken, released)"
    return f"{operation}: other"


def read_units(read_bytes: int, consistent: bool) -> float:
    """DynamoDB's read capacity for one GetItem or Query: the bytes read rounded up to 4 KB (at least one unit,
    even when nothing is found); half of that for an eventually consistent read."""
    units = max(1, math.ceil(read_bytes / 4096))
    return float(units) if consistent else units / 2


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100): a value that was measured, never an interpolation."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def gb_seconds(memory_mb: float, seconds: float) -> float:
    """Lambda's GB-seconds: memory (MB / 1024) times the seconds an invocation holds it."""
    return memory_mb / 1024 * seconds


def parameter_default(template: dict[str, Any], value: Any) -> Any:
    """A property's value with a ``{"Ref": parameter}`` taken as that parameter's default."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return template["Parameters"][value["Ref"]]["Default"]
    return value


def limits(sam_template: dict[str, Any], translated: dict[str, Any], polls_per_minute: float) -> dict[str, Any]:
    """What the template's defaults allow waiting clients, given one idle client's polls per minute."""
    events = sam_template["Resources"]["EventsFunction"]["Properties"]
    api = sam_template["Resources"]["HttpApi"]["Properties"]
    route = api.get("DefaultRouteSettings", {})
    concurrency_ref = events["ReservedConcurrentExecutions"]
    rate = float(parameter_default(sam_template, route["ThrottlingRateLimit"]))
    burst = int(parameter_default(sam_template, route["ThrottlingBurstLimit"]))
    reads = int(sam_template["Parameters"]["ReadsPerMinute"]["Default"])
    concurrency = int(parameter_default(sam_template, concurrency_ref))

    def memory(function: str) -> int:
        return int(translated["Resources"][function]["Properties"]["MemorySize"])  # Globals applied by SAM

    return {
        "concurrency_parameter": concurrency_ref.get("Ref") if isinstance(concurrency_ref, dict) else None,
        "concurrency": concurrency,
        "events_timeout": int(translated["Resources"]["EventsFunction"]["Properties"]["Timeout"]),
        "rate": rate,
        "burst": burst,
        "per_route_throttle": "RouteSettings" in api,
        "reads_per_minute": reads,
        "events_memory_mb": memory("EventsFunction"),
        "chat_memory_mb": memory("ChatFunction"),
        "idle_clients_by_rate": rate * 60 / polls_per_minute,
        "busy_clients_by_rate": rate * 60 / reads,
        "waiting_clients_rate_per_second": concurrency * polls_per_minute / 60,
        "busy_clients_rate_per_second": concurrency * reads / 60,
    }


# -- the parent: a quiet conversation, the child, the limits --------------------------------------------


def measure(world: World) -> dict[str, Any]:
    import boto3

    from bench.env import JWT_SECRET
    from bench.loop import our_agent
    from devstack.tokens import mint_token

    session = boto3.Session(region_name="us-east-1")
    ddb = session.client("dynamodb", endpoint_url=world.moto_url)
    env = world.stack.function_env("ChatFunction")
    tables = {k: env[k] for k in ("CONVERSATIONS_TABLE", "CUSTOMER_DATA_TABLE", "APPROVALS_TABLE", "AUDIT_TABLE")}
    _, turn = our_agent(world.model_url, ddb=ddb, **tables)
    cid = turn(None).conversation_id  # one 3-iteration turn, stored by the real Agent, then quiet
    token = mint_token("customer-7", "customer", 7, secret=JWT_SECRET, ttl_seconds=7200)
    env = {**world.env("EventsFunction"), "BENCH_FEED_SAMPLES": str(SAMPLES)}
    stdout = run_module("bench.feed", [cid, token], env, timeout=600)
    out: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    out["limits"] = limits(world.stack.sam_template, world.stack.template, out["minute"]["invocations"])
    return out


# -- the child: EventsFunction's handler in this process -------------------------------------------------


@dataclass
class Request:
    operation: str
    params: dict[str, Any]
    read_bytes: int = 0  # DynamoDB's size of the items a read answered with


@dataclass
class Requests:
    """Every DynamoDB request of clients made after ``attach``, with what its answer holds (botocore hooks; the
    request's own context dict ties its parameters to its answer, whichever thread makes it)."""

    requests: list[Request] = field(default_factory=list)

    def attach(self, events: Any) -> Requests:
        events.register("before-parameter-build.dynamodb", self._before, unique_id="bench-feed-before")
        events.register("after-call.dynamodb", self._after, unique_id="bench-feed-after")
        return self

    def _before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        request = Request(model.name, json.loads(json.dumps(params, default=str)))
        context["bench_feed_request"] = request
        self.requests.append(request)

    def _after(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        request = context.get("bench_feed_request")
        if request is None:
            return
        items = parsed.get("Items") or ([parsed["Item"]] if "Item" in parsed else [])
        request.read_bytes = sum(item_size(i) for i in items)


class FakeClock:
    """The feed's clock and sleep: sleeping moves the clock, at once."""

    def __init__(self, start: float) -> None:
        self.now = start

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _event(cid: str, token: str, after: str | None, wait: int) -> dict[str, Any]:
    from bench.coldstart import _api_event

    query = f"waitSeconds={wait}" + (f"&after={after}" if after else "")
    event = _api_event("GET", f"/api/conversations/{cid}/events?{query}", token)
    event["routeKey"] = "GET /api/conversations/{id}/events"
    event["pathParameters"] = {"id": cid}
    return event


def _child(cid: str, token: str) -> dict[str, Any]:
    import boto3

    from devstack.worker import lambda_context

    requests = Requests().attach(boto3._get_default_session().events)
    spec = importlib.util.spec_from_file_location("events_app", ROOT / "functions" / "events" / "app.py")
    assert spec and spec.loader
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    from support_agent.api.events_routes import MAX_WAIT_SECONDS
    from support_agent.clock import utc_now
    from support_agent.store.notifications import Notification, NotificationStore
    from support_agent.wiring import events_services

    assert WAIT_SECONDS == MAX_WAIT_SECONDS, "a waiting page asks for the route's longest wait"
    services = events_services()
    feed = services.feed
    context = lambda_context("EventsFunction", 25)

    def poll(after: str | None, wait: int) -> dict[str, Any]:
        out = app.handler(_event(cid, token, after, wait), context)
        assert out["statusCode"] == 200, out
        return dict(json.loads(out["body"]))

    cursor = None
    caught_up = 0
    while True:  # catch up: the turn's events, page after page
        page = poll(cursor, 0)
        cursor = page["nextCursor"]
        caught_up += len(page["events"])
        if not page["events"]:
            break

    # A minute of waiting, on a fake clock: each poll's reads, backoff and return at the wait's end.
    fake = FakeClock(time.time())
    feed._clock, feed._sleep = fake.time, fake.sleep
    mark = len(requests.requests)
    held: list[float] = []
    working = 0.0
    while sum(held) < MINUTE:
        start, t0 = fake.now, time.perf_counter()
        page = poll(cursor, WAIT_SECONDS)
        working += time.perf_counter() - t0
        assert page["events"] == [], page
        held.append(fake.now - start)
    minute = requests.requests[mark:]
    by_purpose = dict(Counter(purpose(r.operation, r.params) for r in minute))
    reads = [r for r in minute if r.operation in ("GetItem", "Query")]
    rcu = sum(read_units(r.read_bytes, bool(r.params.get("ConsistentRead"))) for r in reads)

    # Latency, in real time: a notification written while the client waits.
    feed._clock, feed._sleep = time.time, time.sleep
    writer = NotificationStore(boto3.client("dynamodb"), services.settings.conversations_table)
    rng = random.Random(SEED)
    samples: list[dict[str, float]] = []
    for n in range(SAMPLES):
        delay = rng.uniform(0, MAX_DELAY)
        committed: list[float] = []

        def write(delay: float = delay, n: int = n, committed: list[float] = committed) -> None:
            time.sleep(delay)
            data = {"approvalId": f"apr_bench_{n}", "orderId": 1042, "amountCents": 100, "status": "REFUNDED"}
            writer.transact([], Notification(conversation_id=cid, type="approval.decided", at=utc_now(), data=data))
            committed.append(time.perf_counter())

        thread = threading.Thread(target=write)
        began = time.perf_counter()
        thread.start()
        page = poll(cursor, WAIT_SECONDS)
        returned = time.perf_counter()
        thread.join()
        assert [e["type"] for e in page["events"]] == ["approval.decided"], page
        cursor = page["nextCursor"]
        samples.append({"delay": delay, "latency": returned - committed[0], "poll": returned - began})

    return {
        "caught_up_events": caught_up,
        "wait_seconds": WAIT_SECONDS,
        "minute": {
            "invocations": len(held),
            "held_seconds": sum(held),
            "working_seconds": working,
            "requests": len(minute),
            "by_purpose": by_purpose,
            "read_requests": len(reads),
            "write_requests": len(minute) - len(reads),
            "rcu": rcu,
            "wcu": len(minute) - len(reads),  # the rate counter: one item well under 1 KB
            "largest_read_kb": max((r.read_bytes for r in reads), default=0) / 1024,
            "reads_per_poll": by_purpose.get("Query: messages", 0) / max(len(held), 1),
        },
        "latency": samples,
        "backoff": list(_backoff_constants()[0]),
        "max_reads_per_poll": _backoff_constants()[1],
    }


def _backoff_constants() -> tuple[tuple[float, ...], int]:
    from support_agent.feed import BACKOFF, MAX_READS_PER_POLL

    return BACKOFF, MAX_READS_PER_POLL


def latency_summary(samples: list[dict[str, float]]) -> dict[str, float]:
    values = [s["latency"] for s in samples]
    return {
        "n": len(values),
        "median": statistics.median(values),
        "p95": percentile(values, 95),
        "max": max(values),
        "min": min(values),
    }


def main() -> None:
    protocol = sys.stdout
    sys.stdout = sys.stderr  # the handler's logs go to stderr; stdout carries the one JSON line
    out = _child(sys.argv[1], sys.argv[2])
    protocol.write(json.dumps(out) + "\n")
    protocol.flush()


if __name__ == "__main__":
    main()
