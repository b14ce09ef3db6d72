"""EventsFunction: GET /api/conversations/{id}/events, the long-polled feed. All logic lives in the layer."""

from support_agent.api.events_routes import router
from support_agent.api.http import api_handler
from support_agent.wiring import authenticator

handler = api_handler(router, authenticator)
