"""Refunds at a payment provider: the port (`port.py`), its adapters (`stripe.py`, `none.py`), the factory.

Nothing here touches our tables: the ledger (refund rows, reservations, audit) stays with its callers,
which decide from these outcomes; the provider only moves the money, at most once per attempt key.
"""
