"""Settings from the environment, validated once per cold start.

Every limit the rules in docs/ARCHITECTURE.md name is here, so a deployment changes behaviour through
template parameters, never through code.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    # Tables and queues (physical names come from the stack).
    conversations_table: str = Field("Conversations", alias="CONVERSATIONS_TABLE")
    customer_data_table: str = Field("CustomerData", alias="CUSTOMER_DATA_TABLE")
    approvals_table: str = Field("Approvals", alias="APPROVALS_TABLE")
    audit_table: str = Field("Audit", alias="AUDIT_TABLE")
    approval_queue_url: str = Field("", alias="APPROVAL_QUEUE_URL")
    # The bucket of sealed audit heads (Object Lock, audit/seal.py); empty: verification without seals.
    audit_seal_bucket: str = Field("", alias="AUDIT_SEAL_BUCKET")
    # The WebSocket (docs/API.md#websocket): its state's table, the address clients connect to (what
    # POST /api/ws-ticket answers with), the @connections endpoint answers are posted to, and its limits.
    connections_table: str = Field("Connections", alias="CONNECTIONS_TABLE")
    websocket_url: str = Field("", alias="WEBSOCKET_URL")
    websocket_callback_url: str = Field("", alias="WEBSOCKET_CALLBACK_URL")
    socket_connections_per_owner: int = Field(5, alias="SOCKET_CONNECTIONS_PER_OWNER", ge=1, le=100)
    socket_subscriptions_per_connection: int = Field(10, alias="SOCKET_SUBSCRIPTIONS_PER_CONNECTION", ge=1, le=100)

    # The model.
    # Which adapter answers (llm/factory.py); the stored history is the same for all three.
    llm_provider: Literal["anthropic", "openai", "bedrock"] = Field("anthropic", alias="LLM_PROVIDER")
    # OpenAI-compatible chat completions: base URL as the OpenAI SDK takes it (ending in /v1);
    # OPENAI_MODEL empty means MODEL_ID; the key from OPENAI_API_KEY or the secret (empty: no header).
    openai_base_url: str = Field("https://api.openai.com/v1", alias="OPENAI_BASE_URL")
    openai_api_key: str = Field("", alias="OPENAI_API_KEY", repr=False)
    openai_api_key_secret_arn: str = Field("", alias="OPENAI_API_KEY_SECRET_ARN")
    openai_model: str = Field("", alias="OPENAI_MODEL")
    openai_max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens", alias="OPENAI_MAX_TOKENS_PARAM"
    )
    # Bedrock InvokeModel: an inference profile id or ARN (or a model id); region from the ARN if empty.
    bedrock_model_id: str = Field("", alias="BEDROCK_MODEL_ID")
    bedrock_region: str = Field("", alias="BEDROCK_REGION")
    anthropic_base_url: str = Field("https://api.anthropic.com", alias="ANTHROPIC_BASE_URL")
    anthropic_api_key: str = Field("", alias="ANTHROPIC_API_KEY", repr=False)
    anthropic_api_key_secret_arn: str = Field("", alias="ANTHROPIC_API_KEY_SECRET_ARN")
    anthropic_version: str = Field("2023-06-01", alias="ANTHROPIC_VERSION")
    model_id: str = Field("claude-sonnet-4-5", alias="MODEL_ID")
    max_tokens: int = Field(1024, alias="MAX_TOKENS", ge=1, le=64000)
    llm_connect_timeout: float = Field(3.0, alias="LLM_CONNECT_TIMEOUT", gt=0)
    llm_read_timeout: float = Field(25.0, alias="LLM_READ_TIMEOUT", gt=0)
    llm_max_retries: int = Field(3, alias="LLM_MAX_RETRIES", ge=0, le=10)
    breaker_failure_threshold: int = Field(5, alias="BREAKER_FAILURE_THRESHOLD", ge=1)
    breaker_cooldown_seconds: float = Field(30.0, alias="BREAKER_COOLDOWN_SECONDS", gt=0)

    # Bounds (rule 4).
    max_iterations: int = Field(8, alias="MAX_ITERATIONS", ge=1, le=50)
    max_tool_calls_per_turn: int = Field(8, alias="MAX_TOOL_CALLS_PER_TURN", ge=1, le=50)
    conversation_token_budget: int = Field(200_000, alias="CONVERSATION_TOKEN_BUDGET", ge=1)
    # Estimated tokens of history per model request; the oldest turns are left out beyond it
    # (agent/budget.py). 0 sends the whole history.
    history_token_budget: int = Field(24_000, alias="HISTORY_TOKEN_BUDGET", ge=0, le=150_000)
    turn_deadline_seconds: float = Field(27.0, alias="TURN_DEADLINE_SECONDS", gt=0)
    # Long turns (agent/handover.py): the synchronous part's time, what a model call usually takes, the queue the
    # turn goes to when the next call does not fit (empty: never handed over), and a handed-over turn's limit.
    sync_turn_seconds: float = Field(20.0, alias="SYNC_TURN_SECONDS", gt=0, le=25)
    model_call_budget_seconds: float = Field(8.0, alias="MODEL_CALL_BUDGET_SECONDS", gt=0)
    turn_queue_url: str = Field("", alias="TURN_QUEUE_URL")
    turn_dlq_url: str = Field("", alias="TURN_DLQ_URL")  # the turn sweep ends the turns whose message is here
    turn_max_seconds: float = Field(300.0, alias="TURN_MAX_SECONDS", ge=30, le=840)
    persist_reserve_seconds: float = Field(1.5, alias="PERSIST_RESERVE_SECONDS", ge=0)
    lease_seconds: int = Field(40, alias="LEASE_SECONDS", ge=1)
    max_message_chars: int = Field(4000, alias="MAX_MESSAGE_CHARS", ge=1)
    max_body_bytes: int = Field(16384, alias="MAX_BODY_BYTES", ge=64)
    tool_output_max_chars: int = Field(4000, alias="TOOL_OUTPUT_MAX_CHARS", ge=100)
    # Chat turns a customer may start per clock minute (a DynamoDB counter; 429 rate_limited after).
    turns_per_minute: int = Field(10, alias="TURNS_PER_MINUTE", ge=1, le=10_000)
    # Conversation reads (list and view) a customer may make per clock minute (a separate counter).
    reads_per_minute: int = Field(60, alias="READS_PER_MINUTE", ge=1, le=10_000)
    # MCP requests carrying tools/call a customer may make per clock minute (McpFunction; its own counter).
    mcp_calls_per_minute: int = Field(30, alias="MCP_CALLS_PER_MINUTE", ge=1, le=10_000)
    # Ratings (thumbs and closing scores) a customer may send per clock minute (its own counter).
    ratings_per_minute: int = Field(20, alias="RATINGS_PER_MINUTE", ge=1, le=10_000)
    # The public base URL of the API (https://api.example.com) for the MCP resource metadata; empty: from the
    # request's Host and X-Forwarded-Proto headers.
    mcp_public_base_url: str = Field("", alias="MCP_PUBLIC_BASE_URL")
    # How the loop reaches our own tools: directly, or over MCP to the server object McpFunction serves (in
    # process); outside servers' read-only tools (mcp/allowlist.py), listed again every MCP_REFRESH_SECONDS.
    # MCP_SERVERS is the MCP code's to validate (mcp/allowlist.py, when the loop's tools are built at cold start):
    # config, at the bottom of the package, imports no feature.
    tool_mode: Literal["registry", "mcp"] = Field("registry", alias="TOOL_MODE")
    mcp_servers: str = Field("", alias="MCP_SERVERS")
    mcp_refresh_seconds: float = Field(300.0, alias="MCP_REFRESH_SECONDS", ge=1, le=3600)

    # Money.
    refund_threshold_cents: int = Field(5000, alias="REFUND_THRESHOLD_CENTS", ge=0)
    # The support policy's SSM parameter (policy/source.py): its newest valid version decides every action; empty:
    # the built-in default with REFUND_THRESHOLD_CENTS, reported as version 0. Read again after POLICY_CACHE_SECONDS.
    support_policy_parameter: str = Field("", alias="SUPPORT_POLICY_PARAMETER")
    policy_cache_seconds: int = Field(60, alias="POLICY_CACHE_SECONDS", ge=0, le=3600)
    # Who moves a refund's money (support_agent/refunds): `none` keeps refunds ledger-only. Stripe's key
    # from STRIPE_API_KEY or the secret (a plain string or {"api_key": ...}); timeouts per attempt.
    payment_provider: Literal["none", "stripe"] = Field("none", alias="PAYMENT_PROVIDER")
    stripe_api_base: str = Field("https://api.stripe.com", alias="STRIPE_API_BASE")
    stripe_api_key: str = Field("", alias="STRIPE_API_KEY", repr=False)
    stripe_api_key_secret_arn: str = Field("", alias="STRIPE_API_KEY_SECRET_ARN")
    stripe_connect_timeout: float = Field(3.0, alias="STRIPE_CONNECT_TIMEOUT", gt=0)
    stripe_read_timeout: float = Field(10.0, alias="STRIPE_READ_TIMEOUT", gt=0)
    stripe_max_retries: int = Field(2, alias="STRIPE_MAX_RETRIES", ge=0, le=10)
    # Webhook signing secrets (whsec_...), comma separated while Stripe rolls one (both sign meanwhile);
    # or the secret STRIPE_WEBHOOK_SECRET_ARN holding them as a plain string (refunds/webhooks.py).
    stripe_webhook_secret: str = Field("", alias="STRIPE_WEBHOOK_SECRET", repr=False)
    stripe_webhook_secret_arn: str = Field("", alias="STRIPE_WEBHOOK_SECRET_ARN")
    # The payment sweep (payments/sweep.py): rows unsettled for longer than the grace are asked about
    # again, at most PAYMENT_SWEEP_LIMIT per run. A row whose refund the provider cannot find starts a new
    # attempt only once its attempt is this old: never while Stripe may still be executing the request.
    payment_sweep_grace_seconds: int = Field(300, alias="PAYMENT_SWEEP_GRACE_SECONDS", ge=0, le=86_400)
    payment_sweep_limit: int = Field(100, alias="PAYMENT_SWEEP_LIMIT", ge=1, le=1000)
    payment_new_attempt_after_seconds: int = Field(900, alias="PAYMENT_NEW_ATTEMPT_AFTER_SECONDS", ge=600, le=43_200)
    # Reconciliation (payments/reconcile.py): ledger rows created in the last N days against the provider's refunds.
    reconcile_window_days: int = Field(7, alias="RECONCILE_WINDOW_DAYS", ge=1, le=90)

    # Approvals.
    refund_flow_arn: str = Field("", alias="REFUND_FLOW_ARN")
    approval_wait_seconds: float = Field(5.0, alias="APPROVAL_WAIT_SECONDS", ge=0, le=25)
    # The leads' SNS topic (ApprovalNotifierFunction publishes one message per approval).
    leads_topic_arn: str = Field("", alias="LEADS_TOPIC_ARN")
    # The sweep: PENDING approvals older than this expire and free their reservation.
    approval_ttl_hours: int = Field(168, alias="APPROVAL_TTL_HOURS", ge=1)
    # The sweep re-enqueues a PENDING approval never notified once it is this old (the chat
    # function sends right after its transaction; this grace keeps the sweep from racing it).
    renotify_after_seconds: int = Field(300, alias="RENOTIFY_AFTER_SECONDS", ge=0)

    transparency: Literal["verbose", "quiet"] = Field("verbose", alias="TRANSPARENCY")

    # Outcomes (docs/OUTCOMES.md): a conversation without activity for this long is quiet, and its outcome derived;
    # each turn's AWS cost on the outcome (micro-USD): the read-only turn's measured cost, docs/PERFORMANCE.md.
    outcome_quiet_minutes: int = Field(30, alias="OUTCOME_QUIET_MINUTES", ge=1, le=10_080)
    aws_cost_per_turn_micros: int = Field(51, alias="AWS_COST_PER_TURN_MICROS", ge=0)

    # Observability: prices (USD per million tokens, JSON by model family) on top of pricing.py's
    # defaults, for the estimated cost per turn; how long a key read from Secrets Manager is reused.
    price_table: str = Field("", alias="PRICE_TABLE")
    api_key_cache_seconds: int = Field(300, alias="API_KEY_CACHE_SECONDS", ge=1, le=86_400)

    # Auth.
    jwt_secret: str = Field("", alias="JWT_SECRET", repr=False)
    jwt_jwks_url: str = Field("", alias="JWT_JWKS_URL")
    jwt_issuer: str = Field("support-agent-local", alias="JWT_ISSUER")
    jwt_audience: str = Field("support-agent", alias="JWT_AUDIENCE")
    jwt_role_claim: str = Field("role", alias="JWT_ROLE_CLAIM")
    jwt_customer_id_claim: str = Field("customer_id", alias="JWT_CUSTOMER_ID_CLAIM")
    jwt_leeway_seconds: int = Field(30, alias="JWT_LEEWAY_SECONDS", ge=0, le=300)
    # Longest exp - iat accepted: a leaked token must not stay good for a century.
    jwt_max_lifetime_seconds: int = Field(86_400, alias="JWT_MAX_LIFETIME_SECONDS", ge=60, le=31_536_000)
    jwks_cache_seconds: int = Field(300, alias="JWKS_CACHE_SECONDS", ge=1)

    @field_validator("price_table")
    @classmethod
    def _price_table_parses(cls, value: str) -> str:
        from support_agent.pricing import price_table

        try:
            price_table(value)
        except ValueError as exc:  # JSON and pydantic errors alike: fail at cold start, not mid-turn
            raise ValueError(f"PRICE_TABLE is not a price table: {exc}") from None
        return value

    @field_validator("jwt_secret")
    @classmethod
    def _secret_long_enough(cls, value: str) -> str:
        if value and len(value.encode()) < 32:
            raise ValueError("JWT_SECRET must be at least 32 bytes")
        return value

    @property
    def outcome_quiet_seconds(self) -> int:
        return self.outcome_quiet_minutes * 60

    @property
    def llm_model(self) -> str:
        """The model the chosen provider is asked for (each answer names the one that replied)."""
        chosen = {"openai": self.openai_model, "bedrock": self.bedrock_model_id}.get(self.llm_provider, "")
        return chosen or self.model_id


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    known = {f.alias for f in Settings.model_fields.values() if f.alias}
    return Settings.model_validate({k: v for k, v in env.items() if k in known})


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings; tests call ``get_settings.cache_clear()`` after changing env."""
    return load_settings()
