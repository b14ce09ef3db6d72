"""The MCP server object: the official SDK's low-level ``Server`` answering from mcp/our_tools.py.

The low-level server (not ``MCPServer``) because the tools' schemas are the registry's own (the pydantic
models' JSON Schema, passed through untouched) and each call reads ``params._meta`` itself. Built once per
process by the composition root (wiring.py), reused by every invocation: it holds no per-request state. Who is
calling comes from the ASGI scope that mcp/endpoint.py fills after verifying the token (`PRINCIPAL_SCOPE_KEY`),
never from the JSON-RPC message.

The chat's ``TOOL_MODE=mcp`` (mcp/inprocess.py) talks to a server built here over the chat's own registry,
through the SDK's in-process client: the call's `ToolContext` (principal, conversation, seq, tool_use_id,
deadline) rides in `IN_PROCESS` (a context variable only that client sets; nothing on the wire can), the
registry runs under the chat's keys, the loop audits the call once (origin chat), no MCP rate limit applies, and
an exception a tool raises reaches the loop as itself, as it would in registry mode.

Only McpFunction imports this module, and the chat function when TOOL_MODE=mcp (the SDK costs 0.6-0.85 s to
import; docs/ARCHITECTURE.md "MCP server").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from support_agent.auth import Principal
from support_agent.mcp.our_tools import IDEMPOTENCY_META_KEY, McpServices, call_tool, tool_definitions
from support_agent.store.audit import Streams
from support_agent.tools.registry import ToolContext

SERVER_NAME = "support-agent"
SERVER_VERSION = "1.0.0"
# The verified Principal of the request, put into the ASGI scope by mcp/endpoint.py before the SDK sees it.
PRINCIPAL_SCOPE_KEY = "support_agent.principal"
UNKNOWN_CLIENT = "unknown"
_MAX_CLIENT_NAME = 100
_MAX_IDEMPOTENCY_KEY = 255
# The registry's outcome (ok | error | invalid_input | unknown_tool) in a result's _meta, for the audit row.
OUTCOME_META_KEY = "support-agent/outcome"


@dataclass
class InProcessCall:
    """One in-process request (mcp/inprocess.py): a call's context in (None: listing); out, a tool's exception,
    or the audit streams its effect wrote (the loop's row names them; nothing on the wire carries them)."""

    ctx: ToolContext | None
    error: BaseException | None = None
    streams: Streams = field(default_factory=Streams)


IN_PROCESS: ContextVar[InProcessCall | None] = ContextVar("support_agent_mcp_in_process", default=None)

INSTRUCTIONS = (
    "Tools of the support desk, acting for the signed-in customer only: look up orders and invoices, "
    "request refunds (held for a support lead above the threshold, or when no idempotency key is given "
    f'in params._meta["{IDEMPOTENCY_META_KEY}"]) and ask for a person. Actions the customer must confirm '
    "(cancelling an order, changing its address, by default) are offered only in the support chat."
)


def _principal(ctx: ServerRequestContext[Any, Any]) -> Principal:
    request = ctx.request
    scope = getattr(request, "scope", None)
    value = scope.get(PRINCIPAL_SCOPE_KEY) if isinstance(scope, Mapping) else None
    if not isinstance(value, Principal):  # mcp/endpoint.py authenticates every request first: a wiring bug
        raise RuntimeError("MCP request without a verified principal")
    return value


def _meta(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, Any]:
    params = ctx.params if isinstance(ctx.params, Mapping) else {}
    meta = params.get("_meta")
    return meta if isinstance(meta, Mapping) else {}


def client_name(ctx: ServerRequestContext[Any, Any]) -> str:
    """The client's name: the request's ``_meta`` client info (2026-07-28), else the handshake's clientInfo
    (a stateful session), else "unknown" (stateless handshake mode: tools/call carries none)."""
    info = _meta(ctx).get(types.CLIENT_INFO_META_KEY)
    name = info.get("name") if isinstance(info, Mapping) else None
    if not isinstance(name, str) or not name.strip():
        client_params = ctx.session.client_params
        name = client_params.client_info.name if client_params is not None else None
    if not isinstance(name, str) or not name.strip():
        return UNKNOWN_CLIENT
    return name.strip()[:_MAX_CLIENT_NAME]


def _text_result(payload: dict[str, Any], is_error: bool, outcome: str | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(payload, ensure_ascii=False, default=str))],
        structured_content=payload,
        is_error=is_error,
        _meta={OUTCOME_META_KEY: outcome} if outcome else None,
    )


def build_server(services: Callable[[], McpServices]) -> Server[Any]:
    """A low-level Server over the registry's tools; ``services`` is called on the first tool request (so the
    registry and its clients wait for one)."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        hidden: frozenset[str] = frozenset()
        if IN_PROCESS.get() is None:  # the chat's own calls (TOOL_MODE=mcp) see every tool; a client, those it may call
            _principal(ctx)
            hidden = services().hidden()
        definitions = tool_definitions(services().registry, hidden)
        return types.ListToolsResult(tools=[types.Tool.model_validate(d, by_name=False) for d in definitions])

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        call = IN_PROCESS.get()
        if call is not None:
            return _in_process(services().registry, params, call)
        principal = _principal(ctx)
        key = _meta(ctx).get(IDEMPOTENCY_META_KEY)
        if key is not None and not (isinstance(key, str) and 0 < len(key) <= _MAX_IDEMPOTENCY_KEY):
            return _text_result(
                {"error": f"_meta {IDEMPOTENCY_META_KEY} must be a string of 1 to {_MAX_IDEMPOTENCY_KEY} characters"},
                True,
            )
        # Blocking I/O (boto3) on the loop: one request per Lambda invocation, nothing else waits on it.
        outcome = call_tool(services(), principal, params.name, params.arguments, key, client_name(ctx))
        return _text_result(outcome.result, outcome.is_error, outcome.outcome)

    return Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
    )


def _in_process(registry: Any, params: types.CallToolRequestParams, call: InProcessCall) -> types.CallToolResult:
    """The chat's call: the registry under the chat's keys, unaudited here (the loop audits it)."""
    if call.ctx is None:
        raise RuntimeError("an in-process tool call without its context")
    try:
        outcome = registry.execute(params.name, params.arguments if params.arguments is not None else {}, call.ctx)
    except BaseException as exc:  # handed back to the loop as itself (mcp/inprocess.py re-raises it); sync code:
        # no cancellation can arrive in here, so nothing of anyio's is swallowed
        call.error = exc
        return _text_result({"error": "the tool failed"}, True, "error")
    call.streams = outcome.streams
    return _text_result(outcome.result, outcome.is_error, outcome.outcome)
