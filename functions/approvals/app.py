"""ApprovalsFunction: the support lead's API (approvals, hand-offs, audit). All logic lives in the layer."""

from support_agent.api.http import api_handler
from support_agent.api.lead_routes import router
from support_agent.wiring import authenticator

# Every log line carries the API request id (correlation_id); decisions add the approval id.
handler = api_handler(router, authenticator)
