"""The new paths: a direct refund at the provider's latency, the audit chain's cost per turn, MCP, the hand-over.

In this process, on the moto server (out of process) with botocore hooks counting every request
(bench/calls.py):

* **payments**: the ``request_refund`` tool under the threshold, ``PAYMENT_PROVIDER=stripe`` against devstack's
  simulated Stripe on a local port, each sample on a fresh order of its own; the provider's latency is added by
  an httpx transport that waits before each request (0 ms and 300 ms): the tool call's wall time, its AWS
  requests by API, its requests to the provider;
* **the audit chain**: a conversation's turns on the deployed tables: the requests per turn (the rows ride in the
  step's transaction, the head in its lease update: none added), and the write units of the turn's transactions
  with and without the chain's attributes;
* **MCP**: bench/tool_paths.py (registry vs in-process MCP, per call and per turn; an outside server's calls).

Then, in a process of its own on the local stack, bench/paths_stack.py: the approved refund path and the
hand-over to the worker.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections import Counter
from typing import Any

import httpx

from bench.calls import Call, CallCounter, item_size, kinds
from bench.cost_probe import write_units
from bench.env import World
from devstack.seed import order_item

LATENCIES_MS = (0, 300)
REFUND_SAMPLES = 11  # rounds, each one call at every latency
CUSTOMER = 902  # not in the demo data: its orders are the bench's own
TOTAL, AMOUNT = 10_000, 1_500  # each order refunded once, directly: under the 5,000-cent threshold
AUDIT_TURNS = 5
# The chain's attributes (audit/chain.py): on each audit row, and the stream's head on its owner item.
ROW_CHAIN = ("n", "v", "payload_hash", "prev_hash", "hash")
HEAD_CHAIN = ("audit_n", "audit_hash", "audit_event")
_orders = itertools.count(80_000)


class Latency(httpx.BaseTransport):
    """The provider ``seconds`` further away: each request waits that long before it is sent; every one counted."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.inner = httpx.HTTPTransport()
        self.requests: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.method} {request.url.path}")
        if self.seconds:
            time.sleep(self.seconds)
        return self.inner.handle_request(request)


def by_api(calls: list[Call]) -> dict[str, int]:
    return dict(Counter(f"{c.service}:{c.operation}" for c in calls))


# -- payments ------------------------------------------------------------------------------------------


def refunds(world: World) -> dict[str, Any]:
    """The direct refund at each provider latency, the latencies interleaved round by round (load falls on both)."""
    import boto3

    from devstack.simulated_stripe import TEST_KEY
    from devstack.simulated_stripe import start as start_stripe
    from support_agent.config import load_settings
    from support_agent.refunds import StripePolicy, StripeProvider
    from support_agent.wiring import build_registry

    env = world.stack.function_env("ChatFunction")
    session = boto3.Session(region_name="us-east-1")
    counter = CallCounter().attach(session.events)
    ddb = session.client("dynamodb", endpoint_url=world.moto_url)
    sqs = session.client("sqs", endpoint_url=world.moto_url)
    setup = boto3.Session(region_name="us-east-1").client("dynamodb", endpoint_url=world.moto_url)  # not counted
    samples: dict[int, list[tuple[float, dict[str, int], list[str]]]] = {ms: [] for ms in LATENCIES_MS}
    with start_stripe() as server:
        settings = load_settings(
            {**env, "PAYMENT_PROVIDER": "stripe", "STRIPE_API_BASE": server.url, "STRIPE_API_KEY": TEST_KEY}
        )
        paths = {}
        for ms in LATENCIES_MS:
            transport = Latency(ms / 1000)
            policy = StripePolicy.from_settings(settings)
            provider = StripeProvider(TEST_KEY, base_url=server.url, policy=policy, transport=transport)
            paths[ms] = (transport, build_registry(settings, ddb, sqs, provider))
        for n in range(REFUND_SAMPLES + 1):  # the first round builds what a warm function has: not kept
            for ms, (transport, registry) in paths.items():
                order, ctx = _order(setup, server.stripe, settings.customer_data_table)
                mark, sent, provider_mark = counter.mark(), len(transport.requests), len(server.stripe.requests)
                args = {"order_id": order, "amount_cents": AMOUNT, "reason": "bench"}
                started = time.perf_counter()
                result = registry.execute("request_refund", args, ctx)
                wall = (time.perf_counter() - started) * 1000
                assert not result.is_error and result.result["status"] == "REFUNDED", result
                assert len(server.stripe.requests) - provider_mark == len(transport.requests) - sent
                if n:
                    samples[ms].append((wall, by_api(counter.since(mark)), transport.requests[sent:]))
    counter.detach()
    out: dict[str, Any] = {}
    for ms, runs in samples.items():
        assert all(aws == runs[0][1] and calls == runs[0][2] for _, aws, calls in runs), runs  # the same each time
        out[f"{ms}"] = {
            "wall_ms": statistics.median(wall for wall, _, _ in runs),
            "samples": len(runs),
            "aws": runs[0][1],
            "provider_requests": len(runs[0][2]),
            "provider_calls": runs[0][2],
        }
    return out


def _order(setup: Any, stripe: Any, table: str) -> tuple[int, Any]:
    """A fresh order with a payment intent of its own at the simulated Stripe, and a tool call's context for it."""
    from support_agent.auth import Principal
    from support_agent.ids import new_conversation_id
    from support_agent.store.dynamo import to_item
    from support_agent.tools.registry import ToolContext

    order = next(_orders)
    intent = f"pi_bench_{order}"
    stripe.add_payment_intent(intent, TOTAL, "usd")
    item = order_item(CUSTOMER, order, TOTAL, payment_intent=intent)
    setup.put_item(TableName=table, Item=to_item(item))
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    principal = Principal(f"customer-{CUSTOMER}", "customer", CUSTOMER)
    return order, ToolContext(principal, CUSTOMER, new_conversation_id(), 1, "toolu_bench", "bench", now)


# -- the audit chain ---------------------------------------------------------------------------------------


def chain_bytes(item: dict[str, Any], names: tuple[str, ...]) -> int:
    """The bytes (DynamoDB's item size: names and values) the chain's attributes ``names`` take in ``item``."""
    return item_size({k: v for k, v in item.items() if k in names})


def transaction_units(entries: list[tuple[int, int]]) -> tuple[float, float]:
    """A TransactWriteItems' write units, with and without the chain: ``entries`` is (item bytes, of which the
    chain's) per entry; each entry is billed per started KB of its item, twice (a transaction)."""
    return (
        sum(write_units(size, True) for size, _ in entries),
        sum(write_units(size - chain, True) for size, chain in entries),
    )


def audit(world: World) -> dict[str, Any]:
    import boto3

    from bench.loop import our_agent

    session = boto3.Session(region_name="us-east-1")
    counter = CallCounter().attach(session.events)
    ddb = session.client("dynamodb", endpoint_url=world.moto_url)
    reader = boto3.Session(region_name="us-east-1").client("dynamodb", endpoint_url=world.moto_url)  # not counted
    env = world.stack.function_env("ChatFunction")
    tables = {k: env[k] for k in ("CONVERSATIONS_TABLE", "CUSTOMER_DATA_TABLE", "APPROVALS_TABLE", "AUDIT_TABLE")}
    audit_table = tables["AUDIT_TABLE"]
    _, turn = our_agent(world.model_url, ddb=ddb, CONVERSATION_TOKEN_BUDGET="1000000000", **tables)
    rows: list[dict[str, Any]] = []
    cid = None
    for n in range(1, AUDIT_TURNS + 1):
        mark = counter.mark()
        cid = turn(cid, f"Turn {n}: where is my order 1042, and what did you bill me for it?").conversation_id
        calls = counter.since(mark)
        units_with = units_without = 0.0
        audit_rows: list[tuple[int, int]] = []
        heads = 0
        for call in calls:
            if call.operation != "TransactWriteItems":
                continue
            entries = []
            for entry in call.params["TransactItems"]:
                ((kind, body),) = entry.items()
                if kind == "Put":
                    item = body["Item"]
                    names = ROW_CHAIN if body["TableName"] == audit_table else HEAD_CHAIN
                    if body["TableName"] == audit_table:
                        audit_rows.append((item_size(item), chain_bytes(item, ROW_CHAIN)))
                else:  # an Update or a condition check: billed on the item's size (read now, after the turn)
                    got = reader.get_item(TableName=body["TableName"], Key=body["Key"], ConsistentRead=True)
                    item, names = got.get("Item") or {}, HEAD_CHAIN
                    heads += "audit_n" in str(body.get("UpdateExpression", ""))
                entries.append((item_size(item), chain_bytes(item, names)))
            w, wo = transaction_units(entries)
            units_with, units_without = units_with + w, units_without + wo
        audit_requests = [
            c
            for c in calls
            if c.operation != "TransactWriteItems" and c.params.get("TableName") == audit_table  # outside a step's
        ]
        rows.append(
            {
                "turn": n,
                "requests": len(calls),
                "by_kind": dict(kinds(calls)),
                "transactions": sum(1 for c in calls if c.operation == "TransactWriteItems"),
                "audit_rows": len(audit_rows),
                "audit_requests": len(audit_requests),
                "head_updates": heads,
                "row_bytes": statistics.mean(s for s, _ in audit_rows) if audit_rows else 0.0,
                "chain_bytes": statistics.mean(c for _, c in audit_rows) if audit_rows else 0.0,
                "wru_with": units_with,
                "wru_without": units_without,
            }
        )
    counter.detach()
    return {"turns": rows}


# -- reading the local stack's counts (pure; tests/unit/test_bench_paths.py) ---------------------------------

SYNC_FUNCTIONS = ("ChatFunction",)
HANDOVER_FUNCTIONS = ("ChatFunction", "TurnWorkerFunction")
POLLER = "Lambda's SQS poller (ReceiveMessage + DeleteMessage per batch)"


def requests_of(functions: dict[str, dict[str, Any]], names: tuple[str, ...]) -> Counter[str]:
    """The AWS requests (``service:Operation``) the named functions made, summed."""
    out: Counter[str] = Counter()
    for name in names:
        out.update(functions.get(name, {}).get("requests", {}))
    return out


def handover_added(sync: dict[str, dict[str, Any]], handed: dict[str, dict[str, Any]]) -> list[tuple[str, int, int]]:
    """(request, answered in the request, handed over) per API, then Lambda's poller and the invocations: what the
    same turn asks of AWS when the worker finishes it. The poller's receive and delete are Lambda's own (not seen
    by a function's hooks), two per batch, as the cost section prices them."""
    before, after = requests_of(sync, SYNC_FUNCTIONS), requests_of(handed, HANDOVER_FUNCTIONS)
    rows = [(api, before.get(api, 0), after.get(api, 0)) for api in sorted(set(before) | set(after))]
    workers = handed.get("TurnWorkerFunction", {}).get("invocations", 0)
    rows.append((POLLER, 0, 2 * workers))
    rows.append(("Lambda invocations", _invocations(sync, SYNC_FUNCTIONS), _invocations(handed, HANDOVER_FUNCTIONS)))
    return rows


def _invocations(functions: dict[str, dict[str, Any]], names: tuple[str, ...]) -> int:
    return sum(int(functions.get(name, {}).get("invocations", 0)) for name in names)


def measure(world: World, turns: int) -> dict[str, Any]:
    from bench import paths_stack, tool_paths

    return {
        "refunds": refunds(world),
        "audit": audit(world),
        "mcp": tool_paths.measure(world.model_url, turns),
        "stack": paths_stack.measure(),
    }
