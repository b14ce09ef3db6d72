"""The refund, as one idea: from the request to the money at the provider, and proof that both agree.

What the outside calls (the tools, the MCP server, the lead routes, the handlers in functions/, the sweeps,
wiring) is named here, each name imported from its module on first use (PEP 562): importing the package costs
nothing, so the chat handler, which imports `keys` at its cold start, loads no ledger, no provider and no
pydantic model it does not use (tests/unit/test_chat_import.py). Tests may reach further in.

The modules, in the order a refund meets them:

* keys.py — the refund key's grammar: the one module that builds or parses a refund key, an attempt key or a
  ledger sort key; vocabulary.py — the customers' word for a refund's state. Both are leaves (they import
  nothing of the package), imported as modules by any layer.
* decide.py — a request decided under the policy's terms (`RefundTerms`: actions/refund.py and actions/cancel.py
  build them): refused, refunded at once within the threshold, or held for a lead;
  requests.py — its money writes (the reservation with the ledger row, or with the PENDING approval).
* ledger.py — `RefundLedger`, one row per refund key: the row and its states (ledger_row.py), its tables and
  the parts of every write (ledger_table.py), an approved refund's start (approved.py), what a provider call
  establishes (settlements.py).
* settle.py — one provider call for a row's attempt, its outcome recorded; step.py — RefundFlow's refund step.
* provider/ — the payment-provider port and its adapters (Stripe, ledger-only).
* webhooks.py — Stripe's events, verified and applied (the HTTP edge is api/stripe_webhook.py);
  sweep.py — the payment sweep; reconcile.py — the ledger compared with the provider.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from support_agent.refunds.decide import OrderNotFound as OrderNotFound
    from support_agent.refunds.decide import RefundDesk as RefundDesk
    from support_agent.refunds.decide import RefundRefused as RefundRefused
    from support_agent.refunds.decide import RefundTerms as RefundTerms
    from support_agent.refunds.decide import streams_of as streams_of
    from support_agent.refunds.ledger import RefundLedger as RefundLedger
    from support_agent.refunds.provider.factory import lazy_provider as lazy_provider
    from support_agent.refunds.provider.port import PaymentProvider as PaymentProvider
    from support_agent.refunds.provider.stripe import StripeProvider as StripeProvider
    from support_agent.refunds.provider.stripe_retry import StripePolicy as StripePolicy
    from support_agent.refunds.reconcile import UNSETTLED_AFTER as UNSETTLED_AFTER
    from support_agent.refunds.reconcile import Difference as Difference
    from support_agent.refunds.reconcile import Reconciler as Reconciler
    from support_agent.refunds.requests import RefundWriter as RefundWriter
    from support_agent.refunds.settle import RefundSettler as RefundSettler
    from support_agent.refunds.step import ApprovalNotApproved as ApprovalNotApproved
    from support_agent.refunds.step import ApprovalNotFound as ApprovalNotFound
    from support_agent.refunds.step import PaymentOutcomeUnknown as PaymentOutcomeUnknown
    from support_agent.refunds.step import RefundStep as RefundStep
    from support_agent.refunds.sweep import PaymentSweeper as PaymentSweeper
    from support_agent.refunds.webhooks import StripeWebhooks as StripeWebhooks
    from support_agent.refunds.webhooks import WebhookResult as WebhookResult
    from support_agent.refunds.webhooks import WebhookSecretUnavailable as WebhookSecretUnavailable
    from support_agent.refunds.webhooks import secrets_of as secrets_of

# Each public name and the module (under this package) that defines it.
_PUBLIC = {
    "OrderNotFound": "decide",
    "RefundDesk": "decide",
    "RefundRefused": "decide",
    "RefundTerms": "decide",
    "streams_of": "decide",
    "RefundLedger": "ledger",
    "lazy_provider": "provider.factory",
    "PaymentProvider": "provider.port",
    "StripeProvider": "provider.stripe",
    "StripePolicy": "provider.stripe_retry",
    "UNSETTLED_AFTER": "reconcile",
    "Difference": "reconcile",
    "Reconciler": "reconcile",
    "RefundWriter": "requests",
    "RefundSettler": "settle",
    "ApprovalNotApproved": "step",
    "ApprovalNotFound": "step",
    "PaymentOutcomeUnknown": "step",
    "RefundStep": "step",
    "PaymentSweeper": "sweep",
    "StripeWebhooks": "webhooks",
    "WebhookResult": "webhooks",
    "WebhookSecretUnavailable": "webhooks",
    "secrets_of": "webhooks",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:  # a submodule (`from support_agent.refunds import keys`) is then imported as usual
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
