"""ApprovalsFunction: the support team's API, leads' (approvals, audit, erasure: api/lead_routes.py) and the hand-off
inbox of staff and leads (api/staff_routes.py). All logic lives in the layer."""

from support_agent import snapstart
from support_agent.api import lead_routes, staff_routes
from support_agent.api.http import api_handler
from support_agent.wiring import authenticator, lead_services, rollup_store

# Every log line carries the API request id (correlation_id); decisions add the approval id.
handler = api_handler([lead_routes.router, staff_routes.router], authenticator)
# With SnapStart: the team's services built before the snapshot (no-op elsewhere).
snapstart.register(
    prime=snapstart.primes(lead_services, rollup_store, authenticator, snapstart.route_validation(handler))
)
