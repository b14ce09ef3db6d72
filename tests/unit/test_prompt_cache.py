"""Prompt-cache prefix stability, on the exact bytes the real AnthropicClient sends.

From one request to the next, the bytes up to the last ``cache_control`` breakpoint of request k
must be a prefix of request k+1: then Anthropic's cache can serve everything request k wrote. The
only allowed break is the one the API itself defines — a changed ``tool_choice`` (the last allowed
iteration forbids tools) invalidates the messages' cache, yet tools and system must still match —
and a move of the history budget's cut (agent/budget.py), which is rare by construction.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from support_agent.llm.anthropic import AnthropicClient
from tests.support.harness import Harness, make_harness
from tests.support.scripted import answer, tool_use, tools
from tests.support.transport import scripted_transport

MARK = b',"cache_control":{"type":"ephemeral"}'


def wire(h: Harness) -> list[bytes]:
    """Route the harness's agent through the real client; returns the list the sent bodies land in."""
    sent: list[bytes] = []
    inner = scripted_transport(h.model)

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return inner.handler(request)  # type: ignore[no-any-return]

    h.agent.llm = AnthropicClient(api_key="sk-test", model="claude-test", transport=httpx.MockTransport(handle))
    return sent


def cached_prefix(body: bytes) -> bytes:
    """The bytes before the last breakpoint's marker: what this request may have written to the cache."""
    at = body.rfind(MARK)
    assert at > 0
    return body[:at]


def system_end(body: bytes) -> int:
    """End of the tools + system part (the second breakpoint marker)."""
    first = body.find(MARK)
    return body.find(MARK, first + 1) + len(MARK)


def breaks(sent: list[bytes]) -> list[int]:
    """Indexes k+1 whose request does not extend request k's cached prefix."""
    out = []
    for k in range(len(sent) - 1):
        a, b = sent[k], sent[k + 1]
        assert a.count(MARK) <= 4 and b.count(MARK) <= 4  # the API's limit
        # tools and system never change, whatever happens to the messages
        assert b[: system_end(b)] == a[: system_end(a)]
        if not b.startswith(cached_prefix(a)):
            out.append(k + 1)
    return out


def tool_choice(body: bytes) -> Any:
    return json.loads(body).get("tool_choice")


def test_cache_order_tools_system_messages(aws: None) -> None:
    h = make_harness()
    sent = wire(h)
    h.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("ok")]
    h.turn("Where is order 1042?")
    body = json.loads(sent[0])
    assert list(body) == ["model", "max_tokens", "tools", "system", "messages"]
    # three breakpoints: last tool, system, newest message
    assert sent[0].count(MARK) == 3 and "cache_control" in body["tools"][-1]
    assert "cache_control" in body["messages"][-1]["content"][-1]


def test_prefix_is_stable_over_iterations_and_turns(aws: None) -> None:
    h = make_harness()
    sent = wire(h)
    cid = None
    for n in range(4):
        h.model.script = [
            tools(tool_use("lookup_order", {"order_id": 1042})),
            tools(tool_use("list_invoices", {"order_id": 1042}), tool_use("lookup_order", {"order_id": 1043})),
            answer(f"Here is what I found ({n})."),
        ]
        cid = h.turn(f"Question {n}: where is order 1042 and its invoices?", cid).conversation_id
    # a refund over the threshold and a small direct one: results with approval ids, audit rows
    h.model.script = [
        tools(tool_use("request_refund", {"order_id": 1042, "amount_cents": 18900, "reason": "customer request"})),
        tools(tool_use("request_refund", {"order_id": 1043, "amount_cents": 1000, "reason": "customer request"})),
        answer("Done."),
    ]
    h.turn("Refund 1042 in full and 10.00 of 1043.", cid)
    assert len(sent) == 15
    assert breaks(sent) == []


def test_only_the_tool_choice_change_breaks_the_message_prefix(aws: None) -> None:
    h = make_harness(MAX_ITERATIONS="5")
    sent = wire(h)
    h.model.script = [tools(tool_use("lookup_order", {"order_id": 1042}, id=f"toolu_loop{i}")) for i in range(5)]
    cid = h.turn("Keep looking at order 1042.").conversation_id
    h.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("ok")]
    h.turn("And now?", cid)
    choices = [tool_choice(b) for b in sent]
    assert choices == [None, None, None, None, {"type": "none"}, None, None]
    # the capped iteration breaks the messages' cache (the API's rule); so does the request after it,
    # whose tool_choice changed back; tools and system still match (checked in `breaks`)
    assert breaks(sent) == [4, 5]


def test_history_budget_breaks_the_prefix_only_when_its_cut_moves(aws: None) -> None:
    h = make_harness(HISTORY_TOKEN_BUDGET="1500")
    sent = wire(h)
    cid = None
    for n in range(14):
        h.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer(f"Answer {n}. " + "x" * 300)]
        cid = h.turn(f"Question {n} about order 1042", cid).conversation_id
    first_messages = [json.loads(b)["messages"][0]["content"][0]["text"] for b in sent]
    cut_moved = [k for k in range(1, len(sent)) if first_messages[k] != first_messages[k - 1]]
    found = breaks(sent)
    assert found == cut_moved
    assert 0 < len(found) <= 4  # 28 requests, a handful of cache resets
