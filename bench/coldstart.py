"""Cold starts: each handler in fresh processes, side by side with a bare boto3 handler and the peers.

Every run is a new interpreter (bench/cold_child.py) that imports the handler and serves one event
against moto and the instant model, both out of process. Rounds interleave the variants, so load on
the machine falls on all of them alike; the median of the runs is reported.
"""

from __future__ import annotations

import atexit
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.env import LAMBDA_PYTHON, PEERS_PYTHON, PYTHON, ROOT, World

HANDLERS = ROOT / "bench" / "handlers"
# Our handlers and the baseline run where Lambda would run them: the layer's packages and boto3 only.
OURS = LAMBDA_PYTHON if LAMBDA_PYTHON.exists() else PYTHON
CHAT_MESSAGE = "Where is my order 1042, and what did you bill me for it?"


@dataclass
class Variant:
    name: str
    python: Path
    handler: Path
    function: str | None  # the template's logical id, for its environment
    event: Any  # a callable returning a fresh event, or a fixed one
    group: str  # ours | snapstart | nopyc | baseline | floor | peer
    runs: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # over the function's deployed environment

    def median(self, key: str) -> float:
        return statistics.median(r[key] for r in self.runs)


def _api_event(method: str, path: str, token: str, body: Any = None) -> dict[str, Any]:
    event = json.loads((ROOT / "events" / "chat.json").read_text())
    raw_path, _, query = path.partition("?")
    event.update(routeKey=f"{method} {raw_path}", rawPath=raw_path, rawQueryString=query)
    event["headers"]["authorization"] = f"Bearer {token}"
    event["requestContext"]["http"].update(method=method, path=raw_path)
    if query:
        event["queryStringParameters"] = dict(kv.split("=", 1) for kv in query.split("&"))
    if body is None:
        event.pop("body", None)
    else:
        event["body"] = json.dumps(body)
    return event


def variants(world: World) -> list[Variant]:
    from bench.env import JWT_SECRET
    from devstack.tokens import mint_token

    customer = mint_token("customer-7", "customer", 7, secret=JWT_SECRET, ttl_seconds=7200)
    lead = mint_token("lead-1", "support_lead", None, secret=JWT_SECRET, ttl_seconds=7200)

    def chat_event() -> dict[str, Any]:
        return _api_event("POST", "/api/chat", customer, {"conversationId": None, "message": CHAT_MESSAGE})

    def notifier_event() -> dict[str, Any]:
        return _approval_queue_event(world)

    def mcp_event() -> dict[str, Any]:  # an MCP client's first useful request: tools/list (stateless)
        event = _api_event("POST", "/mcp", customer, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        event["headers"].update({"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"})
        return event

    def ticket_event() -> dict[str, Any]:  # EventsFunction's shortest first request: a WebSocket ticket
        return _api_event("POST", "/api/ws-ticket", customer)

    out = [
        Variant("chat", OURS, ROOT / "functions/chat/app.py", "ChatFunction", chat_event, "ours"),
        *snapstart_variants(
            {
                "chat": ("functions/chat/app.py", "ChatFunction", chat_event),
                "events (POST /api/ws-ticket)": ("functions/events/app.py", "EventsFunction", ticket_event),
                "mcp (tools/list)": ("functions/mcp/app.py", "McpFunction", mcp_event),
                "approvals": (
                    "functions/approvals/app.py",
                    "ApprovalsFunction",
                    _api_event("GET", "/api/approvals?status=PENDING", lead),
                ),
                "payments webhook (a signed event)": (
                    "functions/payments_webhook/app.py",
                    "PaymentsWebhookFunction",
                    _stripe_event,
                ),
                "socket ($disconnect)": ("functions/socket/app.py", "SocketFunction", _socket_event),
            }
        ),
        Variant("mcp (tools/list)", OURS, ROOT / "functions/mcp/app.py", "McpFunction", mcp_event, "ours"),
        Variant(
            "chat, MCP_SERVERS set (an outside server's tools/list on the first event)",
            OURS,
            ROOT / "functions/chat/app.py",
            "ChatFunction",
            chat_event,
            "ours",
            env={"MCP_SERVERS": _outside_servers(world)},
        ),
        Variant(
            "approvals",
            OURS,
            ROOT / "functions/approvals/app.py",
            "ApprovalsFunction",
            _api_event("GET", "/api/approvals?status=PENDING", lead),
            "ours",
        ),
        Variant(
            "notifier",
            OURS,
            ROOT / "functions/approval_notifier/app.py",
            "ApprovalNotifierFunction",
            notifier_event,
            "ours",
        ),
        Variant("sweep", OURS, ROOT / "functions/approval_sweep/app.py", "ApprovalSweepFunction", {}, "ours"),
        Variant("baseline (boto3 GetItem)", OURS, HANDLERS / "baseline.py", None, {}, "baseline"),
        # the floor under the chat handler's import: the libraries it keeps, none of our code
        Variant(
            "libraries only (baseline + Powertools, pydantic, pyjwt)",
            OURS,
            HANDLERS / "libraries.py",
            None,
            chat_event,
            "floor",
        ),
    ]
    if LAMBDA_PYTHON.exists():  # the same packages, without their .pyc (`make bench` builds the venv)
        raw = Variant(
            "chat, as a plain `sam build` ships it (no .pyc)",
            Path(sys.base_prefix) / "bin" / "python3",  # the venv's own interpreter, run with -S
            ROOT / "functions/chat/app.py",
            "ChatFunction",
            chat_event,
            "nopyc",
        )
        out.insert(2, raw)
    if PEERS_PYTHON.exists():
        for name, module in (
            ("strands-agents", "peer_strands"),
            ("pydantic-ai", "peer_pydantic_ai"),
            ("langgraph + langchain-anthropic", "peer_langgraph"),
            ("openai-agents", "peer_openai_agents"),
        ):
            out.append(Variant(name, PEERS_PYTHON, HANDLERS / f"{module}.py", None, chat_event, "peer"))
    return out


SNAPSTART = "SnapStart (simulated: after restore)"
# Signs the bench's webhook events; PaymentsWebhookFunction reads it from its environment (never a real secret).
BENCH_WEBHOOK_SECRET = "whsec_bench"


def snapstart_variants(functions: dict[str, tuple[str, str, Any]]) -> list[Variant]:
    """One simulated-SnapStart variant per API-facing function: {label: (handler file, logical id, event)}.

    cold_child.py runs the handler's prime as part of the "import" and times only the first event after it.
    """
    return [
        Variant(
            f"{label}, {SNAPSTART}",
            OURS,
            ROOT / handler,
            function,
            event,
            "snapstart",
            env={"STRIPE_WEBHOOK_SECRET": BENCH_WEBHOOK_SECRET} if function == "PaymentsWebhookFunction" else {},
        )
        for label, (handler, function, event) in functions.items()
    ]


def _stripe_event() -> dict[str, Any]:
    """An event Stripe would send, signed now, of a type the ledger ignores: verified and parsed, nothing written."""
    from support_agent.refunds.webhooks import signature

    body = json.dumps(
        {
            "id": f"evt_bench_{time.time_ns()}",
            "type": "charge.succeeded",
            "created": int(time.time()),
            "data": {"object": {"id": "ch_bench", "object": "charge", "status": "succeeded"}},
        }
    )
    now = int(time.time())
    event = _api_event("POST", "/webhooks/stripe", "")
    event["headers"].pop("authorization")
    event["headers"]["stripe-signature"] = f"t={now},v1={signature(body.encode(), BENCH_WEBHOOK_SECRET, now)}"
    event["body"] = body
    return event


def _socket_event() -> dict[str, Any]:
    """The WebSocket API's $disconnect for a connection: the socket function's one DynamoDB update."""
    return {
        "requestContext": {
            "routeKey": "$disconnect",
            "eventType": "DISCONNECT",
            "connectionId": f"bench{time.time_ns()}=",
            "requestId": "bench-request",
            "apiId": "local",
            "stage": "dev",
        },
        "isBase64Encoded": False,
    }


_OUTSIDE: str | None = None


def _outside_servers(world: World) -> str:
    """MCP_SERVERS naming devstack's carrier stub, started once per run (its token stored in moto's Secrets
    Manager, where the chat function reads it): the committed configuration, pointed at the stub."""
    global _OUTSIDE
    if _OUTSIDE is None:
        import boto3

        from devstack.carrier_mcp import local_servers, start_for_dev

        secrets = boto3.Session(region_name="us-east-1").client("secretsmanager", endpoint_url=world.moto_url)
        stub = start_for_dev({"CARRIER_PORT": "0"}, secrets)
        atexit.register(stub.stop)
        _OUTSIDE = json.dumps(local_servers(stub.url))
    return _OUTSIDE


def _approval_queue_event(world: World) -> dict[str, Any]:
    """A PENDING approval never notified, sent through the deployed queue and received as Lambda would."""
    import boto3

    from devstack.events import sqs_event
    from support_agent.ids import new_approval_id

    env = world.stack.function_env("ChatFunction")
    session = boto3.Session(region_name="us-east-1")
    ddb = session.client("dynamodb", endpoint_url=world.moto_url)
    sqs = session.client("sqs", endpoint_url=world.moto_url)
    approval_id = new_approval_id()
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    item = {
        "approval_id": {"S": approval_id},
        "entity": {"S": "APPROVAL"},
        "status": {"S": "PENDING"},
        "customer_id": {"N": "7"},
        "order_id": {"N": "1042"},
        "amount_cents": {"N": "9000"},
        "currency": {"S": "USD"},
        "reason": {"S": "customer request"},
        "conversation_id": {"S": "conv_bench"},
        "created_at": {"S": now},
    }
    ddb.put_item(TableName=env["APPROVALS_TABLE"], Item=item)
    url = env["APPROVAL_QUEUE_URL"]
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"approvalId": approval_id}))
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, AttributeNames=["All"], WaitTimeSeconds=1)
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return sqs_event(got["Messages"], arn, "us-east-1")


_NO_BYTECODE: Path | None = None


def no_bytecode_tree() -> Path:
    """The layer as a plain `sam build` ships it: bench/.venv-lambda's packages and our source, no .pyc.

    Run with `python -S` from the base interpreter and PYTHONDONTWRITEBYTECODE, as Lambda's read-only
    /opt is: every module is compiled on every cold start (`make build` precompiles; this row is why).
    """
    global _NO_BYTECODE
    if _NO_BYTECODE is None:  # built afresh once per run, from the code as it is now
        tree = Path(tempfile.mkdtemp(prefix="bench-layer-no-pyc-"))
        atexit.register(shutil.rmtree, tree, ignore_errors=True)
        site = next((LAMBDA_PYTHON.parent.parent / "lib").glob("python3*/site-packages"))
        skip = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(site, tree, dirs_exist_ok=True, ignore=skip)
        shutil.copytree(ROOT / "layers" / "common" / "support_agent", tree / "support_agent", ignore=skip)
        _NO_BYTECODE = tree
    return _NO_BYTECODE


def run_once(world: World, v: Variant) -> dict[str, Any]:
    event = v.event() if callable(v.event) else v.event
    env = world.env(v.function)
    # Every chat variant's runs are one customer's turns within minutes: the limit's check still runs (one
    # update, as always), its threshold is only out of the way.
    env["TURNS_PER_MINUTE"] = "10000"
    flags: list[str] = []
    if v.group == "peer":
        env.pop("PYTHONPATH", None)
    if v.group == "nopyc":
        env.update(PYTHONPATH=str(no_bytecode_tree()), PYTHONDONTWRITEBYTECODE="1")
        flags = ["-S"]
    if v.group == "snapstart":
        env["BENCH_SNAPSTART"] = "1"
    env.update(v.env)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(event, fh)
    started = time.perf_counter()
    proc = subprocess.run(
        [str(v.python), *flags, str(ROOT / "bench" / "cold_child.py"), str(v.handler), fh.name],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=v.handler.parent,
    )
    wall = (time.perf_counter() - started) * 1000
    Path(fh.name).unlink()
    if proc.returncode != 0:
        raise RuntimeError(f"{v.name} failed:\n{proc.stderr[-3000:]}")
    result = dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    if result["status"] != 200 or result["failures"]:
        raise RuntimeError(f"{v.name} answered {result['status']}: {result['body']}")
    result["process_ms"] = wall
    return result


def interpreter_ms(python: Path, runs: int = 5) -> float:
    """A bare interpreter's start and exit, to read the process wall times against."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([str(python), "-c", "pass"], check=True)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(world: World, runs: int) -> list[Variant]:
    vs = variants(world)
    for v in vs:  # one untimed run each: page cache and .pyc files warm, as on a Lambda host
        run_once(world, v)
    for _ in range(runs):
        for v in vs:
            v.runs.append(run_once(world, v))
    return vs


def importtime(world: World, handler: Path, function: str) -> list[tuple[str, float, float]]:
    """`python -X importtime` of a handler: (module, self ms, cumulative ms), largest first."""
    env = world.env(function)
    proc = subprocess.run(
        [str(OURS), "-X", "importtime", "-c", "import app"],
        env=env,
        capture_output=True,
        text=True,
        cwd=handler.parent,
        check=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line or "self [us]" in line:
            continue
        _, self_us, cumulative_us, name = (part.strip() for part in line.replace("import time:", "|").split("|"))
        rows.append((name, int(self_us) / 1000, int(cumulative_us) / 1000))
    return rows


def breakdown(rows: list[tuple[str, float, float]]) -> dict[str, float]:
    """Cumulative import cost of the packages a handler pulls in, each counted where first imported."""
    groups = {
        "boto3 + botocore": ("boto3", "botocore", "s3transfer", "urllib3", "jmespath", "dateutil"),
        "pydantic": ("pydantic", "pydantic_core", "annotated_types", "typing_extensions", "typing_inspection"),
        "Powertools OpenAPI validation": ("aws_lambda_powertools.event_handler.openapi",),
        "Powertools event handler (resolver)": ("aws_lambda_powertools.event_handler",),
        "Powertools other": ("aws_lambda_powertools",),
        "pyjwt": ("jwt",),
        "cryptography (via pyjwt)": ("cryptography", "cffi", "_cffi_backend"),
        "httpx": ("httpx", "httpcore", "h11", "anyio", "sniffio", "certifi", "idna"),
        "support_agent (own code)": ("support_agent",),
        "app.py": ("app",),
    }
    totals = dict.fromkeys(groups, 0.0)
    totals["standard library and other"] = 0.0
    for name, self_ms, _ in rows:
        for group, prefixes in groups.items():
            if any(name == p or name.startswith(p + ".") for p in prefixes):
                totals[group] += self_ms
                break
        else:
            totals["standard library and other"] += self_ms
    return totals
