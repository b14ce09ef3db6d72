"""TRANSPARENCY=quiet end to end: the template deployed with its own default (quiet, as prod runs) into moto.

Quiet means no tool input or output in any body a customer reads: not in the chat answer (no trace), and not
in the conversation view either. The refunds raised stay in the view: they are the customer's own money.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from devstack.seed import seed
from devstack.stack import Stack, deploy
from tests.integration.conftest import BASE_ENV, SECRET, Api
from tests.support.openapi import assert_documented
from tests.support.scripted import answer, tool_use, tools

# What only a tool call's input or result holds: the order's item and status, the tools' names and fields.
TOOL_DATA = ("Trail running shoes", "DELIVERED", "lookup_order", "request_refund", "order_id", 'amount_cents": 18900')


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """This module's stack: Transparency left to the template's default."""
    saved = dict(os.environ)
    os.environ.update(BASE_ENV)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        deployed = deploy({"JwtSecret": SECRET, "TurnsPerMinute": "1000"})
        env = deployed.function_env("ChatFunction")
        os.environ.update(env)
        seed(boto3.client("dynamodb"), env["CUSTOMER_DATA_TABLE"])
        yield deployed
    os.environ.clear()
    os.environ.update(saved)


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
    assert (refund["orderId"], refund["amountCents"], refund["status"]) == (1042, 18900, "PENDING")
    assert [(m["role"], m["text"]) for m in view["messages"] if m["text"]] == [
        ("user", "Refund order 1042"),
        ("assistant", "Your refund needs a teammate's approval."),
    ]

    status, listing, _ = api.call("GET", "/api/conversations")
    assert status == 200 and not [d for d in TOOL_DATA if d in json.dumps(listing)]
