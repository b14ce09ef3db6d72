"""Counts the reliability tests record as they run, printed at the end of the run (the figures in RELIABILITY.md)."""

from __future__ import annotations

from collections import Counter, defaultdict

FIGURES: dict[str, Counter[str]] = defaultdict(Counter)


def count(prop: str, **values: int) -> None:
    FIGURES[prop].update(values)


def lines() -> list[str]:
    out = []
    for prop in sorted(FIGURES):
        parts = ", ".join(f"{k}={v}" for k, v in sorted(FIGURES[prop].items()))
        out.append(f"{prop}: {parts}")
    return out
