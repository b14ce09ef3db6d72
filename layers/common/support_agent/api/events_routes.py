"""The conversation's event feed: what a page shows while a turn runs, and a lead's decision without a reload.

Served by EventsFunction (128 MB, reserved concurrency), not the chat function: a client waiting up to
``waitSeconds`` holds a small function, and the feed is read from what is stored (feed.py), never written.
That concurrency is every customer's, so a poll waits only while it holds one of its customer's few waiting slots
(store/polls.py); without one it answers at once.

The person holding a hand-off follows the same feed (GET /api/handoffs/{id}/events): the customer's events of that
conversation, read as the customer reads them. Their polls count and wait as themselves (`staff_reader`), never
on the customer's read counter or waiting slots, so following a conversation costs its customer nothing.

POST /api/ws-ticket lives here too: the feed's readers are the WebSocket's (docs/API.md#websocket).
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from support_agent.api.route_docs import responses
from support_agent.auth import Principal, require_customer, require_staff
from support_agent.config import get_settings
from support_agent.errors import NotFound
from support_agent.feed import Cursor, Page
from support_agent.ids import CONVERSATION_ID
from support_agent.sockets.connections import TICKET_SECONDS
from support_agent.store.polls import WAITS_PER_CUSTOMER
from support_agent.wiring import events_services, tickets

router = APIGatewayHttpRouter()
MAX_WAIT_SECONDS = 20  # API Gateway's HTTP API answers 504 after 30 s; the function's timeout is 25 s


def _principal() -> Principal:
    from support_agent.api.http import principal

    return principal(router)  # type: ignore[arg-type]


def staff_reader(p: Principal) -> str:
    """Whose read counter and waiting slots a staff member's poll takes: their own (``staff:<sub>``, beside the
    customers' numeric ids under the same ``rate#reads#`` and ``poll#`` prefixes), never the customer's."""
    return f"staff:{p.sub}"


def _page(page: Page) -> dict[str, Any]:
    return {"events": page.events, "nextCursor": page.cursor.encode()}


@router.get(
    "/api/conversations/<conversation_id>/events",
    summary="Follow a conversation: its events after a cursor (long poll)",
    description=(
        "The conversation's events after `after` (from its start without one): a turn's steps as they are "
        "stored (`turn.started`, `tool.requested`, `tool.finished`, `message`, `turn.completed`, `turn.failed`) "
        "and what others decided about it (`approval.decided`, `refund.settled`), in time order. Answers as soon "
        "as there is one, or with no events after `waitSeconds`; resume with `nextCursor`. At most "
        f"{WAITS_PER_CUSTOMER} of a customer's polls wait at once; another answers at once with what there is. "
        "Tool names, inputs and results only when TRANSPARENCY=verbose. Each poll counts as a read "
        "(READS_PER_MINUTE, 429 `rate_limited`)."
    ),
    responses=responses("FeedPage", 400, 401, 403, 404, 429),
    tags=["customer"],
)
def events(
    conversation_id: str,
    after: Annotated[str | None, Query(max_length=512, description="A cursor from this feed")] = None,
    waitSeconds: Annotated[int, Query(ge=0, le=MAX_WAIT_SECONDS, description="Seconds to wait for an event")] = 0,
) -> dict[str, Any]:
    services = events_services()
    customer_id = require_customer(_principal())
    services.read_limiter.take(customer_id)
    owner = services.feed.owner(conversation_id) if CONVERSATION_ID.match(conversation_id) else None
    if owner is None or owner != customer_id:
        raise NotFound("conversation not found")
    cursor = Cursor.decode(after, conversation_id)
    with services.waits.waiting(customer_id, waitSeconds) as wait:  # 0 when the customer's slots are all held
        page = services.feed.poll(cursor, customer_id, wait)
    return _page(page)


_AFTER = Annotated[str | None, Query(max_length=512, description="A cursor from this feed")]
_WAIT = Annotated[int, Query(ge=0, le=MAX_WAIT_SECONDS, description="Seconds to wait for an event")]


@router.get(
    "/api/handoffs/<handoff_id>/events",
    summary="Follow the conversation of a hand-off the caller holds (long poll)",
    description=(
        "The customer's event feed of the hand-off's conversation, the same events and cursors (their messages, "
        "the person's replies as `message` of role `person` with `author`, `handoff.*`, the bot's turns), as "
        "the customer reads it (tool data only when TRANSPARENCY=verbose). 404 unless the caller holds the "
        "hand-off (a lead: any hand-off with a conversation); 403 for a customer. A staff member's polls count "
        "as their own reads (READS_PER_MINUTE per person, 429 `rate_limited`) and wait on their own "
        f"{WAITS_PER_CUSTOMER} waiting slots, never the customer's: a poll beyond them answers at once."
    ),
    responses=responses("FeedPage", 400, 401, 403, 404, 429),
    tags=["support staff"],
)
def handoff_events(handoff_id: str, after: _AFTER = None, waitSeconds: _WAIT = 0) -> dict[str, Any]:
    services = events_services()
    p = _principal()
    require_staff(p)
    reader = staff_reader(p)
    services.read_limiter.take(reader)
    ticket = services.takeover.held(handoff_id, p)  # 404 unless theirs (a lead: any with a conversation)
    cursor = Cursor.decode(after, str(ticket.conversation_id))
    with services.waits.waiting(reader, waitSeconds) as wait:
        page = services.feed.poll(cursor, ticket.customer_id, wait)  # the customer's feed: they own its turns
    return _page(page)


@router.post(
    "/api/ws-ticket",
    summary="A single-use ticket to open the WebSocket with",
    description=(
        "A ticket for the caller (a customer, support staff or a lead), good once and for `expiresIn` (60) seconds, "
        "and the WebSocket's `url` with it (`?ticket=`): open that URL as it is. A browser cannot set an "
        "Authorization header on a WebSocket, and a JWT in a URL lands in access logs and proxies while it stays "
        "valid; a logged ticket is worthless once used or a minute old (docs/API.md#websocket)."
    ),
    responses=responses("WsTicket", 401, 403),
    tags=["customer", "support staff"],
)
def ws_ticket() -> dict[str, Any]:
    p = _principal()
    if p.role != "customer":
        require_staff(p)
    ticket = tickets().issue_ticket(p)
    url = get_settings().websocket_url
    return {"ticket": ticket, "url": f"{url}?ticket={ticket}", "expiresIn": TICKET_SECONDS}
