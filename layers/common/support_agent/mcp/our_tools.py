"""Our tools over MCP: the registry's own tools for a customer's own assistant, under the chat's rules.

The server (mcp/server.py) codes against `tool_definitions` and `call_tool`, on the `McpServices` the
composition root builds (wiring.py) and hands it. This module imports nothing of the ``mcp`` SDK (plain dicts),
so it stays light. (The outside servers' tools the agent uses are mcp/outside.py's.)

* Scoping: the customer id is the verified principal's, never the arguments' (the registry refuses extra
  properties), so another customer's order answers like a missing one.
* Keys: a tool with an effect may carry an idempotency key (``params._meta["support-agent/idempotency-key"]``).
  It becomes the server key ``mcp:<customer_id>:<sha256(key)>``: the call's keys are ("mcp", customer id,
  sha256) where the chat's are (conversation, seq, tool_use_id), so `direct_refund_key`, the refund request
  row, the ledger row and the hand-off's per-call record all follow from it, two customers' key "1" never
  meet, and a repeated call finds what the first recorded. Without a key the call gets a fresh id: a refund of
  any amount is then held for a lead (`ToolContext.held`; an identical pending request answers with its
  approval, refunds/requests.py `held_sk`), and a hand-off reuses the customer's open MCP ticket.
* A key is bound to its first call: the Conversations item ``mcp#<customer_id>#key#<sha256(key)>`` / 0 holds the
  SHA-256 of the tool's name and its validated arguments' canonical JSON (`binding`), claimed before the tool
  runs. The same call again answers as recorded; another one (other arguments, another tool) is an ``is_error``
  ``idempotency_key_reused`` (as ``/api/chat`` answers 422), audited, nothing else written. A key whose refund
  predates the binding item is bound by its next call. A read-only tool ignores a key.
* Confirmation: an action whose rule in the support policy needs the customer's confirmation (actions/) is not
  offered: there is no conversation here to confirm it in. ``tools/list`` omits it (`McpServices.hidden`, read
  from the policy in force) and a call of it is an ``is_error`` (audited, nothing else written).
* Audit: every call is one row of the stream ``mcp#<customer_id>`` (origin ``mcp``, the client's name), whose
  head lives in the Conversations item ``mcp#<customer_id>`` / 0; that item carries no ``customer_id`` and no
  ``updated_at`` (``by_customer`` never lists it). The row is chained on the head read and the head advanced
  in the same transaction, conditioned on it: concurrent calls of one customer retry, never fork the stream.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from support_agent.audit.chain import Head
from support_agent.auth import Principal
from support_agent.clock import utc_now
from support_agent.ids import ulid
from support_agent.refunds.keys import MCP_SCOPE, mcp_refund_key
from support_agent.store.audit import AuditRecord
from support_agent.store.audited_write import AuditedWrite
from support_agent.store.dynamo import error_code, from_item, to_item, to_values, update_if
from support_agent.tools.registry import ToolContext, ToolOutcome, ToolRegistry

logger = logging.getLogger(__name__)

IDEMPOTENCY_META_KEY = "support-agent/idempotency-key"
ORIGIN = "mcp"
KEY_SCOPE = MCP_SCOPE  # the "conversation" part of an MCP call's keys (refunds/keys.py)
MAX_KEY_CHARS = 255
MAX_CLIENT_CHARS = 128
AUDIT_RETRIES = 32  # concurrent calls of one customer racing on its stream's head
KEY_REUSED = "idempotency_key_reused"
NEEDS_CONFIRMATION = "it needs the customer's confirmation in a conversation with the support chat"

_READ_ONLY = frozenset({"lookup_order", "list_invoices"})
# The effects' meaning in MCP's terms: a refund moves money and a hand-off opens a ticket (destructive: not
# undone by the client), and a repeated call with the same arguments (and key) has no further effect.
_EFFECT_ANNOTATIONS = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True, "openWorldHint": True}


@dataclass(frozen=True)
class McpServices:
    registry: ToolRegistry
    ddb: Any
    conversations_table: str  # the holder items ``mcp#<customer_id>`` / 0 (audit head, open MCP hand-off)
    audit_table: str
    now: Callable[[], str] = utc_now
    # The tools not offered over MCP now: declared actions whose rule needs the customer's confirmation (wiring.py).
    hidden: Callable[[], frozenset[str]] = frozenset


def stream_of(customer_id: int) -> str:
    """The customer's MCP audit stream, and the key of the Conversations item holding its head."""
    return f"mcp#{customer_id}"


def server_key(customer_id: int, idempotency_key: str) -> str:
    """``mcp:<customer_id>:<sha256(key)>``: the key our ledger and the payment provider see."""
    return mcp_refund_key(customer_id, _digest(idempotency_key))


def _digest(idempotency_key: str) -> str:
    return hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()


def key_item(customer_id: int, idempotency_key: str) -> dict[str, Any]:
    """The key of the Conversations item binding a customer's idempotency key to its first call."""
    return {"conversation_id": f"mcp#{customer_id}#key#{_digest(idempotency_key)}", "seq": 0}


def binding(name: str, arguments: Mapping[str, Any]) -> str:
    """What a key is bound to: SHA-256 of the canonical JSON (sorted keys, no spaces, UTF-8) of the tool's name and
    its validated arguments. The key itself rides in ``_meta``, never in the arguments (extra properties refused)."""
    canonical = json.dumps({"arguments": arguments, "tool": name}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def bind_key(services: McpServices, customer_id: int, idempotency_key: str, name: str, bound: str) -> bool:
    """True when the key is new (bound now) or already bound to ``bound``; False when another call holds it. One
    conditional UpdateItem (McpFunction may not PutItem): of two different calls racing on a key, one binds it."""
    return update_if(
        services.ddb,
        TableName=services.conversations_table,
        Key=to_item(key_item(customer_id, idempotency_key)),
        UpdateExpression="SET #b = :b, #t = :t, #at = if_not_exists(#at, :at)",  # the same binding: the same tool
        ConditionExpression="attribute_not_exists(#b) OR #b = :b",
        ExpressionAttributeNames={"#b": "binding", "#t": "tool", "#at": "bound_at"},
        ExpressionAttributeValues=to_values({":b": bound, ":t": name[:64], ":at": services.now()}),
    )


def tool_definitions(registry: ToolRegistry, hidden: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """``[{"name", "description", "inputSchema", "annotations"}]`` from the registry's own specs (the same
    pydantic models as the chat's tools), in the registry's order; none of ``hidden``."""
    out = []
    for spec in registry.specs:
        name = spec["name"]
        if name in hidden:
            continue
        annotations = {"readOnlyHint": True} if name in _READ_ONLY else dict(_EFFECT_ANNOTATIONS)
        out.append(
            {
                "name": name,
                "description": spec["description"],
                "inputSchema": spec["input_schema"],
                "annotations": annotations,
            }
        )
    return out


def call_tool(
    services: McpServices,
    principal: Principal,
    name: str,
    arguments: dict[str, Any] | None,
    idempotency_key: str | None,
    client_name: str,
) -> ToolOutcome:
    """Run one tool for the verified customer and audit it; business failures come back as ``is_error``."""
    if principal.role != "customer" or principal.customer_id is None:
        return ToolOutcome({"error": "only a signed-in customer may call tools"}, True, "error")
    customer_id = principal.customer_id
    client = (client_name or "unknown")[:MAX_CLIENT_CHARS]
    key = idempotency_key if idempotency_key else None
    effect = name not in _READ_ONLY
    if name in services.hidden():
        outcome = ToolOutcome({"error": f"{name[:64]} is not offered here: {NEEDS_CONFIRMATION}"}, True, "unknown_tool")
        _audit(services, principal, name, arguments, outcome, None, client)
        return outcome
    if key is not None and len(key) > MAX_KEY_CHARS:
        outcome = ToolOutcome(
            {"error": f"the idempotency key is longer than {MAX_KEY_CHARS} characters"}, True, "invalid_input"
        )
        _audit(services, principal, name, arguments, outcome, None, client)
        return outcome
    if key is not None and effect:
        validated = services.registry.validated(name, arguments if arguments is not None else {})
        # Input the tool refuses binds nothing: the registry answers it below, and the key stays free.
        if not isinstance(validated, ToolOutcome) and not bind_key(
            services, customer_id, key, name, binding(name, validated)
        ):
            outcome = ToolOutcome(
                {
                    "error": f"{KEY_REUSED}: this idempotency key was used with other arguments or another tool; "
                    "send a new key for a new request",
                    "code": KEY_REUSED,
                },
                True,
                "invalid_input",
            )
            _audit(services, principal, name, arguments, outcome, None, client)
            return outcome
    call_id = _digest(key) if key is not None and effect else ulid().lower()
    ctx = ToolContext(
        principal=principal,
        customer_id=customer_id,
        conversation_id=KEY_SCOPE,
        seq=customer_id,
        tool_use_id=call_id,
        request_id=f"mcp_{ulid()}",
        now=services.now(),
        origin=ORIGIN,
        held=effect and key is None and name == "request_refund",
    )
    outcome = services.registry.execute(name, arguments if arguments is not None else {}, ctx)
    _audit(services, principal, name, arguments, outcome, ctx, client)
    return outcome


def _audit(
    services: McpServices,
    principal: Principal,
    name: str,
    arguments: Any,
    outcome: ToolOutcome,
    ctx: ToolContext | None,
    client: str,
) -> None:
    """The call's row on ``mcp#<customer_id>``; it names the streams its effect wrote (the outcome says which, as
    the chat's rows do), so the trail follows them."""
    assert principal.customer_id is not None
    record = AuditRecord(
        stream=stream_of(principal.customer_id),
        action="tool_call",
        actor=principal.sub,
        outcome=outcome.outcome,
        customer_id=principal.customer_id,
        created_at=ctx.now if ctx is not None else services.now(),
        tool=name[:64],
        input=arguments,
        output=outcome.result,
        request_id=ctx.request_id if ctx is not None else None,
        tool_use_id=ctx.tool_use_id if ctx is not None else None,
        approval_id=outcome.streams.approval_id,
        handoff_id=outcome.streams.handoff_id,
        refund_key=outcome.streams.refund_key,
        proposal_id=outcome.streams.proposal_id,
        origin=ORIGIN,
        client=client,
        policy_version=_version(outcome.result),
    )
    append_audit(services, principal.customer_id, record)


def _version(result: Any) -> int | None:
    """The policy version an action's answer says it applied (actions/), for its audit row."""
    version = result.get("policy_version") if isinstance(result, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def append_audit(services: McpServices, customer_id: int, record: AuditRecord) -> None:
    """``record`` chained onto the stream's head, the head advanced in the same transaction conditioned on the
    head read; re-read and chained again while another call of the customer moves it."""
    key = {"conversation_id": stream_of(customer_id), "seq": 0}
    for _ in range(AUDIT_RETRIES):
        out = services.ddb.get_item(
            TableName=services.conversations_table,
            Key=to_item(key),
            ConsistentRead=True,
            ProjectionExpression="audit_n, audit_hash, audit_event",
        )
        read = Head.of(from_item(out["Item"]) if out.get("Item") else None)
        items = AuditedWrite.of(services.audit_table, read, [record]).update(services.conversations_table, key, [])
        try:
            services.ddb.transact_write_items(TransactItems=items)
            return
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
    raise RuntimeError(f"the MCP audit stream of customer {customer_id} kept moving")
