"""TRANSPARENCY=quiet end to end: the template deployed with its own default (quiet, as prod runs) into moto.

Quiet means no tool name, input or output in any body a customer reads: not in the chat answer (no trace), not
in the conversation view, not in the event feed (one table, ``QUIET_HIDES``, for both). The refunds raised stay
in the view: they are the customer's own money.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from devstack.stack import Stack
from support_agent.feed import QUIET_HIDES
from support_agent.store.conversations import ConversationStore, StoredMessage
from tests.integration.conftest import Api, deployed_stack
from tests.support.openapi import assert_documented
from tests.support.scripted import answer, seed_scenario, tool_use, tools

# What only a tool call's input or result holds: the order's item and status, the tools' names and fields.
TOOL_DATA = ("Trail running shoes", "DELIVERED", "lookup_order", "request_refund", "order_id", 'amount_cents": 18900')


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """This module's stack: Transparency left to the template's default."""
    with deployed_stack({"TurnsPerMinute": "1000"}) as deployed:
        yield deployed


def api_messages(api: Api, cid: str) -> list[StoredMessage]:
    return ConversationStore(boto3.client("dynamodb"), api.stack.physical_ids["ConversationsTable"]).load(cid)


def test_quiet_leaves_tool_data_out_of_every_customer_body(api: Api) -> None:
    assert api.stack.function_env("ChatFunction")["TRANSPARENCY"] == "quiet"
    api.model.script = seed_scenario("customer request", "Your refund needs a teammate's approval.")
    status, turn, headers = api.call("POST", "/api/chat", {"conversationId": None, "message": "Refund order 1042"})
    assert status == 200, turn
    assert "trace" not in turn and turn["iterations"] == 3
    assert_documented("POST", "/api/chat", status, turn, headers)

    cid = turn["conversationId"]
    status, view, _ = api.call("GET", f"/api/conversations/{cid}")
    assert status == 200, view
    assert_documented("GET", f"/api/conversations/{cid}", status, view)
    assert all("toolCalls" not in m for m in view["messages"]), view["messages"]
    text = json.dumps([turn, view["messages"]])
    assert not [d for d in TOOL_DATA if d in text], text
    # The refund raised is the customer's own business, quiet or not.
    (refund,) = view["refunds"]
    assert (refund["orderId"], refund["amountCents"], refund["status"]) == (1042, 18900, "PENDING_APPROVAL")
    assert [(m["role"], m["text"]) for m in view["messages"] if m["text"]] == [
        ("user", "Refund order 1042"),
        ("assistant", "Your refund needs a teammate's approval."),
    ]

    status, listing, _ = api.call("GET", "/api/conversations")
    assert status == 200 and not [d for d in TOOL_DATA if d in json.dumps(listing)]


def _keys(value: Any) -> set[str]:
    """Every key of every object in ``value``, however deep."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


@pytest.mark.parametrize("field", QUIET_HIDES)
def test_quiet_hides_the_same_tool_fields_from_the_view_and_the_feed(api: Api, field: str) -> None:
    """One table (``QUIET_HIDES``, feed.py) of what quiet hides, held by both bodies a customer reads a turn's
    tool calls in: the conversation view and the event feed. The feed used to show each tool's name."""
    api.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("It was delivered.")]
    status, turn, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "Where is 1042?"})
    assert status == 200, turn
    cid = turn["conversationId"]
    stored = [b for m in api_messages(api, cid) for b in m.content if b.get("type") in ("tool_use", "tool_result")]
    assert len(stored) == 2  # a call and its result were made: there is something to hide

    status, view, _ = api.call("GET", f"/api/conversations/{cid}")
    assert status == 200, view
    status, page, headers = api.call("GET", f"/api/conversations/{cid}/events")
    assert status == 200, page
    assert_documented("GET", f"/api/conversations/{cid}/events", status, page, headers)
    tool_events = [e for e in page["events"] if e["type"] in ("tool.requested", "tool.finished")]
    assert len(tool_events) == 2 and all(e["toolUseId"] for e in tool_events)  # the steps still show

    for body, what in ((view["messages"], "the view"), (page["events"], "the feed")):
        assert field not in _keys(body), (what, field, body)
        text = json.dumps(body)
        assert not [d for d in TOOL_DATA if d in text], (what, text)


def test_quiet_shows_a_proposal_without_its_tool_data(api: Api) -> None:
    """An address change proposed under quiet: the chat body has no trace, the view and the feed carry the proposal
    (its kind and what will happen: what the customer confirms) but not the tool's input or result, and the old
    address is nowhere a customer reads."""
    new = {"name": "Dana W", "line1": "7 Birch Lane", "city": "Seattle", "postal_code": "98101", "country": "US"}
    api.model.script = [
        tools(tool_use("update_shipping_address", {"order_id": 1047, "address": new})),
        answer("Please confirm the new address with the button."),
    ]
    status, turn, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "ship 1047 to Seattle"})
    assert status == 200 and "trace" not in turn, turn
    cid = turn["conversationId"]
    status, view, _ = api.call("GET", f"/api/conversations/{cid}")
    assert status == 200, view
    (proposal,) = view["proposals"]
    assert proposal["status"] == "PROPOSED" and "input" not in proposal, proposal
    status, feed, _ = api.call("GET", f"/api/conversations/{cid}/events?waitSeconds=0")
    assert status == 200 and "proposal.created" in [e["type"] for e in feed["events"]], feed
    bodies = json.dumps([turn, view, feed])
    assert "41 Alder Street" not in bodies, bodies
    # What was asked of the tool stays out: only the proposal (its kind, what will happen) is shown to confirm.
    assert not [e for e in feed["events"] if e["type"].startswith("tool.") and set(e) & {"input", "result", "name"}]
