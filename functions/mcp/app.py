"""McpFunction: POST /mcp (the MCP server, Streamable HTTP, stateless) and its RFC 9728 metadata document.

All logic lives in the layer (support_agent/api/mcp_endpoint.py, support_agent/mcp/). Only this function
imports the ``mcp`` SDK.
"""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from support_agent.api.mcp_endpoint import handle
from support_agent.observability import metrics, observed


@observed(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return handle(event, context)
