"""What a trial costs: the model's tokens at list price (support_agent/pricing.py) and the AWS requests the stack
made for it, priced by `make bench`'s cost model (bench/cost.py, bench/aws_prices.json) — nothing priced here.

The AWS side needs bench's probe in every function's process, which is installed when the pools are made: a
meter exists only for a local stack started after ``AwsMeter()``. A stack handed to the runner has none, and its
trials carry no AWS cost (the report says so) rather than a guess.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from evals.state import EndState

QUIET_SECONDS = 1.0  # no invocation and no AWS request for this long: the trial's work is done


def model_usd(model: str, state: EndState) -> float | None:
    """The trial's tokens at ``model``'s list price (PRICE_TABLE honoured); None when the model has no price."""
    from support_agent.messages import Usage
    from support_agent.pricing import estimate_usd, price_table

    usage = Usage(
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        cache_read_input_tokens=state.cache_read_input_tokens,
        cache_creation_input_tokens=state.cache_creation_input_tokens,
    )
    return estimate_usd(model, usage, price_table(os.environ.get("PRICE_TABLE", "")))


class AwsMeter:
    """bench/cost.py's recorder, installed before the stack starts; ``since(mark, state)`` prices a trial."""

    def __init__(self) -> None:
        from bench.cost import Recorder

        self.recorder = Recorder(Path(tempfile.mkdtemp(prefix="evals-aws-")))
        self.recorder.patch()  # devstack.local.pools_for and FunctionPool.invoke, for every stack started after
        self.memory: dict[str, int] = {}
        self.arch = "arm64"

    def attach(self, local: Any) -> None:
        resources = local.stack.template["Resources"]
        self.memory = {
            fn: int(r["Properties"].get("MemorySize", 128))
            for fn, r in resources.items()
            if r["Type"] == "AWS::Lambda::Function"
        }
        self.arch = local.stack.sam_template["Parameters"]["Architecture"]["Default"]

    def mark(self) -> tuple[int, dict[str, int]]:
        return self.recorder.mark()

    def wait_quiet(self, timeout: float = 60.0) -> None:
        """Until nothing has run for QUIET_SECONDS (bench's own wait asks for 3 s: too long per trial)."""
        deadline, last, since = time.monotonic() + timeout, self.mark(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.2)
            now = self.mark()
            if now != last or self.recorder._running:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= QUIET_SECONDS:
                return

    def since(self, mark: tuple[int, dict[str, int]], state: EndState) -> tuple[float, dict[str, int]]:
        """The AWS cost in USD of everything since ``mark`` and its requests by ``service:Operation``."""
        from bench.cost import load_prices, price

        functions = self.recorder.since(mark)
        scenario = {
            "functions": functions,
            "usage": {"input_tokens": state.input_tokens, "output_tokens": state.output_tokens},
            "model_calls": state.iterations,
            "model_function": "ChatFunction",
        }
        priced = price(scenario, load_prices(), {**_defaults(functions), **self.memory}, self.arch)
        requests: Counter[str] = Counter()
        for f in functions.values():
            requests.update(f["requests"])
        return float(priced["infra"]), dict(requests)


def _defaults(functions: dict[str, Any]) -> dict[str, int]:
    """A function the template does not size (none today) is priced at Lambda's default 128 MB."""
    return {fn: 128 for fn in functions}
