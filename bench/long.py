"""Long conversations: latency, bytes and tokens per turn as a conversation grows to 50 turns.

The same 3-iteration turn, 50 times in one conversation, on our loop with the in-memory store,
with the history budget (HISTORY_TOKEN_BUDGET, default) and without it (0). The conversation token
cap is lifted for the run, and the turn at which the default cap (200k, all four token fields
summed over the conversation) would have answered 429 is reported instead.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx

from bench.calls import item_size
from bench.memory_dynamodb import MemoryDynamoDB

DEFAULT_CAP = 200_000


class _Recording(httpx.BaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.sizes: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sizes.append(len(request.content))
        return self.inner.handle_request(request)


class _SizingDynamoDB(MemoryDynamoDB):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[int] = []

    def transact_write_items(self, TransactItems: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        self.written += [item_size(t["Put"]["Item"]) for t in TransactItems if "Put" in t]
        return super().transact_write_items(TransactItems, **kw)


@dataclass
class TurnRow:
    turn: int
    wall_ms: float
    last_request_bytes: int
    input_tokens: int
    written_bytes: int
    messages_sent: int
    history_items_bytes: int
    conversation_tokens: int


def run(model_url: str, turns: int, history_budget: str) -> list[TurnRow]:
    from bench.loop import our_agent

    transport = _Recording()
    ddb = _SizingDynamoDB()
    from devstack.seed import seed

    seed(ddb, "CustomerData")
    services, turn = our_agent(
        model_url,
        ddb=ddb,
        transport=transport,
        HISTORY_TOKEN_BUDGET=history_budget,
        CONVERSATION_TOKEN_BUDGET="1000000000",
    )
    rows: list[TurnRow] = []
    cid = None
    total = 0
    for n in range(1, turns + 1):
        sizes, written = len(transport.sizes), len(ddb.written)
        started = time.perf_counter()
        result = turn(cid, f"Turn {n}: where is my order 1042, and what did you bill me for it?")
        wall = (time.perf_counter() - started) * 1000
        cid = result.conversation_id
        total += result.usage.total
        history = sum(ddb.written)  # every stored message and audit row so far
        rows.append(
            TurnRow(
                n,
                wall,
                transport.sizes[-1],
                result.usage.input_tokens,
                sum(ddb.written[written:]),
                len(services.conversations.load(cid)),
                history,
                total,
            )
        )
        assert len(transport.sizes) - sizes == 3
    return rows


def cap_turn(rows: list[TurnRow], cap: int = DEFAULT_CAP) -> int | None:
    """The first turn the default conversation cap would refuse (429), if any."""
    for previous, row in itertools.pairwise(rows):
        if previous.conversation_tokens >= cap:
            return row.turn
    return None


def by_decade(rows: list[TurnRow]) -> list[dict[str, Any]]:
    out = []
    for start in range(0, len(rows), 10):
        block = rows[start : start + 10]
        out.append(
            {
                "turns": f"{block[0].turn}–{block[-1].turn}",
                "wall_ms": statistics.median(r.wall_ms for r in block),
                "last_request_kb": max(r.last_request_bytes for r in block) / 1024,
                "input_tokens": statistics.median(r.input_tokens for r in block),
                "written_kb": statistics.median(r.written_bytes for r in block) / 1024,
            }
        )
    return out
