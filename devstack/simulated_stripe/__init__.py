"""A simulated Stripe for the local stack and the tests: Stripe API v1's refund routes over HTTP.

``make dev`` starts it unless both ``STRIPE_API_BASE`` and ``STRIPE_API_KEY`` are set, and hands its URL
and a test key to the functions. The official ``stripe`` SDK is its reference client
(``tests/unit/test_simulated_stripe.py``): what the SDK sends, it parses; what it answers, the SDK parses,
and raises the same error classes real Stripe makes it raise.

The routes: ``POST /v1/refunds`` (form-encoded: ``payment_intent`` or ``charge``, ``amount``,
``metadata[...]``, ``reason``…; unknown parameters refused), ``GET /v1/refunds/{id}``, and ``GET
/v1/refunds`` filtered by ``payment_intent``, ``charge`` and ``created`` (``created[gte]=…``), newest first,
paginated with ``limit``/``starting_after``/``ending_before`` and ``has_more``. Auth is ``Authorization:
Bearer sk_test_…`` (Basic too, as ``curl -u``); any other key is a 401. Errors are Stripe's body,
``{"error": {"type", "code", "message", "param"}}``: ``resource_missing`` (404), ``amount_too_large`` and
``charge_already_refunded`` (400: never more refunded than was paid; a failed or canceled refund gives its
amount back), ``parameter_*`` (400), ``rate_limit`` (429), ``api_error`` (500).

Idempotency is API v1's (``idempotency``): the first answer for a key is saved once the endpoint began —
a 500 and a refusal included — and replayed with ``Idempotent-Replayed: true`` and ``Original-Request``
for 24 hours of simulated time (``clock.advance``); the same key with other parameters is a 400
``idempotency_error``; a request while one with the key is running is a 409 ``idempotency_key_in_use``;
validation failures and 429s are not saved. Keys are scoped per API key.

Faults (``inject(route, fault, times=1, hold_seconds=5, should_retry=None)``, consumed one per request
on that route): a 429; a 500 not saved (Stripe's edge) or saved, before or after the refund is made; the
refund made, then the answer held past the client's read timeout or the connection dropped; a request
held before it runs (its key in flight). New refunds are ``succeeded``, or ``pending`` with
``new_refund_status = "pending"`` until a test calls ``settle(refund_id, status)``. ``requests`` records
every request (fields, headers, status, replayed, fault) for tests to compare. ``reset()`` forgets the
refunds, saved keys, queued faults and the request log, keeping the payment intents (the e2e tests' reset to
the seed data calls it).

Webhooks (``webhooks``, ``WebhookSender``): once configured with an endpoint and a signing secret, every
refund change is sent as Stripe sends it — ``refund.updated`` and ``charge.refund.updated`` (and
``refund.failed``), signed — on a background thread after the API answer; on request duplicated,
reordered, badly signed, or not delivered at all. ``fail_late(refund_id, reason)`` fails a succeeded refund.

Payment intents: ``pi_demo_<order id>`` for every demo order, for its total (``seed_demo``), plus
``add_payment_intent(id, amount)``. Run it alone with ``python -m devstack.simulated_stripe``.
"""

from devstack.simulated_stripe.api import Recorded, SimulatedStripe
from devstack.simulated_stripe.faults import ROUTES, Fault
from devstack.simulated_stripe.ledger import Clock
from devstack.simulated_stripe.server import TEST_KEY, SimulatedStripeServer, main, start
from devstack.simulated_stripe.webhooks import LOCAL_SECRET, WebhookSender

__all__ = [
    "LOCAL_SECRET",
    "ROUTES",
    "TEST_KEY",
    "Clock",
    "Fault",
    "Recorded",
    "SimulatedStripe",
    "SimulatedStripeServer",
    "WebhookSender",
    "main",
    "start",
]
