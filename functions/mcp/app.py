"""McpFunction: POST /mcp (the MCP server, Streamable HTTP, stateless) and its RFC 9728 metadata document.

All logic lives in the layer (support_agent/api/mcp_endpoint.py, support_agent/mcp/). Only this function
imports the ``mcp`` SDK.
"""

import json
from typing import Any

import anyio
from aws_lambda_powertools.logging import correlation_paths

from support_agent import snapstart, wiring
from support_agent.api.mcp_endpoint import asgi_scope, handle, serve_asgi
from support_agent.auth import Principal
from support_agent.mcp.server import IN_PROCESS, InProcessCall
from support_agent.observability import metrics, observed

_TOOLS_LIST = {"jsonrpc": "2.0", "id": 0, "method": "tools/list"}
_PRIMING_REQUEST = {
    "requestContext": {"http": {"method": "POST", "path": "/mcp"}},
    "rawPath": "/mcp",
    "headers": {"accept": "application/json, text/event-stream", "content-type": "application/json"},
}


def prime() -> None:
    """Before the snapshot: a tools/list through the SDK's transport and the server, in process, so the session
    manager, the JSON-RPC models and the registry's tool list are built. No network: listed in process, the
    policy (SSM) is not asked which tools to hide, and no token is verified (the authenticator is only built)."""
    wiring.authenticator()
    wiring.client("dynamodb")
    scope = asgi_scope(_PRIMING_REQUEST, Principal("snapstart-prime", "customer", 0))
    token = IN_PROCESS.set(InProcessCall(None))
    try:
        status, _, body = anyio.run(serve_asgi, scope, json.dumps(_TOOLS_LIST).encode())
    finally:
        IN_PROCESS.reset(token)
    if status != 200 or not json.loads(body)["result"]["tools"]:
        raise RuntimeError(f"priming tools/list answered {status}: {body[:300]!r}")


# With SnapStart: primed before the snapshot, randomness reseeded after restore (no-op elsewhere).
snapstart.register(prime=prime)


@observed(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return handle(event, context)
