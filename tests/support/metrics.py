"""Reading the EMF metric lines a handler printed (Powertools' Metrics writes one JSON blob per flush)."""

from __future__ import annotations

import json


def emf_total(out: str, name: str) -> float:
    """The sum of metric ``name`` over every EMF blob in ``out`` (a value may be one number or a list)."""
    total = 0.0
    for blob in (json.loads(x) for x in out.splitlines() if x.startswith("{")):
        if "_aws" in blob and name in blob:
            value = blob[name]
            total += sum(value) if isinstance(value, list) else value
    return total
