"""The AsyncAPI 3 document of the WebSocket API (docs/asyncapi.json), generated from the messages' models.

The client's frames are the models SocketFunction validates them with (sockets/routes.py); the server's are
declared here, once, and the socket integration tests validate every message the functions post against them
(tests/integration/test_sockets.py's recording ``@connections``), so the document cannot drift from the wire.
The pushed ``event`` carries the HTTP feed's `FeedEvent` (api/responses.py) unchanged.

    python -m support_agent.api.asyncapi > docs/asyncapi.json     # or: make openapi
"""

from __future__ import annotations

import json
import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from support_agent.api.responses import FeedEvent
from support_agent.sockets.routes import SubscribeMessage, UnsubscribeMessage

TITLE = "Support agent WebSocket API"
VERSION = "1.0.0"
DESCRIPTION = (
    "Pushes a conversation's stored feed events and its reply's text as it is written. Connect with a "
    "single-use ticket from `POST /api/ws-ticket` (`?ticket=`; it dies in 60 s: a logged URL is worthless), then "
    "`subscribe` to a conversation one may read (the HTTP feed's rule). Events carry the feed's cursor: resume "
    "with `after` over the socket or over `GET /api/conversations/{id}/events`. Text deltas are not stored: the "
    "turn's `message` event is the truth that replaces them. docs/API.md#websocket tells the whole story."
)


class _Server(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Subscribed(_Server):
    """The answer to ``subscribe``: pushes resume after ``cursor``; the backlog after it follows at once."""

    type: Literal["subscribed"]
    conversationId: str
    cursor: str = Field(..., description="Opaque: the feed cursor the pushes resume after")


class Unsubscribed(_Server):
    type: Literal["unsubscribed"]
    conversationId: str


class SocketError(_Server):
    type: Literal["error"]
    code: Literal["bad_request", "not_found", "not_connected", "too_many_subscriptions"]
    message: str
    conversationId: str | None = Field(None, description="The conversation the refused frame named, if any")


class PushedEvent(_Server):
    """One stored event of a followed conversation, in the feed's order, never twice."""

    type: Literal["event"]
    conversationId: str
    event: FeedEvent


class Delta(_Server):
    """A piece of the reply's text as the model writes it (coalesced: about 64 characters or 50 ms)."""

    type: Literal["delta"]
    conversationId: str
    turnId: str
    offset: int = Field(..., ge=0, description="Characters of this turn's streamed text before this piece")
    text: str
    restart: bool | None = Field(
        None, description="true: a retried model call writes the text again; drop what this turn streamed so far"
    )


class Ping(BaseModel):
    """The keepalive: API Gateway closes a connection idle for 10 minutes; send one every 5 while idle. API Gateway
    answers it itself (a MOCK integration): no function runs."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["ping"]


class Pong(_Server):
    type: Literal["pong"]


SERVER_MESSAGES: dict[str, type[BaseModel]] = {
    "subscribed": Subscribed,
    "unsubscribed": Unsubscribed,
    "error": SocketError,
    "event": PushedEvent,
    "delta": Delta,
    "pong": Pong,
}
CLIENT_MESSAGES: dict[str, type[BaseModel]] = {
    "subscribe": SubscribeMessage,
    "unsubscribe": UnsubscribeMessage,
    "ping": Ping,
}


def server_message(message: dict[str, Any]) -> BaseModel:
    """``message`` validated as what the server may post (tests call this on every recorded post)."""
    return SERVER_MESSAGES[str(message.get("type"))].model_validate(message)


def _schemas() -> dict[str, Any]:
    """Every model's JSON schema, the nested ones (FeedEvent's) hoisted beside them."""
    schemas: dict[str, Any] = {}
    for model in (*CLIENT_MESSAGES.values(), *SERVER_MESSAGES.values()):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return dict(sorted(schemas.items()))


def _message(model: type[BaseModel], summary: str) -> dict[str, Any]:
    return {
        "name": model.__name__,
        "contentType": "application/json",
        "summary": summary,
        "payload": {"$ref": f"#/components/schemas/{model.__name__}"},
    }


SUMMARIES = {
    "subscribe": "Follow a conversation, after a feed cursor (null: from its start)",
    "unsubscribe": "Stop following a conversation",
    "subscribed": "Following; the backlog after the cursor is pushed next",
    "unsubscribed": "No longer following",
    "error": "A refused frame",
    "event": "A stored feed event of a followed conversation",
    "delta": "The reply's text as it is written (not stored)",
    "ping": "The keepalive (every 5 minutes while idle): API Gateway answers it, no function runs",
    "pong": "The keepalive's answer",
}


def document() -> dict[str, Any]:
    every = {**CLIENT_MESSAGES, **SERVER_MESSAGES}
    messages = {name: _message(model, SUMMARIES[name]) for name, model in every.items()}
    channel = "#/channels/conversations"

    def refs(*names: str) -> list[dict[str, str]]:
        return [{"$ref": f"{channel}/messages/{name}"} for name in names]

    return {
        "asyncapi": "3.0.0",
        "info": {"title": TITLE, "version": VERSION, "description": DESCRIPTION},
        "defaultContentType": "application/json",
        "servers": {
            "aws": {
                "host": "{apiId}.execute-api.{region}.amazonaws.com",
                "pathname": "/{stage}",
                "protocol": "wss",
                "description": "The stack's WebSocketApi (the ticket route answers the whole URL)",
                "variables": {"apiId": {}, "region": {}, "stage": {"default": "prod"}},
                "security": [{"$ref": "#/components/securitySchemes/ticket"}],
            }
        },
        "channels": {
            "conversations": {
                "address": "/",
                "title": "The followed conversations of one connection",
                "messages": {name: {"$ref": f"#/components/messages/{name}"} for name in messages},
            }
        },
        "operations": {
            "subscribe": {
                "action": "send",
                "channel": {"$ref": channel},
                "messages": refs("subscribe"),
                "reply": {"channel": {"$ref": channel}, "messages": refs("subscribed", "error")},
            },
            "unsubscribe": {
                "action": "send",
                "channel": {"$ref": channel},
                "messages": refs("unsubscribe"),
                "reply": {"channel": {"$ref": channel}, "messages": refs("unsubscribed", "error")},
            },
            "ping": {
                "action": "send",
                "channel": {"$ref": channel},
                "messages": refs("ping"),
                "reply": {"channel": {"$ref": channel}, "messages": refs("pong")},
            },
            "receiveEvent": {"action": "receive", "channel": {"$ref": channel}, "messages": refs("event")},
            "receiveDelta": {"action": "receive", "channel": {"$ref": channel}, "messages": refs("delta")},
        },
        "components": {
            "messages": messages,
            "schemas": _schemas(),
            "securitySchemes": {
                "ticket": {
                    "type": "httpApiKey",
                    "name": "ticket",
                    "in": "query",
                    "description": "From POST /api/ws-ticket (bearer JWT): single use, 60 s",
                }
            },
        },
    }


def render() -> str:
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Print the document; ``--check FILE``: 0 when FILE is it, 1 when stale."""
    if argv[:1] == ["--check"]:
        with open(argv[1], encoding="utf-8") as fh:
            return 0 if fh.read() == render() else 1
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
