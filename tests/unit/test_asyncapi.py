"""docs/asyncapi.json: generated from the WebSocket's message models, never stale, true to the routes and the
template. That the functions post exactly these messages is checked where they post: every message the socket
integration tests record is validated by `asyncapi.server_message` (tests/integration/test_sockets.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from devstack.stack import REPO_ROOT, load_template
from support_agent.api import asyncapi

COMMITTED = REPO_ROOT / "docs" / "asyncapi.json"


def test_the_committed_document_is_the_generated_one() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == asyncapi.render(), (
        "docs/asyncapi.json is stale: run `make openapi` and commit it"
    )


def test_check_mode_notices_a_stale_file(tmp_path: Path) -> None:
    fresh, stale = tmp_path / "fresh.json", tmp_path / "stale.json"
    fresh.write_text(asyncapi.render(), encoding="utf-8")
    stale.write_text(asyncapi.render().replace('"delta"', '"piece"'), encoding="utf-8")
    assert asyncapi.main(["--check", str(fresh)]) == 0
    assert asyncapi.main(["--check", str(stale)]) == 1


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    return [r for v in node for r in _refs(v)] if isinstance(node, list) else []


def test_every_reference_resolves() -> None:
    doc = json.loads(asyncapi.render())
    refs = _refs(doc)
    assert len(refs) > 20
    for ref in refs:
        node: Any = doc
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]  # a KeyError names the dangling reference
        assert isinstance(node, dict), ref


def test_the_client_frames_are_the_template_routes() -> None:
    """Each message a client sends selects a route of the WebSocketApi (its RouteSelectionExpression's action)."""
    template = load_template()["Resources"]
    keys = {r["Properties"]["RouteKey"] for r in template.values() if r["Type"] == "AWS::ApiGatewayV2::Route"}
    assert set(asyncapi.CLIENT_MESSAGES) == keys - {"$connect", "$disconnect", "$default"}
    doc = asyncapi.document()
    sent = {op["messages"][0]["$ref"].rsplit("/", 1)[-1] for op in doc["operations"].values() if op["action"] == "send"}
    assert sent == set(asyncapi.CLIENT_MESSAGES)
    received = {
        ref["$ref"].rsplit("/", 1)[-1]
        for op in doc["operations"].values()
        for ref in (op["messages"] if op["action"] == "receive" else op["reply"]["messages"])
    }
    assert received == set(asyncapi.SERVER_MESSAGES)


@pytest.mark.parametrize(
    "message",
    [
        {"type": "delta", "conversationId": "conv_x", "turnId": "turn_y", "offset": -1, "text": "a"},
        {"type": "delta", "conversationId": "conv_x", "turnId": "turn_y", "offset": 0, "text": "a", "extra": 1},
        {"type": "error", "code": "teapot", "message": "no"},
        {"type": "event", "conversationId": "conv_x", "event": {"type": "message"}},
        {"type": "subscribed", "conversationId": "conv_x"},
    ],
)
def test_a_message_off_the_document_is_refused(message: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        asyncapi.server_message(message)


def test_an_unknown_type_is_refused() -> None:
    with pytest.raises(KeyError):
        asyncapi.server_message({"type": "gossip"})
