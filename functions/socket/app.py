"""SocketFunction: the WebSocket API's routes ($connect, $disconnect, subscribe, unsubscribe, $default), by the
event's ``requestContext.routeKey`` (support_agent/sockets/routes.py). All logic lives in the layer."""

from typing import Any

from support_agent import wiring
from support_agent.observability import metrics, observed
from support_agent.sockets.routes import handle


@observed(correlation_id_path="requestContext.requestId")
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return handle(event, wiring.socket_services())
