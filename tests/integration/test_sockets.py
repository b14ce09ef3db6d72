"""The WebSocket's routes on the deployed template: SocketFunction's handler driven by API Gateway WebSocket
events, its answers caught by a stand-in `@connections` client (moto's never answers 410), the tickets from
POST /api/ws-ticket (EventsFunction)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.exceptions import ClientError

from support_agent import wiring
from support_agent.api import asyncapi
from support_agent.config import get_settings
from support_agent.sockets.connections import ConnectionStore, connection_key, owner_key, ticket_key
from support_agent.sockets.routes import SocketServices
from tests.integration.conftest import Api
from tests.support.openapi import assert_documented
from tests.support.scripted import answer


class Management:
    """Records each post; a connection in ``gone`` answers 410 as API Gateway does for a closed one, and one with
    posts left in ``failing`` answers 429 (API Gateway throttling) that many times."""

    def __init__(self) -> None:
        self.posts: dict[str, list[dict[str, Any]]] = {}
        self.gone: set[str] = set()
        self.failing: dict[str, int] = {}
        self.invalid: list[dict[str, Any]] = []  # posted messages off the document (a delta thread swallows errors)

    def post_to_connection(self, ConnectionId: str, Data: bytes) -> None:
        if ConnectionId in self.gone:
            raise ClientError(
                {"Error": {"Code": "GoneException"}, "ResponseMetadata": {"HTTPStatusCode": 410}}, "PostToConnection"
            )
        if self.failing.get(ConnectionId, 0) > 0:
            self.failing[ConnectionId] -= 1
            raise ClientError(
                {"Error": {"Code": "LimitExceededException"}, "ResponseMetadata": {"HTTPStatusCode": 429}},
                "PostToConnection",
            )
        message = json.loads(Data)
        try:  # nothing is posted that docs/asyncapi.json does not describe (the socket fixture checks at its end)
            asyncapi.server_message(message)
        except (KeyError, ValueError):
            self.invalid.append(message)
            raise
        self.posts.setdefault(ConnectionId, []).append(message)


class Socket:
    def __init__(self, api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
        self.api, self.management, self._monkeypatch = api, Management(), monkeypatch
        self.count = 0

    def services(self) -> SocketServices:
        self.api.use_function("SocketFunction")
        built = wiring.build_socket_services(get_settings(), management=self.management)
        self._monkeypatch.setattr(wiring, "socket_services", lambda: built)
        return built

    def invoke(self, route: str, connection_id: str, body: Any = None, ticket: str | None = None) -> int:
        services = self.services()
        kinds = {"$connect": "CONNECT", "$disconnect": "DISCONNECT"}
        self.count += 1
        event: dict[str, Any] = {
            "requestContext": {
                "routeKey": route,
                "eventType": kinds.get(route, "MESSAGE"),
                "connectionId": connection_id,
                "domainName": "local-websocket.execute-api.us-east-1.amazonaws.com",
                "stage": "dev",
                "requestId": f"ws-{self.count}",
            },
            "isBase64Encoded": False,
        }
        if ticket is not None:
            event["queryStringParameters"] = {"ticket": ticket}
        if body is not None:
            event["body"] = body if isinstance(body, str) else json.dumps(body)
        assert services is wiring.socket_services()
        out = self.api.handlers["SocketFunction"](event, None)
        return int(out["statusCode"])

    def ticket(self, token: str | None = "default") -> str:
        status, body, headers = self.api.call("POST", "/api/ws-ticket", token=token)
        assert status == 200, body
        assert_documented("POST", "/api/ws-ticket", status, body, headers)
        return str(parse_qs(urlsplit(body["url"]).query)["ticket"][0])

    def connect(self, connection_id: str, token: str | None = "default") -> int:
        return self.invoke("$connect", connection_id, ticket=self.ticket(token))

    def answers(self, connection_id: str) -> list[dict[str, Any]]:
        """The route's answers: the subscribe backlog's pushed events are test_socket_push's."""
        return [post for post in self.management.posts.get(connection_id, []) if post.get("type") != "event"]

    def store(self) -> ConnectionStore:
        return self.services().connections


@pytest.fixture
def socket(api: Api, monkeypatch: pytest.MonkeyPatch) -> Iterator[Socket]:
    # The module's stack keeps every test's connections: customer 7's would reach the default limit of 5.
    api.overrides["SOCKET_CONNECTIONS_PER_OWNER"] = "50"
    socket = Socket(api, monkeypatch)
    yield socket
    assert socket.management.invalid == [], "posted messages docs/asyncapi.json does not describe"


def item(api: Api, pk: str, sk: str) -> dict[str, Any] | None:
    table = api.stack.physical_ids["ConnectionsTable"]
    out = boto3.client("dynamodb").get_item(TableName=table, Key={"pk": {"S": pk}, "sk": {"S": sk}})
    return out.get("Item")


def conversation(api: Api, token: str | None = None) -> str:
    api.model.script = [answer("Hello.")]
    status, body, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "Hi"}, token=token or "default")
    assert status == 200, body
    return str(body["conversationId"])


# ------------------------------------------------------------------ the ticket route


def test_the_ticket_route_answers_a_customer_and_refuses_without_a_token(api: Api) -> None:
    status, body, headers = api.call("POST", "/api/ws-ticket")
    assert status == 200
    assert_documented("POST", "/api/ws-ticket", status, body, headers)
    assert len(body["ticket"]) == 43 and body["expiresIn"] == 60
    assert body["url"].startswith("wss://") and body["url"].endswith(f"?ticket={body['ticket']}")
    stored = item(api, ticket_key(body["ticket"]), "ticket")
    assert stored is not None and stored["sub"] == {"S": "customer-7"}
    assert body["ticket"] not in json.dumps(stored)  # only its hash is kept
    status, body, _ = api.call("POST", "/api/ws-ticket", token=None)
    assert status == 401


# ------------------------------------------------------------------ $connect


def test_connect_without_a_good_ticket_is_refused(socket: Socket) -> None:
    assert socket.invoke("$connect", "c-none") == 401
    assert socket.invoke("$connect", "c-bad", ticket="not-a-ticket") == 401
    used = socket.ticket()
    assert socket.invoke("$connect", "c-first", ticket=used) == 200
    assert socket.invoke("$connect", "c-again", ticket=used) == 401  # single use
    expired = socket.ticket()
    table = socket.api.stack.physical_ids["ConnectionsTable"]
    boto3.client("dynamodb").update_item(
        TableName=table,
        Key={"pk": {"S": ticket_key(expired)}, "sk": {"S": "ticket"}},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": {"N": "1000"}},
    )
    assert socket.invoke("$connect", "c-late", ticket=expired) == 401
    assert [c for c in ("c-none", "c-bad", "c-again", "c-late") if item(socket.api, connection_key(c), "conn")] == []


def test_connect_with_a_ticket_stores_the_connection_up_to_the_owners_limit(socket: Socket) -> None:
    socket.api.overrides["SOCKET_CONNECTIONS_PER_OWNER"] = "5"  # the template's default
    token = socket.api.token("customer-8", customer_id=8)
    assert [socket.connect(f"c8-{n}", token) for n in range(5)] == [200] * 5
    stored = item(socket.api, connection_key("c8-0"), "conn")
    assert stored is not None and stored["owner"] == {"S": "customer:8"} and "expires_at" in stored
    assert socket.connect("c8-5", token) == 429
    assert item(socket.api, connection_key("c8-5"), "conn") is None
    socket.invoke("$disconnect", "c8-0")
    socket.invoke("$disconnect", "c8-0")  # counted back once
    assert item(socket.api, owner_key("customer:8"), "connections")["count"] == {"N": "4"}  # type: ignore[index]
    assert socket.connect("c8-5", token) == 200


# ------------------------------------------------------------------ subscribe, unsubscribe


def test_subscribe_to_ones_own_conversation_and_not_to_anothers(socket: Socket) -> None:
    mine = conversation(socket.api)
    theirs = conversation(socket.api, socket.api.token("customer-8", customer_id=8))
    assert socket.connect("c7") == 200
    assert socket.invoke("subscribe", "c7", {"action": "subscribe", "conversationId": mine}) == 200
    (subscribed,) = socket.answers("c7")
    assert subscribed["type"] == "subscribed" and subscribed["conversationId"] == mine and subscribed["cursor"]
    assert [s.connection_id for s in socket.store().subscribers(mine)] == ["c7"]

    socket.invoke("subscribe", "c7", {"action": "subscribe", "conversationId": theirs})
    assert socket.answers("c7")[-1] == {
        "type": "error",
        "code": "not_found",
        "message": "conversation not found",
        "conversationId": theirs,
    }
    assert socket.store().subscribers(theirs) == []
    assert item(socket.api, connection_key("c7"), f"sub#{theirs}") is None

    assert socket.invoke("unsubscribe", "c7", {"action": "unsubscribe", "conversationId": mine}) == 200
    assert socket.answers("c7")[-1] == {"type": "unsubscribed", "conversationId": mine}
    assert socket.store().subscribers(mine) == []


def test_a_staff_member_without_the_hand_off_cannot_follow(socket: Socket) -> None:
    cid = conversation(socket.api)
    assert socket.connect("s1", socket.api.token("agent-1", "support_staff", None)) == 200
    socket.invoke("subscribe", "s1", {"action": "subscribe", "conversationId": cid})
    assert socket.answers("s1")[-1]["code"] == "not_found"


def test_too_many_subscriptions_and_bad_frames_are_errors(socket: Socket) -> None:
    assert socket.connect("c-many") == 200
    cids = [conversation(socket.api) for _ in range(11)]
    for cid in cids:
        socket.invoke("subscribe", "c-many", {"action": "subscribe", "conversationId": cid})
    codes = [a.get("code", a["type"]) for a in socket.answers("c-many")]
    assert codes == ["subscribed"] * 10 + ["too_many_subscriptions"]
    socket.invoke("subscribe", "c-many", {"action": "subscribe", "conversationId": cids[0]})  # again: no count
    assert socket.answers("c-many")[-1]["type"] == "subscribed"
    socket.invoke("$default", "c-many", "not json")
    socket.invoke("subscribe", "c-many", {"action": "subscribe", "conversationId": "conv_nope"})
    socket.invoke("subscribe", "c-many", {"action": "subscribe", "conversationId": cids[0], "after": "garbage"})
    assert [a["code"] for a in socket.answers("c-many")[-3:]] == ["bad_request"] * 3


# ------------------------------------------------------------------ gone connections


def test_a_410_marks_the_connection_gone_and_subscribers_skip_it(socket: Socket) -> None:
    cid = conversation(socket.api)
    assert socket.connect("c-live") == 200 and socket.connect("c-gone") == 200
    for connection in ("c-live", "c-gone"):
        socket.invoke("subscribe", connection, {"action": "subscribe", "conversationId": cid})
    assert sorted(s.connection_id for s in socket.store().subscribers(cid)) == ["c-gone", "c-live"]
    socket.management.gone.add("c-gone")
    poster = socket.services().poster
    assert poster.post("c-gone", {"type": "unsubscribed", "conversationId": "conv_x"}).value == "gone"  # never raises
    assert poster.post("c-live", {"type": "unsubscribed", "conversationId": "conv_x"}).value == "sent"
    assert [s.connection_id for s in socket.store().subscribers(cid)] == ["c-live"]
    gone = item(socket.api, connection_key("c-gone"), "conn")
    assert gone is not None and "gone_at" in gone
    # The late $disconnect frees nothing twice.
    before = item(socket.api, owner_key("customer:7"), "connections")
    socket.invoke("$disconnect", "c-gone")
    assert item(socket.api, owner_key("customer:7"), "connections") == before
