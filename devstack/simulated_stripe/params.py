"""The refund routes' parameters, checked as Stripe checks them before anything runs (a 400, never saved)."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from devstack.simulated_stripe.ledger import RefundRequest
from devstack.simulated_stripe.wire import StripeError, positive_int

CREATE_PARAMS = frozenset(
    {
        "amount",
        "charge",
        "currency",
        "customer",
        "expand",
        "instructions_email",
        "metadata",
        "origin",
        "payment_intent",
        "reason",
        "refund_application_fee",
        "reverse_transfer",
    }
)
LIST_PARAMS = frozenset({"charge", "created", "ending_before", "expand", "limit", "payment_intent", "starting_after"})
REASONS = ("duplicate", "fraudulent", "requested_by_customer")
COMPARE = {"eq": operator.eq, "gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le}
METADATA_KEYS, METADATA_KEY_LENGTH, METADATA_VALUE_LENGTH = 50, 40, 500


def _only(params: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for name in params:
        if name not in allowed:
            raise StripeError(400, f"Received unknown parameter: {name}", code="parameter_unknown", param=name)


def _string(params: Mapping[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise StripeError(400, f"Invalid string: {name}", code="parameter_invalid_string", param=name)
    return value


def _metadata(raw: Any) -> dict[str, str]:
    """Stripe's limits: 50 keys of at most 40 characters, values of at most 500; an empty value is no key."""
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, dict):
        raise StripeError(400, "Invalid object", code="parameter_invalid", param="metadata")
    metadata = {k: v for k, v in raw.items() if v != ""}
    if len(metadata) > METADATA_KEYS:
        raise StripeError(400, f"Metadata can have at most {METADATA_KEYS} keys.", param="metadata")
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_LENGTH:
            raise StripeError(
                400, f"Metadata keys can be at most {METADATA_KEY_LENGTH} characters.", param=f"metadata[{key}]"
            )
        if len(value) > METADATA_VALUE_LENGTH:
            raise StripeError(
                400, f"Metadata values can be at most {METADATA_VALUE_LENGTH} characters.", param=f"metadata[{key}]"
            )
    return metadata


def refund_request(params: Mapping[str, Any]) -> RefundRequest:
    _only(params, CREATE_PARAMS)
    payment_intent, charge = _string(params, "payment_intent"), _string(params, "charge")
    if payment_intent is None and charge is None:
        raise StripeError(
            400,
            "One of the following params should be provided for this request: payment_intent or charge.",
            code="parameter_missing",
        )
    reason = _string(params, "reason")
    if reason is not None and reason not in REASONS:
        raise StripeError(
            400, f"Invalid reason: must be one of {', '.join(REASONS)}", code="parameter_invalid", param="reason"
        )
    currency = _string(params, "currency")
    return RefundRequest(
        payment_intent=payment_intent,
        charge=charge,
        amount=positive_int(params, "amount"),
        currency=currency.lower() if currency else None,
        reason=reason,
        metadata=_metadata(params.get("metadata")),
    )


def _created(raw: Any) -> dict[str, int]:
    """``created=N`` (exactly) or ``created[gte]=N`` and friends, as operator → seconds."""
    bounds = {"eq": raw} if isinstance(raw, str) else dict(raw)
    out = {}
    for op, value in bounds.items():
        if op not in COMPARE:
            raise StripeError(400, f"Received unknown parameter: created[{op}]", code="parameter_unknown")
        if not isinstance(value, str) or not value.lstrip("-").isdigit():
            raise StripeError(400, f"Invalid integer: {value}", code="parameter_invalid_integer", param="created")
        out[op] = int(value)
    return out


def list_filter(params: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """The filters (``payment_intent``, ``charge``, ``created``) and the page size of ``GET /v1/refunds``."""
    _only(params, LIST_PARAMS)
    filters: dict[str, Any] = {k: v for k in ("payment_intent", "charge") if (v := _string(params, k))}
    if "created" in params:
        filters["created"] = _created(params["created"])
    return filters, positive_int(params, "limit", maximum=100) or 10


def matches(refund: Mapping[str, Any], filters: Mapping[str, Any]) -> bool:
    if any(refund[k] != filters[k] for k in ("payment_intent", "charge") if k in filters):
        return False
    return all(COMPARE[op](refund["created"], value) for op, value in filters.get("created", {}).items())
