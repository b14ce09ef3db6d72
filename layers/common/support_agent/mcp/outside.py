"""Outside MCP servers' tools for the loop: only those reviewed, and nothing they answer can fail a turn.

* Review (`review`): a listed tool reaches the model only if it is on its server's allowlist, marked read-only
  (``annotations.readOnlyHint``) and its definition still has the pinned digest (mcp/pins.py); a name listed
  again is judged by its first listing, the repeat dropped. Anything else is logged and counted
  (``McpToolRejected``, an alarm): a changed description is an injection until reviewed. A tool the entry
  ``declined`` (reviewed, deliberately not offered: a server's write tools) is only logged.
* Discovery: ``tools/list`` when the source is built (container start) and again once ``MCP_REFRESH_SECONDS`` have
  passed, checked when the loop reads the specs (a stateless function never hears ``list_changed``). A server
  that cannot be listed keeps the tools last reviewed, so one outage does not reshape the prompt.
* Calls: ``tools/call`` over Streamable HTTP with the server's service credential (Secrets Manager; never the
  customer's token), bounded by the server's timeout and the turn's deadline. The verified customer id goes into
  the entry's ``customerIdArgument``, which the model never sees and may not supply. Down, slow, garbled,
  ``isError`` or oversized answers become ``is_error`` results the model can explain; the loop fences and
  truncates the result like any other, and audits the call (tool ``<server>__<tool>``) in the conversation.

Imported only when ``MCP_SERVERS`` is set (wiring.py): it imports the ``mcp`` SDK.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp.types as types
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from support_agent.mcp.allowlist import NAMESPACE_SEPARATOR, McpServerEntry, PinnedTool
from support_agent.mcp.pins import tool_pin
from support_agent.mcp.sync import run_sync
from support_agent.observability import MCP_TOOL_REJECTED, emit
from support_agent.tools.registry import ToolContext, ToolOutcome

logger = logging.getLogger(__name__)

CLIENT_INFO = types.Implementation(name="support-agent", version="1.0.0")
LIST_TIMEOUT_SECONDS = 5.0
MAX_PAGES = 10
# Above this (the JSON of what the model would get) a result is refused outright, not truncated: nobody answers a
# customer's question with a megabyte, and the fence would keep only the first TOOL_OUTPUT_MAX_CHARS anyway.
MAX_RESULT_CHARS = 256 * 1024
# Left of the turn's deadline when a call starts, for storing its result.
DEADLINE_RESERVE_SECONDS = 1.0
_MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class OutsideTool:
    """A reviewed tool: what the model sees (``spec``) and how to call it."""

    entry: McpServerEntry
    remote_name: str
    pin: PinnedTool
    spec: dict[str, Any]
    validator: Draft202012Validator

    @property
    def name(self) -> str:
        return str(self.spec["name"])


@dataclass(frozen=True)
class Rejection:
    server: str
    tool: str
    # not_allowlisted | not_read_only | changed | no_customer_argument | bad_schema | duplicate | declined
    reason: str

    @property
    def alarming(self) -> bool:
        """Everything but a tool the entry declines (reviewed and deliberately not offered)."""
        return self.reason != "declined"


def review(entry: McpServerEntry, listed: list[dict[str, Any]]) -> tuple[list[OutsideTool], list[Rejection]]:
    """Which of a server's listed tools (wire form) the model may see, and which it may not and why."""
    accepted: list[OutsideTool] = []
    rejected: list[Rejection] = []
    seen: set[str] = set()
    for definition in listed:
        name = str(definition.get("name", ""))
        pin = entry.tools.get(name)
        annotations = definition.get("annotations")
        read_only = isinstance(annotations, dict) and annotations.get("readOnlyHint") is True
        if name in seen:  # the first listing decides: a repeat would be offered twice, or stand in for it
            rejected.append(Rejection(entry.name, name, "duplicate"))
            continue
        seen.add(name)
        if name in entry.declined:
            rejected.append(Rejection(entry.name, name, "declined"))
        elif pin is None:
            rejected.append(Rejection(entry.name, name, "not_allowlisted"))
        elif not read_only:
            rejected.append(Rejection(entry.name, name, "not_read_only"))
        elif tool_pin(definition) != pin.sha256:
            rejected.append(Rejection(entry.name, name, "changed"))
        else:
            tool = _offered(entry, name, pin, definition)
            if isinstance(tool, Rejection):
                rejected.append(tool)
            else:
                accepted.append(tool)
    return accepted, rejected


def _offered(entry: McpServerEntry, name: str, pin: PinnedTool, definition: dict[str, Any]) -> OutsideTool | Rejection:
    schema = copy.deepcopy(definition.get("inputSchema") or {"type": "object"})
    if not isinstance(schema, dict):
        return Rejection(entry.name, name, "bad_schema")
    hidden = pin.customer_id_argument
    if hidden is not None:
        properties = schema.get("properties")
        if not isinstance(properties, dict) or hidden not in properties:
            return Rejection(entry.name, name, "no_customer_argument")
        del properties[hidden]
        if isinstance(schema.get("required"), list):
            schema["required"] = [r for r in schema["required"] if r != hidden]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return Rejection(entry.name, name, "bad_schema")
    spec = {
        "name": entry.exposed(name),
        "description": str(definition.get("description") or ""),
        "input_schema": schema,
    }
    return OutsideTool(entry, name, pin, spec, Draft202012Validator(schema))


class OutsideServer:
    """One configured server: its credential and the SDK client calls (one short session per request)."""

    def __init__(self, entry: McpServerEntry, token: Callable[[], str]) -> None:
        self.entry = entry
        self._token = token

    def _client(self, timeout: float) -> Client:
        token = self._token() if self.entry.credential_secret else ""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout), follow_redirects=False)
        return Client(streamable_http_client(self.entry.url, http_client=http), client_info=CLIENT_INFO, cache=None)

    def list_tools(self) -> list[dict[str, Any]]:
        """Every page of ``tools/list`` (wire form), within the server's timeout (at most 5 s: a listing may
        delay the turn that finds it due)."""
        timeout = min(LIST_TIMEOUT_SECONDS, self.entry.timeout_seconds)

        async def listed() -> list[dict[str, Any]]:
            with anyio.fail_after(timeout):
                async with self._client(timeout) as client:
                    tools: list[types.Tool] = []
                    cursor: str | None = None
                    for _ in range(MAX_PAGES):
                        page = await client.list_tools(cursor=cursor)
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if cursor is None:
                            break
            return [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools]

        return run_sync(listed)

    def call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> types.CallToolResult:
        async def called() -> types.CallToolResult:
            with anyio.fail_after(timeout):
                async with self._client(timeout) as client:
                    return await client.call_tool(name, arguments)

        return run_sync(called)


class OutsideTools:
    """Every configured server's reviewed tools, kept fresh; `execute` never raises for what a server does."""

    def __init__(
        self,
        servers: list[OutsideServer],
        refresh_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._servers = {s.entry.name: s for s in servers}
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._tools: dict[str, OutsideTool] = {}
        self._by_server: dict[str, list[OutsideTool]] = {name: [] for name in self._servers}
        self._specs: list[dict[str, Any]] = []
        self._next_refresh = 0.0
        self._lock = threading.Lock()
        self.refresh()

    def owns(self, name: str) -> bool:
        server, sep, _ = name.partition(NAMESPACE_SEPARATOR)
        return bool(sep) and server in self._servers

    @property
    def specs(self) -> list[dict[str, Any]]:
        if self._clock() >= self._next_refresh:
            self.refresh()
        return self._specs

    def refresh(self) -> None:
        """List every server again and review what it offers now."""
        with self._lock:
            for name, server in self._servers.items():
                try:
                    listed = server.list_tools()
                except Exception as exc:  # down, slow, garbled: keep what was last reviewed
                    logger.warning(
                        "outside MCP server could not be listed; keeping its last reviewed tools",
                        extra={"mcp_server": name, "error": _describe(exc), "tools_kept": len(self._by_server[name])},
                    )
                    continue
                accepted, rejected = review(server.entry, listed)
                self._by_server[name] = accepted
                for r in rejected:
                    (logger.error if r.alarming else logger.debug)(
                        "outside MCP tool not offered to the model",
                        extra={"mcp_server": r.server, "mcp_tool": r.tool[:64], "reason": r.reason},
                    )
                if alarming := sum(r.alarming for r in rejected):
                    emit(MCP_TOOL_REJECTED, alarming)
                missing = set(server.entry.tools) - {str(d.get("name")) for d in listed}
                for tool in sorted(missing):
                    logger.warning(
                        "allowlisted outside MCP tool not listed", extra={"mcp_server": name, "mcp_tool": tool}
                    )
            tools = [t for name in self._servers for t in self._by_server[name]]
            self._tools = {t.name: t for t in tools}
            specs = [t.spec for t in tools]
            if specs != self._specs:
                self._specs = specs
            self._next_refresh = self._clock() + self._refresh_seconds

    def execute(self, name: str, raw: Any, ctx: ToolContext) -> ToolOutcome:
        tool = self._tools.get(name)
        if tool is None:
            return ToolOutcome({"error": f"the tool '{name[:64]}' is not available now"}, True, "unknown_tool")
        if not isinstance(raw, dict):
            return ToolOutcome({"error": "tool input must be a JSON object"}, True, "invalid_input")
        hidden = tool.pin.customer_id_argument
        if hidden is not None and hidden in raw:
            return ToolOutcome(
                {"error": f"{hidden} is filled in for the signed-in customer; call again without it"},
                True,
                "invalid_input",
            )
        errors = sorted(tool.validator.iter_errors(raw), key=lambda e: list(e.path))[:5]
        if errors:
            where = "; ".join(f"{'.'.join(map(str, e.path)) or 'input'}: {e.message[:200]}" for e in errors)
            return ToolOutcome({"error": f"invalid input: {where}"}, True, "invalid_input")
        timeout = tool.entry.timeout_seconds
        if ctx.deadline is not None:
            timeout = min(timeout, ctx.deadline.remaining() - DEADLINE_RESERVE_SECONDS)
        if timeout <= 0:
            return ToolOutcome({"error": "not executed: no time left in this turn"}, True, "not_executed")
        arguments = {**raw, hidden: ctx.customer_id} if hidden is not None else dict(raw)
        service = f"the {tool.entry.name} service"
        try:
            result = self._servers[tool.entry.name].call_tool(tool.remote_name, arguments, timeout)
        except Exception as exc:
            return self._failed(tool, exc, timeout)
        return _outcome(result, service)

    def _failed(self, tool: OutsideTool, exc: Exception, timeout: float) -> ToolOutcome:
        service = f"the {tool.entry.name} service"
        if _is_timeout(exc):
            message = f"{service} did not answer within {timeout:.1f} s; try again later or answer without it"
        elif isinstance(exc, MCPError):
            message = f"{service} refused the call: {str(exc)[:_MAX_ERROR_CHARS]}"
        else:
            message = f"{service} is unavailable or did not answer as an MCP server; answer without it"
        logger.warning(
            "outside MCP call failed",
            extra={"mcp_server": tool.entry.name, "mcp_tool": tool.remote_name, "error": _describe(exc)},
        )
        return ToolOutcome({"error": message}, True, "error")


def _outcome(result: types.CallToolResult, service: str) -> ToolOutcome:
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    if result.is_error:
        return ToolOutcome({"error": f"{service} answered with an error: {text[:_MAX_ERROR_CHARS]}"}, True, "error")
    payload: dict[str, Any]
    if isinstance(result.structured_content, dict):
        payload = result.structured_content
    else:
        payload = {"text": text}
        others = len(result.content) - sum(isinstance(c, types.TextContent) for c in result.content)
        if others:
            payload["omitted"] = f"{others} non-text part(s)"
    size = len(json.dumps(payload, ensure_ascii=False, default=str))
    if size > MAX_RESULT_CHARS:
        return ToolOutcome(
            {"error": f"{service} answered with {size} characters, more than {MAX_RESULT_CHARS}; ask for less"},
            True,
            "error",
        )
    return ToolOutcome(payload, False, "ok")


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError | httpx2.TimeoutException):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_timeout(e) for e in exc.exceptions)
    return False


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)[:_MAX_ERROR_CHARS]
    return f"{type(exc).__name__}: {str(exc)[:200]}"


class WithOutsideTools:
    """Our tools (the registry, or over MCP in process) followed by the outside servers' reviewed ones.

    Ours come first and outside names are namespaced (``carrier__track_parcel``), so none can shadow ours."""

    def __init__(self, own: Any, outside: OutsideTools) -> None:
        self._own = own
        self._outside = outside
        self._parts: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None
        self._specs: list[dict[str, Any]] = []

    @property
    def specs(self) -> list[dict[str, Any]]:
        own, outside = self._own.specs, self._outside.specs
        if self._parts is None or self._parts[0] is not own or self._parts[1] is not outside:
            self._parts, self._specs = (own, outside), [*own, *outside]  # rebuilt only when either list changed
        return self._specs

    def execute(self, name: str, raw: Any, ctx: ToolContext) -> ToolOutcome:
        if self._outside.owns(name):
            return self._outside.execute(name, raw, ctx)
        return self._own.execute(name, raw, ctx)

    def recorded(self, name: str, ctx: ToolContext) -> ToolOutcome | None:
        """Outside tools are read-only: nothing to find; a crashed call is answered "not executed"."""
        return None if self._outside.owns(name) else self._own.recorded(name, ctx)
