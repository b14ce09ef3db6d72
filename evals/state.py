"""The end state of a trial, read from the local stack's tables and the simulated Stripe, as the checks compare it.

Approvals and hand-offs live in the Approvals table keyed by their own id; neither index is keyed by customer,
so both are read with a Query on ``by_created`` (``entity = APPROVAL`` / ``HANDOFF``) filtered on the trial's
customer id: every approval of the stack is read and filtered, which a harness on moto can afford (no Scan).
The conversation is read as its owner reads it, ``GET /api/conversations/{id}``: the local stack runs with
``TRANSPARENCY=verbose``, so it holds every tool call with its input and result.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

from evals.seed import Trial


class OrderState(BaseModel):
    order_id: int
    status: str
    total_cents: int
    available_cents: int
    reserved_cents: int
    refunded_cents: int
    address_line1: str = ""


class EndState(BaseModel):
    orders: dict[str, OrderState] = Field(default_factory=dict)  # label -> order, every seeded customer's
    provider_refunds: dict[str, list[int]] = Field(default_factory=dict)  # label -> amounts made during the trial
    approvals: dict[str, list[str]] = Field(default_factory=dict)  # label -> statuses, oldest first
    approval_refunded_cents: dict[str, int] = Field(default_factory=dict)  # label -> approved refunds' amounts
    handoffs: int = 0  # hand-offs opened for the trial's customer
    replies: list[str] = Field(default_factory=list)  # every text the customer was shown, oldest first
    tool_calls: list[str] = Field(default_factory=list)  # every tool the agent called, in order
    customer_messages: list[str] = Field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    iterations: int = 0  # model calls over the trial
    max_turn_iterations: int = 0
    turns: int = 0  # the customer's turns answered
    turn_errors: list[int] = Field(default_factory=list)  # the HTTP statuses of the customer's failed turns
    threshold_cents: int = 5000  # the support policy's refund threshold in force

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


def _labels(trial: Trial) -> dict[int, str]:
    return {oid: label for c in [trial.customer, *trial.others] for label, oid in c.orders.items()}


def read_orders(ddb: Any, table: str, trial: Trial) -> dict[str, OrderState]:
    from support_agent.store.dynamo import from_item, to_item

    out: dict[str, OrderState] = {}
    for c in [trial.customer, *trial.others]:
        for label, oid in c.orders.items():
            key = to_item({"customer_id": c.customer_id, "sk": f"ORDER#{oid}"})
            item = ddb.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
            if item is None:
                continue
            o = from_item(item)
            out[label] = OrderState(
                order_id=oid,
                status=str(o["status"]),
                total_cents=int(o["total_cents"]),
                available_cents=int(o.get("available_cents", 0)),
                reserved_cents=int(o.get("reserved_cents", 0)),
                refunded_cents=int(o.get("refunded_cents", 0)),
                address_line1=str((o.get("shipping_address") or {}).get("line1", "")),
            )
    return out


def _entities(ddb: Any, table: str, entity: str, customer_ids: set[int]) -> list[dict[str, Any]]:
    """Every ``entity`` item of these customers, oldest first: a Query on ``by_created``, filtered."""
    from support_agent.store.dynamo import from_item

    kwargs: dict[str, Any] = {
        "TableName": table,
        "IndexName": "by_created",
        "KeyConditionExpression": "entity = :e",
        "ExpressionAttributeValues": {":e": {"S": entity}},
    }
    found: list[dict[str, Any]] = []
    while True:
        page = ddb.query(**kwargs)
        found += [from_item(i) for i in page.get("Items", [])]
        if "LastEvaluatedKey" not in page:
            break
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return [i for i in found if int(i.get("customer_id", -1)) in customer_ids]


def read_approvals(ddb: Any, table: str, trial: Trial) -> tuple[dict[str, list[str]], dict[str, int], int]:
    """Approvals per order label (statuses), the approved amounts per label, and the customer's hand-offs."""
    labels = _labels(trial)
    everyone = {c.customer_id for c in [trial.customer, *trial.others]}
    statuses: dict[str, list[str]] = {}
    approved: dict[str, int] = {}
    for a in _entities(ddb, table, "APPROVAL", everyone):
        label = labels.get(int(a["order_id"]), f"order {a['order_id']}")
        statuses.setdefault(label, []).append(str(a["status"]))
        if a["status"] in ("APPROVED", "SETTLING", "REFUNDED"):
            approved[label] = approved.get(label, 0) + int(a["amount_cents"])
    handoffs = len(_entities(ddb, table, "HANDOFF", {trial.customer.customer_id}))
    return statuses, approved, handoffs


def read_provider_refunds(stripe: Any, trial: Trial) -> dict[str, list[int]]:
    """Refunds the provider made during the trial (not the seeded earlier ones, not failed or canceled)."""
    out: dict[str, list[int]] = {}
    if stripe is None:
        return out
    for label, intent in trial.payment_intents.items():
        made = [
            int(r["amount"])
            for r in stripe.refunds(intent)
            if r["id"] not in trial.seeded_refunds and r["status"] not in ("failed", "canceled")
        ]
        if made:
            out[label] = made
    return out


def read_conversations(http: Any, trial: Trial, conversation_ids: list[str]) -> dict[str, list[str]]:
    """Replies, tool calls and the customer's own words, from each conversation as its owner reads it."""
    out: dict[str, list[str]] = {"replies": [], "tools": [], "said": []}
    headers = {"Authorization": f"Bearer {trial.token}"}
    for cid in conversation_ids:
        r = http.get(f"/api/conversations/{cid}", headers=headers)
        if r.status_code != 200:
            continue
        for m in r.json().get("messages", []):
            if m["role"] == "user":
                out["said"].append(m.get("text") or "")
                continue
            if m.get("text"):
                out["replies"].append(m["text"])
            out["tools"] += [c["name"] for c in m.get("toolCalls") or []]
    return out


def policy_threshold(local: Any) -> int:
    """The refund threshold of the support policy in force (the newest valid version in SSM)."""
    import boto3

    from devstack.policy import applied, versions
    from support_agent.policy.model import SupportPolicy

    ssm = boto3.client("ssm", endpoint_url=local.moto_url, region_name="us-east-1")
    version = applied(versions(ssm, local.stack.physical_ids["SupportPolicyParameter"]))
    if version is None:
        return int(local.stack.parameters.get("RefundThresholdCents", 5000))
    threshold = SupportPolicy.model_validate_json(version.value).actions.request_refund.approval_threshold_cents
    return int(threshold or 0)


def settled(read: Any, timeout: float = 15.0, quiet: float = 1.0, every: float = 0.25) -> Any:
    """``read()`` once it has stopped changing for ``quiet`` seconds: webhooks and queues finish after a turn."""
    deadline = time.monotonic() + timeout
    last, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(every)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


def read_state(local: Any, trial: Trial, conversation: Any, http: Any) -> EndState:
    """The trial's end state, once the stack's effects have settled; ``conversation``: the customer's run."""
    import boto3

    ddb = boto3.client("dynamodb", endpoint_url=local.moto_url, region_name="us-east-1")
    data, approvals = local.stack.physical_ids["CustomerDataTable"], local.stack.physical_ids["ApprovalsTable"]
    stripe = local.stripe.stripe if local.stripe is not None else None

    def effects() -> tuple[Any, ...]:
        orders = read_orders(ddb, data, trial)
        return orders, read_approvals(ddb, approvals, trial), read_provider_refunds(stripe, trial)

    orders, (statuses, approved, handoffs), refunds = settled(effects)
    talk = read_conversations(http, trial, list(conversation.conversation_ids))
    state = EndState(
        orders=orders,
        provider_refunds=refunds,
        approvals=statuses,
        approval_refunded_cents=approved,
        handoffs=handoffs,
        replies=talk["replies"] or list(conversation.replies),
        tool_calls=talk["tools"],
        customer_messages=talk["said"],
        turns=len(conversation.turns),
        turn_errors=list(getattr(conversation, "error_statuses", [])),
        threshold_cents=policy_threshold(local),
    )
    return with_usage(state, conversation.turns)


def with_usage(state: EndState, turns: list[dict[str, Any]]) -> EndState:
    """Tokens and model calls summed over the turns' answers (each 200 body carries its own)."""
    iterations = [int(t.get("iterations", 0)) for t in turns]
    return state.model_copy(
        update={
            "input_tokens": sum(int(t.get("inputTokens", 0)) for t in turns),
            "output_tokens": sum(int(t.get("outputTokens", 0)) for t in turns),
            "cache_read_input_tokens": sum(int(t.get("cacheReadInputTokens", 0)) for t in turns),
            "cache_creation_input_tokens": sum(int(t.get("cacheCreationInputTokens", 0)) for t in turns),
            "iterations": sum(iterations),
            "max_turn_iterations": max(iterations, default=0),
        }
    )
