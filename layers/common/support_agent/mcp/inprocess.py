"""``TOOL_MODE=mcp``: the registry's tools reach the loop through the MCP protocol, in process.

The official SDK's client talks to a server built by mcp/server.py over the chat's own registry (the server
McpFunction serves, minus the network): ``tools/list`` gives the specs, ``tools/call`` runs a tool. What makes the
call the chat's rides in a context variable (`server.IN_PROCESS`): the principal, the key
``<conversation_id>:<seq>:<tool_use_id>``, the deadline. So the turn, the stored history, the audit row (written
once, by the loop, origin chat) and the money effects are those of registry mode; tests/integration and
tests/reliability run the conformance suite, the seed transcript and crash-and-repair in both modes.

A call that crashed is answered from what it recorded by the registry itself (`recorded`): that is a lookup by
the call's key, not a tool call, and needs no protocol.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
from mcp import Client

from support_agent.mcp.our_tools import McpServices
from support_agent.mcp.server import IN_PROCESS, OUTCOME_META_KEY, InProcessCall, build_server
from support_agent.mcp.sync import run_sync
from support_agent.tools.registry import ToolContext, ToolOutcome, ToolRegistry

CLIENT_INFO = types.Implementation(name="support-agent-chat", version="1.0.0")
# Our own server speaks it: adopted directly, without the `server/discover` probe "auto" would make per session.
PROTOCOL_VERSION = "2026-07-28"


class InProcessMcpTools:
    """A `ToolSource` over the MCP protocol; the loop cannot tell it from the registry."""

    def __init__(self, registry: ToolRegistry, services: McpServices) -> None:
        self._registry = registry
        self._server = build_server(lambda: services)
        self._specs: list[dict[str, Any]] | None = None

    def _client(self) -> Client:
        return Client(self._server, client_info=CLIENT_INFO, cache=None, mode=PROTOCOL_VERSION)

    @property
    def specs(self) -> list[dict[str, Any]]:
        """From ``tools/list`` once per process: the same list, in the same order, as the registry's."""
        if self._specs is None:

            async def listed() -> list[types.Tool]:
                token = IN_PROCESS.set(InProcessCall(None))
                try:
                    async with self._client() as client:
                        return (await client.list_tools()).tools
                finally:
                    IN_PROCESS.reset(token)

            self._specs = [
                {"name": t.name, "description": t.description or "", "input_schema": t.input_schema}
                for t in run_sync(listed)
            ]
        return self._specs

    def execute(self, name: str, raw: Any, ctx: ToolContext) -> ToolOutcome:
        if not isinstance(raw, dict):  # MCP carries only objects; the registry refuses the rest without running
            return self._registry.execute(name, raw, ctx)
        call = InProcessCall(ctx)
        arguments = raw

        async def called() -> types.CallToolResult:
            token = IN_PROCESS.set(call)  # before the client starts the server's tasks: they inherit it
            try:
                async with self._client() as client:
                    return await client.call_tool(name, arguments)
            finally:
                IN_PROCESS.reset(token)

        result = run_sync(called)
        if call.error is not None:
            raise call.error
        payload = result.structured_content if isinstance(result.structured_content, dict) else {}
        meta = result.meta or {}
        outcome = meta.get(OUTCOME_META_KEY)
        if not isinstance(outcome, str):
            outcome = "error" if result.is_error else "ok"
        return ToolOutcome(payload, bool(result.is_error), outcome, call.streams)

    def recorded(self, name: str, ctx: ToolContext) -> ToolOutcome | None:
        return self._registry.recorded(name, ctx)
