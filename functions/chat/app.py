"""ChatFunction: POST /api/chat and the customer's conversations. All logic lives in the layer."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from support_agent import snapstart
from support_agent.api.chat_routes import router
from support_agent.api.http import build_resolver, handle
from support_agent.config import get_settings
from support_agent.observability import metrics, observed
from support_agent.wiring import authenticator, chat_services

# With SnapStart: clients built before the snapshot, randomness reseeded after restore (no-op elsewhere).
snapstart.register(prime=chat_services)
app = build_resolver(authenticator)
app.include_router(router)


# Every log line carries the API request id (correlation_id); the loop adds the conversation id.
@observed(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return handle(app, event, context, get_settings().max_body_bytes)
