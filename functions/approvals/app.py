"""ApprovalsFunction: the support lead's API (approvals, hand-offs, audit). All logic lives in the layer."""

from typing import Any

from support_agent.api.http import build_resolver, handle
from support_agent.api.lead_routes import router
from support_agent.config import get_settings

app = build_resolver()
app.include_router(router)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return handle(app, event, context, get_settings().max_body_bytes)
