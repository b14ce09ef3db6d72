"""The paths section's tables (bench/paths.py's measurements), for the terminal and docs/PERFORMANCE.md."""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.paths import handover_added
from bench.report import md

COLD = {
    "chat": "chat",
    "chat, MCP_SERVERS set (an outside server's tools/list on the first event)": "chat with MCP_SERVERS",
    "mcp (tools/list)": "McpFunction (tools/list)",
}


def _apis(counts: dict[str, int] | Counter[str]) -> str:
    return ", ".join(f"{api} {n:g}" for api, n in sorted(counts.items())) or "—"


def _x(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b else "—"


def payments(p: dict[str, Any]) -> str:
    r, approved = p["refunds"], p["stack"]["approved"]
    rows = [
        [
            f"+{ms} ms per provider request",
            r[ms]["wall_ms"],
            r[ms]["wall_ms"] - int(ms) * r[ms]["provider_requests"],
            _x(r[ms]["wall_ms"], r["0"]["wall_ms"]),
            f"{sum(r[ms]['aws'].values())}: {_apis(r[ms]['aws'])}",
            f"{r[ms]['provider_requests']:g}: {', '.join(r[ms]['provider_calls'])}",
        ]
        for ms in r
    ]
    direct = (
        f"**Payments: the direct refund** (`request_refund` under the threshold, `PAYMENT_PROVIDER=stripe` against "
        f"the simulated Stripe on a local port; a fresh order per call; median of {r['0']['samples']} calls at "
        "each latency, interleaved; AWS requests on the moto server)\n\n"
        + md(
            [
                "provider latency",
                "tool call ms",
                "less the added latency",
                "× at 0 ms",
                "AWS requests per refund",
                "provider requests",
            ],
            rows,
        )
    )
    functions = approved["functions"]
    per = [
        [fn, f["invocations"], sum(f["requests"].values()), _apis(f["requests"])] for fn, f in sorted(functions.items())
    ]
    aws = sum(sum(f["requests"].values()) for f in functions.values())
    provider = Counter(approved["provider_requests"])
    per.append(["Step Functions (RefundFlow)", "—", f"{approved['transitions']} state transitions", ""])
    per.append(["the provider", "—", sum(provider.values()), _apis(provider)])
    per.append(
        [
            "**per approved refund**",
            f"**{sum(f['invocations'] for f in functions.values())}**",
            f"**{aws} AWS, {sum(provider.values())} provider**",
            "",
        ]
    )
    return (
        direct
        + "\n\n**Payments: the approved path, per refund** (the local stack, from the lead's `approve` to REFUNDED: "
        "RefundFlow, the payment step, the provider's webhooks; the turn that asked is not counted)\n\n"
        + md(["function", "invocations", "AWS requests", "by API"], per)
    )


def handover(p: dict[str, Any]) -> str:
    h = p["stack"]["handover"]
    m = h["median"]
    timing = [
        ["the local poller hands the message to TurnWorkerFunction (a local artefact)", m["poller_ms"]],
        ["the worker, from its invocation to its first model call (the figure without the poller)", m["worker_ms"]],
        ["**SendMessage → the worker's first model call, on the local stack**", m["total_ms"]],
    ]
    added = [
        [api, sync, handed, f"{handed - sync:+d}"]
        for api, sync, handed in handover_added(p["stack"]["read_only"]["functions"], h["functions"])
    ]
    return (
        f"**Long turns: the hand-over** (the local stack, `Prefer: respond-async`; median of {len(h['samples'])} "
        "turns; ms from the chat function's SendMessage reaching the queue)\n\n"
        + md(["step", "ms"], timing)
        + "\n\n**What the hand-over adds** (the read-only turn answered in the request, ChatFunction, beside the "
        "same turn handed over, ChatFunction + TurnWorkerFunction; the page's feed and record reads not counted)\n\n"
        + md(["request", "in the request", "handed over", "added"], added)
    )


def mcp(p: dict[str, Any], results: dict[str, Any]) -> str:
    m = p["mcp"]
    call, turn = m["call_us"], m["turn_ms"]
    rows = [
        [
            "one tool call (`lookup_order`, in-memory store), µs",
            call["registry"],
            call["mcp"],
            _x(call["mcp"], call["registry"]),
        ],
        ["one 3-iteration turn, ms", turn["registry"], turn["mcp"], _x(turn["mcp"], turn["registry"])],
        ["an outside server (the carrier stub over HTTP): `tools/list`, ms", "—", m["outside"]["list_ms"], ""],
        ["an outside server: `tools/call`, ms", "—", m["outside"]["call_ms"], ""],
    ]
    out = "**MCP** (`TOOL_MODE=registry` vs `mcp`, median; the outside server: one SDK session per request)\n\n" + md(
        ["path", "registry", "MCP", "× registry"], rows
    )
    cold = {v.name: v for v in results.get("cold", []) if v.name in COLD}
    if "chat" in cold:
        chat = cold["chat"].median("total_ms")
        rows = [
            [
                COLD[name],
                v.median("import_ms"),
                v.median("first_event_ms"),
                v.median("total_ms"),
                int(v.median("modules")),
                _x(v.median("total_ms"), chat),
            ]
            for name, v in cold.items()
        ]
        out += "\n\n**Cold starts beside the chat function's** (from the cold-start table)\n\n" + md(
            ["handler", "import ms", "first event ms", "import + first event ms", "modules", "× chat"], rows
        )
    return out


def audit(p: dict[str, Any]) -> str:
    rows = [
        [
            "1 (new conversation)" if r["turn"] == 1 else r["turn"],
            r["requests"],
            r["audit_requests"],
            r["transactions"],
            r["audit_rows"],
            r["head_updates"],
            f"{r['row_bytes']:.0f} ({r['chain_bytes']:.0f})",
            f"{r['wru_with']:g}",
            f"{r['wru_without']:g}",
        ]
        for r in p["audit"]["turns"]
    ]
    return (
        "**The audit chain, per turn** (the loop's 3-iteration turn on the deployed tables, moto; write units of "
        "the turn's transactions by item size, with and without the chain's attributes)\n\n"
        + md(
            [
                "turn",
                "AWS requests",
                "of which for the audit trail",
                "TransactWriteItems",
                "audit rows in them",
                "head advanced in the lease update",
                "bytes per audit row (chain)",
                "WRU with the chain",
                "WRU without",
            ],
            rows,
        )
    )


def table(results: dict[str, Any]) -> str:
    p = results["paths"]
    return "\n\n".join(["## The new paths", payments(p), handover(p), mcp(p, results), audit(p)])
