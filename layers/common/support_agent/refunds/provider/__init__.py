"""Refunds at a payment provider: the port (`port.py`), its adapters (`stripe.py`, `none.py`), the factory.

Stripe's own rules sit beside its adapter: when a request is repeated (`stripe_retry.py`) and where its API
key comes from (`stripe_key.py`). Nothing here touches our tables: the ledger (refund rows, reservations,
audit) stays with its callers, which decide from these outcomes; the provider only moves the money, at most
once per attempt key.
"""
