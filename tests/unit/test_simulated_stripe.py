"""The simulated Stripe of `make dev` and the tests, driven by the official `stripe` SDK (16.x) as its client.

What the SDK sends, it must parse; what it answers, the SDK must parse into `Refund`/`ListObject` and turn
into the error classes real Stripe makes it raise. Idempotency and the faults are checked as a client
meets them: through the SDK's own retries (same key), its timeouts, and its view of the headers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import stripe

from devstack.local import _payments
from devstack.parameters import dev_parameters
from devstack.seed import DEMO_DATA, demo_items
from devstack.simulated_stripe import LOCAL_SECRET, TEST_KEY, Fault, SimulatedStripeServer, start
from support_agent.store.customer_data import Order
from support_agent.tools.orders import order_view
from tests.support.threads import run_together

POST, LIST, GET = "POST /v1/refunds", "GET /v1/refunds", "GET /v1/refunds/{id}"


@pytest.fixture
def server() -> Iterator[SimulatedStripeServer]:
    with start() as running:
        yield running


@pytest.fixture(autouse=True)
def quick_sdk_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's backoff (0.5 s at least) made short: the retries themselves are what is under test."""
    monkeypatch.setattr(stripe.HTTPClient, "INITIAL_DELAY", 0.01)
    monkeypatch.setattr(stripe.HTTPClient, "MAX_DELAY", 0.02)


def sdk(
    server: SimulatedStripeServer, retries: int = 0, timeout: float = 10, key: str = "sk_test_unit"
) -> stripe.StripeClient:
    return stripe.StripeClient(
        key,
        base_addresses={"api": server.url},
        max_network_retries=retries,
        http_client=stripe.RequestsClient(timeout=timeout),
    )


def refund(client: stripe.StripeClient, key: str | None, amount: int = 1000, pi: str = "pi_demo_1042") -> Any:
    params = {"payment_intent": pi, "amount": amount, "metadata": {"refund_key": "conv-1:3:toolu_1"}}
    return client.v1.refunds.create(params, {"idempotency_key": key} if key else None)  # type: ignore[arg-type]


def posts(server: SimulatedStripeServer) -> list[Any]:
    return [r for r in server.stripe.requests if r.method == "POST"]


# -- the routes, as the SDK sees them ---------------------------------------------------------------------------------


def test_create_retrieve_and_list_parse_as_sdk_objects(server: SimulatedStripeServer) -> None:
    client = sdk(server)
    made = refund(client, "conv-1:3:toolu_1#1")
    assert isinstance(made, stripe.Refund)
    assert (made.amount, made.currency, made.status, made.payment_intent) == (1000, "usd", "succeeded", "pi_demo_1042")
    assert made.metadata["refund_key"] == "conv-1:3:toolu_1" and made.id.startswith("re_")
    assert client.v1.refunds.retrieve(made.id).to_dict() == made.to_dict()
    listed = client.v1.refunds.list({"payment_intent": "pi_demo_1042"})
    assert isinstance(listed, stripe.ListObject) and [r.id for r in listed.data] == [made.id]
    assert client.v1.refunds.list({"payment_intent": "pi_demo_1043"}).data == []
    sent = posts(server)[0]
    assert sent.fields == (
        ("payment_intent", "pi_demo_1042"),
        ("amount", "1000"),
        ("metadata[refund_key]", "conv-1:3:toolu_1"),
    )
    assert sent.headers["authorization"] == "Bearer sk_test_unit"
    assert sent.headers["idempotency-key"] == "conv-1:3:toolu_1#1" and sent.headers["stripe-version"]
    assert sent.headers["content-type"] == "application/x-www-form-urlencoded"


def test_list_pages_newest_first_and_filters_by_created(server: SimulatedStripeServer) -> None:
    client = sdk(server)
    server.stripe.add_payment_intent("pi_test_big", 100_000)
    made = [refund(client, None, 100, "pi_test_big").id for _ in range(25)]
    refund(client, None, 100, "pi_demo_2001")  # another payment intent: never in the pages below
    pages = client.v1.refunds.list({"payment_intent": "pi_test_big", "limit": 10})
    assert [r.id for r in pages.auto_paging_iter()] == made[::-1]
    cursors = [r.params.get("starting_after") for r in server.stripe.requests if r.method == "GET"]
    assert cursors == [None, made[15], made[5]]  # three pages: 10, 10, 5
    older = client.v1.refunds.list({"payment_intent": "pi_test_big", "limit": 3, "ending_before": made[10]})
    assert [r.id for r in older.data] == [made[13], made[12], made[11]] and older.has_more

    server.stripe.clock.advance(3600)
    since = server.stripe.clock.now()
    late = refund(client, None, 100, "pi_test_big").id
    assert [r.id for r in client.v1.refunds.list({"created": {"gte": since}}).data] == [late]
    assert len(client.v1.refunds.list({"created": {"lt": since}, "limit": 100}).data) == 26


def test_demo_orders_and_payment_intents_agree() -> None:
    data = json.loads(DEMO_DATA.read_text())
    orders = [o for c in data["customers"] for o in c["orders"]]
    stored = {i["order_id"]: i for i in demo_items(data) if i["sk"].startswith("ORDER#")}
    assert {o["order_id"]: stored[o["order_id"]]["payment_intent"] for o in orders} == {
        o["order_id"]: f"pi_demo_{o['order_id']}" for o in orders
    }
    with start() as running:
        intents = {o["order_id"]: running.stripe.ledger.payment_intent(f"pi_demo_{o['order_id']}") for o in orders}
    assert {k: (v.amount, v.currency) for k, v in intents.items() if v} == {
        o["order_id"]: (o["total_cents"], "usd") for o in orders
    }
    # lookup_order shows the model its whitelisted view: the payment intent stays ours.
    assert all("pi_demo" not in json.dumps(order_view(Order.from_item(item))) for item in stored.values())


# -- money: never more than was paid ---------------------------------------------------------------------------------


def test_refusals_raise_the_sdk_error_classes(server: SimulatedStripeServer) -> None:
    client = sdk(server)
    with pytest.raises(stripe.InvalidRequestError) as too_large:
        refund(client, "k-1", amount=18901)
    assert (too_large.value.code, too_large.value.param, too_large.value.http_status) == (
        "amount_too_large",
        "amount",
        400,
    )
    refund(client, "k-2", amount=18900)
    with pytest.raises(stripe.InvalidRequestError) as done:
        refund(client, "k-3", amount=1)
    assert done.value.code == "charge_already_refunded" and done.value.http_status == 400
    with pytest.raises(stripe.InvalidRequestError) as missing:
        refund(client, "k-4", pi="pi_nope")
    assert (missing.value.code, missing.value.param, missing.value.http_status) == (
        "resource_missing",
        "payment_intent",
        404,
    )
    with pytest.raises(stripe.InvalidRequestError) as no_refund:
        client.v1.refunds.retrieve("re_nope")
    assert no_refund.value.code == "resource_missing" and no_refund.value.http_status == 404
    with pytest.raises(stripe.InvalidRequestError) as unknown:
        client.v1.refunds.create({"payment_intent": "pi_demo_1043", "amount_cents": 5})  # type: ignore[arg-type]
    assert (unknown.value.code, unknown.value.param) == ("parameter_unknown", "amount_cents")
    with pytest.raises(stripe.AuthenticationError):
        refund(sdk(server, key="sk_live_real"), "k-5")
    assert [r["amount"] for r in server.stripe.refunds()] == [18900]


def test_a_failed_refund_gives_its_amount_back_and_no_amount_means_what_is_left(server: SimulatedStripeServer) -> None:
    client = sdk(server)
    server.stripe.new_refund_status = "pending"
    pending = refund(client, "k-1", amount=2000, pi="pi_demo_1043")
    assert pending.status == "pending"
    with pytest.raises(stripe.InvalidRequestError, match="unrefunded amount"):
        refund(client, "k-2", amount=501, pi="pi_demo_1043")  # a pending refund holds its amount
    assert server.stripe.settle(pending.id, "failed")["status"] == "failed"
    assert client.v1.refunds.retrieve(pending.id).status == "failed"
    server.stripe.new_refund_status = "succeeded"
    rest = client.v1.refunds.create({"payment_intent": "pi_demo_1043"})
    assert rest.amount == 2500 and rest.status == "succeeded"
    with pytest.raises(ValueError, match="not pending"):
        server.stripe.settle(rest.id, "failed")


def test_a_refund_made_outside_counts_until_it_fails(server: SimulatedStripeServer) -> None:
    client = sdk(server)
    outside = server.stripe.refund_outside("pi_demo_1044", 100, status="pending")
    assert (outside["status"], outside["metadata"]) == ("pending", {})
    with pytest.raises(stripe.InvalidRequestError) as too_large:
        refund(client, "k#1", amount=16000, pi="pi_demo_1044")
    assert too_large.value.code == "amount_too_large"
    assert [r.id for r in client.v1.refunds.list({"payment_intent": "pi_demo_1044"}).data] == [outside["id"]]
    server.stripe.settle(outside["id"], "failed")
    assert refund(client, "k#2", amount=16000, pi="pi_demo_1044").status == "succeeded"
    assert server.stripe.refund_outside("pi_demo_1043", 2500)["status"] == "succeeded"
    with pytest.raises(stripe.InvalidRequestError, match="already been refunded"):
        refund(client, "k#3", amount=1, pi="pi_demo_1043")


def test_settle_a_pending_refund(server: SimulatedStripeServer) -> None:
    client = sdk(server)
    server.stripe.new_refund_status = "pending"
    made = refund(client, "k-1")
    server.stripe.settle(made.id, "succeeded")
    assert client.v1.refunds.retrieve(made.id).status == "succeeded"
    assert server.stripe.ledger.refunded("pi_demo_1042") == 1000


# -- idempotency, API v1 -----------------------------------------------------------------------------------------------


def test_the_same_key_replays_the_first_answer(server: SimulatedStripeServer) -> None:
    client = sdk(server)
    first, second = refund(client, "k#1"), refund(client, "k#1")
    assert first.id == second.id and len(server.stripe.refunds()) == 1
    assert "idempotent-replayed" not in {k.lower() for k in first.last_response.headers}
    assert second.last_response.headers["Idempotent-Replayed"] == "true"
    assert second.last_response.headers["Original-Request"] == first.last_response.request_id
    assert second.last_response.request_id != first.last_response.request_id
    # a refusal once the endpoint ran is saved too, even when what is left changes
    with pytest.raises(stripe.InvalidRequestError):
        refund(client, "k#2", amount=18001)
    server.stripe.add_payment_intent("pi_demo_1042", 50_000)  # more left now: the key still answers the refusal
    with pytest.raises(stripe.InvalidRequestError) as replayed:
        refund(client, "k#2", amount=18001)
    assert replayed.value.code == "amount_too_large" and replayed.value.headers["Idempotent-Replayed"] == "true"


def test_the_same_key_with_other_parameters_is_an_idempotency_error(server: SimulatedStripeServer) -> None:
    client = sdk(server)
    refund(client, "k#1", amount=1000)
    with pytest.raises(stripe.IdempotencyError) as error:
        refund(client, "k#1", amount=1001)
    assert error.value.http_status == 400 and error.value.error.type == "idempotency_error"
    # keys are scoped per API key: another key's "k#1" is a request of its own
    assert refund(sdk(server, key="sk_test_other"), "k#1", amount=1001).amount == 1001
    assert sorted(r["amount"] for r in server.stripe.refunds()) == [1000, 1001]


def test_keys_are_forgotten_after_24_hours(server: SimulatedStripeServer) -> None:
    client = sdk(server)
    server.stripe.inject(POST, Fault.ERROR_BEFORE)
    for _ in range(2):  # the saved 500, then its replay: no refund
        with pytest.raises(stripe.APIError):
            refund(client, "k#1")
    assert server.stripe.refunds() == []
    server.stripe.clock.advance(24 * 3600 - 1)
    with pytest.raises(stripe.APIError):
        refund(client, "k#1")
    server.stripe.clock.advance(1)
    assert refund(client, "k#1").status == "succeeded" and len(server.stripe.refunds()) == 1


def test_a_concurrent_request_with_the_key_is_409_and_the_sdk_retries_it(server: SimulatedStripeServer) -> None:
    server.stripe.inject(POST, Fault.SLOW, hold_seconds=0.5)
    results: dict[str, Any] = {}
    first = threading.Thread(target=lambda: results.setdefault("first", refund(sdk(server), "k#1")))
    first.start()
    deadline = time.monotonic() + 5
    while not server.stripe.idempotency.in_flight("sk_test_unit", "k#1") and time.monotonic() < deadline:
        time.sleep(0.005)
    with pytest.raises(stripe.APIError) as in_use:
        refund(sdk(server), "k#1")
    assert in_use.value.http_status == 409 and in_use.value.error.code == "idempotency_key_in_use"
    retried = refund(sdk(server, retries=100), "k#1")  # the SDK retries 409 with the same key until the replay
    first.join()
    assert retried.id == results["first"].id and len(server.stripe.refunds()) == 1


def test_ten_concurrent_requests_with_one_key_make_one_refund(server: SimulatedStripeServer) -> None:
    server.stripe.inject(POST, Fault.SLOW, hold_seconds=0.3)
    ids: list[str] = []
    run_together([lambda: ids.append(refund(sdk(server, retries=100), "k#1").id)] * 10, timeout=None)
    assert len(ids) == 10 and len(set(ids)) == 1 and len(server.stripe.refunds()) == 1
    assert any(r.status == 409 for r in posts(server))


# -- faults ----------------------------------------------------------------------------------------------------------


def test_a_500_after_the_refund_is_saved_and_replayed(server: SimulatedStripeServer) -> None:
    server.stripe.inject(POST, Fault.ERROR_AFTER)
    with pytest.raises(stripe.APIError) as error:
        refund(sdk(server, retries=1), "k#1")  # the SDK retries the 500 with the same key and gets it again
    assert error.value.http_status == 500 and error.value.headers["Idempotent-Replayed"] == "true"
    assert [(r.status, r.replayed) for r in posts(server)] == [(500, False), (500, True)]
    made = server.stripe.refunds("pi_demo_1042")
    assert len(made) == 1 and made[0]["metadata"] == {"refund_key": "conv-1:3:toolu_1"}  # what a find matches


def test_a_500_before_the_refund_is_saved_too(server: SimulatedStripeServer) -> None:
    server.stripe.inject(POST, Fault.ERROR_BEFORE, should_retry=False)
    with pytest.raises(stripe.APIError) as error:
        refund(sdk(server, retries=3), "k#1")  # Stripe-Should-Retry: false stops the SDK at once
    assert error.value.headers["Stripe-Should-Retry"] == "false" and len(posts(server)) == 1
    with pytest.raises(stripe.APIError) as replayed:
        refund(sdk(server), "k#1")
    assert replayed.value.headers["Idempotent-Replayed"] == "true" and server.stripe.refunds() == []


def test_a_429_and_an_edge_500_are_not_saved(server: SimulatedStripeServer) -> None:
    client = sdk(server)
    server.stripe.inject(POST, Fault.RATE_LIMIT)
    with pytest.raises(stripe.RateLimitError) as limited:
        refund(client, "k#1")
    assert limited.value.http_status == 429 and limited.value.error.code == "rate_limit"
    server.stripe.inject(POST, Fault.ERROR_UNSAVED)
    with pytest.raises(stripe.APIError):
        refund(client, "k#1")
    made = refund(client, "k#1")  # the key was never used: this request runs
    assert "Idempotent-Replayed" not in made.last_response.headers and len(server.stripe.refunds()) == 1
    server.stripe.inject(POST, Fault.RATE_LIMIT, times=2, should_retry=True)  # the SDK honours the header
    assert refund(sdk(server, retries=2), "k#2").status == "succeeded"
    assert server.stripe.faults.pending() == 0 and len(server.stripe.refunds()) == 2


def test_a_timeout_after_the_refund_then_the_same_key_gets_it(server: SimulatedStripeServer) -> None:
    server.stripe.inject(POST, Fault.TIMEOUT_AFTER, hold_seconds=3)
    with pytest.raises(stripe.APIConnectionError):
        refund(sdk(server, timeout=0.3), "k#1")
    assert len(server.stripe.refunds()) == 1  # made, though the client never heard
    again = refund(sdk(server), "k#1")
    assert again.id == server.stripe.refunds()[0]["id"] and again.last_response.headers["Idempotent-Replayed"] == "true"
    server.stripe.inject(POST, Fault.TIMEOUT_AFTER, hold_seconds=3)
    through = refund(sdk(server, retries=1, timeout=0.3), "k#2", amount=500)  # the SDK's own retry, same key
    assert through.amount == 500 and len(server.stripe.refunds()) == 2


def test_a_dropped_connection_after_the_refund(server: SimulatedStripeServer) -> None:
    server.stripe.inject(POST, Fault.DROP_AFTER)
    with pytest.raises(stripe.APIConnectionError):
        refund(sdk(server), "k#1")
    again = refund(sdk(server), "k#1")
    assert again.last_response.headers["Idempotent-Replayed"] == "true" and len(server.stripe.refunds()) == 1


def test_faults_on_the_read_routes(server: SimulatedStripeServer) -> None:
    client = sdk(server)
    made = refund(client, "k#1")
    server.stripe.inject(GET, Fault.RATE_LIMIT)
    with pytest.raises(stripe.RateLimitError):
        client.v1.refunds.retrieve(made.id)
    server.stripe.inject(LIST, Fault.ERROR_AFTER, times=2)
    for _ in range(2):
        with pytest.raises(stripe.APIError):
            client.v1.refunds.list({"payment_intent": "pi_demo_1042"})
    assert [r.id for r in client.v1.refunds.list({"payment_intent": "pi_demo_1042"}).data] == [made.id]
    with pytest.raises(ValueError, match="unknown route"):
        server.stripe.inject("POST /v1/charges", Fault.ERROR_AFTER)


def test_reset_forgets_refunds_keys_faults_and_requests_but_keeps_the_payment_intents(
    server: SimulatedStripeServer,
) -> None:
    client = sdk(server)
    made = refund(client, "k#1", amount=18900)
    server.stripe.new_refund_status = "pending"
    server.stripe.inject(POST, Fault.ERROR_AFTER, times=2)
    server.stripe.clock.advance(3600)
    server.stripe.reset()
    assert server.stripe.refunds() == [] and server.stripe.requests == [] and server.stripe.faults.pending() == 0
    assert abs(server.stripe.clock.now() - time.time()) < 5
    again = refund(client, "k#1", amount=18900)  # the key is new again, and the whole amount is refundable
    assert again.status == "succeeded" and again.id != made.id
    assert "Idempotent-Replayed" not in again.last_response.headers
    assert [(r.status, r.replayed, r.fault) for r in server.stripe.requests] == [(200, False, None)]
    intents = {f"pi_demo_{o}" for o in (1042, 1043, 1044, 1045, 2001, 2002)}
    assert {i for i in intents if server.stripe.ledger.payment_intent(i)} == intents


# -- the wire, without the SDK ---------------------------------------------------------------------------------------


def test_auth_form_encoding_and_unknown_routes(server: SimulatedStripeServer) -> None:
    http = httpx.Client(base_url=server.url, timeout=5)
    form = {"payment_intent": "pi_demo_1044", "amount": "100"}
    missing = http.post("/v1/refunds", data=form)
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "invalid_request_error"
    assert http.post("/v1/refunds", data=form, auth=("sk_test_curl", "")).status_code == 200  # curl -u sk_test_…:
    as_json = http.post("/v1/refunds", json=form, headers={"Authorization": f"Bearer {TEST_KEY}"})
    assert as_json.status_code == 400 and "form-encoded" in as_json.json()["error"]["message"]
    unknown = http.get("/v1/charges", headers={"Authorization": f"Bearer {TEST_KEY}"})
    assert unknown.status_code == 404 and "Unrecognized request URL" in unknown.json()["error"]["message"]
    assert len(server.stripe.refunds()) == 1


# -- make dev ---------------------------------------------------------------------------------------------------------


def test_make_dev_starts_it_unless_stripe_is_configured() -> None:
    overrides: dict[str, str] = {}
    configured = {"STRIPE_API_BASE": "https://api.stripe.com", "STRIPE_API_KEY": "sk_test_mine"}
    assert _payments(configured, overrides) is None and overrides == configured
    overrides = {}
    simulated = _payments({"STRIPE_API_KEY": "sk_test_mine"}, overrides)  # both or nothing
    assert simulated is not None
    try:
        assert overrides == {
            "STRIPE_API_BASE": simulated.url,
            "STRIPE_API_KEY": TEST_KEY,
            "STRIPE_WEBHOOK_SECRET": LOCAL_SECRET,  # what its webhooks are signed with
        }
        # PAYMENT_PROVIDER comes from the template parameter make dev deploys: stripe, unless PARAMS says none
        assert dev_parameters({})["PaymentProvider"] == "stripe"
        assert dev_parameters({}, {"PaymentProvider": "none"})["PaymentProvider"] == "none"
        client = stripe.StripeClient(TEST_KEY, base_addresses={"api": simulated.url}, max_network_retries=0)
        assert client.v1.refunds.create({"payment_intent": "pi_demo_1042", "amount": 18900}).status == "succeeded"
    finally:
        simulated.stop()
