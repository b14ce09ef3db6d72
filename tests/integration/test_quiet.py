"""TRANSPARENCY=quiet end to end: the template deployed with its own default (quiet, as prod runs) into moto.

Quiet means no tool input or output in any body a customer reads: not in the chat answer (no trace), and not
in the conversation view either. The refunds raised stay in the view: they are the customer's own money.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from devstack.stack import Stack
from tests.integration.conftest import Api, deployed_stack
from tests.support.openapi import assert_documented
from tests.support.scripted import answer, tool_use, tools

# What only a tool call's input or result holds: the order's item and status, the tools' names and fields.
TOOL_DATA = ("Trail running shoes", "DELIVERED", "lookup_order", "request_refund", "order_id", 'amount_cents": 18900')


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """This module's stack: Transparency left to the template's default."""
    with deployed_stack({"TurnsPerMinute": "1000"}) as deployed:
        yield deployed


def test_quiet_leaves_tool_data_out_of_every_customer_body(api: Api) -> None:
    assert api.stack.function_env("ChatFunction")["TRANSPARENCY"] == "quiet"
    api.model.script = [
        tools(tool_use("lookup_order", {"order_id": 1042})),
        tools(tool_use("request_refund", {"order_id": 1042, "amount_cents": 18900, "reason": "customer request"})),
        answer("Your refund needs a teammate's approval."),
    ]
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
