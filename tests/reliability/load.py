"""Property 9: a bounded load run against the local stack, and its figures.

Concurrent customers (each thread its own, so no two threads share a conversation) run mixed flows through
the HTTP API with the simulated model — order status, invoices, refunds under and over the threshold,
follow-ups in the same conversation, reading conversations back — while a lead lists approvals and approves
or rejects them. Fixed request counts, a timeout per request and loopback only: it stops by itself.
Afterwards the tables are checked: every conversation valid, every audit complete, the money invariant on
every order.

    python -m tests.reliability.load [--threads 4] [--requests 25] [--seed 1]

starts its own local stack (on free ports), prints requests, errors, p50/p95 and the checks, and stops it.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import boto3
import httpx

from devstack.tokens import DEFAULT_DEV_SECRET, mint_token
from tests.reliability.checks import World, check_conversation, check_money
from tests.support.shop_rows import put_invoice, put_one_item_order

FIRST_CUSTOMER = 500
ORDERS = ((1, "DELIVERED", 18_900), (2, "SHIPPED", 2_500), (3, "DELIVERED", 16_000), (4, "PROCESSING", 3_200))
REQUEST_TIMEOUT = 30.0


@dataclass
class Report:
    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    flows: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def requests(self) -> int:
        return len(self.latencies_ms)

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    def lines(self) -> list[str]:
        mean = statistics.fmean(self.latencies_ms) if self.latencies_ms else 0.0
        return [
            f"requests {self.requests} in {self.seconds:.1f}s ({self.requests / max(self.seconds, 1e-9):.1f}/s), "
            f"errors {len(self.errors)}",
            f"latency ms: p50 {self.percentile(50):.0f}, p95 {self.percentile(95):.0f}, "
            f"max {max(self.latencies_ms, default=0):.0f}, mean {mean:.0f}",
            "statuses: " + ", ".join(f"{k}={v}" for k, v in sorted(self.statuses.items())),
            "flows: " + ", ".join(f"{k}={v}" for k, v in sorted(self.flows.items())),
        ]


def stack_world(local: Any) -> World:
    ddb = boto3.client(
        "dynamodb",
        endpoint_url=local.moto_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    ids = local.stack.physical_ids
    return World(ddb, ids["ConversationsTable"], ids["CustomerDataTable"], ids["ApprovalsTable"], ids["AuditTable"])


def seed_customers(world: World, count: int, first: int = FIRST_CUSTOMER) -> list[int]:
    """Customers of the load run, each with the demo's four kinds of order (ids <customer>0<n>)."""
    customers = list(range(first, first + count))
    for cid in customers:
        for n, status, total in ORDERS:
            oid = cid * 100 + n
            put_one_item_order(world.ddb, world.customer_data, cid, oid, total, "Thing", status=status, note="")
            put_invoice(world.ddb, world.customer_data, cid, oid, oid, total)
    return customers


class Client:
    """One thread's customers and HTTP connection; every request timed and judged."""

    def __init__(self, url: str, report: Report, customers: list[int], secret: str, rng: random.Random) -> None:
        self.http = httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT)
        self.report, self.rng = report, rng
        self.tokens = {c: mint_token(f"customer-{c}", "customer", c, secret=secret) for c in customers}
        self.lead = mint_token("lead-load", "support_lead", None, secret=secret)
        self.conversations: dict[int, str] = {}

    def request(self, flow: str, method: str, path: str, token: str, body: Any = None) -> httpx.Response | None:
        began = time.perf_counter()
        try:
            resp = self.http.request(method, path, json=body, headers={"authorization": f"Bearer {token}"})
        except httpx.HTTPError as exc:
            with self.report.lock:
                self.report.latencies_ms.append((time.perf_counter() - began) * 1000)
                self.report.errors.append(f"{flow}: {type(exc).__name__}")
            return None
        ms = (time.perf_counter() - began) * 1000
        ok = resp.status_code < 500 and resp.headers.get("content-type", "").startswith("application/json")
        expected = resp.status_code < 400 or resp.status_code in (409, 429)  # a decision race; throttling
        with self.report.lock:
            self.report.latencies_ms.append(ms)
            self.report.statuses[resp.status_code] += 1
            self.report.flows[flow] += 1
            if not (ok and expected):
                self.report.errors.append(f"{flow}: {method} {path} -> {resp.status_code} {resp.text[:200]}")
        return resp

    def chat(self, flow: str, customer: int, text: str, follow_up: bool) -> None:
        cid = self.conversations.get(customer) if follow_up else None
        resp = self.request(flow, "POST", "/api/chat", self.tokens[customer], {"conversationId": cid, "message": text})
        if resp is not None and resp.status_code == 200:
            self.conversations[customer] = resp.json()["conversationId"]

    def one(self) -> None:
        customer = self.rng.choice(list(self.tokens))
        order = customer * 100 + self.rng.choice([1, 2, 3, 4])
        flow = self.rng.choices(
            ["status", "invoices", "small_refund", "big_refund", "follow_up", "read_back", "lead"],
            weights=[3, 2, 2, 1, 2, 1, 1],
        )[0]
        if flow == "status":
            self.chat(flow, customer, f"Where is my order {order}?", follow_up=False)
        elif flow == "invoices":
            self.chat(flow, customer, f"Can I see the invoices for order {order}?", follow_up=False)
        elif flow == "small_refund":
            self.chat(flow, customer, f"Please refund $5 on order {order}.", follow_up=False)
        elif flow == "big_refund":
            self.chat(flow, customer, f"Please refund order {customer * 100 + 1} in full.", follow_up=False)
        elif flow == "follow_up":
            self.chat(flow, customer, "And what about its invoice?", follow_up=True)
        elif flow == "read_back":
            if customer in self.conversations:
                self.request(flow, "GET", f"/api/conversations/{self.conversations[customer]}", self.tokens[customer])
            else:
                self.request(flow, "GET", "/api/conversations", self.tokens[customer])
        else:
            self.decide()

    def decide(self) -> None:
        resp = self.request("lead", "GET", "/api/approvals?status=PENDING", self.lead)
        pending = resp.json().get("approvals", []) if resp is not None and resp.status_code == 200 else []
        if pending:
            aid = self.rng.choice(pending)["approvalId"]
            action = self.rng.choice(["approve", "reject", "reject"])
            self.request(f"lead_{action}", "POST", f"/api/approvals/{aid}/{action}", self.lead, {})


def run(url: str, customers: list[int], threads: int, requests_per_thread: int, secret: str, seed: int = 1) -> Report:
    report = Report()
    groups = [customers[i::threads] for i in range(threads)]

    def worker(i: int) -> None:
        client = Client(url, report, groups[i], secret, random.Random(seed * 1000 + i))
        for _ in range(requests_per_thread):
            client.one()
        client.http.close()

    began = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(i,), name=f"load-{i}") for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(REQUEST_TIMEOUT * requests_per_thread * 3)  # a hard stop, even if something hangs
        assert not t.is_alive(), "a load thread did not finish"
    report.seconds = time.perf_counter() - began
    return report


def check_stack(world: World, customers: list[int], tools: list[dict[str, Any]]) -> dict[str, int]:
    """Every conversation valid and audited, no lease held, the money invariant for every customer."""
    counts: Counter[str] = Counter()
    for cid in world.conversation_ids():
        counts.update(check_conversation(world, cid, tools))
        counts["conversations"] += 1
    for customer in (7, 8, *customers):
        check_money(world, customer)
        counts["customers_checked"] += 1
    return dict(counts)


def tool_specs() -> list[dict[str, Any]]:
    from support_agent.config import load_settings
    from support_agent.wiring import build_registry

    return build_registry(load_settings({}), None, None).specs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--requests", type=int, default=25, help="requests per thread")
    parser.add_argument("--customers", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    from devstack.local import start

    environ = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    print("starting the local stack (simulated model, free ports)…", flush=True)
    local = start(port=0, moto_port=0, environ=environ, schedule_seconds=3600)
    try:
        world = stack_world(local)
        customers = seed_customers(world, args.customers)
        secret = environ.get("JWT_SECRET") or DEFAULT_DEV_SECRET
        report = run(local.url, customers, args.threads, args.requests, secret, args.seed)
        print(f"load: {args.threads} threads x {args.requests} requests, {args.customers} customers")
        for line in report.lines():
            print("  " + line)
        for error in report.errors[:20]:
            print("  error: " + error)
        checked = check_stack(world, customers, tool_specs())
        print("  afterwards: " + ", ".join(f"{k}={v}" for k, v in sorted(checked.items())) + " — all valid")
    finally:
        local.stop()


if __name__ == "__main__":
    main()
