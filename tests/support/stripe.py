"""The simulated Stripe in-process: an httpx transport into `SimulatedStripe`, and its refunds compared to our ledger.

No socket and no thread: `InProcessStripe` hands each request to `SimulatedStripe.handle` and turns the
delivery faults into what httpx raises on a real connection (an answer held past the read timeout is a
`ReadTimeout`, a dropped connection a `RemoteProtocolError`; the refund was made either way). A connection
that never opens (`refuse_connections`) is an `httpx.ConnectError` before anything reaches Stripe.

`provider_for` builds the real `StripeProvider` on it with a policy that never sleeps, and
`ledger_problems` says where our ledger and the provider disagree (the "never twice" checks).
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import httpx

from devstack.simulated_stripe import TEST_KEY, Fault, SimulatedStripe
from support_agent.refunds.provider.stripe import StripeProvider
from support_agent.refunds.provider.stripe_retry import StripePolicy

POST, LIST, GET = "POST /v1/refunds", "GET /v1/refunds", "GET /v1/refunds/{id}"
BASE = "https://api.stripe.test"
DEAD = ("failed", "canceled")
# Every fault the simulated Stripe injects (plus `refuse_connections`, which never reaches it).
FAULTS = tuple(Fault)


class InProcessStripe(httpx.BaseTransport):
    """A `SimulatedStripe` as an httpx transport; ``stripe`` is its state (refunds, faults, request log)."""

    def __init__(self, stripe: SimulatedStripe | None = None, *, demo: bool = True) -> None:
        self.stripe = stripe or SimulatedStripe()
        if demo and stripe is None:
            self.stripe.seed_demo()
        self._refused = 0
        self._lock = threading.Lock()
        self.connect_errors = 0  # requests that never connected

    def refuse_connections(self, times: int = 1) -> None:
        """The next ``times`` requests fail to connect (nothing reaches Stripe)."""
        with self._lock:
            self._refused += times

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            refuse, self._refused = self._refused > 0, max(0, self._refused - 1)
            self.connect_errors += refuse
        if refuse:
            raise httpx.ConnectError("connection refused (simulated)", request=request)
        reply = self.stripe.handle(request.method, request.url.raw_path.decode(), dict(request.headers), request.read())
        if reply.drop:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        if reply.hold_seconds:
            raise httpx.ReadTimeout("The read operation timed out (simulated)", request=request)
        headers = {"Content-Type": "application/json", **reply.headers}
        return httpx.Response(reply.status, headers=headers, content=json.dumps(reply.body).encode(), request=request)


def provider_for(transport: InProcessStripe, max_retries: int = 2) -> StripeProvider:
    """The real Stripe adapter on ``transport``; its backoff is not slept (the retries are what is tested)."""
    policy = StripePolicy(max_retries=max_retries, sleep=lambda _s: None, random=lambda: 0.0)
    return StripeProvider(TEST_KEY, base_url=BASE, policy=policy, transport=transport)


def stripe_env() -> dict[str, str]:
    """Settings for ``PAYMENT_PROVIDER=stripe`` (the transport, not this URL, carries the calls)."""
    return {"PAYMENT_PROVIDER": "stripe", "STRIPE_API_BASE": BASE, "STRIPE_API_KEY": TEST_KEY}


def refunds_by_key(stripe: SimulatedStripe) -> dict[str, list[dict[str, Any]]]:
    """The provider's refunds grouped by ``metadata.refund_key``, oldest first (dead ones included)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for refund in stripe.refunds():
        out[refund["metadata"].get("refund_key", "")].append(refund)
    return out


def live(refunds: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in refunds if r["status"] not in DEAD]


def duplicates(stripe: SimulatedStripe) -> dict[str, list[str]]:
    """Refund keys with more than one live refund at the provider: must always be empty."""
    return {k: [r["id"] for r in live(rs)] for k, rs in refunds_by_key(stripe).items() if len(live(rs)) > 1}


def ledger_problems(
    rows: Iterable[dict[str, Any]],
    orders: Iterable[dict[str, Any]],
    stripe: SimulatedStripe,
    *,
    unknown_ok: bool = True,
) -> list[str]:
    """Where the ledger and the provider disagree.

    ``rows``: ledger rows (items with a ``refund_key``); ``orders``: the orders they belong to. Checked:
    no refund key with two live refunds; a SUCCEEDED row has a succeeded refund of its amount under its
    key, with its id; a FAILED row has no live refund; a SETTLING/REQUESTED row has no succeeded one
    unless ``unknown_ok`` (its outcome not yet asked again); every live refund belongs to a row; per
    order ``available + reserved + refunded = total`` and ``refunded`` is the sum of its payment intent's
    succeeded refunds whose rows are SUCCEEDED (the others are outcomes still unknown to the ledger).
    """
    problems = [f"refund key {k} has live refunds {ids}" for k, ids in duplicates(stripe).items()]
    by_key = refunds_by_key(stripe)
    status_of: dict[str, str] = {}
    for row in rows:
        if "refund_key" not in row:
            continue
        key, status = row["refund_key"], row["status"]
        status_of[key] = status
        alive = live(by_key.get(key, []))
        succeeded = [r for r in alive if r["status"] == "succeeded"]
        if status == "SUCCEEDED":
            if [(r["id"], r["amount"]) for r in succeeded] != [(row.get("refund_id"), int(row["amount_cents"]))]:
                problems.append(f"{key} SUCCEEDED ({row.get('refund_id')}) but the provider holds {alive}")
        elif status == "FAILED":
            if alive:
                problems.append(f"{key} FAILED but the provider holds live refunds {alive}")
        elif succeeded and not unknown_ok:
            problems.append(f"{key} {status} but the provider made it: {succeeded}")
        if any(r["amount"] != int(row["amount_cents"]) for r in alive):
            problems.append(f"{key}: a provider refund of another amount than {row['amount_cents']}: {alive}")
    strays = [r["id"] for k, rs in by_key.items() if k not in status_of for r in live(rs)]
    if strays:
        problems.append(f"live provider refunds no ledger row knows: {strays}")
    for order in orders:
        total, available, reserved, refunded = (
            int(order[k]) for k in ("total_cents", "available_cents", "reserved_cents", "refunded_cents")
        )
        if available + reserved + refunded != total or min(available, reserved, refunded) < 0:
            problems.append(f"order {order['order_id']}: {available} + {reserved} + {refunded} != {total}")
        # A refund made but not yet recorded (the process died, or the answer was lost) is the ledger's
        # unknown outcome: it counts once its row is SUCCEEDED.
        paid_back = sum(
            r["amount"]
            for r in stripe.refunds(order.get("payment_intent") or f"pi_demo_{order['order_id']}")
            if r["status"] == "succeeded" and status_of.get(r["metadata"].get("refund_key", "")) == "SUCCEEDED"
        )
        if refunded != paid_back:
            problems.append(f"order {order['order_id']}: refunded {refunded}, the provider refunded {paid_back}")
    return problems
