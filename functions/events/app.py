"""EventsFunction: GET /api/conversations/{id}/events, the long-polled feed. All logic lives in the layer."""

from support_agent import snapstart
from support_agent.api.events_routes import router
from support_agent.api.http import api_handler
from support_agent.wiring import authenticator, events_services, tickets

handler = api_handler(router, authenticator)
# With SnapStart: the feed's and the ticket issuer's clients built before the snapshot (no-op elsewhere).
snapstart.register(prime=snapstart.primes(events_services, tickets, authenticator, snapstart.route_validation(handler)))
