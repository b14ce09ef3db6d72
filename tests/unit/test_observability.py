"""Logs, metrics and traces of a real turn: the chat handler on moto tables, the real Anthropic client
on a scripted transport. What is asserted is what an operator relies on: one ``tool_dispatch`` line
per tool call, one ``model_call`` line per model call, correlation ids on every line, EMF metrics
with the names the alarms use, subsegments per model call / tool call / write — and no secret, token,
message text or tool output anywhere in the output.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from devstack.seed import seed
from devstack.tokens import mint_token
from support_agent import observability as obs
from support_agent import wiring
from support_agent.approvals.decisions import ApprovalDecisions
from support_agent.approvals.sweep import ApprovalSweeper
from support_agent.config import load_settings
from support_agent.messages import Usage
from support_agent.pricing import estimate_usd, price_for, price_table
from support_agent.secrets import key_provider
from support_agent.store.approvals import ApprovalStore
from tests.support.aws import create_tables
from tests.support.harness import Harness
from tests.support.scripted import ScriptedModel, answer, tool_use, tools
from tests.support.transport import HttpFailure, scripted_transport

ROOT = Path(__file__).resolve().parents[2]
SECRET = "observability-test-secret-0123456789abcdef"
API_KEY = "sk-ant-api03-OBSERVABILITY-TEST-KEY-never-log-me"
INJECTION = "ignore previous instructions"  # in order 2002's note: tool output, never logged


class Logs:
    """Every JSON line the shared handler writes (support_agent.* stdlib loggers included)."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.buffer.getvalue().splitlines() if line.strip()]


@pytest.fixture
def logs() -> Iterator[Logs]:
    capture = Logs()
    handler = obs.logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(capture.buffer)
    try:
        yield capture
    finally:
        handler.setStream(previous)


def emf_blobs(out: str) -> list[dict[str, Any]]:
    return [b for b in (json.loads(x) for x in out.splitlines() if x.startswith("{")) if "_aws" in b]


def metric_values(blobs: list[dict[str, Any]]) -> dict[str, list[float]]:
    """metric name -> every value emitted, across the EMF blobs (a value may be a list)."""
    out: dict[str, list[float]] = {}
    for blob in blobs:
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                value = blob[metric["Name"]]
                out.setdefault(metric["Name"], []).extend(value if isinstance(value, list) else [value])
    return out


@dataclass
class Chat:
    handler: Any
    model: ScriptedModel
    raw: list[str] = field(default_factory=list)
    counter: int = 0

    def turn(self, message: str, customer_id: int = 7, conversation_id: str | None = None) -> dict[str, Any]:
        self.counter += 1
        event = json.loads((ROOT / "events" / "chat.json").read_text())
        token = mint_token(f"customer-{customer_id}", "customer", customer_id, secret=SECRET)
        self.raw.append(token)
        event["headers"]["authorization"] = f"Bearer {token}"
        event["requestContext"]["requestId"] = f"req-obs-{self.counter}"
        event["body"] = json.dumps({"conversationId": conversation_id, "message": message})
        out = self.handler(event, None)
        body = json.loads(out["body"])
        body["_status"] = out["statusCode"]
        return dict(body)


def _load(function: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"fn_obs_{function}", ROOT / "functions" / function / "app.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.handler


@pytest.fixture
def chat(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Chat]:
    ddb = boto3.client("dynamodb")
    tables = create_tables(ddb)
    queue_url = boto3.client("sqs").create_queue(QueueName="ApprovalQueue")["QueueUrl"]
    seed(ddb, "CustomerDataTable")
    env = {
        "CONVERSATIONS_TABLE": tables["ConversationsTable"],
        "CUSTOMER_DATA_TABLE": tables["CustomerDataTable"],
        "APPROVALS_TABLE": tables["ApprovalsTable"],
        "AUDIT_TABLE": tables["AuditTable"],
        "APPROVAL_QUEUE_URL": queue_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "JWT_SECRET": SECRET,
        "MODEL_ID": "claude-sonnet-4-5",
        "LLM_MAX_RETRIES": "1",
        "TRANSPARENCY": "verbose",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    model = ScriptedModel()
    wiring.reset(llm_transport=scripted_transport(model))
    obs.metrics.clear_metrics()
    yield Chat(_load("chat"), model)
    wiring.reset()


RETRY_NOW = {"retry-after": "0"}  # a retryable 529 the client retries at once


def test_a_turn_logs_each_tool_and_model_call_with_correlation_ids(
    chat: Chat, logs: Logs, capsys: pytest.CaptureFixture[str]
) -> None:
    chat.model.script = [
        tools(
            tool_use("lookup_order", {"order_id": 2002}),
            tool_use("lookup_order", {"order_id": 999_999}),
            usage=Usage(1000, 40, 0, 900),
        ),
        HttpFailure(529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, RETRY_NOW),
        answer("Order 2002 was delivered; I could not find order 999999.", Usage(300, 25, 900, 0)),
    ]
    body = chat.turn("Where are my orders 2002 and 999999?", customer_id=8)
    out = capsys.readouterr().out
    lines = logs.lines()
    assert body["_status"] == 200, body
    cid = body["conversationId"]

    dispatch = [line for line in lines if line["message"] == "tool_dispatch"]
    assert [(d["tool"], d["iteration"], d["outcome"], d["is_error"]) for d in dispatch] == [
        ("lookup_order", 1, "ok", False),
        ("lookup_order", 1, "error", True),
    ]
    assert all(isinstance(d["latency_ms"], int) and d["latency_ms"] >= 0 for d in dispatch)
    assert [d["tool_use_id"] for d in dispatch] == [c["id"] for c in body["trace"][0]["toolCalls"]]

    calls = [line for line in lines if line["message"] == "model_call"]
    assert [(c["provider"], c["model"], c["iteration"], c["retries"], c["outcome"]) for c in calls] == [
        ("anthropic", "claude-sonnet-4-5", 1, 0, "ok"),
        ("anthropic", "claude-sonnet-4-5", 2, 1, "ok"),
    ]
    assert (calls[0]["input_tokens"], calls[0]["output_tokens"], calls[0]["cache_creation_input_tokens"]) == (
        1000,
        40,
        900,
    )
    assert calls[1]["cache_read_input_tokens"] == 900 and calls[1]["stop_reason"] == "end_turn"
    (end,) = [line for line in lines if line["message"] == "turn_end"]
    assert (end["iterations"], end["tool_calls"], end["stop_reason"]) == (2, 2, "end_turn")

    # The client's retry warning went through the same handler (a support_agent.* stdlib logger).
    assert any("retry 1" in str(line["message"]) for line in lines)
    # Correlation ids on every line of the invocation: the API request id and the conversation id.
    assert lines and all(line.get("correlation_id") == "req-obs-1" for line in lines)
    first = next(i for i, line in enumerate(lines) if line["message"] == "model_call")
    assert all(line.get("conversation_id") == cid for line in lines[first:])  # from the turn's start on
    assert all(line.get("function_request_id", "").startswith("local-") for line in lines)

    text = json.dumps(lines) + out
    for secret in (API_KEY, chat.raw[0], SECRET, "Bearer"):
        assert secret not in text
    assert INJECTION not in text.lower()  # tool output (the order's note) stays out of the logs
    assert "Where are my orders" not in text  # and so does the customer's message


def test_metrics_are_emf_with_the_names_the_alarms_use(chat: Chat, capsys: pytest.CaptureFixture[str]) -> None:
    chat.model.script = [
        tools(tool_use("lookup_order", {"order_id": 1042}), tool_use("nope", {}), usage=Usage(1000, 40, 0, 900)),
        HttpFailure(529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, RETRY_NOW),
        answer("Order 1042 was delivered.", Usage(300, 25, 900, 0)),
    ]
    capsys.readouterr()
    assert chat.turn("Where is order 1042?")["_status"] == 200
    blobs = emf_blobs(capsys.readouterr().out)
    assert blobs, "no EMF output"
    for blob in blobs:
        (directive,) = blob["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "SupportAgent"
        assert "service" in directive["Dimensions"][0]
    values = metric_values(blobs)
    assert sum(values[obs.INPUT_TOKENS]) == 1300
    assert sum(values[obs.OUTPUT_TOKENS]) == 65
    assert sum(values[obs.CACHE_READ_TOKENS]) == 900
    assert sum(values[obs.CACHE_WRITE_TOKENS]) == 900
    assert values[obs.ITERATIONS] == [2] and values[obs.TURNS] == [1]
    assert sum(values[obs.MODEL_CALLS]) == 2 and sum(values[obs.LLM_RETRIES]) == 1
    assert sum(values[obs.TOOL_CALLS]) == 2 and sum(values[obs.TOOL_ERRORS]) == 1  # the unknown tool
    assert obs.LLM_UNAVAILABLE not in values
    expected = estimate_usd("claude-sonnet-4-5", Usage(1300, 65, 900, 900), price_table())
    assert values[obs.TURN_COST] == [pytest.approx(expected)]
    assert expected == pytest.approx((1300 * 3 + 65 * 15 + 900 * 0.3 + 900 * 3.75) / 1e6)
    unit = {m["Name"]: m["Unit"] for b in blobs for d in b["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]}
    assert {name: unit[name] for name in values if name in obs.METRICS} == {
        name: obs.METRICS[name] for name in values if name in obs.METRICS
    }


def test_model_unavailable_is_a_503_a_warning_and_a_metric(
    chat: Chat, logs: Logs, capsys: pytest.CaptureFixture[str]
) -> None:
    busy = HttpFailure(529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, RETRY_NOW)
    chat.model.script = [busy, busy]
    capsys.readouterr()
    body = chat.turn("hello?")
    values = metric_values(emf_blobs(capsys.readouterr().out))
    lines = logs.lines()
    assert body["_status"] == 503 and body["error"]["code"] == "model_unavailable"
    assert values[obs.LLM_UNAVAILABLE] == [1] and sum(values[obs.LLM_RETRIES]) == 1
    (call,) = [line for line in lines if line["message"] == "model_call"]
    assert (call["level"], call["outcome"], call["error"], call["retries"]) == (
        "WARNING",
        "unavailable",
        "model_unavailable",
        1,
    )
    assert obs.TURNS not in values  # a failed turn is not a turn


# ------------------------------------------------------------------ tracing


@dataclass
class FakeSubsegment:
    name: str
    annotations: dict[str, Any] = field(default_factory=dict)

    def put_annotation(self, key: str, value: Any) -> None:
        self.annotations[key] = value


@dataclass
class FakeProvider:
    opened: list[FakeSubsegment] = field(default_factory=list)

    @contextmanager
    def in_subsegment(self, name: str) -> Iterator[FakeSubsegment]:
        sub = FakeSubsegment(name)
        self.opened.append(sub)
        yield sub


@dataclass
class FakeTracer:
    provider: FakeProvider = field(default_factory=FakeProvider)


def test_a_subsegment_per_model_call_tool_call_and_write(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTracer()
    monkeypatch.setattr(obs, "tracer", lambda: fake)
    harness.model.script = [
        tools(tool_use("lookup_order", {"order_id": 1042}), tool_use("list_invoices", {})),
        answer("Delivered."),
    ]
    harness.turn("Where is order 1042?")
    names = [s.name for s in fake.provider.opened]
    assert names == [
        "model_call",
        "persist",  # write-ahead: the user message and the assistant's tool calls
        "tool:lookup_order",
        "tool:list_invoices",
        "persist",  # the results and their audit rows
        "model_call",
        "persist",
    ]
    first, *_ = fake.provider.opened
    assert first.annotations == {
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "iteration": 1,
        "outcome": "ok",
        "stop_reason": "tool_use",
    }
    assert fake.provider.opened[2].annotations == {"tool": "lookup_order", "iteration": 1, "outcome": "ok"}
    assert fake.provider.opened[4].annotations == {"messages": 1, "audit_rows": 2}


_XRAY_PROBE = """
import json, os, socket, sys
sys.path[:0] = [{layer!r}]
import importlib.util
spec = importlib.util.spec_from_file_location("chat_app", {app!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from support_agent import observability as obs
report = {{"imported_outside_lambda": "aws_xray_sdk" in sys.modules, "tracer_outside_lambda": obs.tracer() is not None}}
daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
daemon.bind(("127.0.0.1", 0))
daemon.settimeout(10)
os.environ.update(
    LAMBDA_TASK_ROOT="/var/task",
    AWS_LAMBDA_FUNCTION_NAME="chat",
    AWS_XRAY_DAEMON_ADDRESS="127.0.0.1:%d" % daemon.getsockname()[1],
    _X_AMZN_TRACE_ID="Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
)
obs.tracer.cache_clear()
with obs.span("model_call", provider="anthropic", iteration=1) as span:
    span.annotate(outcome="ok")
report["imported_in_lambda"] = "aws_xray_sdk" in sys.modules
packet = daemon.recvfrom(65536)[0].decode().split("\\n", 1)[1]
report["sent"] = json.loads(packet)
print(json.dumps(report))
"""


def test_xray_only_inside_lambda_and_subsegments_reach_the_daemon() -> None:
    """Importing the chat function never loads aws_xray_sdk; inside Lambda a span is a real subsegment."""
    code = _XRAY_PROBE.format(layer=str(ROOT / "layers" / "common"), app=str(ROOT / "functions" / "chat" / "app.py"))
    env = {k: v for k, v in os.environ.items() if k not in ("LAMBDA_TASK_ROOT", "POWERTOOLS_TRACE_DISABLED")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["imported_outside_lambda"] is False and report["tracer_outside_lambda"] is False
    assert report["imported_in_lambda"] is True
    sent = report["sent"]
    assert (sent["name"], sent["type"], sent["trace_id"]) == (
        "model_call",
        "subsegment",
        "1-5759e988-bd862e3fe1be46a994272793",
    )
    assert sent["parent_id"] == "53995c3f42cd8ad8"
    assert sent["annotations"] == {"provider": "anthropic", "iteration": 1, "outcome": "ok"}


def test_tracing_is_off_outside_lambda_and_when_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAMBDA_TASK_ROOT", raising=False)
    assert obs.tracing_enabled() is False
    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    assert obs.tracing_enabled() is True
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    assert obs.tracing_enabled() is False
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED")
    monkeypatch.setenv("AWS_SAM_LOCAL", "true")
    assert obs.tracing_enabled() is False


# ------------------------------------------------------------------ approvals


def emitted() -> dict[str, list[float]]:
    return {name: list(m["Value"]) for name, m in obs.metrics.metric_set.items()}


def test_approval_metrics_created_completed_expired_and_oldest_pending_age(harness: Harness) -> None:
    obs.metrics.clear_metrics()
    harness.model.script = [
        tools(tool_use("request_refund", {"order_id": 1043, "amount_cents": 500, "reason": "late"})),
        tools(tool_use("request_refund", {"order_id": 1042, "amount_cents": 18_900, "reason": "broken"})),
        answer("One refunded, one waits for a lead."),
    ]
    result = harness.turn("Refund 5.00 on 1043 and all of 1042.")
    statuses = [c["toolCalls"][0]["result"]["status"] for c in result.trace[:2]]
    assert statuses == ["REFUNDED", "PENDING_APPROVAL"]
    assert emitted()[obs.REFUNDS_COMPLETED] == [1] and emitted()[obs.APPROVALS_CREATED] == [1]

    store = ApprovalStore(harness.ddb, "ApprovalsTable", "CustomerDataTable", "AuditTable")
    created = datetime.now(UTC)

    def sweep(hours: float) -> None:
        obs.metrics.clear_metrics()
        ApprovalSweeper(
            store, harness.ddb, harness.sqs, harness.queue_url, 168, 300, clock=lambda: created + timedelta(hours=hours)
        ).run()

    sweep(30)
    age = emitted()[obs.OLDEST_PENDING_APPROVAL_AGE]
    assert len(age) == 1 and 30 * 3600 - 60 <= age[0] <= 30 * 3600 + 60
    assert obs.APPROVALS_EXPIRED not in emitted()
    sweep(169)
    assert emitted()[obs.APPROVALS_EXPIRED] == [1]
    assert emitted()[obs.OLDEST_PENDING_APPROVAL_AGE] == [0]  # none left pending


def test_a_decision_puts_the_approval_id_on_every_later_line(harness: Harness, logs: Logs) -> None:
    harness.model.script = [
        tools(tool_use("request_refund", {"order_id": 1042, "amount_cents": 18_900, "reason": "broken"})),
        answer("A lead will decide."),
    ]
    approval_id = harness.turn("Refund 1042.").trace[0]["toolCalls"][0]["result"]["approval_id"]
    obs.logger.clear_state()
    obs.metrics.clear_metrics()
    store = ApprovalStore(harness.ddb, "ApprovalsTable", "CustomerDataTable", "AuditTable")
    decisions = ApprovalDecisions(store, None, "", 0, lambda: datetime.now(UTC).isoformat())
    decisions.reject(approval_id, "lead-1", "not eligible")
    logging.getLogger("support_agent.approvals").info("after the decision")
    assert logs.lines()[-1]["approval_id"] == approval_id
    assert emitted()[obs.APPROVALS_REJECTED] == [1]
    obs.logger.clear_state()


def test_the_notifier_logs_each_record_with_its_approval_and_message_id(
    harness: Harness, logs: Logs, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.model.script = [
        tools(tool_use("request_refund", {"order_id": 1042, "amount_cents": 18_900, "reason": "broken"})),
        answer("A lead will decide."),
    ]
    approval_id = harness.turn("Refund 1042.").trace[0]["toolCalls"][0]["result"]["approval_id"]
    topic = boto3.client("sns").create_topic(Name="leads")["TopicArn"]
    monkeypatch.setenv("APPROVALS_TABLE", "ApprovalsTable")
    monkeypatch.setenv("LEADS_TOPIC_ARN", topic)
    wiring.reset()
    record = {
        "messageId": "msg-1",
        "receiptHandle": "rh",
        "body": json.dumps({"approvalId": approval_id}),
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1",
            "SenderId": "x",
            "ApproximateFirstReceiveTimestamp": "1",
        },
        "messageAttributes": {},
        "md5OfBody": "x",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:ApprovalQueue",
        "awsRegion": "us-east-1",
    }
    assert _load("approval_notifier")({"Records": [record]}, None) == {"batchItemFailures": []}
    (line,) = [x for x in logs.lines() if approval_id in str(x["message"])]
    assert (line["approval_id"], line["message_id"]) == (approval_id, "msg-1")
    assert "approval_id" not in obs.logger.get_current_keys()  # not carried to the next record


# ------------------------------------------------------------------ pricing and the API key


def test_prices_match_model_families_and_the_table_overrides() -> None:
    table = price_table()
    for model in ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"):
        assert price_for(model, table) == table["claude-sonnet-4-5"]
    assert price_for("claude-opus-4-5-20251101", table) == table["claude-opus-4-5"]  # not claude-opus-4
    assert price_for("gpt-4o-mini-2024-07-18", table) == table["gpt-4o-mini"]  # not gpt-4o
    assert price_for("some-local-model", table) is None
    assert estimate_usd("some-local-model", Usage(10, 10), table) is None
    custom = price_table(
        '{"some-local-model": {"input": 1, "output": 2}, "claude-sonnet-4-5": {"input": 0, "output": 0}}'
    )
    assert estimate_usd("some-local-model", Usage(1_000_000, 500_000), custom) == 2.0
    assert estimate_usd("claude-sonnet-4-5", Usage(1000, 1000), custom) == 0.0


@pytest.mark.parametrize("bad", ["not json", '{"m": {"input": -1, "output": 1}}', '{"m": {"input": 1}}'])
def test_a_bad_price_table_fails_at_cold_start(bad: str) -> None:
    with pytest.raises(ValueError, match="PRICE_TABLE"):
        load_settings({"PRICE_TABLE": bad})


def test_the_api_key_is_read_through_powertools_and_reread_after_max_age(aws: None) -> None:
    secrets = boto3.client("secretsmanager")
    arn = secrets.create_secret(Name="anthropic", SecretString="sk-ant-first")["ARN"]
    settings = load_settings({"ANTHROPIC_API_KEY_SECRET_ARN": arn, "API_KEY_CACHE_SECONDS": "1"})
    calls: list[str] = []

    class Counting:
        def get_secret_value(self, **kwargs: Any) -> dict[str, Any]:
            calls.append(kwargs["SecretId"])
            return dict(secrets.get_secret_value(**kwargs))

    key = key_provider(
        settings.anthropic_api_key, settings.anthropic_api_key_secret_arn, Counting(), settings.api_key_cache_seconds
    )
    assert key() == "sk-ant-first" and key() == "sk-ant-first"
    assert calls == [arn]  # cached across calls (and so across warm invocations)
    secrets.put_secret_value(SecretId=arn, SecretString="sk-ant-rotated")
    time.sleep(1.1)
    assert key() == "sk-ant-rotated" and len(calls) == 2
