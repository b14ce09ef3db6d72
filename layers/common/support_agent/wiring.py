"""The composition root: the one place every function's long-lived objects are built and kept.

Each is built on first use and reused while the environment is warm; nothing at import, so importing
a handler makes no AWS or network call and tests can point the environment at moto first. A function
builds only what it uses: each builder imports its own modules (the notifier's cold start imports no
agent, no model adapter, no JWT library), and of the boto3 clients, one per service for the whole
process, DynamoDB is built with the services (every function reads it on its first event; SnapStart
snapshots it) while SQS, SNS and Step Functions wait for their first call (most chat turns never send
to SQS, most lead requests never start a flow: docs/PERFORMANCE.md). ``reset()`` starts afresh.

Only the edges import this module: the handlers in functions/, the routes and the MCP edge in api/. What it
builds gets what it needs as arguments and never calls back here (pyproject.toml's import contracts).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import boto3

from support_agent.clock import Clock, utc_datetime, utc_now
from support_agent.config import Settings, get_settings

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from support_agent.actions import Action, ProposalDesk
    from support_agent.agent.loop import Agent
    from support_agent.agent.turn_sweep import TurnSweeper
    from support_agent.agent.worker import TurnWorker
    from support_agent.approvals.decisions import ApprovalDecisions
    from support_agent.approvals.notifier import ApprovalNotifier
    from support_agent.approvals.sweep import ApprovalSweeper
    from support_agent.audit.seal import SealWriter
    from support_agent.auth import Authenticator
    from support_agent.feed import Feed
    from support_agent.handoffs.brief import Briefs
    from support_agent.llm.base import LlmClient
    from support_agent.mcp.our_tools import McpServices
    from support_agent.outcomes.sweep import OutcomeSweeper
    from support_agent.policy.model import PolicyReader
    from support_agent.refunds import (
        PaymentProvider,
        PaymentSweeper,
        Reconciler,
        RefundSettler,
        RefundStep,
        StripeWebhooks,
    )
    from support_agent.reports.job import RollupJob
    from support_agent.reports.store import RollupStore
    from support_agent.sockets.connections import ConnectionStore
    from support_agent.sockets.deltas import DeltaStreams
    from support_agent.sockets.pusher import Pusher
    from support_agent.sockets.routes import SocketServices
    from support_agent.store.approvals import ApprovalStore
    from support_agent.store.audit import AuditStore
    from support_agent.store.conversations import ConversationStore
    from support_agent.store.customer_data import CustomerDataStore
    from support_agent.store.erasure import ConversationEraser
    from support_agent.store.handoffs import HandoffStore
    from support_agent.store.polls import PollSlots
    from support_agent.store.ratelimit import RateLimiter
    from support_agent.store.ratings import RatingStore
    from support_agent.store.takeover import Takeover
    from support_agent.store.turns import TurnStore
    from support_agent.tools.registry import ToolRegistry, ToolSource

Service = Literal["dynamodb", "sqs", "sns", "stepfunctions", "secretsmanager", "s3", "ssm"]


@dataclass(frozen=True)
class EventsServices:
    """The events feed's function: reads only (and the reader's rate counter and waiting slots)."""

    settings: Settings
    feed: Feed
    read_limiter: RateLimiter
    waits: PollSlots
    takeover: Takeover  # a person's view of a conversation they hold (GET /api/handoffs/{id}/events)


@dataclass(frozen=True)
class ChatServices:
    settings: Settings
    agent: Agent
    conversations: ConversationStore
    customer_data: CustomerDataStore
    approvals: ApprovalStore
    limiter: RateLimiter
    read_limiter: RateLimiter
    payments: PaymentProvider  # lazy: built on the first refund call (refunds/provider/factory.py)
    turns: TurnStore  # turn records and idempotency keys (store/turns.py)
    # The customer's Confirm and Decline of a proposed action (actions/proposals.py): the routes call it.
    proposals: ProposalDesk
    # The customer's ratings (store/ratings.py) and their own per-minute limit.
    ratings: RatingStore
    rating_limiter: RateLimiter
    sqs: Any = None  # the hand-over's queue client (lazy: most turns never need it)


@dataclass(frozen=True)
class LeadServices:
    settings: Settings
    approvals: ApprovalStore
    decisions: ApprovalDecisions
    handoffs: HandoffStore
    audit: AuditStore
    eraser: ConversationEraser
    now: Callable[[], str]
    payments: PaymentProvider  # lazy: built on the first refund call (refunds/provider/factory.py)
    takeover: Takeover  # who answers a conversation: claims, replies, hand-backs, closes (store/takeover.py)
    briefs: Briefs  # what the person picking up a hand-off reads: its brief, its transcript (handoffs/brief.py)


class _LazyClient:
    """A client built on its first call, from the process's cache."""

    def __init__(self, service: Service) -> None:
        self._service: Service = service

    def __getattr__(self, name: str) -> Any:
        return getattr(client(self._service), name)


def _lazy(service: Service) -> Any:
    """Stands in for ``client(service)`` where the client should wait for its first call."""
    return _LazyClient(service)


def build_settler(settings: Settings, ddb: Any, payments: PaymentProvider) -> RefundSettler:
    """The settler of every refund path. Its ledger announces settlements in the conversations' feeds
    (store/notifications.py): an approval's outcome always, a direct refund's only for the callers that ask
    (the webhook, the payment sweep; the chat's tool never does)."""
    from support_agent.refunds import RefundLedger, RefundSettler

    ledger = RefundLedger(
        ddb,
        settings.customer_data_table,
        settings.approvals_table,
        settings.audit_table,
        settings.conversations_table,
    )
    return RefundSettler(payments, ledger, utc_now)


def build_policy_reader(settings: Settings) -> PolicyReader:
    """The support policy's reader: the SSM parameter's newest valid version (policy/source.py) when one is
    configured, else the built-in default with REFUND_THRESHOLD_CENTS, reported as version 0 (today's rules)."""
    from support_agent.policy.source import policy_source

    return policy_source(settings, lambda: client("ssm"))


@dataclass(frozen=True)
class ActionKit:
    """The declared actions (actions/), the policy they read and the desk that proposes and decides them."""

    actions: list[Action[Any]]
    policy: PolicyReader
    proposals: ProposalDesk


def build_actions(
    settings: Settings, ddb: Any, sqs: Any, payments: PaymentProvider | None = None, policy: PolicyReader | None = None
) -> ActionKit:
    """``payments``: the process's provider; by default one built from the settings on its first call."""
    from support_agent.actions import AddressChange, Cancellation, ProposalDesk, address_action, cancel_action
    from support_agent.refunds import RefundWriter, lazy_provider
    from support_agent.store.conversations import ConversationStore
    from support_agent.store.customer_data import CustomerDataStore
    from support_agent.store.proposals import ProposalStore
    from support_agent.tools.refunds import refund_declaration, refund_desk

    customer_data = CustomerDataStore(ddb, settings.customer_data_table)
    writer = RefundWriter(ddb, settings.customer_data_table, settings.approvals_table, settings.audit_table)

    def enqueue(approval_id: str) -> None:
        sqs.send_message(QueueUrl=settings.approval_queue_url, MessageBody=json.dumps({"approvalId": approval_id}))

    settler = build_settler(settings, ddb, payments if payments is not None else lazy_provider(settings))
    desk = refund_desk(customer_data, writer, settler, enqueue, settings.refund_threshold_cents)
    store = ProposalStore(ddb, settings.customer_data_table, settings.audit_table, settings.conversations_table)
    actions = [
        refund_declaration(desk),
        cancel_action(Cancellation(store, customer_data, desk)),
        address_action(AddressChange(customer_data)),
    ]
    conversations = ConversationStore(ddb, settings.conversations_table)

    def last_seq(conversation_id: str) -> int | None:
        header = conversations.get_header(conversation_id)
        return None if header is None else header.next_seq - 1

    reader = policy if policy is not None else build_policy_reader(settings)
    proposals = ProposalDesk(store, customer_data, reader, {a.name: a for a in actions}, last_seq)
    return ActionKit(actions, reader, proposals)


def build_registry(
    settings: Settings, ddb: Any, sqs: Any, payments: PaymentProvider | None = None, kit: ActionKit | None = None
) -> ToolRegistry:
    """``payments``: the process's provider; by default one built from the settings on its first call. ``kit``: the
    declared actions (built here when not given)."""
    from support_agent.store.customer_data import CustomerDataStore
    from support_agent.store.handoffs import HandoffStore
    from support_agent.tools.actions import action_tools
    from support_agent.tools.handoff import handoff_tools
    from support_agent.tools.orders import order_tools
    from support_agent.tools.registry import ToolRegistry

    kit = kit if kit is not None else build_actions(settings, ddb, sqs, payments)
    customer_data = CustomerDataStore(ddb, settings.customer_data_table)
    handoffs = HandoffStore(ddb, settings.approvals_table, settings.conversations_table, settings.audit_table)
    # Today's four first, the new actions after them: the tool list's cached prefix is unchanged for those.
    refunds, *others = action_tools(kit.actions, kit.policy, kit.proposals)
    return ToolRegistry([*order_tools(customer_data), refunds, *handoff_tools(handoffs), *others])


def build_tool_source(settings: Settings, registry: ToolRegistry, ddb: Any, secrets_client: Any = None) -> ToolSource:
    """What the loop calls tools through: the registry, or (TOOL_MODE=mcp) the same tools over MCP in process,
    followed by the outside servers' reviewed tools (MCP_SERVERS). The SDK is imported only for those two."""
    source: ToolSource = registry
    if settings.tool_mode == "mcp":
        from support_agent.mcp.inprocess import InProcessMcpTools
        from support_agent.mcp.our_tools import McpServices

        source = InProcessMcpTools(
            registry, McpServices(registry, ddb, settings.conversations_table, settings.audit_table)
        )
    if settings.mcp_servers:
        from support_agent.mcp.allowlist import parse_servers
        from support_agent.mcp.outside import OutsideServer, OutsideTools, WithOutsideTools
        from support_agent.secrets import key_provider

        secrets = secrets_client if secrets_client is not None else (lambda: client("secretsmanager"))
        servers = [
            OutsideServer(
                entry,
                key_provider("", entry.credential_secret or "", secrets, settings.api_key_cache_seconds),
            )
            for entry in parse_servers(settings.mcp_servers)
        ]
        source = WithOutsideTools(source, OutsideTools(servers, settings.mcp_refresh_seconds))
    return source


def build_mcp_services(settings: Settings, ddb: Any, sqs: Any, payments: PaymentProvider | None = None) -> McpServices:
    """The chat's registry (the same tools, stores and settler) and the MCP audit stream's tables; the actions the
    policy in force says the customer must confirm are not offered (`McpServices.hidden`)."""
    from support_agent.clock import utc_now
    from support_agent.mcp.our_tools import McpServices

    kit = build_actions(settings, ddb, sqs, payments)

    def hidden() -> frozenset[str]:
        applied = kit.policy.current()
        return frozenset(a.name for a in kit.actions if not a.offered_over_mcp(applied))

    registry = build_registry(settings, ddb, sqs, payments, kit)
    return McpServices(registry, ddb, settings.conversations_table, settings.audit_table, utc_now, hidden)


def build_delta_streams(settings: Settings, ddb: Any) -> DeltaStreams | None:
    """The reply's text deltas of the chat function's and the worker's turns (sockets/deltas.py); none without a
    callback URL. A 410 stops only this turn's posts to that connection: ending it in the table is the pusher's (this
    role reads the ``subscribers`` index and writes nothing there)."""
    if not settings.websocket_callback_url:
        return None
    from support_agent.sockets.deltas import DeltaStreams
    from support_agent.sockets.push import Poster, management_client

    url = settings.websocket_callback_url
    poster = Poster(lambda: management_client(url), lambda _connection_id: None)
    return DeltaStreams(build_connection_store(settings, ddb).subscribers, poster)


def build_chat_services(
    settings: Settings, llm: LlmClient, ddb: Any = None, sqs: Any = None, payments: PaymentProvider | None = None
) -> ChatServices:
    from support_agent.agent.loop import Agent
    from support_agent.refunds import lazy_provider
    from support_agent.store.approvals import ApprovalStore
    from support_agent.store.conversations import ConversationStore
    from support_agent.store.customer_data import CustomerDataStore
    from support_agent.store.ratelimit import RateLimiter
    from support_agent.store.ratings import RatingStore
    from support_agent.store.turns import TurnStore

    ddb = client("dynamodb") if ddb is None else ddb
    sqs = _lazy("sqs") if sqs is None else sqs
    payments = payments if payments is not None else lazy_provider(settings)
    # A stored message marks the conversation active: its outcome waits until it has been quiet (docs/OUTCOMES.md).
    conversations = ConversationStore(
        ddb, settings.conversations_table, settings.audit_table, quiet_seconds=settings.outcome_quiet_seconds
    )
    kit = build_actions(settings, ddb, sqs, payments)
    tools = build_tool_source(settings, build_registry(settings, ddb, sqs, payments, kit), ddb)
    # Each turn of a conversation with proposals: their decisions (overdue ones expired first), told to the model.
    agent = Agent(
        settings,
        llm,
        conversations,
        tools,
        decisions=lambda c, cid: kit.proposals.decisions(c, cid, utc_now()),
        streams=build_delta_streams(settings, ddb),
    )
    return ChatServices(
        settings,
        agent,
        conversations,
        CustomerDataStore(ddb, settings.customer_data_table),
        ApprovalStore(ddb, settings.approvals_table),
        RateLimiter(ddb, settings.conversations_table, settings.turns_per_minute),
        RateLimiter(ddb, settings.conversations_table, settings.reads_per_minute, kind="reads"),
        payments=payments,
        turns=TurnStore(ddb, settings.conversations_table),
        sqs=sqs,
        proposals=kit.proposals,
        ratings=RatingStore(ddb, settings.conversations_table),
        rating_limiter=RateLimiter(ddb, settings.conversations_table, settings.ratings_per_minute, kind="ratings"),
    )


def build_outcome_sweeper(settings: Settings, ddb: Any = None, clock: Clock = utc_datetime) -> OutcomeSweeper:
    """OutcomeSweepFunction's: the outcome store and every store a conversation's facts are read from (reads only,
    but for the outcome item and the header's follow-up)."""
    from support_agent.outcomes.facts import FactGatherer
    from support_agent.outcomes.store import OutcomeStore
    from support_agent.outcomes.sweep import OutcomeSweeper
    from support_agent.pricing import price_table
    from support_agent.store.approvals import ApprovalStore
    from support_agent.store.conversations import ConversationStore
    from support_agent.store.customer_data import CustomerDataStore
    from support_agent.store.handoffs import HandoffStore
    from support_agent.store.proposals import ProposalStore
    from support_agent.store.ratings import RatingStore
    from support_agent.store.turns import TurnStore

    ddb = client("dynamodb") if ddb is None else ddb
    table = settings.conversations_table
    facts = FactGatherer(
        ConversationStore(ddb, table),
        TurnStore(ddb, table),
        RatingStore(ddb, table),
        CustomerDataStore(ddb, settings.customer_data_table),
        ApprovalStore(ddb, settings.approvals_table),
        HandoffStore(ddb, settings.approvals_table, table, ""),
        ProposalStore(ddb, settings.customer_data_table, "", table),
        model=settings.llm_model,
        prices=price_table(settings.price_table),
        aws_cost_per_turn_micros=settings.aws_cost_per_turn_micros,
    )
    return OutcomeSweeper(OutcomeStore(ddb, table), facts, settings.outcome_quiet_seconds, clock)


def build_rollup_job(settings: Settings, ddb: Any = None, clock: Clock = utc_datetime) -> RollupJob:
    """DailyRollupFunction's: the day's sources (three indexes, read only) and the rollup items."""
    from support_agent.reports.job import RollupJob
    from support_agent.reports.sources import DaySources
    from support_agent.reports.store import RollupStore

    ddb = client("dynamodb") if ddb is None else ddb
    sources = DaySources(ddb, settings.conversations_table, settings.customer_data_table, settings.approvals_table)
    return RollupJob(sources, RollupStore(ddb, settings.conversations_table), clock)


def build_lead_services(
    settings: Settings, ddb: Any = None, sfn: Any = None, payments: PaymentProvider | None = None
) -> LeadServices:
    from support_agent.approvals.decisions import ApprovalDecisions
    from support_agent.audit.seal import SealReader
    from support_agent.handoffs.brief import Briefs
    from support_agent.refunds import lazy_provider
    from support_agent.store.approvals import ApprovalStore
    from support_agent.store.audit import AuditStore
    from support_agent.store.conversations import ConversationStore
    from support_agent.store.customer_data import CustomerDataStore
    from support_agent.store.erasure import ConversationEraser
    from support_agent.store.handoffs import HandoffStore
    from support_agent.store.takeover import Takeover

    ddb = client("dynamodb") if ddb is None else ddb
    sfn = _lazy("stepfunctions") if sfn is None else sfn
    approvals = ApprovalStore(
        ddb, settings.approvals_table, settings.customer_data_table, settings.audit_table, settings.conversations_table
    )
    handoffs = HandoffStore(ddb, settings.approvals_table, settings.conversations_table, settings.audit_table)
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
            handoffs=handoffs,  # a cancellation's refund rejected opens one (approvals/decisions.py)
        ),
        handoffs,
        AuditStore(
            ddb,
            settings.audit_table,
            settings.conversations_table,
            settings.approvals_table,
            settings.customer_data_table,
            SealReader(_lazy("s3"), settings.audit_seal_bucket) if settings.audit_seal_bucket else None,
        ),
        ConversationEraser(
            ddb,
            settings.conversations_table,
            settings.audit_table,
            time.time,
            utc_now,
            settings.lease_seconds,
            customer_data_table=settings.customer_data_table,
        ),
        utc_now,
        payments=payments if payments is not None else lazy_provider(settings),
        takeover=Takeover(
            ddb,
            settings.approvals_table,
            settings.conversations_table,
            settings.audit_table,
            quiet_seconds=settings.outcome_quiet_seconds,  # a person's reply is activity too
        ),
        briefs=Briefs(
            ConversationStore(ddb, settings.conversations_table),
            CustomerDataStore(ddb, settings.customer_data_table),
            approvals,
        ),
    )


def build_connection_store(settings: Settings, ddb: Any) -> ConnectionStore:
    """The WebSocket's state (sockets/connections.py): POST /api/ws-ticket issues tickets, SocketFunction the rest."""
    from support_agent.sockets.connections import ConnectionStore

    return ConnectionStore(
        ddb,
        settings.connections_table,
        settings.socket_connections_per_owner,
        settings.socket_subscriptions_per_connection,
    )


def build_socket_services(settings: Settings, ddb: Any = None, management: Any = None) -> SocketServices:
    """SocketFunction's: the connection store, the poster (its ``apigatewaymanagementapi`` client built on the first
    post unless ``management`` is given), the conversation's header and the hand-off a person holds, the pusher of
    a new subscription's backlog."""
    from support_agent.sockets.routes import SocketServices
    from support_agent.store.conversations import ConversationStore
    from support_agent.store.takeover import Takeover

    ddb = client("dynamodb") if ddb is None else ddb
    pusher = build_socket_pusher(settings, ddb, management)
    return SocketServices(
        pusher.connections,
        pusher.poster,
        ConversationStore(ddb, settings.conversations_table),
        Takeover(ddb, settings.approvals_table, settings.conversations_table, settings.audit_table),
        pusher,
    )


def build_socket_pusher(settings: Settings, ddb: Any = None, management: Any = None) -> Pusher:
    """SocketPushFunction's (and a subscribe's backlog): the subscriptions, the feed as its readers read it
    (TRANSPARENCY), the poster (its ``apigatewaymanagementapi`` client built on the first post unless
    ``management`` is given)."""
    from support_agent.feed import Feed
    from support_agent.sockets.push import Poster, management_client
    from support_agent.sockets.pusher import Pusher

    ddb = client("dynamodb") if ddb is None else ddb
    store = build_connection_store(settings, ddb)

    def management_api() -> Any:
        return management if management is not None else management_client(settings.websocket_callback_url)

    feed = Feed(ddb, settings.conversations_table, verbose=settings.transparency == "verbose")
    return Pusher(store, feed, Poster(management_api, store.mark_gone), ddb, settings.connections_table)


class _Root:
    """What one process has built so far; ``llm_transport`` and ``payments_transport`` (tests, httpx)
    carry model and payment-provider calls in-process."""

    def __init__(self, llm_transport: Any = None, payments_transport: Any = None) -> None:
        self.llm_transport = llm_transport
        self.payments_transport = payments_transport
        self.clients: dict[Service, Any] = {}

    def client(self, service: Service) -> Any:
        if service not in self.clients:
            self.clients[service] = boto3.client(service)
        return self.clients[service]

    @cached_property
    def chat_services(self) -> ChatServices:
        from support_agent.llm.factory import llm_client_from_settings

        settings = get_settings()
        # The secret's client too is built here, and only on the first read of a key kept in Secrets Manager.
        llm = llm_client_from_settings(
            settings, transport=self.llm_transport, secrets_client=lambda: self.client("secretsmanager")
        )
        return build_chat_services(settings, llm, payments=self.payments)

    @cached_property
    def lead_services(self) -> LeadServices:
        return build_lead_services(get_settings(), payments=self.payments)

    @cached_property
    def payments(self) -> PaymentProvider:
        """One per process, shared by the services; nothing is built until its first call."""
        from support_agent.refunds import lazy_provider

        return lazy_provider(
            get_settings(),
            transport=self.payments_transport,
            secrets_client=lambda: self.client("secretsmanager"),
        )

    @cached_property
    def notifier(self) -> ApprovalNotifier:
        from support_agent.approvals.notifier import ApprovalNotifier
        from support_agent.store.approvals import ApprovalStore

        settings = get_settings()
        store = ApprovalStore(self.client("dynamodb"), settings.approvals_table)
        return ApprovalNotifier(store, _lazy("sns"), settings.leads_topic_arn)

    @cached_property
    def sweeper(self) -> ApprovalSweeper:
        from support_agent.approvals.sweep import ApprovalSweeper
        from support_agent.store.approvals import ApprovalStore

        settings = get_settings()
        ddb = self.client("dynamodb")
        return ApprovalSweeper(
            ApprovalStore(
                ddb,
                settings.approvals_table,
                settings.customer_data_table,
                settings.audit_table,
                settings.conversations_table,
            ),
            ddb,
            _lazy("sqs"),
            settings.approval_queue_url,
            settings.approval_ttl_hours,
            settings.renotify_after_seconds,
            sfn=_lazy("stepfunctions"),
            state_machine_arn=settings.refund_flow_arn,
        )

    @cached_property
    def refund_step(self) -> RefundStep:
        """PaymentsFunction's: RefundFlow's refund step, on the process's provider."""
        from support_agent.refunds import RefundStep
        from support_agent.store.approvals import ApprovalStore

        settings = get_settings()
        ddb = self.client("dynamodb")
        return RefundStep(
            ApprovalStore(ddb, settings.approvals_table, settings.customer_data_table, settings.audit_table),
            build_settler(settings, ddb, self.payments),
            settings.payment_provider,
            utc_now,
        )

    @cached_property
    def payment_sweeper(self) -> PaymentSweeper:
        """PaymentSweepFunction's: unsettled ledger rows asked about again, on the process's provider."""
        from support_agent.refunds import PaymentSweeper

        settings = get_settings()
        settler = build_settler(settings, self.client("dynamodb"), self.payments)
        return PaymentSweeper(
            settler.ledger,
            settler,
            self.payments,
            grace_seconds=settings.payment_sweep_grace_seconds,
            new_attempt_after_seconds=settings.payment_new_attempt_after_seconds,
            limit=settings.payment_sweep_limit,
        )

    @cached_property
    def reconciler(self) -> Reconciler:
        """ReconcileFunction's (and ``make reconcile``'s): the ledger against the process's provider, read only."""
        from support_agent.refunds import UNSETTLED_AFTER, Reconciler, RefundLedger

        settings = get_settings()
        ledger = RefundLedger(
            self.client("dynamodb"), settings.customer_data_table, settings.approvals_table, settings.audit_table
        )
        return Reconciler(
            ledger,
            self.payments,
            window_days=settings.reconcile_window_days,
            unsettled_after=max(UNSETTLED_AFTER, timedelta(seconds=2 * settings.payment_sweep_grace_seconds)),
        )

    @cached_property
    def stripe_webhooks(self) -> StripeWebhooks:
        """PaymentsWebhookFunction's: the ledger, a settler that never asks the provider, the signing secrets
        (``STRIPE_WEBHOOK_SECRET``, or the secret ``STRIPE_WEBHOOK_SECRET_ARN`` read on first use, cached)."""
        from support_agent.errors import ServiceError
        from support_agent.refunds import StripeWebhooks, WebhookSecretUnavailable, secrets_of
        from support_agent.secrets import key_provider

        settings = get_settings()
        read = key_provider(
            settings.stripe_webhook_secret,
            settings.stripe_webhook_secret_arn,
            lambda: self.client("secretsmanager"),
            settings.api_key_cache_seconds,
        )

        def secrets() -> list[str]:
            try:
                return secrets_of(read())
            except ServiceError as exc:  # secrets.py's error: here it is the webhook secret's
                raise WebhookSecretUnavailable("could not read the webhook signing secret") from exc

        # `apply` only records what an event says: the provider is never asked, so none is built.
        settler = build_settler(settings, self.client("dynamodb"), self.payments)
        return StripeWebhooks(settler.ledger, settler, settings.customer_data_table, secrets)

    @cached_property
    def turn_worker(self) -> TurnWorker:
        """TurnWorkerFunction's: the chat services' own loop, stores and tools."""
        from support_agent.agent.lifecycle import TurnLifecycle
        from support_agent.agent.worker import TurnWorker

        services = self.chat_services
        return TurnWorker(TurnLifecycle(services.settings, services.agent, services.turns, services.conversations))

    @cached_property
    def turn_sweeper(self) -> TurnSweeper:
        from support_agent.agent.turn_sweep import TurnSweeper
        from support_agent.store.conversations import ConversationStore
        from support_agent.store.turns import TurnStore

        settings = get_settings()
        ddb = self.client("dynamodb")
        return TurnSweeper(
            TurnStore(ddb, settings.conversations_table),
            ConversationStore(ddb, settings.conversations_table),
            self.client("sqs"),
            settings.turn_queue_url,
            settings.turn_dlq_url,
            settings.lease_seconds,
        )

    @cached_property
    def events_services(self) -> EventsServices:
        from support_agent.feed import Feed
        from support_agent.store.polls import PollSlots
        from support_agent.store.ratelimit import RateLimiter
        from support_agent.store.takeover import Takeover

        settings = get_settings()
        ddb = self.client("dynamodb")
        return EventsServices(
            settings,
            Feed(ddb, settings.conversations_table, verbose=settings.transparency == "verbose"),
            RateLimiter(ddb, settings.conversations_table, settings.reads_per_minute, kind="reads"),
            PollSlots(ddb, settings.conversations_table),
            Takeover(ddb, settings.approvals_table, settings.conversations_table, settings.audit_table),
        )

    @cached_property
    def socket_services(self) -> SocketServices:
        return build_socket_services(get_settings(), self.client("dynamodb"))

    @cached_property
    def socket_pusher(self) -> Pusher:
        return build_socket_pusher(get_settings(), self.client("dynamodb"))

    @cached_property
    def tickets(self) -> ConnectionStore:
        """EventsFunction's: the WebSocket's ticket issuer (POST /api/ws-ticket)."""
        return build_connection_store(get_settings(), self.client("dynamodb"))

    @cached_property
    def outcome_sweeper(self) -> OutcomeSweeper:
        return build_outcome_sweeper(get_settings(), self.client("dynamodb"))

    @cached_property
    def rollup_job(self) -> RollupJob:
        return build_rollup_job(get_settings(), self.client("dynamodb"))

    @cached_property
    def rollup_store(self) -> RollupStore:
        """The lead API's reports: the stored rollups, read only (GET /api/reports/daily)."""
        from support_agent.reports.store import RollupStore

        return RollupStore(self.client("dynamodb"), get_settings().conversations_table)

    @cached_property
    def seal_writer(self) -> SealWriter:
        from support_agent.audit.seal import SealWriter

        return SealWriter(self.client("s3"), get_settings().audit_seal_bucket, utc_now)

    @cached_property
    def mcp_services(self) -> McpServices:
        """McpFunction's: the registry's tools under the MCP rules (mcp/our_tools.py), on the process's provider."""
        return build_mcp_services(get_settings(), self.client("dynamodb"), _lazy("sqs"), self.payments)

    @cached_property
    def mcp_server(self) -> Server[Any]:
        """McpFunction's server object (mcp/server.py) over `mcp_services`, built on its first tool request."""
        from support_agent.mcp.server import build_server

        return build_server(lambda: self.mcp_services)

    @cached_property
    def authenticator(self) -> Authenticator:
        """Kept while warm, so the JWKS cache survives across invocations."""
        from support_agent.auth import Authenticator

        return Authenticator(get_settings())


_root = _Root()


def client(service: Service) -> Any:
    """The process's boto3 client for ``service``: built on first use, then shared by every store."""
    return _root.client(service)


def chat_services() -> ChatServices:
    return _root.chat_services


def lead_services() -> LeadServices:
    return _root.lead_services


def events_services() -> EventsServices:
    return _root.events_services


def socket_services() -> SocketServices:
    return _root.socket_services


def tickets() -> ConnectionStore:
    return _root.tickets


def socket_pusher() -> Pusher:
    return _root.socket_pusher


def approval_notifier() -> ApprovalNotifier:
    return _root.notifier


def approval_sweeper() -> ApprovalSweeper:
    return _root.sweeper


def payment_sweeper() -> PaymentSweeper:
    return _root.payment_sweeper


def reconciler() -> Reconciler:
    return _root.reconciler


def turn_worker() -> TurnWorker:
    return _root.turn_worker


def turn_sweeper() -> TurnSweeper:
    return _root.turn_sweeper


def seal_writer() -> SealWriter:
    return _root.seal_writer


def outcome_sweeper() -> OutcomeSweeper:
    return _root.outcome_sweeper


def rollup_job() -> RollupJob:
    return _root.rollup_job


def rollup_store() -> RollupStore:
    return _root.rollup_store


def authenticator() -> Authenticator:
    return _root.authenticator


def mcp_services() -> McpServices:
    return _root.mcp_services


def mcp_server() -> Server[Any]:
    return _root.mcp_server


def refund_step() -> RefundStep:
    return _root.refund_step


def payments() -> PaymentProvider:
    return _root.payments


def stripe_webhooks() -> StripeWebhooks:
    return _root.stripe_webhooks


def reset(*, llm_transport: Any = None, payments_transport: Any = None) -> None:
    """Forget the settings and everything built (tests change the environment between stacks).

    ``llm_transport`` routes the model adapter's HTTP through an in-process transport (tests'
    scripted model) instead of the network, until the next reset; ``payments_transport`` does the
    same for the payment provider's.
    """
    global _root
    get_settings.cache_clear()
    _root = _Root(llm_transport, payments_transport)
