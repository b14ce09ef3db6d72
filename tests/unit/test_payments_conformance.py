"""Our Stripe requests equal what the official `stripe` SDK (16.x) sends for the same call.

Both talk to one local HTTP server that records every request: method, path, parsed form or query,
and the ``Authorization``, ``Idempotency-Key``, ``Stripe-Version`` and ``Content-Type`` headers must
match. The SDK is given no ``stripe_version``, so this also pins ours to the SDK's own default.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import stripe

from support_agent.refunds.keys import attempt_key
from support_agent.refunds.provider.port import RefundAttempt
from support_agent.refunds.provider.stripe import STRIPE_VERSION, StripeProvider
from support_agent.refunds.provider.stripe_retry import StripePolicy

KEY = "sk_test_conformance"
PI = "pi_demo_1042"
REFUND_KEY = "apr_01JZ0000000000000000000000"
ATTEMPT = attempt_key(REFUND_KEY, 2)
HEADERS = ("authorization", "idempotency-key", "stripe-version", "content-type")
REFUND = {
    "id": "re_1",
    "object": "refund",
    "amount": 18900,
    "currency": "usd",
    "payment_intent": PI,
    "status": "succeeded",
    "metadata": {"refund_key": REFUND_KEY},
}


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    fields: dict[str, str]  # the form of a POST, the query of a GET
    headers: dict[str, str]


class Recorder(BaseHTTPRequestHandler):
    seen: list[Seen]

    def _record(self) -> None:
        url = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
        fields = dict(parse_qsl(body if self.command == "POST" else url.query, keep_blank_values=True))
        headers = {h: self.headers[h] for h in HEADERS if self.headers[h] is not None}
        self.seen.append(Seen(self.command, url.path, fields, headers))
        listing = self.command == "GET" and url.path == "/v1/refunds"
        payload = {"object": "list", "url": "/v1/refunds", "data": [REFUND], "has_more": False} if listing else REFUND
        raw = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = _record

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[Seen]]]:
    seen: list[Seen] = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def clients(url: str) -> tuple[StripeProvider, stripe.StripeClient]:
    ours = StripeProvider(KEY, base_url=url, policy=StripePolicy(max_retries=0))
    sdk = stripe.StripeClient(KEY, base_addresses={"api": url}, max_network_retries=0)
    return ours, sdk


def test_the_pinned_version_is_the_sdks() -> None:
    assert stripe.VERSION.startswith("16.")
    assert stripe.api_version == STRIPE_VERSION


def test_refund_request_equals_the_sdks(server: tuple[str, list[Seen]]) -> None:
    url, seen = server
    ours, sdk = clients(url)
    meta = {"approval_id": REFUND_KEY, "customer_id": "7"}
    ours.refund(RefundAttempt(ATTEMPT, PI, 18900, "usd", meta))
    sdk.v1.refunds.create(
        params={"payment_intent": PI, "amount": 18900, "metadata": {**meta, "refund_key": REFUND_KEY, "attempt": "2"}},
        options={"idempotency_key": ATTEMPT},
    )
    mine, theirs = seen
    assert mine == theirs
    assert (mine.method, mine.path, mine.fields["metadata[refund_key]"]) == ("POST", "/v1/refunds", REFUND_KEY)
    assert set(mine.headers) == set(HEADERS)  # every compared header is there, not absent on both sides


def test_retrieve_and_list_requests_equal_the_sdks(server: tuple[str, list[Seen]]) -> None:
    url, seen = server
    ours, sdk = clients(url)
    ours.retrieve("re_1")
    sdk.v1.refunds.retrieve("re_1")
    ours.find(REFUND_KEY, PI)
    sdk.v1.refunds.list(params={"payment_intent": PI, "limit": 100})
    my_get, their_get, my_list, their_list = seen
    assert my_get == their_get and (my_get.method, my_get.path) == ("GET", "/v1/refunds/re_1")
    assert my_list == their_list and my_list.fields == {"payment_intent": PI, "limit": "100"}
    assert {"authorization", "stripe-version"} <= set(my_get.headers)


def test_listing_by_creation_time_equals_the_sdks(server: tuple[str, list[Seen]]) -> None:
    """Reconciliation's ``GET /v1/refunds?created[gte]=…`` and the per-intent listing, as the SDK sends them."""
    url, seen = server
    ours, sdk = clients(url)
    since = 1_790_000_000
    assert [r.id for r in ours.list_created_since(since)] == ["re_1"]
    sdk.v1.refunds.list(params={"created": {"gte": since}, "limit": 100})
    assert [r.id for r in ours.list_for_intent(PI)] == ["re_1"]
    sdk.v1.refunds.list(params={"payment_intent": PI, "limit": 100})
    my_created, their_created, my_intent, their_intent = seen
    assert my_created == their_created
    assert (my_created.method, my_created.path) == ("GET", "/v1/refunds")
    assert my_created.fields == {"created[gte]": str(since), "limit": "100"}
    assert my_intent == their_intent and my_intent.fields == {"payment_intent": PI, "limit": "100"}
