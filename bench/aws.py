"""AWS requests per turn on the moto server: what the chat loop asks of DynamoDB, by purpose.

The real `Agent` with boto3 clients on the deployed stack (out-of-process moto), the instant model,
and botocore event hooks counting every request (bench/calls.py). The same checks run in
`make test` as tests/integration/test_aws_calls.py.
"""

from __future__ import annotations

from typing import Any

from bench.calls import Call, CallCounter, bytes_written, kinds, largest_item
from bench.env import World

KINDS = (
    "lease_acquire",
    "lease_release",
    "history_query",
    "transact_write",
    "read:GetItem",
    "read:Query",
    "rate_limit",
)


def measure(world: World, turns: int = 20) -> dict[str, Any]:
    import boto3

    from bench.loop import our_agent

    session = boto3.Session(region_name="us-east-1")
    counter = CallCounter().attach(session.events)
    ddb = session.client("dynamodb", endpoint_url=world.moto_url)
    env = world.stack.function_env("ChatFunction")
    tables = {k: env[k] for k in ("CONVERSATIONS_TABLE", "CUSTOMER_DATA_TABLE", "APPROVALS_TABLE", "AUDIT_TABLE")}
    _, turn = our_agent(world.model_url, ddb=ddb, CONVERSATION_TOKEN_BUDGET="1000000000", **tables)
    per_turn: list[list[Call]] = []
    cid = None
    for n in range(turns):
        mark = counter.mark()
        cid = turn(cid, f"Turn {n}: where is my order 1042, and what did you bill me for it?").conversation_id
        per_turn.append(counter.since(mark))
    counter.detach()
    rows = []
    for label, calls in (
        ("turn 1 (new conversation)", per_turn[0]),
        ("turn 2", per_turn[1]),
        (f"turn {turns}", per_turn[-1]),
    ):
        k = kinds(calls)
        rows.append(
            {
                "turn": label,
                **{kind: k.get(kind, 0) for kind in KINDS},
                "other": sum(n for kind, n in k.items() if kind not in KINDS),
                "requests": len(calls),
                "written_kb_per_iteration": bytes_written(calls) / 3 / 1024,
                "largest_item_kb": largest_item(calls) / 1024,
                "wire_kb": sum(c.wire_bytes for c in calls) / 1024,
            }
        )
    everything = [c for t in per_turn for c in t]
    return {
        "rows": rows,
        "turns": turns,
        "total_requests": len(everything),
        "largest_item_kb": largest_item(everything) / 1024,
        "history_pages_max": max(kinds(t)["history_query"] for t in per_turn),
    }
