"""The WebSocket API's routes, as SocketFunction runs them (the event's ``requestContext.routeKey``).

$connect answers 200, 401 (no ticket, or one unknown, expired or used) or 429 (the owner's connections are at the
limit): API Gateway refuses the upgrade on anything but 200. The other routes answer 200 and post their answer to
the connection: ``subscribed``, ``unsubscribed`` or an ``error`` with its code (docs/API.md#websocket).

Who may follow a conversation is the feed's rule (api/events_routes.py): a customer their own conversation (the
header's ``customer_id``); a support person only the conversation of a hand-off they hold (a lead: any open one),
checked by the same `Takeover.held`. Anything else, an unknown id included, is ``not_found``: ids cannot be probed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from support_agent.auth import Principal
from support_agent.errors import InvalidRequest, NotFound
from support_agent.feed import Cursor
from support_agent.ids import CONVERSATION_ID
from support_agent.sockets.connections import (
    ConnectionStore,
    NotConnected,
    Subscription,
    TooManyConnections,
    TooManySubscriptions,
)
from support_agent.sockets.push import Posted, Poster
from support_agent.sockets.pusher import Pusher
from support_agent.store.conversations import ConversationStore
from support_agent.store.takeover import Takeover

logger = logging.getLogger(__name__)

OK = {"statusCode": 200}


@dataclass(frozen=True)
class SocketServices:
    connections: ConnectionStore
    poster: Poster
    conversations: ConversationStore  # the header only: whose conversation, which hand-off is open
    takeover: Takeover  # a support person's hold on that hand-off
    pusher: Pusher  # a new subscription's backlog, pushed as the stream's events are (sockets/pusher.py)


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conversationId: str = Field(pattern=CONVERSATION_ID.pattern)


class SubscribeMessage(_Message):
    action: Literal["subscribe"]
    after: str | None = Field(None, max_length=512)


class UnsubscribeMessage(_Message):
    action: Literal["unsubscribe"]


def error(code: str, message: str, conversation_id: str | None = None) -> dict[str, Any]:
    answer = {"type": "error", "code": code, "message": message}
    return answer if conversation_id is None else {**answer, "conversationId": conversation_id}


def handle(event: dict[str, Any], services: SocketServices) -> dict[str, Any]:
    context = event.get("requestContext") or {}
    route, connection_id = context.get("routeKey"), str(context.get("connectionId", ""))
    if route == "$connect":
        return connect(event, connection_id, services)
    if route == "$disconnect":
        services.connections.disconnect(connection_id)
        return OK
    answer = message(route, event.get("body"), connection_id, services)
    if services.poster.post(connection_id, answer) is Posted.SENT and answer["type"] == "subscribed":
        backlog(Subscription(connection_id, answer["conversationId"], answer["cursor"]), services)
    return OK


def backlog(subscription: Subscription, services: SocketServices) -> None:
    """The events after the subscription's cursor, right after ``subscribed``: a client resuming with ``after``
    misses nothing stored meanwhile, and gets nothing twice (the pusher's claim). A read that fails is left to
    the next push (the cursor stays)."""
    try:
        services.pusher.catch_up(subscription)
    except (ClientError, BotoCoreError):
        logger.warning("a new subscription's backlog was not pushed", exc_info=True)


def connect(event: dict[str, Any], connection_id: str, services: SocketServices) -> dict[str, Any]:
    ticket = (event.get("queryStringParameters") or {}).get("ticket")
    principal = services.connections.consume_ticket(ticket)
    if principal is None:
        logger.info("socket refused: no valid ticket", extra={"had_ticket": bool(ticket)})
        return {"statusCode": 401}
    try:
        services.connections.connect(connection_id, principal)
    except TooManyConnections:
        logger.info("socket refused: the owner's connections are at the limit")
        return {"statusCode": 429}
    return OK


def message(route: str | None, body: Any, connection_id: str, services: SocketServices) -> dict[str, Any]:
    """The answer to a client's frame, posted to its connection."""
    try:
        raw = json.loads(body) if isinstance(body, str) else None
    except ValueError:
        raw = None
    kind = SubscribeMessage if route == "subscribe" else UnsubscribeMessage if route == "unsubscribe" else None
    if kind is None or not isinstance(raw, dict):
        return error("bad_request", 'send {"action": "subscribe" | "unsubscribe", "conversationId": ...} as JSON')
    try:
        parsed = kind.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:3])
        named = raw.get("conversationId")
        return error("bad_request", problems, named if isinstance(named, str) else None)
    if isinstance(parsed, SubscribeMessage):
        return subscribe(parsed, connection_id, services)
    services.connections.unsubscribe(connection_id, parsed.conversationId)
    return {"type": "unsubscribed", "conversationId": parsed.conversationId}


def subscribe(request: SubscribeMessage, connection_id: str, services: SocketServices) -> dict[str, Any]:
    cid = request.conversationId
    connection = services.connections.get(connection_id)
    if connection is None or connection.ended:
        return error("not_connected", "this connection is not open: connect again", cid)
    try:
        cursor = Cursor.decode(request.after, cid)
    except InvalidRequest as exc:
        return error("bad_request", exc.message, cid)
    if not may_follow(connection.principal, cid, services):
        return error("not_found", "conversation not found", cid)
    try:
        services.connections.subscribe(connection, cid, cursor.encode())
    except TooManySubscriptions:
        return error("too_many_subscriptions", "this connection follows as many conversations as it may", cid)
    except NotConnected:
        return error("not_connected", "this connection is not open: connect again", cid)
    return {"type": "subscribed", "conversationId": cid, "cursor": cursor.encode()}


def may_follow(principal: Principal, conversation_id: str, services: SocketServices) -> bool:
    header = services.conversations.get_header(conversation_id)
    if header is None:
        return False
    if principal.role == "customer":
        return principal.customer_id is not None and header.customer_id == principal.customer_id
    if not header.open_handoff_id:
        return False
    try:
        held = services.takeover.held(header.open_handoff_id, principal)
    except NotFound:
        return False
    return held.conversation_id == conversation_id
