"""A turn harness: real stores on moto tables from template.yaml, a scripted model, fake time."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import boto3

from devstack.seed import seed
from support_agent.agent.loop import Agent, TurnResult
from support_agent.auth import Principal
from support_agent.config import Settings, load_settings
from support_agent.messages import Deadline
from support_agent.store.audit import AuditStore
from support_agent.store.conversations import ConversationStore
from support_agent.store.customer_data import CustomerDataStore, Order
from support_agent.wiring import build_registry, build_tool_source
from tests.support.aws import create_tables
from tests.support.scripted import ScriptedModel


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class Harness:
    settings: Settings
    model: ScriptedModel
    ddb: Any
    sqs: Any
    queue_url: str
    clock: FakeClock
    agent: Agent
    conversations: ConversationStore
    customer_data: CustomerDataStore
    audit: AuditStore
    crash_at: set[str] = field(default_factory=set)
    counter: int = 0

    def turn(
        self, message: str, conversation_id: str | None = None, customer_id: int = 7, seconds: float = 27.0
    ) -> TurnResult:
        self.counter += 1
        principal = Principal(f"customer-{customer_id}", "customer", customer_id)
        return self.agent.run_turn(
            principal,
            customer_id,
            conversation_id,
            message,
            f"req-{self.counter}",
            Deadline.after(seconds, self.clock),
        )

    def order(self, order_id: int, customer_id: int = 7) -> Order:
        order = self.customer_data.get_order(customer_id, order_id)
        assert order is not None
        return order

    def queued(self) -> list[dict[str, Any]]:
        out = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
        return [json.loads(m["Body"]) for m in out.get("Messages", [])]


class Crash(Exception):
    """Stands for the process dying at a step."""


def make_harness(**env: str) -> Harness:
    ddb = boto3.client("dynamodb")
    sqs = boto3.client("sqs")
    create_tables(ddb)
    queue_url = sqs.create_queue(QueueName="ApprovalQueue")["QueueUrl"]
    settings = load_settings(
        {
            "CONVERSATIONS_TABLE": "ConversationsTable",
            "CUSTOMER_DATA_TABLE": "CustomerDataTable",
            "APPROVALS_TABLE": "ApprovalsTable",
            "AUDIT_TABLE": "AuditTable",
            "APPROVAL_QUEUE_URL": queue_url,
            **env,
        }
    )
    seed(ddb, settings.customer_data_table)
    model = ScriptedModel()
    clock = FakeClock()
    conversations = ConversationStore(ddb, settings.conversations_table, settings.audit_table)
    harness: Harness

    def checkpoint(step: str) -> None:
        if step in harness.crash_at:
            harness.crash_at.discard(step)
            raise Crash(step)

    agent = Agent(
        settings,
        model,
        conversations,
        build_tool_source(settings, build_registry(settings, ddb, sqs), ddb),
        clock=clock,
        checkpoint=checkpoint,
    )
    harness = Harness(
        settings,
        model,
        ddb,
        sqs,
        queue_url,
        clock,
        agent,
        conversations,
        CustomerDataStore(ddb, settings.customer_data_table),
        AuditStore(ddb, settings.audit_table),
    )
    return harness
