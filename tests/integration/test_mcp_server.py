"""McpFunction, deployed from the template into moto, driven by the official MCP SDK's client.

Each HTTP request of the SDK's Streamable HTTP client goes through an in-process httpx2 transport that turns
it into an API Gateway v2 event for the function's real handler (in a worker thread: the handler runs its own
``anyio.run``), so the whole path is the deployed one: routing, the JWT, the rate limit, the SDK's transport
and server, the registry's tools against the stack's tables. Both client modes: ``legacy`` (the initialize
handshake) and ``auto`` (``server/discover`` at 2026-07-28).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import boto3
import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

from devstack.tokens import mint_token
from support_agent.mcp.our_tools import IDEMPOTENCY_META_KEY
from support_agent.store.handoffs import HandoffStore
from support_agent.tools.registry import ToolRegistry
from tests.integration.conftest import EVENTS, Api

BASE = "https://mcp.test"
URL = f"{BASE}/mcp"
MODES = ["legacy", "auto"]
WRONG_SECRET = "not-the-stack-secret-0123456789abcdef"


class LambdaTransport(httpx2.AsyncBaseTransport):
    """httpx2 requests → API Gateway v2 (payload 2.0) events → McpFunction's handler → httpx2 responses."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.events: list[dict[str, Any]] = []
        self.statuses: list[int] = []

    def event(self, request: httpx2.Request) -> dict[str, Any]:
        event = json.loads((EVENTS / "chat.json").read_text())
        method, path = request.method, request.url.path
        event["routeKey"] = f"{method} {path}"
        event["rawPath"] = path
        event["rawQueryString"] = request.url.query.decode() if isinstance(request.url.query, bytes) else ""
        event["headers"] = {k.lower(): v for k, v in request.headers.items()}
        event["headers"]["x-forwarded-proto"] = request.url.scheme
        event["requestContext"]["http"].update({"method": method, "path": path})
        event["requestContext"]["domainName"] = request.url.host
        self.api.counter += 1
        event["requestContext"]["requestId"] = f"mcp-{self.api.counter}"
        body = request.content
        if body:
            event["body"] = body.decode()
        else:
            event.pop("body", None)
        return event

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        event = self.event(request)
        self.events.append(event)
        self.api.use_function("McpFunction")
        handler = self.api.handlers["McpFunction"]
        out = await anyio.to_thread.run_sync(handler, copy.deepcopy(event), None)
        body = out.get("body") or ""
        self.statuses.append(out["statusCode"])
        return httpx2.Response(
            out["statusCode"], headers=out.get("headers") or {}, content=body.encode(), request=request
        )


def http_client(api: Api, token: str | None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx2.AsyncClient(transport=LambdaTransport(api), headers=headers, timeout=30)


def with_client(api: Api, mode: str, fn: Callable[[Client], Awaitable[Any]], token: str | None = "default") -> Any:
    """Run ``fn`` with an SDK client connected (in ``mode``) to McpFunction, as customer 7 by default."""
    if token == "default":
        token = api.token()

    async def main() -> Any:
        async with (
            http_client(api, token) as http,
            Client(streamable_http_client(URL, http_client=http), mode=mode) as client,
        ):
            return await fn(client)

    return anyio.run(main)


def raw(
    api: Api, method: str, path: str, body: Any = None, token: str | None = "default", **headers: str
) -> httpx2.Response:
    """One plain HTTP request through the same transport (for what the SDK's client never sends)."""
    if token == "default":
        token = api.token()

    async def main() -> httpx2.Response:
        async with http_client(api, token) as http:
            content = body if isinstance(body, str | bytes) or body is None else json.dumps(body)
            hdrs = {"content-type": "application/json", "accept": "application/json, text/event-stream", **headers}
            return await http.request(method, f"{BASE}{path}", content=content, headers=hdrs)

    return anyio.run(main)


def registry(api: Api) -> ToolRegistry:
    from support_agent import wiring

    api.use_function("McpFunction")
    return wiring.mcp_services().registry


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    assert [c.type for c in result.content] == ["text"]
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


@pytest.mark.parametrize("mode", MODES)
def test_lists_the_registry_tools_with_their_schemas(api: Api, mode: str) -> None:
    async def go(client: Client) -> Any:
        return client.protocol_version, await client.list_tools()

    version, listed = with_client(api, mode, go)
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    # Every tool of the registry but those the customer must confirm (no conversation over MCP to confirm in).
    confirmed_by_customer = ("cancel_order", "update_shipping_address")
    specs = {s["name"]: s["input_schema"] for s in registry(api).specs if s["name"] not in confirmed_by_customer}
    assert {t.name: t.input_schema for t in listed.tools} == specs
    assert {"lookup_order", "list_invoices", "request_refund"} <= set(specs)


@pytest.mark.parametrize("mode", MODES)
def test_lookup_order_is_scoped_to_the_verified_customer(api: Api, mode: str) -> None:
    async def lookup(client: Client) -> types.CallToolResult:
        return await client.call_tool("lookup_order", {"order_id": 1043})

    mine = with_client(api, mode, lookup)
    assert mine.is_error is False
    order = structured(mine)
    assert "1043" in json.dumps(order) and "SHIPPED" in json.dumps(order)

    theirs = with_client(api, mode, lookup, token=api.token("customer-8", customer_id=8))
    missing = with_client(api, mode, lambda c: c.call_tool("lookup_order", {"order_id": 999999}))
    assert theirs.is_error is True and missing.is_error is True
    # another customer's order looks exactly like a missing one
    assert json.dumps(structured(missing)).replace("999999", "1043") == json.dumps(structured(theirs))


@pytest.mark.parametrize("mode", MODES)
def test_list_invoices(api: Api, mode: str) -> None:
    result = with_client(api, mode, lambda c: c.call_tool("list_invoices", {}))
    assert result.is_error is False
    assert "invoices" in structured(result)


@pytest.mark.parametrize("mode", MODES)
def test_unknown_tool_and_bad_arguments_are_tool_errors(api: Api, mode: str) -> None:
    async def go(client: Client) -> tuple[types.CallToolResult, types.CallToolResult]:
        return await client.call_tool("drop_tables", {}), await client.call_tool("lookup_order", {"order_id": "x"})

    unknown, bad = with_client(api, mode, go)
    assert unknown.is_error is True and "drop_tables" in json.dumps(structured(unknown))
    assert bad.is_error is True


def test_ping_on_the_handshake_era_only(api: Api) -> None:
    """ping is a handshake-era method: 2026-07-28 removed it, and the SDK answers it there as unknown."""
    with pytest.warns(Warning):
        assert isinstance(with_client(api, "legacy", lambda c: c.send_ping()), types.EmptyResult)
    with pytest.raises(BaseException) as caught, pytest.warns(Warning):
        with_client(api, "auto", lambda c: c.send_ping())
    errors = caught.value.exceptions if isinstance(caught.value, BaseExceptionGroup) else [caught.value]
    flat = _leaves(errors)
    assert any(isinstance(e, MCPError) and e.error.code == types.METHOD_NOT_FOUND for e in flat), flat


def _leaves(errors: Any) -> list[BaseException]:
    out: list[BaseException] = []
    for e in errors:
        out.extend(_leaves(e.exceptions) if isinstance(e, BaseExceptionGroup) else [e])
    return out


def test_no_token_and_bad_token_are_401_with_the_resource_metadata(api: Api) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for token, error in (
        (None, ""),
        ("not.a.jwt", 'error="invalid_token", '),
        (
            mint_token("customer-7", "customer", 7, secret="wrong-secret-0123456789abcdef-0123456789"),
            'error="invalid_token", ',
        ),
    ):
        response = raw(api, "POST", "/mcp", ping, token=token)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == (
            f'Bearer {error}resource_metadata="{BASE}/.well-known/oauth-protected-resource"'
        )
        assert response.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("mode", MODES)
def test_the_sdk_client_without_a_token_gets_401(api: Api, mode: str) -> None:
    transport = LambdaTransport(api)

    async def main() -> None:
        async with (
            httpx2.AsyncClient(transport=transport, timeout=30) as http,
            Client(streamable_http_client(URL, http_client=http), mode=mode) as client,
        ):
            await client.list_tools()

    with pytest.raises(BaseExceptionGroup) as caught:  # the SDK surfaces an HTTP error answer as an MCPError
        anyio.run(main)
    assert any(isinstance(e, MCPError) for e in _leaves(caught.value.exceptions))
    assert transport.statuses and set(transport.statuses) == {401}


def test_a_lead_is_403(api: Api) -> None:
    response = raw(api, "POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, token=api.lead())
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_get_mcp_is_405(api: Api) -> None:
    response = raw(api, "GET", "/mcp", accept="text/event-stream")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_the_protected_resource_metadata(api: Api) -> None:
    response = raw(api, "GET", "/.well-known/oauth-protected-resource", token=None)
    assert response.status_code == 200
    doc = response.json()
    assert doc["resource"] == f"{BASE}/mcp"
    assert doc["authorization_servers"] == [api.stack.function_env("McpFunction")["JWT_ISSUER"]]
    assert doc["bearer_methods_supported"] == ["header"]


def test_tool_calls_past_the_rate_limit_are_429_with_retry_after(api: Api) -> None:
    api.overrides["MCP_CALLS_PER_MINUTE"] = "2"
    api.current = ""  # take the override now
    token = api.token("customer-9", customer_id=9)  # a customer no other test calls tools for
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_invoices", "arguments": {}}}
    headers = {"mcp-protocol-version": "2025-11-25"}
    # Counted per clock minute: the third call is refused, or (when a minute turned over in between) the
    # first call past two in the new minute.
    answers = []
    for _ in range(5):
        answers.append(raw(api, "POST", "/mcp", call, token=token, **headers))
        if answers[-1].status_code != 200:
            break
    statuses = [a.status_code for a in answers]
    assert statuses[-1] == 429 and set(statuses[:-1]) == {200} and len(statuses) in (3, 4, 5), statuses
    refused = answers[-1]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.json()["error"]["code"] == "rate_limited"
    # only tools/call counts: listing goes on
    listing = raw(api, "POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, token=token, **headers)
    assert listing.status_code == 200


def _jsonrpc_error(response: httpx2.Response) -> dict[str, Any]:
    body = response.json()
    assert body.get("jsonrpc") == "2.0" and "error" in body, body
    return body["error"]


def _params(version: str) -> dict[str, Any]:
    """A request's params: at 2026-07-28 every request carries its envelope in ``_meta`` (no handshake)."""
    if version in HANDSHAKE_PROTOCOL_VERSIONS:
        return {}
    envelope = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        types.CLIENT_INFO_META_KEY: {"name": "raw-test", "version": "0"},
    }
    return {"params": {"_meta": envelope}}


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
def test_malformed_jsonrpc_and_unknown_methods(api: Api, version: str) -> None:
    headers = {"mcp-protocol-version": version}
    not_json = raw(api, "POST", "/mcp", "{not json", **headers)
    assert not_json.status_code == 400
    assert _jsonrpc_error(not_json)["code"] == types.PARSE_ERROR

    # not a request: the SDK's handshake-era transport answers invalid params, its 2026 entry invalid request
    not_a_request = raw(api, "POST", "/mcp", {"jsonrpc": "2.0", "nonsense": True}, **headers)
    assert not_a_request.status_code == 400
    assert _jsonrpc_error(not_a_request)["code"] in (types.INVALID_REQUEST, types.INVALID_PARAMS)

    unknown = raw(
        api,
        "POST",
        "/mcp",
        {"jsonrpc": "2.0", "id": 7, "method": "tools/destroy", **_params(version)},
        **headers,
        **{"mcp-method": "tools/destroy"},  # 2026-07-28 routes on this header and checks it against the body
    )
    error = _jsonrpc_error(unknown)
    assert error["code"] == types.METHOD_NOT_FOUND, error

    listing = raw(
        api,
        "POST",
        "/mcp",
        {"jsonrpc": "2.0", "id": 8, "method": "tools/list", **_params(version)},
        **headers,
        **{"mcp-method": "tools/list"},
    )
    assert listing.status_code == 200 and listing.json()["result"]["tools"]


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
def test_a_batch_is_refused_as_the_sdk_refuses_it(api: Api, version: str) -> None:
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "tools/list", **_params(version)}]
    response = raw(api, "POST", "/mcp", batch, **{"mcp-protocol-version": version})
    assert response.status_code == 400
    assert _jsonrpc_error(response)["code"] in (types.INVALID_REQUEST, types.INVALID_PARAMS)


@pytest.mark.parametrize("mode", MODES)
def test_request_refund_with_a_key_through_the_sdk(api: Api, mode: str) -> None:
    key = f"it-refund-{mode}"

    async def go(client: Client) -> tuple[types.CallToolResult, types.CallToolResult]:
        args = {"order_id": 1044, "amount_cents": 100, "reason": "scratched"}
        meta = {IDEMPOTENCY_META_KEY: key}
        first = await client.call_tool("request_refund", args, meta=meta)
        again = await client.call_tool("request_refund", args, meta=meta)
        return first, again

    first, again = with_client(api, mode, go)
    assert first.is_error is False, structured(first)
    assert structured(again) == structured(first)


@pytest.mark.parametrize("mode", MODES)
def test_a_refund_without_a_key_is_held_for_a_lead_and_asked_again_is_the_same_approval(api: Api, mode: str) -> None:
    async def go(client: Client) -> tuple[types.CallToolResult, types.CallToolResult]:
        args = {"order_id": 1042, "amount_cents": 500, "reason": "late"}  # 5.00: well under the threshold
        return await client.call_tool("request_refund", args), await client.call_tool("request_refund", args)

    first, again = with_client(api, mode, go)
    held, repeated = structured(first), structured(again)
    assert held["status"] == "PENDING_APPROVAL" and held["approval_id"].startswith("apr_"), held
    assert repeated["approval_id"] == held["approval_id"]
    status, approval, _ = api.call("GET", f"/api/approvals/{held['approval_id']}", token=api.lead())
    assert (status, approval["status"], approval["amountCents"]) == (200, "PENDING", 500)
    pending = api.call("GET", "/api/approvals?status=PENDING", token=api.lead())[1]["approvals"]
    assert [a["approvalId"] for a in pending if a["orderId"] == 1042 and a["amountCents"] == 500] == [
        held["approval_id"]
    ]


@pytest.mark.parametrize("mode", MODES)
def test_one_key_twice_is_one_refund(api: Api, mode: str) -> None:
    async def go(client: Client) -> list[types.CallToolResult]:
        args = {"order_id": 1043, "amount_cents": 700, "reason": "torn"}
        meta = {IDEMPOTENCY_META_KEY: f"one-refund-{mode}"}
        return [await client.call_tool("request_refund", args, meta=meta) for _ in range(3)]

    results = with_client(api, mode, go)
    bodies = [structured(r) for r in results]
    assert all(b == bodies[0] for b in bodies) and not results[0].is_error, bodies
    rows = boto3.client("dynamodb").query(
        TableName=api.stack.physical_ids["CustomerDataTable"],
        KeyConditionExpression="customer_id = :c AND begins_with(sk, :p)",
        ExpressionAttributeValues={":c": {"N": "7"}, ":p": {"S": "REFUND#mcp#7#"}},
    )["Items"]
    server_key = f"mcp:7:{hashlib.sha256(f'one-refund-{mode}'.encode()).hexdigest()}"
    mine = [r for r in rows if r.get("refund_key", {}).get("S") == server_key]
    assert len(mine) == 1, rows  # one ledger row for the key, whatever the number of calls


def _key_rows(api: Api, customer_id: int, key: str) -> list[dict[str, Any]]:
    """The ledger rows of an MCP refund made with ``key`` (the provider here is ledger-only: they are the refunds)."""
    rows = boto3.client("dynamodb").query(
        TableName=api.stack.physical_ids["CustomerDataTable"],
        KeyConditionExpression="customer_id = :c AND begins_with(sk, :p)",
        ExpressionAttributeValues={":c": {"N": str(customer_id)}, ":p": {"S": f"REFUND#mcp#{customer_id}#"}},
    )["Items"]
    server_key = f"mcp:{customer_id}:{hashlib.sha256(key.encode()).hexdigest()}"
    return [r for r in rows if r.get("refund_key", {}).get("S") == server_key]


def _refunded(api: Api, customer_id: int, order_id: int) -> int:
    item = boto3.client("dynamodb").get_item(
        TableName=api.stack.physical_ids["CustomerDataTable"],
        Key={"customer_id": {"N": str(customer_id)}, "sk": {"S": f"ORDER#{order_id}"}},
        ConsistentRead=True,
    )["Item"]
    return int(item["refunded_cents"]["N"])


def _reused(result: types.CallToolResult) -> bool:
    return result.is_error is True and "idempotency_key_reused" in result.content[0].text  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
def test_one_key_with_other_arguments_is_refused_and_refunds_once(api: Api, mode: str) -> None:
    """The key is bound to the tool and its arguments: the same ones answer as recorded, other ones are refused
    (as /api/chat answers 422 idempotency_key_reused), and the refund is made once."""
    api.overrides["MCP_CALLS_PER_MINUTE"] = "1000"  # this module's many calls within one minute
    api.current = ""
    sam, key = api.token("customer-8", customer_id=8), f"bound-{mode}"
    args = {"order_id": 2002, "amount_cents": 300, "reason": "dented"}
    refunded_before = _refunded(api, 8, 2002)

    async def go(client: Client) -> list[types.CallToolResult]:
        meta = {IDEMPOTENCY_META_KEY: key}
        return [
            await client.call_tool("request_refund", args, meta=meta),
            await client.call_tool("request_refund", dict(reversed(args.items())), meta=meta),
            await client.call_tool("request_refund", {**args, "amount_cents": 400}, meta=meta),
        ]

    first, same, other = with_client(api, mode, go, token=sam)
    assert first.is_error is False and structured(first)["status"] == "REFUNDED", structured(first)
    assert same.is_error is False and structured(same) == structured(first)
    assert _reused(other), structured(other)
    assert [r["amount_cents"]["N"] for r in _key_rows(api, 8, key)] == ["300"]
    assert _refunded(api, 8, 2002) - refunded_before == 300


@pytest.mark.parametrize("mode", MODES)
def test_a_key_used_by_one_tool_is_refused_by_another(api: Api, mode: str) -> None:
    api.overrides["MCP_CALLS_PER_MINUTE"] = "1000"
    api.current = ""
    sam, key = api.token("customer-8", customer_id=8), f"one-tool-{mode}"

    async def go(client: Client) -> tuple[types.CallToolResult, types.CallToolResult]:
        meta = {IDEMPOTENCY_META_KEY: key}
        refund = {"order_id": 2002, "amount_cents": 200, "reason": "scuffed"}
        return (
            await client.call_tool("request_refund", refund, meta=meta),
            await client.call_tool("escalate_to_human", {"reason": "a person"}, meta=meta),
        )

    refund, person = with_client(api, mode, go, token=sam)
    assert refund.is_error is False, structured(refund)
    assert _reused(person), structured(person)
    ids = api.stack.physical_ids
    handoffs = HandoffStore(
        boto3.client("dynamodb"), ids["ApprovalsTable"], ids["ConversationsTable"], ids["AuditTable"]
    )
    assert handoffs.opened_by("mcp", 8, hashlib.sha256(key.encode()).hexdigest()) is None  # nothing under the key


@pytest.mark.parametrize("mode", MODES)
def test_escalate_to_human_reuses_the_open_hand_off_and_a_key_is_once(api: Api, mode: str) -> None:
    sam = api.token("customer-8", customer_id=8)

    async def go(client: Client) -> list[types.CallToolResult]:
        args = {"reason": "I want a person"}
        keyed = {IDEMPOTENCY_META_KEY: f"person-{mode}"}
        return [
            await client.call_tool("escalate_to_human", args),
            await client.call_tool("escalate_to_human", args),
            await client.call_tool("escalate_to_human", args, meta=keyed),
            await client.call_tool("escalate_to_human", args, meta=keyed),
        ]

    bare, again, keyed, keyed_again = (structured(r) for r in with_client(api, mode, go, token=sam))
    assert bare["handoff_id"].startswith("hof_") and again["handoff_id"] == bare["handoff_id"], (bare, again)
    assert keyed_again == keyed
    handoffs = api.call("GET", "/api/handoffs?status=OPEN", token=api.lead())[1]["handoffs"]
    assert len([h for h in handoffs if h["handoffId"] == bare["handoff_id"]]) == 1


def test_only_mcp_function_imports_the_sdk(api: Api) -> None:
    """The SDK's import cost (docs/ARCHITECTURE.md "MCP server") stays in McpFunction: every other handler,
    imported in a fresh interpreter with its deployed environment, loads no module of the ``mcp`` SDK."""
    import os
    import subprocess
    import sys

    from tests.integration.conftest import BASE_ENV, ROOT

    probe = (
        "import importlib.util, json, sys\n"
        "spec = importlib.util.spec_from_file_location('h', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types')))))\n"
    )
    loaded: dict[str, list[str]] = {}
    for logical_id in sorted(api.stack.physical_ids):
        if not logical_id.endswith("Function"):
            continue
        try:
            code_dir, handler = api.stack.function_handler(logical_id)
        except (KeyError, ValueError):
            continue
        env = {**os.environ, **BASE_ENV, **api.stack.function_env(logical_id)}
        env["PYTHONPATH"] = f"{ROOT / 'layers' / 'common'}:{ROOT}"
        out = subprocess.run(
            [sys.executable, "-c", probe, str(code_dir / f"{handler.rsplit('.', 1)[0]}.py")],
            env=env,
            capture_output=True,
            text=True,
            cwd=code_dir,
            timeout=120,
            check=True,
        )
        loaded[logical_id] = json.loads(out.stdout.strip().splitlines()[-1])
    assert "mcp" in loaded.pop("McpFunction")  # the probe sees the SDK where it is imported
    assert len(loaded) >= 10 and all(found == [] for found in loaded.values()), loaded
