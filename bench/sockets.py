"""The WebSocket channel beside the long poll (issue 36): how soon each shows the reply and a stored event, what an
idle client costs, and what streaming costs the turn.

``python -m bench.sockets --child OUT`` (a process of its own, as bench/cost.py's child: the local stack sets this
process's AWS environment) starts the local stack (devstack/local.py: the functions in their worker processes, the
Conversations table's stream polled as Lambda polls it, the template's WebSocket API and its ``@connections``
endpoint) with bench/cost.py's counting (`Recorder`), and the simulated model writing a streamed reply over
``WRITING_SECONDS``. One customer's page follows one conversation two ways at once: a real WebSocket client
(``websockets``; a ticket from ``POST /api/ws-ticket``, then ``subscribe``) and the long poll
(``GET /api/conversations/{id}/events?waitSeconds=20`` over HTTP, one after another, each from the last cursor).
Every clock is ``perf_counter`` in this process (the model, both clients and the writer run here):

* **text deltas**: ``DELTA_TURNS`` turns through ``POST /api/chat`` (a text-only answer): from the simulated model
  flushing the reply's first text frame (its HTTP handler's ``wfile`` wrapped) to the socket's first ``delta``
  frame, and to the long poll's first page holding the reply's ``message`` (what it sees first: nothing is shown
  before the turn's end);
* **stored events**: ``SAMPLES`` notifications written (``NotificationStore``, as the approval flow writes them)
  each a random 0 to ``MAX_DELAY`` s after the long poll began waiting (bench/feed.py's delays and seed), from the
  write's TransactWriteItems answering to each client's receipt of that very event;
* **an idle connected client**: what connecting costs (the ticket, ``$connect``, ``subscribe``), ``IDLE_SECONDS``
  of nothing, and one keepalive (``ping``: API Gateway closes a connection idle for 10 minutes), each function's
  invocations, their time and DynamoDB request units counted as bench/cost.py counts them.

The streaming overhead of the loop is bench/loop.py's `streaming` (in the parent, against the instant model).
Prices are applied when the report is written (`idle_minute`, `usd`), from bench/aws_prices.json.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.feed import MAX_DELAY, SAMPLES, SEED, gb_seconds, percentile

DELTA_TURNS = int(os.environ.get("BENCH_SOCKET_TURNS", "10"))
WRITING_SECONDS = 1.5  # the simulated model spreads a streamed reply's text over this (SIMULATED_MODEL_DELAY_SECONDS)
IDLE_SECONDS = float(os.environ.get("BENCH_SOCKET_IDLE_SECONDS", "30"))  # the idle window (scaled to a minute)
KEEPALIVE_MINUTES = 5  # the chat page's ping (web/common.js): API Gateway closes a connection idle for 10
CONNECTION_MINUTES = 120  # API Gateway ends a connection after 2 hours: the page connects again
MESSAGE_BYTES = 32 * 1024  # API Gateway meters WebSocket messages in 32 KB increments
GREETING = "Hello, what can you help me with?"  # the simulated model answers it with text only
PARAMETERS = {"TurnsPerMinute": "1000", "ReadsPerMinute": "10000"}  # the bench's own pace is not refused


# -- pure helpers (tests/unit/test_bench_sockets.py) ---------------------------------------------------------


def summary(values: list[float]) -> dict[str, float]:
    """Median and nearest-rank p95 (bench/feed.py's `percentile`: a measured value), min and max."""
    return {
        "n": len(values),
        "median": statistics.median(values),
        "p95": percentile(values, 95),
        "min": min(values),
        "max": max(values),
    }


def first_at_or_after(stamps: list[float], since: float) -> float | None:
    """The first stamp taken at or after ``since`` (stamps in the order they were taken)."""
    return next((t for t in stamps if t >= since), None)


def messages(frame_bytes: list[int]) -> int:
    """WebSocket messages as API Gateway bills them: each frame in 32 KB increments, at least one."""
    return sum(max(1, math.ceil(size / MESSAGE_BYTES)) for size in frame_bytes)


USAGE = ("invocations", "gb_seconds", "rru", "wru", "http_requests", "messages", "connection_minutes")


def usage(functions: dict[str, dict[str, Any]], memory: dict[str, int], **extra: float) -> dict[str, float]:
    """A run's billable units from bench/cost.py's `Recorder.since` (per function: invocations, seconds, request
    units), with the memory each function is deployed with; ``extra``: the units counted outside (HTTP requests,
    WebSocket messages, connection minutes)."""
    out = dict.fromkeys(USAGE, 0.0)
    for fn, f in functions.items():
        out["invocations"] += f["invocations"]
        out["gb_seconds"] += gb_seconds(memory[fn], f["seconds"])
        out["rru"] += f["rru"]
        out["wru"] += f["wru"]
    for key, value in extra.items():
        out[key] += value
    return out


def scaled(run: dict[str, float], factor: float) -> dict[str, float]:
    return {k: v * factor for k, v in run.items()}


def added(*runs: dict[str, float]) -> dict[str, float]:
    return {k: sum(r.get(k, 0.0) for r in runs) for k in USAGE}


def usd(run: dict[str, float], prices: dict[str, Any], architecture: str) -> dict[str, float]:
    """Each line item's USD (on-demand list prices per million units, bench/aws_prices.json)."""
    p = {k: v["usd_per_million"] / 1e6 for k, v in prices["per_million"].items()}
    return {
        "Lambda requests": run["invocations"] * p["lambda_request"],
        "Lambda GB-seconds": run["gb_seconds"] * p[f"lambda_gb_second_{architecture}"],
        "DynamoDB reads": run["rru"] * p["dynamodb_read_request_unit"],
        "DynamoDB writes": run["wru"] * p["dynamodb_write_request_unit"],
        "HTTP API requests": run["http_requests"] * p["http_api_request"],
        "WebSocket messages": run["messages"] * p["websocket_message"],
        "WebSocket connection minutes": run["connection_minutes"] * p["websocket_connection_minute"],
    }


def long_poll_minute(minute: dict[str, Any], events_memory_mb: int) -> dict[str, float]:
    """bench/feed.py's measured minute of one waiting page, in `usage`'s units: each poll an HTTP API request and
    an invocation holding EventsFunction for its wait."""
    return {
        **dict.fromkeys(USAGE, 0.0),
        "invocations": float(minute["invocations"]),
        "gb_seconds": gb_seconds(events_memory_mb, minute["held_seconds"]),
        "rru": float(minute["rcu"]),
        "wru": float(minute["wcu"]),
        "http_requests": float(minute["invocations"]),
    }


def idle_minute(measured: dict[str, Any]) -> dict[str, dict[str, float]]:
    """An idle connected page's minute, by part: the connection minute, its idle window scaled to a minute, a
    keepalive every KEEPALIVE_MINUTES and a new connection (ticket, $connect, subscribe) every CONNECTION_MINUTES."""
    minute = {**dict.fromkeys(USAGE, 0.0), "connection_minutes": 1.0}
    return {
        "the connection minute": minute,
        "the idle window, per minute": scaled(measured["idle"], 60 / measured["idle_seconds"]),
        f"a keepalive every {KEEPALIVE_MINUTES} minutes": scaled(measured["keepalive"], 1 / KEEPALIVE_MINUTES),
        f"connecting again every {CONNECTION_MINUTES} minutes": scaled(measured["connect"], 1 / CONNECTION_MINUTES),
    }


# -- the parent ------------------------------------------------------------------------------------------------


def measure(world: Any, warmup: int, runs: int) -> dict[str, Any]:
    """The local stack's measurements (a child of its own), and the loop's streaming overhead (bench/loop.py)."""
    from bench.cost import run_child
    from bench.loop import streaming

    loop = streaming(world.model_url, warmup, runs)  # first: a minute, where the child takes several
    return {**run_child("bench.sockets"), "loop": loop}


# -- the child: the local stack, one page following a conversation both ways ----------------------------------------


class Stamping:
    """The simulated model's ``wfile``: a flush that sent a text delta is stamped (the model's text written)."""

    def __init__(self, raw: Any, stamps: list[float]) -> None:
        self._raw, self._stamps, self._text = raw, stamps, False

    def write(self, data: bytes) -> Any:
        self._text = self._text or b'"text_delta"' in data
        return self._raw.write(data)

    def flush(self) -> None:
        self._raw.flush()
        if self._text:
            self._stamps.append(time.perf_counter())
            self._text = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def stamp_model_text(stamps: list[float]) -> None:
    from devstack.simulated_model import server

    send = server._Handler._send

    def stamped(handler: Any, reply: Any) -> None:
        raw = handler.wfile
        handler.wfile = Stamping(raw, stamps)
        try:
            send(handler, reply)
        finally:
            handler.wfile = raw

    server._Handler._send = stamped  # type: ignore[method-assign]


class Received:
    """What a client received, each with the perf_counter of its arrival; waited on by the main thread."""

    def __init__(self) -> None:
        self.items: list[tuple[float, dict[str, Any]]] = []
        self._cond = threading.Condition()

    def add(self, at: float, item: dict[str, Any]) -> None:
        with self._cond:
            self.items.append((at, item))
            self._cond.notify_all()

    def wait(self, found: Callable[[dict[str, Any]], bool], since: float, timeout: float = 30) -> float:
        """The arrival of the first item since ``since`` that ``found`` accepts."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                hit = next((at for at, item in self.items if at >= since and found(item)), None)
                if hit is not None:
                    return hit
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("nothing arrived")
                self._cond.wait(left)


class Page:
    """One customer's page following a conversation over the socket and the long poll at once."""

    def __init__(self, local: Any) -> None:
        import httpx

        self.local = local
        self.auth = {"Authorization": f"Bearer {local.tokens['customers'][0]['token']}"}
        self.http = httpx.Client(base_url=local.url, timeout=60)
        self.socket_in, self.polled, self.poll_began = Received(), Received(), Received()
        self.sent_bytes: list[int] = []
        self.received_bytes: list[int] = []
        self.ws: Any = None
        self.cid = ""
        self.cursor: str | None = None
        self._stop = threading.Event()

    def chat(self, message: str, cid: str | None) -> dict[str, Any]:
        r = self.http.post("/api/chat", json={"conversationId": cid, "message": message}, headers=self.auth)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def events(self, wait: int) -> dict[str, Any]:
        params: dict[str, Any] = {"waitSeconds": wait, **({"after": self.cursor} if self.cursor else {})}
        r = self.http.get(f"/api/conversations/{self.cid}/events", params=params, headers=self.auth, timeout=60)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def start(self) -> None:
        """A conversation (its first turn streams to nobody), and the feed caught up: the cursor both follow from."""
        self.cid = self.chat(GREETING, None)["conversationId"]
        while True:
            page = self.events(0)
            self.cursor = page["nextCursor"]
            if not page["events"]:
                return

    def connect(self) -> None:
        from websockets.sync.client import connect

        r = self.http.post("/api/ws-ticket", headers=self.auth)
        assert r.status_code == 200, r.text
        self.ws = connect(r.json()["url"], open_timeout=30)
        threading.Thread(target=self._receive, daemon=True, name="bench-socket").start()
        began = time.perf_counter()
        self.send({"action": "subscribe", "conversationId": self.cid, "after": self.cursor})
        self.socket_in.wait(lambda m: m.get("type") == "subscribed", began)

    def send(self, frame: dict[str, Any]) -> None:
        data = json.dumps(frame)
        self.sent_bytes.append(len(data.encode()))
        self.ws.send(data)

    def _receive(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            for frame in self.ws:
                at = time.perf_counter()
                self.received_bytes.append(len(frame if isinstance(frame, bytes) else frame.encode()))
                self.socket_in.add(at, json.loads(frame))
        except ConnectionClosed:
            return

    def long_poll(self) -> None:
        """Poll after poll from the last cursor, each page's events stamped as it returns (a thread of its own)."""
        while not self._stop.is_set():
            self.poll_began.add(time.perf_counter(), {})
            page = self.events(20)
            at = time.perf_counter()
            self.cursor = page["nextCursor"]
            for event in page["events"]:
                self.polled.add(at, event)

    def stop(self, writer: Any) -> None:
        self._stop.set()
        write_notification(writer, self.cid, "stop")  # the waiting poll returns at once
        self.ws.close()


def write_notification(writer: Any, cid: str, name: str) -> float:
    """A feed event stored as the approval flow stores one; the perf_counter of its TransactWriteItems' answer."""
    from support_agent.clock import utc_now
    from support_agent.store.notifications import Notification

    data = {"approvalId": f"apr_bench_{name}", "orderId": 1042, "amountCents": 100, "status": "REFUNDED"}
    writer.transact([], Notification(conversation_id=cid, type="approval.decided", at=utc_now(), data=data))
    return time.perf_counter()


def _reply(event: dict[str, Any], turn_id: str) -> bool:
    return event.get("type") == "message" and event.get("role") == "assistant" and event.get("turnId") == turn_id


def _pushed(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == "event" and m["event"].get("approvalId") == f"apr_bench_{name}"


def _polled(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e.get("approvalId") == f"apr_bench_{name}"


def deltas(page: Page, model_text: list[float]) -> list[dict[str, float]]:
    """Each turn: the model's first text frame → the socket's first delta, and → the long poll's reply message."""
    samples = []
    for _ in range(DELTA_TURNS):
        began = time.perf_counter()
        page.chat(GREETING, page.cid)
        delta = page.socket_in.wait(lambda m: m.get("type") == "delta", began)
        turn_id = next(m["turnId"] for at, m in page.socket_in.items if at == delta and m.get("type") == "delta")
        seen = page.polled.wait(lambda e, t=turn_id: _reply(e, t), began)
        page.socket_in.wait(lambda m, t=turn_id: m.get("type") == "event" and _reply(m["event"], t), began)
        first = first_at_or_after(model_text, began)
        assert first is not None, "the model wrote no text"
        last = max(t for t in model_text if t >= began)
        texts = [m for at, m in page.socket_in.items if at >= began and m.get("type") == "delta"]
        samples.append(
            {"socket": delta - first, "long_poll": seen - first, "writing": last - first, "posts": len(texts)}
        )
    return samples


def pushes(page: Page, writer: Any) -> list[dict[str, float]]:
    """Each notification: its write → the socket's push, and → the long poll's return, both for the same event."""
    rng = random.Random(SEED)
    samples = []
    for n in range(SAMPLES):
        delay = rng.uniform(0, MAX_DELAY)
        waiting = _waiting_poll(page, delay)
        time.sleep(max(0.0, waiting + delay - time.perf_counter()))
        committed = write_notification(writer, page.cid, str(n))
        pushed = page.socket_in.wait(_pushed(str(n)), committed)
        polled = page.polled.wait(_polled(str(n)), committed)
        samples.append({"delay": delay, "socket": pushed - committed, "long_poll": polled - committed})
    return samples


def _waiting_poll(page: Page, delay: float) -> float:
    """When the long poll now waiting began (bench/feed.py writes ``delay`` after that); a poll already waiting
    longer than ``delay``: the next one's."""
    last_return = max((at for at, _ in page.polled.items), default=0.0)
    began = page.poll_began.wait(lambda _: True, max(last_return, page.poll_began.items[-1][0]))  # the newest
    if time.perf_counter() - began > delay:
        began = page.poll_began.wait(lambda _: True, time.perf_counter())
    return began


def costs(page: Page, recorder: Any, memory: dict[str, int]) -> dict[str, Any]:
    """A connection's life on warm functions (ticket, $connect counted as a message, subscribe and its answer,
    $disconnect), then a connection's idle window and one keepalive."""
    for _ in range(2):  # the first builds SocketFunction's clients; the second is measured
        mark, sent, got = recorder.mark(), len(page.sent_bytes), len(page.received_bytes)
        page.connect()
        page.ws.close()
        recorder.wait_quiet()
        frames = [0, *page.sent_bytes[sent:], *page.received_bytes[got:]]  # $connect: a message (assumed)
        connect = usage(recorder.since(mark), memory, http_requests=1, messages=messages(frames))
    page.connect()
    recorder.wait_quiet()
    mark, began = recorder.mark(), time.perf_counter()
    time.sleep(IDLE_SECONDS)
    idle_seconds = time.perf_counter() - began
    idle = usage(recorder.since(mark), memory)
    mark, sent, got = recorder.mark(), len(page.sent_bytes), len(page.received_bytes)
    pinged = time.perf_counter()
    page.send({"action": "ping"})  # the chat page's keepalive: the route's MOCK integration answers a pong
    page.socket_in.wait(lambda m: m.get("type") in ("pong", "error"), pinged)
    recorder.wait_quiet()
    keepalive = usage(
        recorder.since(mark), memory, messages=messages(page.sent_bytes[sent:] + page.received_bytes[got:])
    )
    answer = [str(m.get("type")) for at, m in page.socket_in.items if at >= pinged]
    return {
        "connect": connect,
        "idle": idle,
        "idle_seconds": idle_seconds,
        "keepalive": keepalive,
        "keepalive_answer": answer,
    }


def child(out_path: str) -> None:
    import boto3

    from bench.cost import Recorder
    from devstack.events import STREAM_POLL_SECONDS
    from devstack.local import start
    from support_agent.store.notifications import NotificationStore

    recorder = Recorder(Path(tempfile.mkdtemp(prefix="bench-sockets-calls-")))
    recorder.patch()
    model_text: list[float] = []
    stamp_model_text(model_text)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "STRIPE_"))}
    for name in ("LLM_PROVIDER", "TOOL_MODE"):
        environ.pop(name, None)
    environ["SIMULATED_MODEL_DELAY_SECONDS"] = str(WRITING_SECONDS)
    local = start(port=0, moto_port=0, environ=environ, schedule_seconds=86_400, parameters=PARAMETERS)
    try:
        memory = {
            fn: int(r["Properties"]["MemorySize"])
            for fn, r in local.stack.template["Resources"].items()
            if r["Type"] == "AWS::Lambda::Function"
        }
        page = Page(local)
        page.start()
        recorder.wait_quiet()
        measured_costs = costs(page, recorder, memory)
        threading.Thread(target=page.long_poll, daemon=True, name="bench-long-poll").start()
        page.chat(GREETING, page.cid)  # the first streamed turn builds the chat function's poster: not measured
        writer = NotificationStore(boto3.client("dynamodb"), local.stack.physical_ids["ConversationsTable"])
        write_notification(writer, page.cid, "warm")  # and the pusher's first post
        page.socket_in.wait(_pushed("warm"), 0)
        page.polled.wait(_polled("warm"), 0)
        out = {
            "deltas": deltas(page, model_text),
            "events": pushes(page, writer),
            **measured_costs,
            "memory": memory,
            "architecture": local.stack.sam_template["Parameters"]["Architecture"]["Default"],
            "writing_seconds": WRITING_SECONDS,
            "stream_poll_seconds": STREAM_POLL_SECONDS,
        }
        page.stop(writer)
        Path(out_path).write_text(json.dumps(out), encoding="utf-8")
    finally:
        local.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"] and len(sys.argv) == 3:
        child(sys.argv[2])
    else:
        raise SystemExit("python -m bench.sockets --child OUT (make bench runs it: BENCH_ONLY=sockets)")
