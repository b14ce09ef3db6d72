"""Benchmarks against the peers, side by side (`make bench`, docs/PERFORMANCE.md)."""
