"""SocketFunction: the WebSocket API's routes ($connect, $disconnect, subscribe, unsubscribe, $default), by the
event's ``requestContext.routeKey`` (support_agent/sockets/routes.py). All logic lives in the layer."""

from typing import Any

from support_agent import snapstart, wiring
from support_agent.observability import metrics, observed
from support_agent.sockets.routes import handle

# With SnapStart: the connection store and its client built before the snapshot (no-op elsewhere).
snapstart.register(prime=wiring.socket_services)


@observed(correlation_id_path="requestContext.requestId")
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return handle(event, wiring.socket_services())
