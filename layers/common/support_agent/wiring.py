"""Process-wide singletons, built on first use and reused across warm invocations.

Built lazily (not at import) so importing a handler makes no AWS or network call, and tests can
point the environment at moto first; ``reset()`` drops them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from typing import Any

import boto3

from support_agent.agent.loop import Agent, utc_now
from support_agent.approvals.decisions import ApprovalDecisions
from support_agent.config import Settings, get_settings
from support_agent.llm.base import LlmClient
from support_agent.store.approvals import ApprovalStore
from support_agent.store.audit import AuditStore
from support_agent.store.conversations import ConversationStore
from support_agent.store.customer_data import CustomerDataStore
from support_agent.store.handoffs import HandoffStore
from support_agent.store.ratelimit import RateLimiter, TurnRateLimiter
from support_agent.store.refunds import RefundWriter
from support_agent.tools.handoff import handoff_tools
from support_agent.tools.orders import order_tools
from support_agent.tools.refunds import refund_tools
from support_agent.tools.registry import ToolRegistry


@dataclass(frozen=True)
class ChatServices:
    settings: Settings
    agent: Agent
    conversations: ConversationStore
    customer_data: CustomerDataStore
    approvals: ApprovalStore
    limiter: TurnRateLimiter
    read_limiter: RateLimiter


def build_registry(settings: Settings, ddb: Any, sqs: Any) -> ToolRegistry:
    customer_data = CustomerDataStore(ddb, settings.customer_data_table)
    writer = RefundWriter(ddb, settings.customer_data_table, settings.approvals_table, settings.audit_table)

    def enqueue(approval_id: str) -> None:
        sqs.send_message(QueueUrl=settings.approval_queue_url, MessageBody=json.dumps({"approvalId": approval_id}))

    handoffs = HandoffStore(ddb, settings.approvals_table, settings.conversations_table, settings.audit_table)
    return ToolRegistry(
        order_tools(customer_data)
        + refund_tools(customer_data, writer, enqueue, settings.refund_threshold_cents)
        + handoff_tools(handoffs)
    )


class _LazyClient:
    """A boto3 client made on first use. The chat function sends to SQS only for a refund over the
    threshold, so most cold starts never pay for building the client (docs/PERFORMANCE.md)."""

    def __init__(self, service: str) -> None:
        self._service = service
        self._client: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = boto3.client(self._service)  # type: ignore[call-overload]
        return getattr(self._client, name)


def build_chat_services(settings: Settings, llm: LlmClient, ddb: Any = None, sqs: Any = None) -> ChatServices:
    ddb = ddb or boto3.client("dynamodb")
    sqs = sqs or _LazyClient("sqs")
    conversations = ConversationStore(ddb, settings.conversations_table)
    agent = Agent(settings, llm, conversations, build_registry(settings, ddb, sqs), settings.audit_table)
    return ChatServices(
        settings,
        agent,
        conversations,
        CustomerDataStore(ddb, settings.customer_data_table),
        ApprovalStore(ddb, settings.approvals_table),
        # the same client as the stores: a second boto3 client would cost a cold start ~15-50 ms
        TurnRateLimiter(ddb, settings.conversations_table, settings.turns_per_minute),
        RateLimiter(ddb, settings.conversations_table, settings.reads_per_minute, kind="reads"),
    )


@dataclass(frozen=True)
class LeadServices:
    settings: Settings
    approvals: ApprovalStore
    decisions: ApprovalDecisions
    handoffs: HandoffStore
    audit: AuditStore
    now: Callable[[], str]


def build_lead_services(settings: Settings, ddb: Any = None, sfn: Any = None) -> LeadServices:
    ddb = ddb or boto3.client("dynamodb")
    sfn = sfn or boto3.client("stepfunctions")
    approvals = ApprovalStore(ddb, settings.approvals_table, settings.customer_data_table, settings.audit_table)
    return LeadServices(
        settings,
        approvals,
        ApprovalDecisions(
            approvals,
            sfn,
            settings.refund_flow_arn,
            settings.approval_wait_seconds,
            utc_now,
            ttl=timedelta(hours=settings.approval_ttl_hours),
        ),
        HandoffStore(ddb, settings.approvals_table, settings.conversations_table, settings.audit_table),
        AuditStore(ddb, settings.audit_table),
        utc_now,
    )


@lru_cache(maxsize=1)
def lead_services() -> LeadServices:
    return build_lead_services(get_settings())


# Tests route the real AnthropicClient through an in-process transport instead of the network.
LLM_TRANSPORT: Any = None


@lru_cache(maxsize=1)
def chat_services() -> ChatServices:
    from support_agent.llm.factory import llm_client_from_settings

    settings = get_settings()
    return build_chat_services(settings, llm_client_from_settings(settings, transport=LLM_TRANSPORT))


def reset() -> None:
    """Forget settings and singletons (tests change the environment between stacks)."""
    from support_agent.auth import _authenticator_for

    chat_services.cache_clear()
    lead_services.cache_clear()
    get_settings.cache_clear()
    cache_clear = getattr(_authenticator_for, "cache_clear", None)
    if cache_clear:
        cache_clear()
