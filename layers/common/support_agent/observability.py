"""The one Logger, Metrics and Tracer every function shares (Powertools), and the events they record.

* **Logs** are JSON lines from one Powertools ``Logger``. The package's plain ``logging`` loggers
  (``support_agent.*``) write through the same handler, so every line of an invocation carries the
  correlation ids the handler and the loop append (API request id, conversation id, approval id).
  What is logged is chosen here, field by field: tool names, outcomes, latencies, token counts —
  never a token, a key, a message text or a tool's output.
* **Metrics** are CloudWatch EMF from one ``Metrics`` (namespace ``SupportAgent``, dimension
  ``service``), flushed by ``@metrics.log_metrics`` on each handler. ``METRICS`` names every metric
  the code emits; template.yaml's alarms and dashboard use exactly these (tests/unit/test_alarms.py).
* **Traces**: a subsegment per model call, tool call and persistence write (``span``). The Tracer is
  created only inside Lambda with tracing on: importing aws_xray_sdk builds two botocore clients for
  its sampler, which costs about as much as importing boto3 itself (docs/OPERATIONS.md has the
  numbers). Elsewhere — tests, the local stack, ``sam local`` — ``span`` costs nothing and
  aws_xray_sdk is never imported. ``POWERTOOLS_TRACE_DISABLED=true`` turns it off in Lambda too.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import lru_cache, wraps
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer

    from support_agent.messages import Usage

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "support-agent"
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "SupportAgent"


def _json_message(message: Any) -> Any:
    """A message that is JSON text (an object or an array) is logged decoded, as Powertools does; anything
    else as it is. Powertools tries ``json.loads`` on every str message, and our messages are event names
    (``model_call``), so each line raised and caught a decode error: about a sixth of a line's cost."""
    if isinstance(message, str) and message[:1] in ("{", "["):
        return json.loads(message)  # a malformed one stays text: Powertools catches the ValueError
    return message


logger = Logger(service=SERVICE, json_deserializer=_json_message)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
# Reads (health, lists) emit no metric of their own: that is expected, not worth a warning per cold start.
warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)

# The package's own loggers (logging.getLogger(__name__)) share the JSON handler and its keys.
_package = logging.getLogger("support_agent")
_package.handlers = [logger.registered_handler]
_package.setLevel(logger.log_level)
_package.propagate = False

# ------------------------------------------------------------------ metric names (alarms use these)

INPUT_TOKENS = "InputTokens"
OUTPUT_TOKENS = "OutputTokens"
CACHE_READ_TOKENS = "CacheReadInputTokens"
CACHE_WRITE_TOKENS = "CacheCreationInputTokens"
MODEL_CALLS = "ModelCalls"
MODEL_LATENCY = "ModelLatency"
LLM_RETRIES = "LlmRetries"
LLM_UNAVAILABLE = "LlmUnavailable"
LLM_ERRORS = "LlmErrors"
TURNS = "Turns"
ITERATIONS = "IterationsPerTurn"
TURN_COST = "EstimatedCostUSD"
TOOL_CALLS = "ToolCalls"
TOOL_ERRORS = "ToolErrors"
APPROVALS_CREATED = "ApprovalsCreated"
APPROVALS_APPROVED = "ApprovalsApproved"
APPROVALS_REJECTED = "ApprovalsRejected"
APPROVALS_EXPIRED = "ApprovalsExpired"
APPROVALS_RELEASED = "ApprovalsReleased"
REFUND_RETRIES = "RefundRetries"
REFUNDS_COMPLETED = "RefundsCompleted"  # direct refunds; approved ones are RefundFlow's ExecutionsSucceeded
OLDEST_PENDING_APPROVAL_AGE = "OldestPendingApprovalAge"
# Seconds since the oldest APPROVED approval was approved (or retried): its refund never settled.
OLDEST_APPROVED_APPROVAL_AGE = "OldestApprovedApprovalAge"
# Differences between the refund ledger and the payment provider found by one reconciliation run (0: they agree).
RECONCILIATION_DIFFERENCES = "ReconciliationDifferences"
# Seconds since the oldest refund ledger row still REQUESTED or SETTLING began its attempt (the payment sweep).
OLDEST_UNSETTLED_REFUND_AGE = "OldestUnsettledRefundAge"
# Audit rows modified or removed, as the audit table's stream shows them (the trail is append-only: 0 always).
AUDIT_ROWS_TAMPERED = "AuditRowsTampered"
# Stream heads the seal function could not put in the Object Lock bucket (each is replayed from the stream).
AUDIT_SEAL_FAILURES = "AuditSealFailures"
# Outside MCP tools not offered to the model (off the allowlist, not read-only, changed since pinned).
MCP_TOOL_REJECTED = "McpToolRejected"
# Seconds the oldest OPEN hand-off has waited for a person (0: none queued), and the inbox's depth by state.
OLDEST_OPEN_HANDOFF_AGE = "OldestOpenHandoffAge"
OPEN_HANDOFFS = "OpenHandoffs"
ASSIGNED_HANDOFFS = "AssignedHandoffs"
# Support policy versions refused at load (policy/source.py): the newest does not validate, an older one applies.
POLICY_REFUSED = "PolicyRefused"
# A completed day's outcomes (reports/job.py, once per day): rates are fractions 0..1, absent without a denominator.
RESOLUTION_RATE = "ResolutionRate"
ESCALATION_RATE = "EscalationRate"
THUMBS_DOWN_SHARE = "ThumbsDownShare"
CSAT = "Csat"
CONVERSATIONS = "Conversations"
REFUNDED_CENTS = "RefundedCents"
# Stored events the socket pusher could not post (not a 410: a throttle, a 5xx, a timeout); they go with the next push.
SOCKET_POSTS_FAILED = "SocketPostsFailed"

METRICS: dict[str, str] = {
    INPUT_TOKENS: MetricUnit.Count.value,
    OUTPUT_TOKENS: MetricUnit.Count.value,
    CACHE_READ_TOKENS: MetricUnit.Count.value,
    CACHE_WRITE_TOKENS: MetricUnit.Count.value,
    MODEL_CALLS: MetricUnit.Count.value,
    MODEL_LATENCY: MetricUnit.Milliseconds.value,
    LLM_RETRIES: MetricUnit.Count.value,
    LLM_UNAVAILABLE: MetricUnit.Count.value,
    LLM_ERRORS: MetricUnit.Count.value,
    TURNS: MetricUnit.Count.value,
    ITERATIONS: MetricUnit.Count.value,
    TURN_COST: MetricUnit.NoUnit.value,
    TOOL_CALLS: MetricUnit.Count.value,
    TOOL_ERRORS: MetricUnit.Count.value,
    APPROVALS_CREATED: MetricUnit.Count.value,
    APPROVALS_APPROVED: MetricUnit.Count.value,
    APPROVALS_REJECTED: MetricUnit.Count.value,
    APPROVALS_EXPIRED: MetricUnit.Count.value,
    APPROVALS_RELEASED: MetricUnit.Count.value,
    REFUND_RETRIES: MetricUnit.Count.value,
    REFUNDS_COMPLETED: MetricUnit.Count.value,
    OLDEST_PENDING_APPROVAL_AGE: MetricUnit.Seconds.value,
    OLDEST_APPROVED_APPROVAL_AGE: MetricUnit.Seconds.value,
    RECONCILIATION_DIFFERENCES: MetricUnit.Count.value,
    OLDEST_UNSETTLED_REFUND_AGE: MetricUnit.Seconds.value,
    AUDIT_ROWS_TAMPERED: MetricUnit.Count.value,
    AUDIT_SEAL_FAILURES: MetricUnit.Count.value,
    MCP_TOOL_REJECTED: MetricUnit.Count.value,
    OLDEST_OPEN_HANDOFF_AGE: MetricUnit.Seconds.value,
    OPEN_HANDOFFS: MetricUnit.Count.value,
    ASSIGNED_HANDOFFS: MetricUnit.Count.value,
    POLICY_REFUSED: MetricUnit.Count.value,
    RESOLUTION_RATE: MetricUnit.NoUnit.value,
    ESCALATION_RATE: MetricUnit.NoUnit.value,
    THUMBS_DOWN_SHARE: MetricUnit.NoUnit.value,
    CSAT: MetricUnit.NoUnit.value,
    CONVERSATIONS: MetricUnit.Count.value,
    REFUNDED_CENTS: MetricUnit.Count.value,
    SOCKET_POSTS_FAILED: MetricUnit.Count.value,
}


def emit(name: str, value: float = 1) -> None:
    """Add one value of a known metric (an unknown name is a bug: the dashboard would miss it)."""
    metrics.add_metric(name=name, unit=METRICS[name], value=value)


class TurnMetrics:
    """A turn's metrics, added to the EMF set once, at the turn's end (`flush`), not per call.

    Powertools' ``add_metric`` checks the unit and formats a debug string on every call; a 3-iteration
    turn made about 20 of them. What CloudWatch computes stays the same: counts are summed per turn
    (their alarms and widgets read Sum only), while values read as averages or percentiles —
    ``ModelLatency`` per call, ``IterationsPerTurn`` and ``EstimatedCostUSD`` per turn — keep one value
    each, so p50/p90, Average and Maximum see the same samples as before.
    """

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._samples: list[tuple[str, float]] = []

    def count(self, name: str, value: float = 1) -> None:
        """Add to a Sum-only metric (sent as one value per turn)."""
        self._sums[name] = self._sums.get(name, 0) + value

    def sample(self, name: str, value: float) -> None:
        """Keep one value of a metric read by distribution (sent as is)."""
        self._samples.append((name, value))

    def flush(self) -> None:
        """Add everything tallied to the invocation's EMF set (idempotent: the tally is emptied)."""
        sums, samples = self._sums, self._samples
        self._sums, self._samples = {}, []
        for name, total in sums.items():
            emit(name, total)
        for name, value in samples:
            emit(name, value)


# ------------------------------------------------------------------ events


def ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


def model_call(
    *,
    provider: str,
    model: str,
    iteration: int,
    latency_ms: int,
    retries: int,
    outcome: str,
    usage: Usage | None = None,
    stop_reason: str | None = None,
    error: str | None = None,
    tally: TurnMetrics | None = None,
) -> None:
    """One line and the metrics of one model call; ``outcome`` is ok | unavailable | error.

    The metrics go to the turn's ``tally`` (sent at its end); without one they are sent at once.
    """
    into = tally or TurnMetrics()
    fields: dict[str, Any] = {
        "event": "model_call",
        "provider": provider,
        "model": model,
        "iteration": iteration,
        "latency_ms": latency_ms,
        "retries": retries,
        "outcome": outcome,
    }
    into.count(MODEL_CALLS)
    into.sample(MODEL_LATENCY, latency_ms)  # the dashboard's p50/p90: one value per call
    if retries:
        into.count(LLM_RETRIES, retries)
    if outcome == "unavailable":
        into.count(LLM_UNAVAILABLE)
    elif outcome == "error":
        into.count(LLM_ERRORS)
    if usage is not None:
        fields.update(
            stop_reason=stop_reason,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_input_tokens=usage.cache_read_input_tokens,
            cache_creation_input_tokens=usage.cache_creation_input_tokens,
        )
        into.count(INPUT_TOKENS, usage.input_tokens)
        into.count(OUTPUT_TOKENS, usage.output_tokens)
        into.count(CACHE_READ_TOKENS, usage.cache_read_input_tokens)
        into.count(CACHE_WRITE_TOKENS, usage.cache_creation_input_tokens)
    if error:
        fields["error"] = error
    (logger.info if outcome == "ok" else logger.warning)("model_call", extra=fields)
    if tally is None:
        into.flush()


def tool_dispatch(
    *,
    tool: str,
    tool_use_id: str,
    iteration: int,
    outcome: str,
    is_error: bool,
    latency_ms: int,
    tally: TurnMetrics | None = None,
) -> None:
    """One line per tool call: which tool, how it ended, how long it took — never its input or output."""
    logger.info(
        "tool_dispatch",
        extra={
            "event": "tool_dispatch",
            "tool": tool[:64],
            "tool_use_id": tool_use_id[:128],
            "iteration": iteration,
            "outcome": outcome,
            "is_error": is_error,
            "latency_ms": latency_ms,
        },
    )
    into = tally or TurnMetrics()
    into.count(TOOL_CALLS)
    if is_error:
        into.count(TOOL_ERRORS)
    if tally is None:
        into.flush()


def turn_end(
    *,
    stop_reason: str,
    iterations: int,
    tool_calls: int,
    usage: Usage,
    cost_usd: float | None,
    tally: TurnMetrics | None = None,
) -> None:
    """The per-turn metrics: iterations and the estimated cost (absent for a model without a price)."""
    logger.info(
        "turn_end",
        extra={
            "event": "turn_end",
            "stop_reason": stop_reason,
            "iterations": iterations,
            "tool_calls": tool_calls,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "estimated_cost_usd": cost_usd,
        },
    )
    into = tally or TurnMetrics()
    into.count(TURNS)
    into.sample(ITERATIONS, iterations)  # read as Average and Maximum
    if cost_usd is not None:
        into.sample(TURN_COST, cost_usd)  # read as Sum, Average and p90 per turn
    if tally is None:
        into.flush()


# ------------------------------------------------------------------ tracing


def tracing_enabled() -> bool:
    """Inside Lambda (not ``sam local``), unless POWERTOOLS_TRACE_DISABLED says otherwise."""
    if os.environ.get("POWERTOOLS_TRACE_DISABLED", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    return bool(os.environ.get("LAMBDA_TASK_ROOT")) and not os.environ.get("AWS_SAM_LOCAL")


@lru_cache(maxsize=1)
def tracer() -> Tracer | None:
    """The Tracer, created on first use and only where it can send anything (see the module doc)."""
    if not tracing_enabled():
        return None
    from aws_lambda_powertools import Tracer

    # Only what this code calls: DynamoDB/SQS/SNS/Step Functions (botocore) and the model (httpx).
    return Tracer(service=SERVICE, patch_modules=["botocore", "httpx"])


class Span:
    """A subsegment, or nothing when tracing is off. Annotations are indexed (searchable) in X-Ray."""

    def __init__(self, subsegment: Any = None) -> None:
        self._subsegment = subsegment

    def annotate(self, **values: str | int | float | bool | None) -> None:
        if self._subsegment is None:
            return
        for key, value in values.items():
            if value is not None:
                self._subsegment.put_annotation(key, value)


_NO_SPAN = nullcontext(Span())  # reusable: ten spans a turn cost no generator when tracing is off


def span(name: str, **annotations: str | int | float | bool | None) -> AbstractContextManager[Span]:
    t = tracer()
    if t is None:
        return _NO_SPAN
    return _subsegment(t, name, annotations)


@contextmanager
def _subsegment(t: Tracer, name: str, annotations: dict[str, str | int | float | bool | None]) -> Iterator[Span]:
    with t.provider.in_subsegment(name=name) as subsegment:
        current = Span(subsegment)
        current.annotate(**annotations)
        yield current


# ------------------------------------------------------------------ handlers

Handler = TypeVar("Handler", bound=Callable[..., Any])


def _stand_in_context() -> Any:
    """What Lambda would pass, for callers that pass None (tests, scripts)."""
    name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or SERVICE
    return SimpleNamespace(
        function_name=name,
        memory_limit_in_mb=int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE") or 0),
        invoked_function_arn="",
        aws_request_id=f"local-{uuid.uuid4()}",
    )


def observed(correlation_id_path: str | None = None) -> Callable[[Handler], Handler]:
    """Logger context (Lambda fields, a correlation id from the event, state cleared per invocation)
    and, inside Lambda with tracing on, the handler's own subsegment. Apply above ``@metrics.log_metrics``.
    """

    def decorate(handler: Handler) -> Handler:
        inner: Callable[..., Any] = handler
        t = tracer()
        if t is not None:
            inner = t.capture_lambda_handler(inner, capture_response=False)
        inner = logger.inject_lambda_context(correlation_id_path=correlation_id_path, clear_state=True)(inner)

        @wraps(handler)
        def run(event: Any, context: Any = None, *args: Any, **kwargs: Any) -> Any:
            return inner(event, context if context is not None else _stand_in_context(), *args, **kwargs)

        return run  # type: ignore[return-value]

    return decorate
