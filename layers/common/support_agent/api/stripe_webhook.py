"""``POST /webhooks/stripe`` at the HTTP edge: an API Gateway (payload 2.0) event in, its proxy response out.

The body is taken RAW: the bytes Stripe signed (API Gateway base64-encodes it when ``isBase64Encoded``); it is
never re-serialised. What the event says is applied by refunds/webhooks.py; here only the request's shape is
checked (as every route checks it, api/http.py) and the answer rendered, a refusal in the error contract
(contract.py). The function's handler is functions/payments_webhook/app.py.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from support_agent.errors import InvalidRequest, TooLarge

if TYPE_CHECKING:
    from support_agent.refunds.webhooks import StripeWebhooks, WebhookResult

logger = logging.getLogger(__name__)

# A refund event is a few kB; far above that is not Stripe's.
MAX_BODY_BYTES = 256 * 1024


def handle(webhooks: StripeWebhooks, event: Mapping[str, Any]) -> dict[str, Any]:
    """The response to one webhook request: 200 with what was done, 400 (or 413) when it is not provably Stripe's
    or not an event; anything else (the secret unreadable, DynamoDB) is raised, so Stripe delivers it again."""
    # On the first request, not at import: the resolver api/http.py loads is no part of this function's cold start.
    from support_agent.api.http import body_problem
    from support_agent.contract import error_body, status_and_code

    try:
        payload = raw_body(event)
        problem = body_problem(dict(event))  # the shape every route refuses alike (api/http.py)
        if problem is not None:
            raise InvalidRequest(problem)
        header = _header(event.get("headers") or {}, "stripe-signature")
        result = webhooks.receive(payload, header)
    except (InvalidRequest, TooLarge) as exc:
        logger.warning("webhook refused", extra={"reason": exc.kind, "detail": exc.message})
        return _response(status_and_code(exc)[0], error_body(exc))
    return _response(200, answer(result))


def answer(result: WebhookResult) -> dict[str, Any]:
    """What Stripe is answered: that the event was received, and what became of it."""
    out: dict[str, Any] = {"received": True, "outcome": result.outcome, "eventId": result.event_id}
    if result.refund_id:
        out["refundId"] = result.refund_id
    if result.ledger_status:
        out["ledgerStatus"] = result.ledger_status
    return out


def raw_body(event: Mapping[str, Any]) -> bytes:
    """The request body as sent: API Gateway base64-encodes non-text bodies (``isBase64Encoded``)."""
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        try:
            data = base64.b64decode(body, validate=True)
        except ValueError:
            raise InvalidRequest("body: invalid base64") from None
    else:
        data = str(body).encode("utf-8")
    if len(data) > MAX_BODY_BYTES:
        raise TooLarge(f"request body is larger than {MAX_BODY_BYTES} bytes")
    return data


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == name), None)
    return None if value is None else str(value)


def _response(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"statusCode": status, "headers": {"Content-Type": "application/json"}, "body": json.dumps(body)}
