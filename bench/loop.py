"""Loop overhead: one 3-iteration turn against the instant model, ours beside the floor and the peers.

* ours: the real `Agent` (loop, repair, history, fences, audit rows, write-ahead) with the real
  `AnthropicClient`, on the real stores over an in-memory DynamoDB stand-in (bench/memory_dynamodb.py);
* the floor: a raw httpx loop that hand-builds the same three requests (same system prompt, same tool
  definitions) and does nothing else;
* the full path: the same `Agent` on DynamoDB (moto server, out of process), reported apart;
* the peers run in bench/.venv-peers (bench/peer_loops.py) against the same server.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx

from bench.env import PEERS_PYTHON, ROOT, World
from bench.memory_dynamodb import MemoryDynamoDB

MESSAGE = "Where is my order 1042, and what did you bill me for it?"


def timed(turn: Callable[[], Any], warmup: int, runs: int) -> dict[str, list[float]]:
    """Wall and CPU milliseconds per turn (CPU of this process only: the server is elsewhere)."""
    for _ in range(warmup):
        turn()
    out: dict[str, list[float]] = {"wall": [], "cpu": []}
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        turn()
        out["cpu"].append((time.process_time() - cpu) * 1000)
        out["wall"].append((time.perf_counter() - wall) * 1000)
    return out


class _NoSqs:
    def send_message(self, **_: Any) -> dict[str, Any]:
        return {}


def settings_for(model_url: str, **extra: str) -> Any:
    from support_agent.config import load_settings

    return load_settings(
        {
            "CONVERSATIONS_TABLE": "Conversations",
            "CUSTOMER_DATA_TABLE": "CustomerData",
            "APPROVALS_TABLE": "Approvals",
            "AUDIT_TABLE": "Audit",
            "APPROVAL_QUEUE_URL": "http://queue",
            "ANTHROPIC_API_KEY": "sk-bench",
            "ANTHROPIC_BASE_URL": model_url,
            "TRANSPARENCY": "verbose",
            **extra,
        }
    )


def our_agent(
    model_url: str, ddb: Any = None, transport: httpx.BaseTransport | None = None, **extra: str
) -> tuple[Any, Callable[..., Any]]:
    """(agent, turn(conversation_id, message)) on the given DynamoDB client (in memory by default)."""
    from devstack.seed import seed
    from support_agent.auth import Principal
    from support_agent.llm.factory import llm_client_from_settings
    from support_agent.messages import Deadline
    from support_agent.observability import metrics
    from support_agent.wiring import build_chat_services

    settings = settings_for(model_url, **extra)
    if ddb is None:
        ddb = MemoryDynamoDB()
        seed(ddb, settings.customer_data_table)
    llm = llm_client_from_settings(settings, transport=transport)
    services = build_chat_services(settings, llm, ddb=ddb, sqs=_NoSqs())
    principal = Principal("customer-7", "customer", 7)
    counter = [0]

    def turn(conversation_id: str | None = None, message: str = MESSAGE) -> Any:
        counter[0] += 1
        result = services.agent.run_turn(
            principal, 7, conversation_id, message, f"bench-{counter[0]}", Deadline.after(27.0)
        )
        # One turn is one invocation: the handler's @metrics.log_metrics writes its EMF line and empties
        # the set, so values never pile up across turns (Powertools formats the whole set per add).
        metrics.flush_metrics()
        assert result.iterations == 3 and result.stop_reason == "end_turn", result
        return result

    return services, turn


def floor_turn(model_url: str) -> Callable[[], Any]:
    """The least a client can do for the same turn: build, post, parse, run the tool, repeat."""
    from devstack.seed import DEMO_DATA, demo_items
    from support_agent.agent.prompt import SYSTEM_PROMPT
    from support_agent.wiring import build_registry

    data = demo_items(json.loads(DEMO_DATA.read_text()))
    orders = {i["order_id"]: i for i in data if i["sk"].startswith("ORDER#") and i["customer_id"] == 7}
    invoices = [i for i in data if i["sk"].startswith("INVOICE#") and i["customer_id"] == 7]
    tools = build_registry(settings_for(model_url), None, _NoSqs()).specs  # the same definitions as ours
    impl = {
        "lookup_order": lambda a: orders.get(a["order_id"], {"error": "not found"}),
        "list_invoices": lambda a: {"invoices": [i for i in invoices if i["order_id"] == a.get("order_id")]},
    }
    client = httpx.Client()
    url = model_url + "/v1/messages"
    headers = {"x-api-key": "sk-bench", "anthropic-version": "2023-06-01", "content-type": "application/json"}

    def turn() -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": MESSAGE}]}]
        for _ in range(8):
            body = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "tools": tools, "system": SYSTEM_PROMPT}
            body["messages"] = messages
            data = client.post(url, content=json.dumps(body), headers=headers).json()
            messages.append({"role": "assistant", "content": data["content"]})
            uses = [b for b in data["content"] if b["type"] == "tool_use"]
            if not uses:
                return str(data["content"][0]["text"])
            results = [
                {"type": "tool_result", "tool_use_id": u["id"], "content": json.dumps(impl[u["name"]](u["input"]))}
                for u in uses
            ]
            messages.append({"role": "user", "content": results})
        raise AssertionError("no answer")

    return turn


def peers(model_url: str, warmup: int, runs: int) -> dict[str, Any]:
    """Run bench/peer_loops.py in the peers' venv; {name: [ms...]} or {name: "why it could not run"}."""
    if not PEERS_PYTHON.exists():
        return {"(peers)": "bench/.venv-peers is missing: `make bench` creates it"}
    proc = subprocess.run(
        [str(PEERS_PYTHON), str(ROOT / "bench" / "peer_loops.py"), model_url, str(warmup), str(runs)],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT / "bench" / "handlers",
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "AWS_DEFAULT_REGION": "us-east-1"},
    )
    if proc.returncode != 0:
        return {"(peers)": f"peer_loops.py failed: {proc.stderr[-800:]}"}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def measure(world: World, warmup: int, runs: int) -> dict[str, Any]:
    import boto3

    _, ours = our_agent(world.model_url)
    floor = floor_turn(world.model_url)
    results: dict[str, Any] = {}
    # interleave ours and the floor in blocks, so drifting load hits both
    ours_ms: dict[str, list[float]] = {"wall": [], "cpu": []}
    floor_ms: dict[str, list[float]] = {"wall": [], "cpu": []}
    for _ in range(4):
        for acc, turn in ((ours_ms, ours), (floor_ms, floor)):
            for key, values in timed(turn, warmup, runs // 4 + 1).items():
                acc[key] += values
    results["ours (in-memory store)"] = ours_ms
    results["floor (raw httpx loop)"] = floor_ms
    results.update(peers(world.model_url, warmup, runs))
    ddb = boto3.client("dynamodb", endpoint_url=world.moto_url, region_name="us-east-1")
    env = world.stack.function_env("ChatFunction")
    tables = {k: env[k] for k in ("CONVERSATIONS_TABLE", "CUSTOMER_DATA_TABLE", "APPROVALS_TABLE", "AUDIT_TABLE")}
    _, full = our_agent(world.model_url, ddb=ddb, **tables)
    results["ours, full path (DynamoDB on moto)"] = timed(full, warmup, runs)
    results["_profile"] = profile_breakdown(world.model_url)
    return results


def median(values: list[float]) -> float:
    return float(statistics.median(values))


PARTS = {
    # Client.request: building the request (URL merge, headers, cookies) as well as send + read
    "HTTP to the model (httpx send + read)": [("httpx/_client.py", "request")],
    "request body (build_body + encode_body)": [
        ("llm/anthropic.py", "build_body"),
        ("llm/anthropic.py", "encode_body"),
    ],
    "response parsing": [("llm/anthropic.py", "parse_response")],
    "persistence (lease, load, write-ahead, results)": [
        ("store/conversations.py", name)
        for name in ("acquire_lease", "release_lease", "load", "append", "new_header", "create")
    ],
    "audit rows (AuditRecord.put)": [("store/audit.py", "put")],
    "tools (validation + run)": [("tools/registry.py", "execute")],
    "fences": [("agent/untrusted.py", "fence")],
    "history merge + budget": [
        ("agent/history.py", "for_request"),
        ("agent/history.py", "add"),  # RequestHistory: merged as messages arrive
        ("agent/history.py", "request"),
    ],
    "logs and metrics (observability)": [
        ("support_agent/observability.py", name)
        for name in ("model_call", "tool_dispatch", "turn_end", "turn_start", "flush")  # flush: TurnMetrics
    ],
}


def profile_breakdown(model_url: str, turns: int = 30) -> dict[str, float]:
    """Share of our turn's time per part, under cProfile (which inflates small calls; shares only)."""
    import cProfile
    import pstats

    _, turn = our_agent(model_url)
    for _ in range(5):
        turn()
    profile = cProfile.Profile()
    profile.enable()
    started = time.perf_counter()
    for _ in range(turns):
        turn()
    elapsed = time.perf_counter() - started
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for part, functions in PARTS.items():
        total = 0.0
        for (filename, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.items():
            if any(filename.endswith(f) and name == n for f, n in functions):
                total += ct
        out[part] = total / elapsed
    out["everything else in the loop"] = max(0.0, 1 - sum(out.values()))
    return out
