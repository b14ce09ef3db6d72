"""The loop benchmark's peers, run in bench/.venv-peers: the same turn on each framework, in memory.

``python bench/peer_loops.py MODEL_URL WARMUP RUNS`` (cwd bench/handlers) prints one JSON line:
{name: [milliseconds per turn, ...]} or {name: "why it could not run"}. Tools read in-memory demo
data, as ours do in this benchmark, so only the frameworks' own work and HTTP are timed.
"""

import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
MESSAGE = "Where is my order 1042, and what did you bill me for it?"


def memory_data() -> dict:
    data = json.loads((HERE.parent / "devstack" / "demo_data.json").read_text())
    customer = next(c for c in data["customers"] if c["customer_id"] == 7)
    orders = [
        {**o, "currency": "USD", "available_cents": o["total_cents"], "reserved_cents": 0, "refunded_cents": 0}
        for o in customer["orders"]
    ]
    invoices = [{**i, "currency": "USD", "status": i.get("status", "PAID")} for i in customer["invoices"]]
    return {"orders": orders, "invoices": invoices}


def anthropic_hand_loop(common):
    """The anthropic SDK's messages.create in a hand-written loop: the smallest honest SDK agent."""
    import anthropic

    client = anthropic.Anthropic(api_key=common.API_KEY, base_url=common.BASE_URL)
    tools = [
        {
            "name": "lookup_order",
            "description": common.LOOKUP_DOC,
            "input_schema": {
                "type": "object",
                "properties": {"order_id": {"type": "integer"}},
                "required": ["order_id"],
            },
        },
        {
            "name": "list_invoices",
            "description": common.INVOICES_DOC,
            "input_schema": {"type": "object", "properties": {"order_id": {"type": "integer"}}},
        },
    ]
    impl = {"lookup_order": common.lookup_order, "list_invoices": common.list_invoices}

    def run(message: str) -> str:
        messages = [{"role": "user", "content": message}]
        for _ in range(8):
            reply = client.messages.create(
                model=common.MODEL, max_tokens=1024, system=common.SYSTEM, tools=tools, messages=messages
            )
            messages.append({"role": "assistant", "content": reply.content})
            uses = [b for b in reply.content if b.type == "tool_use"]
            if not uses:
                return "".join(b.text for b in reply.content if b.type == "text")
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": u.id, "content": json.dumps(impl[u.name](**u.input))}
                        for u in uses
                    ],
                }
            )
        raise AssertionError("no answer")

    return run


def main() -> None:
    model_url, warmup, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.environ["ANTHROPIC_BASE_URL"] = model_url
    os.environ["ANTHROPIC_API_KEY"] = "sk-bench"
    sys.path.insert(0, str(HERE / "handlers"))
    import peer_common as common

    common.BASE_URL = model_url
    common.MEMORY = memory_data()
    results: dict = {}
    loaders = {
        "anthropic SDK hand loop": lambda: anthropic_hand_loop(common),
        "langgraph + langchain-anthropic": lambda: __import__("peer_langgraph").run,
        "strands-agents": lambda: __import__("peer_strands").run,
        "pydantic-ai": lambda: __import__("peer_pydantic_ai").run,
        "openai-agents": lambda: __import__("peer_openai_agents").run,
    }
    for name, load in loaders.items():
        try:
            run = load()
            reply = run(MESSAGE)
            assert "1042" in reply, reply
            for _ in range(warmup):
                run(MESSAGE)
            times: dict = {"wall": [], "cpu": []}
            for _ in range(runs):
                wall, cpu = time.perf_counter(), time.process_time()
                run(MESSAGE)
                times["cpu"].append((time.process_time() - cpu) * 1000)
                times["wall"].append((time.perf_counter() - wall) * 1000)
            results[name] = times
        except Exception as exc:  # report, do not hide: the table says why
            traceback.print_exc()
            results[name] = f"could not run: {type(exc).__name__}: {str(exc)[:200]}"
    print(json.dumps(results))


if __name__ == "__main__":
    main()
