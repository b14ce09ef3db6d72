"""ApprovalsFunction: the support lead's API (approvals, hand-offs, audit). All logic lives in the layer."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from support_agent.api.http import build_resolver, handle
from support_agent.api.lead_routes import router
from support_agent.config import get_settings
from support_agent.observability import metrics, observed
from support_agent.wiring import authenticator

app = build_resolver(authenticator)
app.include_router(router)


# Every log line carries the API request id (correlation_id); decisions add the approval id.
@observed(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return handle(app, event, context, get_settings().max_body_bytes)
