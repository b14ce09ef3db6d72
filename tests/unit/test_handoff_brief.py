"""A hand-off's brief is built from what is stored (handoffs/brief.py): what the tool calls touched, the refunds,
the last messages with text, cut; never what a tool's result only claims in passing, nor an errored call's."""

from __future__ import annotations

from typing import Any

from support_agent.agent.untrusted import fence
from support_agent.api import responses
from support_agent.handoffs.brief import LAST_MESSAGES, MESSAGE_CHARS, RefundLine, brief
from support_agent.store.conversations import StoredMessage
from support_agent.store.handoffs import Handoff
from tests.support.approval_items import handoff_item


def _m(seq: int, role: str, *blocks: dict[str, Any], **kw: Any) -> StoredMessage:
    return StoredMessage(seq, role, list(blocks), f"2026-12-04T12:00:{seq:02d}Z", **kw)


def _text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def _use(id: str, name: str, input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def _result(id: str, payload: Any, is_error: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": id, "content": fence(payload, 10_000), "is_error": is_error}


TICKET = Handoff.from_item(handoff_item(conversation_id="conv_1", reason="wants a person"))
REFUND = RefundLine(3001, 16000, "USD", "PENDING_APPROVAL", "apr_1", "PENDING", None)


def test_the_brief_names_what_the_tool_calls_touched_and_the_refunds() -> None:
    messages = [
        _m(1, "user", _text("where are my orders?")),
        _m(
            2,
            "assistant",
            _use("t1", "lookup_order", {"order_id": 1042}),
            _use("t2", "list_invoices", {"order_id": 1042}),
            _use("t3", "list_invoices", {}),
            _use("t4", "lookup_order", {"order_id": 1042}),
        ),
        _m(
            3,
            "user",
            _result("t1", {"order_id": 1042, "note": "see also order 9999"}),
            _result("t2", {"invoices": [{"invoice_id": 5001, "order_id": 1042}]}),
            _result("t3", "invoices unavailable", is_error=True),
            _result("t4", {"order_id": 1042}),
        ),
        _m(4, "assistant", _text("Here they are.")),
    ]
    got = brief(TICKET, messages, [REFUND])
    assert (got.customer_id, got.reason) == (7, "wants a person")
    assert got.orders == [1042, 3001]  # in tool inputs and refunds, once each; never from a result's prose
    assert got.invoices == [5001]  # from list_invoices results; an errored call names none
    assert got.refunds == [REFUND]
    assert [(m.seq, m.role, m.text) for m in got.last_messages] == [
        (1, "user", "where are my orders?"),
        (4, "assistant", "Here they are."),
    ]  # the tool-only messages have no text to quote


def test_the_last_messages_are_few_cut_and_say_who_wrote() -> None:
    messages = [_m(i, "user" if i % 2 else "assistant", _text(f"m{i} " + "x" * 900)) for i in range(1, 10)]
    messages.append(_m(10, "person", _text("Dana here."), author="agent-1", author_name="Dana"))
    got = brief(TICKET, messages, [])
    assert [m.seq for m in got.last_messages] == list(range(11 - LAST_MESSAGES, 11))
    assert all(len(m.text) <= MESSAGE_CHARS for m in got.last_messages)
    assert got.last_messages[0].text.startswith(f"m{11 - LAST_MESSAGES} ")
    assert (got.last_messages[-1].role, got.last_messages[-1].author) == ("person", "Dana")
    assert {m.author for m in got.last_messages[:-1]} == {None}


def test_an_mcp_ticket_is_a_brief_without_messages_and_renders() -> None:
    ticket = Handoff.from_item(handoff_item(holder="mcp#7", reason="by MCP"))
    got = brief(ticket, [], [])
    assert (got.orders, got.invoices, got.refunds, got.last_messages) == ([], [], [], [])
    body = responses.Handoff.of(ticket, brief=brief(TICKET, [_m(1, "user", _text("hi"))], [REFUND])).model_dump()
    assert body["brief"]["refunds"] == [
        {
            "orderId": 3001,
            "amountCents": 16000,
            "currency": "USD",
            "status": "PENDING_APPROVAL",
            "approvalId": "apr_1",
            "approvalStatus": "PENDING",
        }
    ]
    assert body["brief"]["lastMessages"] == [
        {"seq": 1, "role": "user", "author": None, "text": "hi", "createdAt": "2026-12-04T12:00:01Z"}
    ]
