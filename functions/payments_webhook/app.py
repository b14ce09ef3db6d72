"""PaymentsWebhookFunction: ``POST /webhooks/stripe``, Stripe's refund events. Logic lives in the layer.

No JWT: Stripe cannot send one. The request proves itself by its ``Stripe-Signature`` (refunds/webhooks.py),
verified over the raw body before anything is read from it. A 400 (unsigned, stale, forged) changes
nothing; an error (the secret unreadable, DynamoDB) is raised, so Lambda counts it, API Gateway answers
500 and Stripe delivers the event again later.
"""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from support_agent import snapstart, wiring
from support_agent.api import stripe_webhook
from support_agent.observability import metrics, observed

# With SnapStart: the ledger and its client built before the snapshot; the signing secret is still read on the
# first event (no-op elsewhere).
snapstart.register(prime=wiring.stripe_webhooks)


@observed(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return stripe_webhook.handle(wiring.stripe_webhooks(), event)
