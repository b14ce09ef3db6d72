"""Issue 14's "done when", through `make dev`'s stack: refunds move money at the simulated Stripe, once.

* the lead approves 1042 (the demo's 18900): the simulated Stripe holds exactly one refund of 18900 for
  ``pi_demo_1042``, and the approval view shows its id in ``refund.refundId``;
* ten concurrent approvals of one approval make one provider refund;
* a direct refund of 2000 on 1043 reaches Stripe once, also when the first answer was a 500 saved after the
  refund was made, or a timeout (the answer held past the adapter's read timeout).

Each check also holds the ledger to the provider: the order's refunded cents equal what Stripe refunded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import httpx
import pytest

from devstack.demo import run, succeeded
from devstack.local import REGION, LocalStack, banner
from devstack.simulated_stripe import Fault, SimulatedStripe, SimulatedStripeServer
from tests.support.threads import run_together

POST = "POST /v1/refunds"
APPROVAL_DONE = ("REFUNDED", "FAILED")


@dataclass
class Stack:
    """The running stack as a client sees it, plus the simulated Stripe and the order table behind it."""

    local: LocalStack
    http: httpx.Client

    @property
    def stripe_server(self) -> SimulatedStripeServer:
        assert self.local.stripe is not None, "make dev runs the simulated Stripe when STRIPE_* are not set"
        return self.local.stripe

    @property
    def stripe(self) -> SimulatedStripe:
        return self.stripe_server.stripe

    def customer(self, customer_id: int) -> dict[str, str]:
        token = next(c["token"] for c in self.local.tokens["customers"] if c["customerId"] == customer_id)
        return {"Authorization": f"Bearer {token}"}

    @property
    def lead(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.local.tokens['leads'][0]['token']}"}

    def chat(self, customer_id: int, message: str) -> dict[str, Any]:
        """The turn's answer. A turn past SyncTurnSeconds (a 13 s Stripe hold on a loaded machine) is handed to the
        worker and answered 202, as the product does: its record is followed until it completed, whose ``response``
        is the very body a 200 would have carried."""
        resp = self.http.post("/api/chat", json={"message": message}, headers=self.customer(customer_id))
        if resp.status_code == 202:
            return self._finished(resp.headers["Location"], customer_id)
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def _finished(self, location: str, customer_id: int, timeout: float = 90.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            view = self.http.get(location, headers=self.customer(customer_id)).json()
            if view.get("status") != "running" or time.monotonic() > deadline:
                break
            time.sleep(1.0)  # well within the customer's ReadsPerMinute
        assert view.get("status") == "completed", view
        return dict(view["response"])

    def approval(self, approval_id: str) -> dict[str, Any]:
        resp = self.http.get(f"/api/approvals/{approval_id}", headers=self.lead)
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def await_approval(self, approval_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """The approval once RefundFlow finished with it (REFUNDED or FAILED)."""
        deadline = time.monotonic() + timeout
        approval = self.approval(approval_id)
        while approval["status"] not in APPROVAL_DONE and time.monotonic() < deadline:
            time.sleep(0.25)
            approval = self.approval(approval_id)
        return approval

    def money(self, customer_id: int, order_id: int) -> tuple[int, int, int]:
        """(available, reserved, refunded) of the order, read consistently from the table."""
        session = boto3.Session(region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")
        ddb = session.client("dynamodb", endpoint_url=self.local.moto_url)
        item = ddb.get_item(
            TableName=self.local.stack.physical_ids["CustomerDataTable"],
            Key={"customer_id": {"N": str(customer_id)}, "sk": {"S": f"ORDER#{order_id}"}},
            ConsistentRead=True,
        )["Item"]
        return tuple(int(item[f"{k}_cents"]["N"]) for k in ("available", "reserved", "refunded"))  # type: ignore[return-value]

    def executions(self, approval_id: str) -> list[str]:
        """The names of RefundFlow's executions for the approval (``<id>``, then ``<id>-r<n>`` per retry)."""
        session = boto3.Session(region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")
        sfn = session.client("stepfunctions", endpoint_url=self.local.moto_url)
        arn = self.local.stack.state_machine_arn("RefundFlow")
        pages = sfn.get_paginator("list_executions").paginate(stateMachineArn=arn)
        return sorted(e["name"] for page in pages for e in page["executions"] if e["name"].startswith(approval_id))

    def refund_posts(self, payment_intent: str) -> list[Any]:
        return [
            r
            for r in self.stripe.requests
            if r.method == "POST" and r.path == "/v1/refunds" and r.params.get("payment_intent") == payment_intent
        ]


def tool_results(turn: dict[str, Any], name: str) -> list[Any]:
    return [c["result"] for it in turn["trace"] for c in it["toolCalls"] if c["name"] == name]


@pytest.fixture
def stack(seeded_stack: LocalStack) -> Iterator[Stack]:
    with httpx.Client(base_url=seeded_stack.url, timeout=90) as http:
        yield Stack(seeded_stack, http)


def test_make_dev_deploys_stripe_for_every_function_that_refunds(stack: Stack) -> None:
    """PAYMENT_PROVIDER=stripe and the simulated Stripe's address in the deployed environment (what
    `sam local` gets too), the test key given to the workers."""
    refunders = [
        name
        for name, resource in stack.local.stack.sam_template["Resources"].items()
        if "PAYMENT_PROVIDER" in resource.get("Properties", {}).get("Environment", {}).get("Variables", {})
    ]
    assert {"ChatFunction", "ApprovalsFunction", "PaymentsFunction"} <= set(refunders)
    url = stack.stripe_server.url
    for name in refunders:
        env = stack.local.stack.function_env(name)
        assert (env["PAYMENT_PROVIDER"], env["STRIPE_API_BASE"]) == ("stripe", url), name
    assert f"payments       simulated Stripe on {url} (PAYMENT_PROVIDER=stripe)" in banner(stack.local)


def test_lead_approves_1042_and_stripe_holds_one_refund_whose_id_the_approval_shows(stack: Stack) -> None:
    printed: list[str] = []
    outcome = run(stack.local, printed.append)  # make demo's scenario: the chat, then lead-1 approves
    approval = outcome["approval"]
    assert approval is not None and approval["status"] == "REFUNDED", printed
    approval_id = approval["approvalId"]

    (made,) = stack.stripe.refunds("pi_demo_1042")
    assert (made["amount"], made["currency"], made["status"]) == (18900, "usd", "succeeded")
    assert made["metadata"]["refund_key"] == approval_id  # an approved refund's key is its approval id
    assert stack.stripe.refunds() == [made]  # nothing else anywhere
    assert {r.headers["idempotency-key"] for r in stack.refund_posts("pi_demo_1042")} == {f"{approval_id}#1"}

    view = stack.approval(approval_id)
    assert view["refund"]["refundId"] == made["id"]
    assert (view["refund"]["provider"], view["refund"]["status"]) == ("stripe", "SUCCEEDED")  # the ledger row
    assert stack.money(7, 1042) == (0, 0, 18900)  # the ledger agrees with the provider
    # make demo prints the provider's refund id, and counts the run as a success only with one
    assert f"refund at stripe: {made['id']} (SUCCEEDED)" in printed and succeeded(outcome, "stripe")


def test_ten_concurrent_approvals_of_one_approval_make_one_provider_refund(stack: Stack) -> None:
    turn = stack.chat(7, "Please refund order 1044.")  # 16000: over the threshold, a PENDING approval
    (pending,) = tool_results(turn, "request_refund")
    assert pending["status"] == "PENDING_APPROVAL", pending
    approval_id = pending["approval_id"]
    # The refund's call to Stripe takes a second, so the approvals arrive while it runs (APPROVED/SETTLING).
    stack.stripe.inject(POST, Fault.SLOW, hold_seconds=1.0)

    go = threading.Barrier(10)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def approve() -> None:
        with httpx.Client(base_url=stack.local.url, timeout=90) as http:
            go.wait()
            resp = http.post(f"/api/approvals/{approval_id}/approve", headers=stack.lead)
        with lock:
            answers.append(resp)

    run_together([approve] * 10, timeout=None)

    assert sorted({r.status_code for r in answers}) in ([200], [202], [200, 202]), [r.text for r in answers]
    assert all(r.json()["approvalId"] == approval_id for r in answers)
    approval = stack.await_approval(approval_id)
    assert approval["status"] == "REFUNDED", approval

    assert stack.stripe.faults.pending() == 0  # the slow call was the flow's
    (made,) = stack.stripe.refunds("pi_demo_1044")
    assert (made["amount"], made["metadata"]["refund_key"]) == (16000, approval_id)
    assert approval["refund"]["refundId"] == made["id"]
    assert {r.headers["idempotency-key"] for r in stack.refund_posts("pi_demo_1044")} == {f"{approval_id}#1"}
    assert stack.money(7, 1044) == (0, 0, 16000)
    assert stack.executions(approval_id) == [approval_id]  # one RefundFlow run: the others found it started


# The answer held longer than the adapter's read timeout (STRIPE_READ_TIMEOUT, 10 s by default).
TIMEOUT_HOLD_SECONDS = 13.0


@pytest.mark.parametrize(
    "fault",
    [None, Fault.ERROR_AFTER, Fault.TIMEOUT_AFTER],
    ids=["no-fault", "500-saved-after-the-refund", "timeout-after-the-refund"],
)
def test_a_direct_refund_of_2000_on_1043_reaches_stripe_once(stack: Stack, fault: Fault | None) -> None:
    if fault is not None:
        stack.stripe.inject(POST, fault, hold_seconds=TIMEOUT_HOLD_SECONDS)
    turn = stack.chat(7, "Please refund $20 on order 1043.")
    (answer,) = tool_results(turn, "request_refund")

    (made,) = stack.stripe.refunds("pi_demo_1043")  # one refund, whatever the first answer was
    assert (made["amount"], made["status"]) == (2000, "succeeded")
    assert answer["status"] == "REFUNDED" and answer["refund_id"] == made["id"], answer
    assert stack.stripe.refunds() == [made]

    posts = stack.refund_posts("pi_demo_1043")
    # Every request for the refund was one attempt, sent byte for byte again: one key, one body.
    assert {r.headers["idempotency-key"] for r in posts} == {made["metadata"]["refund_key"] + "#1"}
    assert len({r.fields for r in posts}) == 1
    assert [r.fault for r in posts][:1] == [fault]
    if fault is not None:
        assert len(posts) >= 2 and all(r.replayed for r in posts[1:])  # the retries got the saved answer
    assert stack.money(7, 1043) == (500, 0, 2000)

    view = stack.http.get(f"/api/conversations/{turn['conversationId']}", headers=stack.customer(7)).json()
    listed = [r for r in view["refunds"] if r["orderId"] == 1043]
    assert [r["status"] for r in listed] == ["REFUNDED"], view["refunds"]
