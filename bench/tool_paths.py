"""MCP as the loop's tool path: what TOOL_MODE=mcp and an outside server cost, side by side with the registry.

* One call: `lookup_order` through the registry itself and through the SDK's in-process client
  (`InProcessMcpTools`), on the in-memory DynamoDB (so the tool's own I/O is the same tiny constant).
* One turn: the loop bench's 3-iteration turn (bench/loop.py) with TOOL_MODE=registry and TOOL_MODE=mcp.
* An outside server: devstack's carrier stub over HTTP on this machine: a `tools/list` and a `tools/call`
  (each one short SDK session, as the client makes them), beside the in-process call.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.loop import _NoSqs, our_agent, settings_for
from bench.memory_dynamodb import MemoryDynamoDB


def _per_call_us(fn: Callable[[], Any], warmup: int, runs: int) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1e6)
    return statistics.median(samples)


def _sources() -> tuple[Any, Any, Any]:
    from devstack.seed import seed
    from support_agent.auth import Principal
    from support_agent.mcp.inprocess import InProcessMcpTools
    from support_agent.mcp.our_tools import McpServices
    from support_agent.tools.registry import ToolContext
    from support_agent.wiring import build_registry

    settings = settings_for("http://127.0.0.1:9")
    ddb = MemoryDynamoDB()
    seed(ddb, settings.customer_data_table)
    registry = build_registry(settings, ddb, _NoSqs())
    mcp = InProcessMcpTools(registry, McpServices(registry, ddb, settings.conversations_table, settings.audit_table))
    ctx = ToolContext(Principal("customer-7", "customer", 7), 7, "conv_bench", 1, "toolu_bench", "bench", "now")
    return registry, mcp, ctx


def _outside(runs: int) -> dict[str, float]:
    import json

    from devstack.carrier_mcp import CarrierStub, local_servers
    from support_agent.mcp.allowlist import parse_servers
    from support_agent.mcp.outside import OutsideServer

    with CarrierStub("bench-token") as stub:
        entry = parse_servers(json.dumps(local_servers(stub.url)))[0]
        server = OutsideServer(entry, lambda: "bench-token")
        arguments = {"customer_id": 7, "tracking_number": "CR10430001"}
        return {
            "list_ms": _per_call_us(server.list_tools, 2, runs) / 1000,
            "call_ms": _per_call_us(lambda: server.call_tool("track_parcel", arguments, 5.0), 2, runs) / 1000,
        }


def measure(model_url: str, turns: int) -> dict[str, Any]:
    registry, mcp, ctx = _sources()
    args = {"order_id": 1042}
    direct_us = _per_call_us(lambda: registry.execute("lookup_order", args, ctx), 50, 500)
    mcp_us = _per_call_us(lambda: mcp.execute("lookup_order", args, ctx), 50, 500)
    assert mcp.execute("lookup_order", args, ctx) == registry.execute("lookup_order", args, ctx)

    turn_ms: dict[str, float] = {}
    for mode in ("registry", "mcp"):
        _, turn = our_agent(model_url, TOOL_MODE=mode)
        turn_ms[mode] = _per_call_us(turn, 5, turns) / 1000
    return {
        "call_us": {"registry": direct_us, "mcp": mcp_us},
        "turn_ms": turn_ms,
        "outside": _outside(max(10, turns // 2)),
    }
