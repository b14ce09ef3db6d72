"""The `sam build` output, run the way Lambda runs it: packaging and runtime compatibility (issue 8).

Both architectures are built from template.yaml. The host's build then serves one event per function
from events/ under the template's runtime (python3.13), each in a fresh isolated interpreter whose
``sys.path`` holds only the built function, the built layer and the runtime's boto3 (see
lambda_shim.py): a dependency missing from the layer's requirements.txt fails here, not in AWS.
The functions talk to a moto server the stack was deployed into, and the chat function to the
simulated model over HTTP, each with its deployed environment. The arm64 build must resolve (pip
fetches manylinux aarch64 wheels; no container needed) and carry aarch64 binaries.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from devstack.events import stream_event
from devstack.seed import seed
from devstack.simulated_model import SimulatedModelServer
from devstack.simulated_model import start as start_model
from devstack.stack import Stack, deploy
from devstack.tokens import mint_token
from support_agent.store.dynamo import from_item, to_item

if TYPE_CHECKING:
    from tests.smoke.conftest import Build, Tools

REPO = Path(__file__).resolve().parents[2]
EVENTS = REPO / "events"
ARCHITECTURES = ("x86_64", "arm64")  # conftest.ARCHITECTURES: what the `builds` fixture builds
SHIM = Path(__file__).with_name("lambda_shim.py")
SECRET = "smoke-test-secret-0123456789abcdef-0123"
REGION = "us-east-1"
STACK_NAME = "support-agent-smoke"
ELF_MACHINE = {"x86_64": 62, "arm64": 183}  # e_machine: EM_X86_64, EM_AARCH64
# Compiled packages of the layer: their binaries must be for the build's architecture.
COMPILED = ("pydantic_core", "cryptography", "_cffi_backend")
INVOKE_TIMEOUT_SECONDS = 120


# ------------------------------------------------------------------ the builds


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_sam_build_succeeds(builds: dict[str, Build], arch: str) -> None:
    build = builds[arch]
    assert build.returncode == 0, f"sam build ({arch}) failed after {build.seconds}s:\n{build.log[-4000:]}"
    assert "Build Succeeded" in build.log
    functions = [k for k, r in build.template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"]
    assert {"ChatFunction", "PaymentsFunction", "PaymentSweepFunction", "ReconcileFunction"} <= set(functions)
    for logical_id in functions:
        assert (build.function_dir(logical_id) / "app.py").is_file(), logical_id
    assert (build.layer_dir() / "python" / "support_agent" / "wiring.py").is_file()


def elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(header[18:20], "little")


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_layer_binaries_match_the_architecture(builds: dict[str, Build], arch: str) -> None:
    build = builds[arch]
    assert build.returncode == 0, f"sam build ({arch}) failed"
    python = build.layer_dir() / "python"
    binaries = [p for p in python.rglob("*.so") if p.relative_to(python).parts[0].split(".")[0] in COMPILED]
    found = {p.relative_to(python).parts[0].split(".")[0] for p in binaries}
    assert found == set(COMPILED), f"compiled packages missing from the {arch} layer: {set(COMPILED) - found}"
    wrong = [str(p.relative_to(python)) for p in binaries if elf_machine(p) != ELF_MACHINE[arch]]
    assert not wrong, f"{arch} layer holds binaries for another machine: {wrong}"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_layer_holds_every_requirement(builds: dict[str, Build], arch: str) -> None:
    build = builds[arch]
    assert build.returncode == 0, f"sam build ({arch}) failed"
    lines = [ln.strip() for ln in (REPO / "layers/common/requirements.txt").read_text().splitlines()]
    required = {_canonical(re.split(r"[\[<>=!~ ;]", ln, maxsplit=1)[0]) for ln in lines if ln[:1].isalpha()}
    installed = {
        _canonical(p.name.split("-")[0]) for p in (build.layer_dir() / "python").glob("*.dist-info") if p.is_dir()
    }
    assert required and required <= installed, f"missing from the {arch} layer: {required - installed}"
    assert "boto3" not in installed, "boto3 comes with the runtime; the layer should not ship it"


# ------------------------------------------------------------------ local AWS for the built functions


@dataclass
class LocalAws:
    url: str
    session: boto3.Session
    stack: Stack
    model: SimulatedModelServer
    xray: socket.socket  # where the X-Ray SDK's UDP emitter sends segments (AWS_XRAY_DAEMON_ADDRESS)
    leads_inbox: str  # an SQS queue subscribed to the leads' SNS topic
    state: dict[str, Any] = field(default_factory=dict)

    def client(self, service: str) -> Any:
        return self.session.client(service, endpoint_url=self.url)  # type: ignore[call-overload]

    def table(self, logical_id: str) -> str:
        return self.stack.physical_ids[logical_id]


@pytest.fixture(scope="module")
def local_aws(host_build: Build) -> Iterator[LocalAws]:
    """A moto server holding the deployed template and the demo data; the simulated model; an X-Ray sink."""
    import httpx
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{server._server.server_port}"  # type: ignore[union-attr]
    httpx.post(f"{url}/moto-api/reset", timeout=30)  # moto's backends are process-wide: start empty
    model = start_model(port=0)
    xray = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    xray.bind(("127.0.0.1", 0))
    xray.setblocking(False)
    try:
        session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
        stack = deploy(
            {"JwtSecret": SECRET, "Transparency": "verbose", "Architecture": host_build.arch},
            stack_name=STACK_NAME,
            session=session,
            endpoint_url=url,
        )
        ddb = session.client("dynamodb", endpoint_url=url)
        seed(ddb, stack.physical_ids["CustomerDataTable"])
        sqs, sns = session.client("sqs", endpoint_url=url), session.client("sns", endpoint_url=url)
        inbox = sqs.create_queue(QueueName="smoke-leads-inbox")["QueueUrl"]
        inbox_arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(
            TopicArn=stack.outputs["LeadsTopicArn"],
            Protocol="sqs",
            Endpoint=inbox_arn,
            Attributes={"RawMessageDelivery": "true"},
        )
        yield LocalAws(url, session, stack, model, xray, inbox)
    finally:
        xray.close()
        model.stop()
        httpx.post(f"{url}/moto-api/reset", timeout=30)
        server.stop()


# ------------------------------------------------------------------ invoking a built function


@dataclass(frozen=True)
class Invocation:
    result: Any
    origins: dict[str, list[str]]  # top-level packages by where they were loaded from: task, layer, runtime
    logs: str
    init_ms: int
    invoke_ms: int
    uncompiled: list[str]  # modules of the function or layer that had to be compiled at import


def lambda_env(aws: LocalAws, build: Build, logical_id: str, runtime_root: Path, tools: Tools) -> dict[str, str]:
    """What Lambda sets, the function's deployed environment, and the local AWS endpoint. Nothing inherited."""
    name = aws.stack.physical_ids[logical_id]
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TZ": ":UTC",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_ENDPOINT_URL": aws.url,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{tools.runtime}",
        "AWS_LAMBDA_FUNCTION_NAME": name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
        "LAMBDA_TASK_ROOT": str(build.function_dir(logical_id)),
        "LAMBDA_RUNTIME_DIR": str(runtime_root),
        "_HANDLER": build.handler(logical_id),
        # Tracing is on in the template: the layer's aws-xray-sdk runs and emits to the local sink.
        "_X_AMZN_TRACE_ID": f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};"
        f"Parent={uuid.uuid4().hex[:16]};Sampled=1",
        "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{aws.xray.getsockname()[1]}",
        "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
    }
    env.update(aws.stack.function_env(logical_id))
    return env


@pytest.fixture(scope="module")
def invoke(
    local_aws: LocalAws, host_build: Build, runtime_root: Path, tools: Tools, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    calls = tmp_path_factory.mktemp("invocations")

    def run(logical_id: str, event: dict[str, Any], **env: str) -> Invocation:
        key = f"{logical_id}-{uuid.uuid4().hex[:8]}"
        spec = {
            "task_root": str(host_build.function_dir(logical_id)),
            "layer_root": str(host_build.layer_dir() / "python"),
            "runtime_root": str(runtime_root),
            "handler": host_build.handler(logical_id),
            "event": event,
            "timeout_seconds": host_build.template["Resources"][logical_id]["Properties"].get("Timeout", 10),
            "function_name": local_aws.stack.physical_ids[logical_id],
            "result_path": str(calls / f"{key}.result.json"),
        }
        (calls / f"{key}.spec.json").write_text(json.dumps(spec))
        proc = subprocess.run(
            # -B: no .pyc written into the built tree, which Lambda mounts read-only.
            [str(tools.python), "-I", "-S", "-B", str(SHIM), str(calls / f"{key}.spec.json")],
            env={**lambda_env(local_aws, host_build, logical_id, runtime_root, tools), **env},
            capture_output=True,
            text=True,
            timeout=INVOKE_TIMEOUT_SECONDS,
        )
        result_file = calls / f"{key}.result.json"
        assert result_file.exists(), f"{logical_id} died (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        out = json.loads(result_file.read_text())
        assert out["python"].startswith(tools.runtime.removeprefix("python") + ".")
        assert "error" not in out, f"{logical_id} raised {out['error']}\n{out['traceback']}\n{proc.stdout[-3000:]}"
        logs = proc.stdout + proc.stderr
        return Invocation(out["result"], out["origins"], logs, out["init_ms"], out["invoke_ms"], out["uncompiled"])

    return run


def event_from(name: str) -> dict[str, Any]:
    return dict(json.loads((EVENTS / name).read_text()))


def drain_udp(sock: socket.socket) -> list[bytes]:
    packets = []
    while True:
        try:
            packets.append(sock.recv(65536))
        except BlockingIOError:
            return packets


def chat_of_customer_7(invoke: Any, local_aws: LocalAws, **env: str) -> Invocation:
    """ChatFunction invoked with events/chat.json as customer 7, the simulated model answering (no retries)."""
    event = event_from("chat.json")
    event["headers"]["authorization"] = f"Bearer {mint_token('customer-7', 'customer', 7, secret=SECRET)}"
    return invoke(
        "ChatFunction",
        event,
        ANTHROPIC_BASE_URL=local_aws.model.url,
        ANTHROPIC_API_KEY="simulated-local-key",
        LLM_MAX_RETRIES="0",
        **env,
    )


# ------------------------------------------------------------------ the four functions, one event each


@pytest.fixture(scope="module")
def chat_turn(invoke: Any, local_aws: LocalAws) -> tuple[Invocation, dict[str, Any]]:
    drain_udp(local_aws.xray)
    done = chat_of_customer_7(invoke, local_aws)
    local_aws.state["xray"] = drain_udp(local_aws.xray)
    assert done.result["statusCode"] == 200, done.result
    return done, json.loads(done.result["body"])


def test_chat_turn_is_served_and_stored(chat_turn: tuple[Invocation, dict[str, Any]], local_aws: LocalAws) -> None:
    done, body = chat_turn
    assert body["conversationId"].startswith("conv_")
    assert body["stopReason"] == "end_turn"
    assert body["reply"].startswith("[simulated model]")
    calls = [c["name"] for step in body["trace"] for c in step["toolCalls"]]
    assert calls == ["lookup_order", "request_refund"], body["trace"]

    ddb = local_aws.client("dynamodb")
    items = ddb.query(
        TableName=local_aws.table("ConversationsTable"),
        KeyConditionExpression="conversation_id = :c",
        ExpressionAttributeValues={":c": {"S": body["conversationId"]}},
    )["Items"]
    stored = [from_item(i) for i in items]
    header = next(i for i in stored if int(i["seq"]) == 0)
    assert int(header["customer_id"]) == 7
    roles = [i["role"] for i in sorted(stored, key=lambda i: int(i["seq"])) if int(i["seq"]) > 0]
    assert roles[0] == "user" and roles[-1] == "assistant" and len(roles) >= 5, roles

    # Everything the handler imported came from the built function, the layer or the runtime's boto3.
    assert {"pydantic_core", "jwt", "httpx", "aws_lambda_powertools", "support_agent"} <= set(done.origins["layer"])
    assert "aws_xray_sdk" in done.origins["layer"], "the Tracer did not load: is tracing active?"
    assert set(done.origins["runtime"]) <= {"boto3", "s3transfer"}, done.origins["runtime"]
    assert done.origins["task"] == ["app"]
    # `make build` precompiled the layer and the function: nothing of ours is compiled on a cold start.
    assert done.uncompiled == [], f"compiled at import, on every cold start: {done.uncompiled[:20]}"


def test_chat_turn_in_tool_mode_mcp_under_the_runtime(invoke: Any, local_aws: LocalAws) -> None:
    """TOOL_MODE=mcp: the layer's MCP SDK client and server, in process, under the template's runtime."""
    done = chat_of_customer_7(invoke, local_aws, TOOL_MODE="mcp")
    assert done.result["statusCode"] == 200, done.result
    body = json.loads(done.result["body"])
    lookup = body["trace"][0]["toolCalls"][0]  # (the refund was asked for by the turn before: not again)
    assert lookup["name"] == "lookup_order", body["trace"]
    assert not lookup["isError"] and lookup["result"]["order_id"] == 1042, lookup
    assert "mcp" in done.origins["layer"]


def test_events_function_reads_the_turns_feed_under_the_runtime(
    invoke: Any, chat_turn: tuple[Invocation, dict[str, Any]]
) -> None:
    """EventsFunction (128 MB, its own small handler) serves the chat turn's steps from what the turn stored."""
    cid = chat_turn[1]["conversationId"]
    event = event_from("conversation_events.json")
    event["rawPath"] = event["requestContext"]["http"]["path"] = f"/api/conversations/{cid}/events"
    event["pathParameters"] = {"id": cid}
    event["headers"]["authorization"] = f"Bearer {mint_token('customer-7', 'customer', 7, secret=SECRET)}"
    done = invoke("EventsFunction", event)
    assert done.result["statusCode"] == 200, done.result
    got = json.loads(done.result["body"])["events"]
    assert got[0]["type"] == "turn.started" and got[-1]["type"] == "turn.completed", got
    requested = [e["name"] for e in got if e["type"] == "tool.requested"]
    assert requested == ["lookup_order", "request_refund"], got
    assert {e["turnId"] for e in got} == {chat_turn[1]["turnId"]}
    assert "support_agent" in done.origins["layer"] and done.origins["task"] == ["app"]
    assert done.uncompiled == [], done.uncompiled[:20]


def test_chat_turn_traces_to_xray(chat_turn: tuple[Invocation, dict[str, Any]], local_aws: LocalAws) -> None:
    documents = [json.loads(p.split(b"\n", 1)[1]) for p in local_aws.state["xray"] if b"\n" in p]
    names = {d.get("name") for d in documents}
    assert documents, "no X-Ray segment reached the daemon address"
    assert any(n and n.startswith("## ") for n in names), names


def test_lead_lists_the_pending_approval(
    invoke: Any, chat_turn: tuple[Invocation, dict[str, Any]], local_aws: LocalAws
) -> None:
    event = event_from("approvals_list.json")
    event["headers"]["authorization"] = f"Bearer {mint_token('lead-1', 'support_lead', None, secret=SECRET)}"
    done = invoke("ApprovalsFunction", event)
    assert done.result["statusCode"] == 200, done.result
    approvals = json.loads(done.result["body"])["approvals"]
    mine = [a for a in approvals if a["conversationId"] == chat_turn[1]["conversationId"]]
    assert len(mine) == 1 and mine[0]["status"] == "PENDING" and mine[0]["orderId"] == 1042, approvals
    assert mine[0]["amountCents"] == 18900
    local_aws.state["approval_id"] = mine[0]["approvalId"]


def sqs_event(local_aws: LocalAws, approval_id: str) -> dict[str, Any]:
    event = event_from("sqs_approval.json")
    record = event["Records"][0]
    record["body"] = json.dumps({"approvalId": approval_id})
    record["md5OfBody"] = hashlib.md5(record["body"].encode()).hexdigest()
    queue = local_aws.stack.outputs["ApprovalQueueUrl"]
    attrs = local_aws.client("sqs").get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    record["eventSourceARN"] = attrs["Attributes"]["QueueArn"]
    return event


def test_notifier_tells_the_leads_once(invoke: Any, local_aws: LocalAws) -> None:
    approval_id = local_aws.state.get("approval_id")
    assert approval_id, "the lead test found no approval from the chat turn"
    event = sqs_event(local_aws, approval_id)
    first = invoke("ApprovalNotifierFunction", event)
    again = invoke("ApprovalNotifierFunction", event)  # a redelivery: the claim makes it a no-op
    assert first.result == {"batchItemFailures": []}
    assert again.result == {"batchItemFailures": []}

    sqs = local_aws.client("sqs")
    got = sqs.receive_message(QueueUrl=local_aws.leads_inbox, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    messages = [json.loads(m["Body"]) for m in got.get("Messages", [])]
    assert [m["approvalId"] for m in messages] == [approval_id], messages
    approval = local_aws.client("dynamodb").get_item(
        TableName=local_aws.table("ApprovalsTable"), Key=to_item({"approval_id": approval_id})
    )["Item"]
    assert "notified_at" in approval


def test_sweep_expires_a_stale_approval(invoke: Any, local_aws: LocalAws) -> None:
    approval_id = local_aws.state.get("approval_id")
    assert approval_id, "the lead test found no approval from the chat turn"
    ddb = local_aws.client("dynamodb")
    week_and_a_day = (datetime.now(UTC) - timedelta(hours=24 * 8)).isoformat(timespec="milliseconds")
    ddb.update_item(
        TableName=local_aws.table("ApprovalsTable"),
        Key=to_item({"approval_id": approval_id}),
        UpdateExpression="SET created_at = :old",
        ExpressionAttributeValues={":old": {"S": week_and_a_day.replace("+00:00", "Z")}},
    )
    done = invoke("ApprovalSweepFunction", event_from("schedule.json"))
    assert done.result["expired"] == 1 and done.result["errors"] == 0, done.result

    approval = from_item(
        ddb.get_item(TableName=local_aws.table("ApprovalsTable"), Key=to_item({"approval_id": approval_id}))["Item"]
    )
    assert approval["status"] == "EXPIRED"
    order = from_item(
        ddb.get_item(
            TableName=local_aws.table("CustomerDataTable"), Key=to_item({"customer_id": 7, "sk": "ORDER#1042"})
        )["Item"]
    )
    assert (order["available_cents"], order["reserved_cents"], order["refunded_cents"]) == (18900, 0, 0)


@pytest.mark.parametrize("logical_id", ["PaymentSweepFunction", "ReconcileFunction"])
def test_scheduled_payment_functions_run_under_the_runtime(invoke: Any, logical_id: str) -> None:
    """The payment sweep and the reconciliation import and run as built, on the template's default provider."""
    done = invoke(logical_id, event_from("schedule.json"))
    assert isinstance(done.result, dict) and done.result.get("errors", 0) == 0, done.result


def test_audit_seal_function_seals_the_turns_heads_under_the_runtime(
    chat_turn: tuple[Invocation, dict[str, Any]], invoke: Any, local_aws: LocalAws
) -> None:
    """The audit table's stream, read from the moto server as the mapping reads it, sealed by the built function
    into the bucket the local stack locked (versioning and Object Lock applied after the deploy)."""
    ddb, streams = local_aws.client("dynamodb"), local_aws.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=local_aws.table("AuditTable"))["Table"]["LatestStreamArn"]
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")
        records += streams.get_records(ShardIterator=iterator["ShardIterator"], Limit=1000)["Records"]
    assert records, "the turn appended audit rows"
    done = invoke("AuditSealFunction", stream_event(records, arn))
    assert done.result == {"batchItemFailures": []}
    conversation = chat_turn[1]["conversationId"]
    s3, bucket = local_aws.client("s3"), local_aws.table("AuditSealBucket")
    versions = s3.list_object_versions(Bucket=bucket, Prefix=f"heads/{conversation}/").get("Versions", [])
    assert len(versions) == 1
    with pytest.raises(s3.exceptions.ClientError) as refused:  # locked by the bucket's default retention
        s3.delete_object(Bucket=bucket, Key=versions[0]["Key"], VersionId=versions[0]["VersionId"])
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
