"""The reply's text deltas on the deployed template: the chat function (and the turn worker) against the simulated
model over real HTTP, on both wire formats; a subscription stored as SocketFunction stores it; the posts caught by a
recording ``@connections`` client (moto's accepts anything and keeps nothing)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from devstack.simulated_model import SimulatedModelServer, start
from support_agent.auth import Principal
from support_agent.sockets import deltas, push
from support_agent.sockets.connections import ConnectionStore
from support_agent.store.conversations import ConversationStore, StoredMessage
from tests.integration.conftest import Api
from tests.integration.test_llm_providers import use_provider
from tests.integration.test_long_turns import take_messages, work

PROVIDERS = ["anthropic", "openai"]


@pytest.fixture(scope="module")
def model() -> Iterator[SimulatedModelServer]:
    server = start(port=0)
    yield server
    server.stop()


class Management:
    """The ``apigatewaymanagementapi`` client the functions build from WEBSOCKET_CALLBACK_URL: records each post."""

    def __init__(self) -> None:
        self.posts: dict[str, list[dict[str, Any]]] = {}

    def post_to_connection(self, ConnectionId: str, Data: bytes) -> None:
        self.posts.setdefault(ConnectionId, []).append(json.loads(Data))


@pytest.fixture
def management(monkeypatch: pytest.MonkeyPatch) -> Management:
    recorder = Management()
    monkeypatch.setattr(push, "management_client", lambda endpoint_url: recorder)
    return recorder


@pytest.fixture
def streamed(model: SimulatedModelServer, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each model request asked for a stream."""
    asked: list[bool] = []
    post = model.model.post

    def recording(path: str, headers: Any, raw: bytes) -> Any:
        asked.append(json.loads(raw).get("stream") is True)
        return post(path, headers, raw)

    monkeypatch.setattr(model.model, "post", recording)
    return asked


def provider(api: Api, model: SimulatedModelServer, name: str) -> None:
    if name == "openai":
        use_provider(api, LLM_PROVIDER="openai", OPENAI_BASE_URL=f"{model.url}/v1", OPENAI_API_KEY="sim-key")
    else:
        use_provider(api, ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY="sim-key")


def chat(api: Api, message: str, cid: str | None = None, **headers: str) -> tuple[int, dict[str, Any]]:
    status, body, _ = api.call("POST", "/api/chat", {"conversationId": cid, "message": message}, headers=headers)
    assert status in (200, 202), body
    return status, dict(body)


def follow(api: Api, cid: str, connection_id: str) -> None:
    store = ConnectionStore(boto3.client("dynamodb"), api.stack.physical_ids["ConnectionsTable"], 50)
    connection = store.connect(connection_id, Principal("customer-7", "customer", 7))
    store.subscribe(connection, cid, "start")


def turn_messages(api: Api, cid: str) -> dict[str, list[StoredMessage]]:
    """The conversation's assistant messages, by the turn that stored them."""
    store = ConversationStore(boto3.client("dynamodb"), api.stack.physical_ids["ConversationsTable"])
    found: dict[str, list[StoredMessage]] = {}
    for m in store.load(cid):
        if m.role == "assistant" and m.turn_id:
            found.setdefault(m.turn_id, []).append(m)
    return found


def text_of(messages: list[StoredMessage]) -> str:
    return "".join(str(b.get("text", "")) for m in messages for b in m.content if b.get("type") == "text")


def assert_deltas_are_the_stored_text(posts: list[dict[str, Any]], cid: str, turn_id: str, stored: str) -> None:
    assert posts and {(p["type"], p["conversationId"], p["turnId"]) for p in posts} == {("delta", cid, turn_id)}
    assert not any(p.get("restart") for p in posts)
    assert [p["offset"] for p in posts] == [sum(len(p["text"]) for p in posts[:i]) for i in range(len(posts))]
    assert "".join(p["text"] for p in posts) == stored


@pytest.mark.parametrize("name", PROVIDERS)
def test_a_followed_conversations_turn_streams_its_text_in_order(
    api: Api, model: SimulatedModelServer, management: Management, streamed: list[bool], name: str
) -> None:
    provider(api, model, name)
    _, first = chat(api, "Where is my order 1043?")
    cid = first["conversationId"]
    assert streamed and not any(streamed)  # a new conversation: nobody could follow it yet
    assert management.posts == {}

    follow(api, cid, f"c-{name}")
    streamed.clear()
    _, second = chat(api, "What are the invoices for it?", cid)
    assert [c["name"] for it in second["trace"] for c in it["toolCalls"]] == ["list_invoices"]
    assert len(streamed) == 2 and all(streamed)  # each model call of the turn streamed
    turns = turn_messages(api, cid)  # by the order each turn first stored
    assert len(turns) == 2
    turn_id = list(turns)[-1]
    stored = turns[turn_id]
    posts = management.posts[f"c-{name}"]
    assert_deltas_are_the_stored_text(posts, cid, turn_id, text_of(stored))
    assert "".join(p["text"] for p in posts).endswith(text_of(stored[-1:]))  # the final answer's text at least
    assert second["reply"].strip() in "".join(p["text"] for p in posts)


def test_a_conversation_nobody_follows_posts_nothing(
    api: Api, model: SimulatedModelServer, management: Management, streamed: list[bool]
) -> None:
    provider(api, model, "anthropic")
    _, first = chat(api, "Where is my order 1042?")
    follow(api, first["conversationId"], "c-elsewhere")  # another conversation's follower
    _, other = chat(api, "Where is my order 1043?")
    streamed.clear()
    chat(api, "What are the invoices for it?", other["conversationId"])
    assert streamed and all(streamed)  # streamed all the same: someone may subscribe while it runs
    assert management.posts == {}


def test_a_turn_handed_over_to_the_worker_streams_from_the_worker(
    api: Api, model: SimulatedModelServer, management: Management, streamed: list[bool]
) -> None:
    provider(api, model, "openai")
    _, first = chat(api, "Where is my order 1043?")
    cid = first["conversationId"]
    follow(api, cid, "c-worker")
    status, running = chat(
        api, "What are the invoices for it?", cid, prefer="respond-async", **{"idempotency-key": "d1"}
    )
    assert status == 202 and management.posts == {}  # handed over before any model call
    streamed.clear()
    (message,) = take_messages(api)
    assert work(api, [message]) == {"batchItemFailures": []}
    assert streamed and all(streamed)
    stored = turn_messages(api, cid)[running["turnId"]]
    assert_deltas_are_the_stored_text(management.posts["c-worker"], cid, running["turnId"], text_of(stored))


def test_a_subscriber_arriving_after_the_workers_turn_began_still_gets_the_whole_text(
    api: Api, model: SimulatedModelServer, management: Management, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page of a new conversation subscribes once the 202 has named it: the worker may be writing already."""
    provider(api, model, "anthropic")
    _, first = chat(api, "Where is my order 1043?")
    cid = first["conversationId"]
    status, running = chat(
        api, "What are the invoices for it?", cid, prefer="respond-async", **{"idempotency-key": "late-1"}
    )
    assert status == 202
    monkeypatch.setattr(deltas, "REFRESH_SECONDS", 0.0)  # read the followers before every post
    reads: list[int] = []
    subscribers = ConnectionStore.subscribers

    def arriving(store: ConnectionStore, conversation_id: str) -> list[Any]:
        found = subscribers(store, conversation_id)
        reads.append(len(found))
        if len(reads) == 1:  # the turn's first post has found nobody: the page subscribes now
            follow(api, cid, "c-late")
        return found

    monkeypatch.setattr(ConnectionStore, "subscribers", arriving)
    (message,) = take_messages(api)
    assert work(api, [message]) == {"batchItemFailures": []}
    stored = text_of(turn_messages(api, cid)[running["turnId"]])
    posts = management.posts["c-late"]
    assert reads[0] == 0 and reads[-1] == 1
    assert posts[0]["offset"] == 0 and posts[0]["text"]  # caught up: the text posted before it came, in one post
    assert [p["offset"] for p in posts] == [sum(len(p["text"]) for p in posts[:i]) for i in range(len(posts))]
    assert "".join(p["text"] for p in posts) == stored
