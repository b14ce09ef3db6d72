"""What the Stripe adapter adds to a cold start: our httpx adapter against ``import stripe``, side by side.

``python -m bench.payments_import [runs]``. Each sample is a fresh interpreter that first imports what the chat
function has loaded before its first refund (httpx for the model adapter, pydantic, the settings, the
loop), then starts the clock and imports
either our adapter (`support_agent.refunds.provider.stripe`) or the official SDK, alternating so both meet the
same machine noise. Reports medians of wall and CPU time and their ratio (docs/PAYMENTS.md).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys, time
import httpx, pydantic, support_agent.config, support_agent.agent.loop, support_agent.llm.anthropic
c0, t0 = time.process_time(), time.perf_counter()
import {module}
print(json.dumps({{"wall_ms": (time.perf_counter() - t0) * 1000, "cpu_ms": (time.process_time() - c0) * 1000,
                  "modules": len(sys.modules)}}))
"""
CANDIDATES = {"ours (httpx adapter)": "support_agent.refunds.provider.stripe", "stripe SDK": "stripe"}


def sample(module: str) -> dict[str, float]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'layers' / 'common'}{os.pathsep}{ROOT}",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(module=module)], capture_output=True, text=True, check=True, env=env
    )
    return dict(json.loads(out.stdout))


def measure(runs: int = 15) -> dict[str, dict[str, float]]:
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in CANDIDATES}
    for _ in range(runs):
        for name, module in CANDIDATES.items():
            samples[name].append(sample(module))
    return {
        name: {key: statistics.median(s[key] for s in rows) for key in ("wall_ms", "cpu_ms", "modules")}
        for name, rows in samples.items()
    }


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    result = measure(runs)
    ours, sdk = result["ours (httpx adapter)"], result["stripe SDK"]
    for name, row in result.items():
        print(f"{name:22} wall {row['wall_ms']:7.1f} ms  cpu {row['cpu_ms']:7.1f} ms  modules {row['modules']:.0f}")
    print(f"stripe SDK / ours: wall {sdk['wall_ms'] / ours['wall_ms']:.1f}x, cpu {sdk['cpu_ms'] / ours['cpu_ms']:.1f}x")


if __name__ == "__main__":
    main()
