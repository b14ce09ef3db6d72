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
    model_url: str, ddb: Any = None, transport: httpx.BaseTransport | None = None, turn_ids: bool = False, **extra: str
) -> tuple[Any, Callable[..., Any]]:
    """(agent, turn(conversation_id, message)) on the given DynamoDB client (in memory by default); ``turn_ids``:
    each turn has a record's id, as the chat function's turns do (a turn without one is never streamed)."""
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
            principal,
            7,
            conversation_id,
            message,
            f"bench-{counter[0]}",
            Deadline.after(27.0),
            turn_id=f"turn_bench{counter[0]:08d}" if turn_ids else None,
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
            data = client.post(url, content=_encode(body), headers=headers).json()
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


def _encode(body: dict[str, Any]) -> str:
    """The floor's request body (a function of its own, so the step timers see it)."""
    return json.dumps(body)


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
    # interleave ours and the floor in short blocks, so drifting load (a shared machine) hits both
    ours_ms: dict[str, list[float]] = {"wall": [], "cpu": []}
    floor_ms: dict[str, list[float]] = {"wall": [], "cpu": []}
    for _ in range(8):
        for acc, turn in ((ours_ms, ours), (floor_ms, floor)):
            for key, values in timed(turn, warmup, runs // 8 + 1).items():
                acc[key] += values
    results["ours (in-memory store)"] = ours_ms
    results["floor (raw httpx loop)"] = floor_ms
    results.update(peers(world.model_url, warmup, runs))
    ddb = boto3.client("dynamodb", endpoint_url=world.moto_url, region_name="us-east-1")
    env = world.stack.function_env("ChatFunction")
    tables = {k: env[k] for k in ("CONVERSATIONS_TABLE", "CUSTOMER_DATA_TABLE", "APPROVALS_TABLE", "AUDIT_TABLE")}
    _, full = our_agent(world.model_url, ddb=ddb, **tables)
    results["ours, full path (DynamoDB on moto)"] = timed(full, warmup, runs)
    results["_steps"] = step_breakdown(world.model_url, max(runs, 30))
    return results


class RecordingPoster:
    """The ``@connections`` poster of a streamed turn, in memory: the streaming path (the adapter's SSE parse, the
    sink, the coalescer, the posting thread) without a network; counts what it would have posted."""

    def __init__(self) -> None:
        self.posts = 0

    def post(self, connection_id: str, message: dict[str, Any]) -> Any:
        from support_agent.sockets.push import Posted

        self.posts += 1
        return Posted.SENT


STREAMING_OFF, STREAMING_ON, STREAMING_OFF_AGAIN = (
    "streaming off",
    "streaming on (a DeltaPublisher per turn, recording poster)",
    "streaming off, again (the noise yardstick)",
)
STREAMING_PARSE_ONLY = "streamed, posted nowhere (the SSE parse alone: a sink that keeps nothing)"


class NullSink:
    """A turn's `TextSink` that posts nothing: what the model's stream costs without the publisher."""

    def delta(self, piece: str) -> None:
        pass

    def restart(self) -> None:
        pass

    def close(self, timeout: float = 0.2) -> bool:
        return True


def streaming(model_url: str, warmup: int, runs: int) -> dict[str, Any]:
    """Our turn (in-memory store) with the reply's text streamed and not, interleaved in short blocks; ``off`` twice,
    each on its own agent, so the spread between the two offs is what the run's noise is. Each block follows a
    conversation of its own, begun untimed (a new conversation's first turn streams to nobody), so every variant's
    conversations are of equal length and none reaches the length limit."""
    from support_agent.sockets.deltas import DeltaPublisher

    poster = RecordingPoster()
    variants: dict[str, Callable[..., Any]] = {}
    for name in (STREAMING_OFF, STREAMING_ON, STREAMING_PARSE_ONLY, STREAMING_OFF_AGAIN):
        services, variants[name] = our_agent(model_url, turn_ids=True)
        if name == STREAMING_ON:
            services.agent.streams = lambda cid, tid, offset: DeltaPublisher(cid, tid, ["bench"], poster, offset=offset)
        elif name == STREAMING_PARSE_ONLY:
            services.agent.streams = lambda cid, tid, offset: NullSink()
    out: dict[str, Any] = {name: {"wall": [], "cpu": []} for name in variants}
    for _ in range(8):
        for name, turn in variants.items():
            cid = turn(None).conversation_id
            for key, values in timed(lambda turn=turn, cid=cid: turn(cid), warmup, runs // 8 + 1).items():
                out[name][key] += values
    out["_posts_per_turn"] = poster.posts / (8 * (warmup + runs // 8 + 1))
    return out


def median(values: list[float]) -> float:
    return float(statistics.median(values))


# Each step of our turn, by the functions that do it. A step's time is its functions' time minus that of
# any other step's function they call (the stores' calls into the stand-in count as the stand-in's).
STEPS: dict[str, list[tuple[str, str]]] = {
    "HTTP to the model (httpx send + read)": [("httpx", "Client.request")],
    "request body (build_body + encode_body)": [
        ("support_agent.llm.anthropic", "build_body"),
        ("support_agent.llm.anthropic", "encode_body"),
        ("bench.loop", "_encode"),  # the floor's
    ],
    "response parsing (JSON + parse_response)": [
        ("httpx", "Response.json"),
        ("support_agent.llm.anthropic", "parse_response"),
    ],
    "persistence: our stores (lease, load, write-ahead, results)": [
        ("support_agent.store.conversations", f"ConversationStore.{name}")
        for name in ("acquire_lease", "release_lease", "load", "append", "new_header")
    ],
    "persistence: the in-memory stand-in (the bench's, not ours)": [
        ("bench.memory_dynamodb", f"MemoryDynamoDB.{name}")
        for name in ("get_item", "query", "put_item", "update_item", "transact_write_items")
    ],
    "audit rows (hash chain + rows)": [
        ("support_agent.store.audited_write", "chain"),
        ("support_agent.agent.loop", "_Turn._audit"),
        ("support_agent.store.audit", "AuditRecord.put"),
    ],
    "tools (validation + run)": [("support_agent.tools.registry", "ToolRegistry.execute")],
    "fences": [("support_agent.agent.loop", "fence")],
    "the answer's sanitising": [("support_agent.agent.loop", "sanitize_content")],
    "history merge + budget": [
        ("support_agent.agent.history", "RequestHistory.add"),
        ("support_agent.agent.history", "RequestHistory.request"),
    ],
    "logs (a line per model call, tool call and turn)": [
        ("aws_lambda_powertools.logging.logger", "Logger.info"),
        ("aws_lambda_powertools.logging.logger", "Logger.warning"),
    ],
    "metrics (the turn's tally, add_metric, the EMF line)": [
        ("support_agent.observability", "TurnMetrics.count"),
        ("support_agent.observability", "TurnMetrics.sample"),
        ("support_agent.observability", "TurnMetrics.flush"),
        ("aws_lambda_powertools.metrics", "Metrics.flush_metrics"),
    ],
}
OTHER = "everything else in the loop"


class _StepTimer:
    """Wraps each step's functions with a perf_counter pair (the cheap clock: CPU clocks are system calls
    here); time spent in a nested step is taken off the outer one. The HTTP step also records CPU time."""

    def __init__(self) -> None:
        self.turn: dict[str, float] = {}
        self._stack: list[list[Any]] = []  # [step, time in nested steps]
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, attr: str, step: str, cpu: bool = False) -> None:
        import functools

        if isinstance(owner, type):  # as defined (a staticmethod stays one), on the class or a base
            original = next(k.__dict__[attr] for k in owner.__mro__ if attr in k.__dict__)
            own = attr in owner.__dict__
        else:
            original, own = getattr(owner, attr), True
        static = isinstance(original, staticmethod)
        target = original.__func__ if static else original
        stack, clock, cpu_clock = self._stack, time.perf_counter, time.process_time

        @functools.wraps(target)
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            if stack and stack[-1][0] == step:  # a step calling itself: counted once
                return target(*args, **kwargs)
            frame = [step, 0.0]
            stack.append(frame)
            started, cpu_started = clock(), cpu_clock() if cpu else 0.0
            try:
                return target(*args, **kwargs)
            finally:
                spent = clock() - started
                stack.pop()
                self.turn[step] = self.turn.get(step, 0.0) + spent - frame[1]
                if cpu:
                    self.turn[step + " (CPU)"] = self.turn.get(step + " (CPU)", 0.0) + cpu_clock() - cpu_started
                if stack:
                    stack[-1][1] += spent

        self._undo.append((owner, attr, original if own else None))
        setattr(owner, attr, staticmethod(timed_call) if static else timed_call)

    def restore(self) -> None:
        for owner, attr, original in reversed(self._undo):
            if original is None:
                delattr(owner, attr)  # it was inherited
            else:
                setattr(owner, attr, original)


def step_breakdown(model_url: str, turns: int = 60) -> dict[str, Any]:
    """Median µs per turn of each step of ours (wall, in process: no step but HTTP waits on anything), the
    floor's HTTP beside it, and both turns untimed (ours and the floor taking turns, then the same timed)."""
    import importlib

    services, turn = our_agent(model_url)
    floor = floor_turn(model_url)
    plain: dict[str, list[float]] = {"ours": [], "floor": []}
    for i in range(turns + 5):
        for who, fn in (("ours", turn), ("floor", floor)):
            started = time.perf_counter()
            fn()
            if i >= 5:
                plain[who].append((time.perf_counter() - started) * 1e6)
    timer = _StepTimer()
    for step, functions in STEPS.items():
        for module, path in functions:
            owner: Any = importlib.import_module(module)
            *outer, attr = path.split(".")
            for name in outer:
                owner = getattr(owner, name)
            timer.wrap(owner, attr, step, cpu=step.startswith("HTTP"))
    services.agent.now = _bound(services.agent.now)  # an instance attribute, wrapped on the instance
    timer.wrap(services.agent, "now", "clocks (timestamps)")
    timer.wrap(services.agent, "run_turn", OTHER)
    per_turn: dict[str, list[float]] = {}
    try:
        for i in range(turns + 5):
            for who, fn in (("ours", turn), ("floor", floor)):
                timer.turn = {}
                fn()
                if i >= 5:
                    for step, seconds in timer.turn.items():
                        per_turn.setdefault(f"{who}: {step}", []).append(seconds * 1e6)
    finally:
        timer.restore()
    out: dict[str, Any] = {k: median(v) for k, v in per_turn.items()}
    out["_plain_us"] = median(plain["ours"])  # without the timers
    out["_floor_us"] = median(plain["floor"])
    out["_timed_us"] = sum(v for k, v in out.items() if k.startswith("ours: ") and not k.endswith("(CPU)"))
    return out


def _bound(fn: Callable[[], str]) -> Callable[[], str]:
    return lambda: fn()
