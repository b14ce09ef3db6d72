"""Only on the PYTHONPATH of the local stack's functions during the cost benchmark (bench/cost.py): counts
every AWS request the process makes (bench/cost_probe.py)."""

import os

if os.environ.get("BENCH_COST_CALLS"):
    from bench.cost_probe import install

    install(os.environ["BENCH_COST_CALLS"], os.environ.get("BENCH_COST_FUNCTION", "?"))
