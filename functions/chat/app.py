"""ChatFunction: POST /api/chat and the customer's conversations. All logic lives in the layer."""

from support_agent import snapstart
from support_agent.api.chat_routes import router
from support_agent.api.http import api_handler
from support_agent.wiring import authenticator, chat_services

# Every log line carries the API request id (correlation_id); the loop adds the conversation id.
handler = api_handler(router, authenticator)
# With SnapStart: clients built before the snapshot, randomness reseeded after restore (no-op elsewhere).
snapstart.register(prime=snapstart.primes(chat_services, authenticator, snapstart.route_validation(handler)))
