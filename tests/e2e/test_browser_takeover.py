"""A person takes over a conversation, in a real browser with two pages open: the customer's chat and the agent's
console (issue 32).

Dana (customer 7) asks for a person: the simulated model calls escalate_to_human. Her next message is kept for a
person (202 owner "person": no turn, no model call). Riley (support staff, agent-1) signs in to the console, sees
only the inbox, reads the brief, claims the hand-off: Dana's open chat says "Riley from support joined". Riley
replies; the reply appears in Dana's chat without a reload, as Riley's (not the assistant's). Dana answers; it
appears live in Riley's console. Riley hands back with a note: Dana's chat says the assistant is back, and her next
question is answered by the model. Throughout, the model is called only when no person has the conversation, and
the hand-off's audit trail verifies. Screenshots of both pages go to tests/e2e/artifacts/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devstack.local import LocalStack
from tests.e2e.conftest import WAIT_MS, PageWatch

REPLY_TIMEOUT_MS = 45_000  # a model turn through the worker processes
ASK = "Can I talk to a person, please?"
WAITING = "hello?? is anyone there"
RILEY_SAYS = "Hi Dana, this is Riley from support. I can see order 1043 — what went wrong with it?"
DANA_SAYS = "The socks arrived with a hole in them."
NOTE = "Replacement socks sent for order 1043; confirm the delivery address if asked."
AFTER = "Where is my order 1043?"


def is_chat_post(response: Any) -> bool:
    return response.request.method == "POST" and response.url.endswith("/api/chat")


@pytest.fixture
def agent_page(browser: Any) -> Iterator[tuple[Any, PageWatch]]:
    """The agent's page: a browser context of its own (its own session), watched like `page`."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(WAIT_MS)
    pg = context.new_page()
    watch = PageWatch()
    pg.on("console", watch.console)
    pg.on("pageerror", watch.page_error)
    pg.on("request", watch.request_started)
    pg.on("requestfinished", watch.request_ended)
    pg.on("requestfailed", watch.request_ended)
    try:
        yield pg, watch
    finally:
        context.close()


def test_a_person_takes_over_the_conversation_and_hands_it_back(
    local_stack: LocalStack,
    page: tuple[Any, PageWatch],
    agent_page: tuple[Any, PageWatch],
    screenshot: Callable[[Any, str], Path],
) -> None:
    from playwright.sync_api import expect

    chat, chat_watch = page
    console, console_watch = agent_page
    assert local_stack.model is not None, "the simulated model"
    model = local_stack.model.model
    (riley,) = local_stack.tokens["staff"]
    assert (riley["sub"], riley["name"]) == ("agent-1", "Riley")

    # ---- Dana asks for a person: the model escalates; her chat says a person will join
    chat.goto(f"{local_stack.url}/")
    chat.click("#signin-customer-7")
    expect(chat.locator("#app")).to_be_visible()
    expect(chat.locator("body")).to_have_attribute("data-live", "socket")  # followed over the WebSocket
    chat.evaluate("window.__sameDocument = true")  # gone if the page reloads
    chat.fill("#message", ASK)
    chat.click("#send")
    expect(chat.locator(".reply").last.locator(".reply-text")).to_contain_text("teammate", timeout=REPLY_TIMEOUT_MS)
    expect(chat.locator('.trace-call[data-tool="escalate_to_human"]')).to_have_count(1)
    expect(chat.locator('.handoff-update[data-event="handoff.opened"]')).to_have_count(1)
    status = chat.locator("#handoff-status")
    expect(status).to_contain_text("Waiting for a person")
    conversation_id = chat.locator("#conversation-id").inner_text()
    assert conversation_id.startswith("conv_"), conversation_id

    # ---- while the hand-off is queued, her message is kept for a person: 202 owner person, no turn, no model call
    calls = model.requests
    chat.fill("#message", WAITING)
    with chat.expect_response(is_chat_post) as kept:
        chat.click("#send")
    assert kept.value.status == 202, kept.value.text()
    body = kept.value.json()
    assert (body["owner"], body["status"], "turnId" in body) == ("person", "queued", False), body
    assert kept.value.headers.get("location") is None
    sent = chat.locator(".message.user").filter(has_text=WAITING)
    expect(sent.locator(".sent-note")).to_contain_text("a person from support will reply")
    expect(chat.locator("#send")).to_be_enabled()
    expect(chat.locator(".live-turn")).to_have_count(0)  # not shown as the assistant working
    screenshot(chat, "01-chat-waiting-for-a-person")

    # ---- Riley, support staff: the console shows the inbox only; the brief; claim
    console.goto(f"{local_stack.url}/lead")
    console.click("#signin-staff-agent-1")
    expect(console.locator("#app")).to_be_visible()
    expect(console.locator("#whoami-name")).to_have_text("Riley (agent-1)")
    expect(console.locator("#role-note")).to_be_visible()
    expect(console.locator("#approvals-section")).to_be_hidden()
    expect(console.locator("#audit-section")).to_be_hidden()
    expect(console.locator("#handoff-filter")).to_have_value("OPEN")
    row = console.locator("tr.handoff-row").filter(
        has=console.locator(f'.handoff-conversation [data-conversation-id="{conversation_id}"]')
    )
    expect(row).to_have_attribute("data-status", "OPEN")
    expect(row.locator(".handoff-customer")).to_have_text("7")
    expect(row.locator(".handoff-reason")).to_contain_text("asked for a person")
    row.locator("details.brief summary").click()
    brief = row.locator("details.brief")
    expect(brief.locator(".brief-message").last).to_contain_text(WAITING)
    expect(brief.locator('.brief-message[data-role="user"]').first).to_contain_text(ASK)
    handoff_id = row.get_attribute("data-handoff-id")
    assert handoff_id and handoff_id.startswith("hof_"), handoff_id
    screenshot(console, "02-console-inbox")

    row.locator("button.claim-handoff").click()
    workspace = console.locator("#workspace")
    expect(workspace).to_be_visible()
    expect(workspace).to_have_attribute("data-handoff-id", handoff_id)
    expect(console.locator("#ws-status")).to_contain_text("held by you")
    transcript = console.locator("#ws-transcript")
    expect(transcript.locator(".ws-message.from-user").filter(has_text=ASK)).to_have_count(1)
    expect(transcript.locator(".ws-message.from-user").filter(has_text=WAITING)).to_have_count(1)
    expect(transcript.locator(".ws-message.from-assistant").first).to_contain_text("teammate")

    # Dana's open chat: who joined
    joined = chat.locator('.handoff-update[data-event="handoff.assigned"]')
    expect(joined).to_have_count(1)
    expect(joined).to_contain_text("Riley from support joined")
    expect(status).to_contain_text("Riley from support is answering")

    # ---- Riley replies: it appears in Dana's open chat without a reload, as Riley's. The first attempt meets a 409
    # (as while the assistant finishes a turn): the page sends it again after a moment, with the same key.
    keys: list[str | None] = []

    def busy_once(route: Any) -> None:
        keys.append(route.request.headers.get("idempotency-key"))
        if len(keys) == 1:
            message = "the assistant is finishing a turn on this conversation; try again in a moment"
            route.fulfill(status=409, json={"error": {"code": "conflict", "message": message}})
        else:
            route.fallback()

    console.route(f"**/api/handoffs/{handoff_id}/messages", busy_once)
    console.fill("#ws-message", RILEY_SAYS)
    console.click("#ws-send")
    expect(transcript.locator(".ws-message.from-person").filter(has_text=RILEY_SAYS)).to_have_count(1)
    expect(console.locator("#ws-send-status")).to_have_text("Sent.")
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1], keys
    console.unroute(f"**/api/handoffs/{handoff_id}/messages")
    reply = chat.locator(".message.person")
    expect(reply).to_have_count(1)
    expect(reply).to_have_attribute("data-author", "Riley")
    expect(reply.locator(".who")).to_have_text("Riley")
    expect(reply.locator(".message-text")).to_have_text(RILEY_SAYS)
    assert chat.evaluate("window.__sameDocument") is True

    # ---- Dana answers: it appears live in Riley's console, and no model was called
    chat.fill("#message", DANA_SAYS)
    with chat.expect_response(is_chat_post) as kept:
        chat.click("#send")
    assert (kept.value.status, kept.value.json()["status"]) == (202, "assigned")
    expect(chat.locator(".message.user").filter(has_text=DANA_SAYS).locator(".sent-note")).to_contain_text(
        "Riley will reply"
    )
    expect(transcript.locator(".ws-message.from-user").filter(has_text=DANA_SAYS)).to_have_count(1)
    assert model.requests == calls, "the model was called while a person had the conversation"
    expect(chat.locator(".message.user").filter(has_text=DANA_SAYS)).to_have_count(1)  # shown once
    screenshot(chat, "03-chat-with-riley")
    screenshot(console, "04-console-conversation")

    # ---- Dana's page reloaded: the history has Riley's message once, and the feed says Riley still answers
    chat_watch.settle(chat)
    chat.reload()
    expect(chat.locator("#conversation-id")).to_have_text(conversation_id)
    expect(status).to_contain_text("Riley from support is answering")
    expect(reply).to_have_count(1)
    expect(reply.locator(".who")).to_have_text("Riley")
    for text in (ASK, WAITING, DANA_SAYS):
        expect(chat.locator(".message.user").filter(has_text=text)).to_have_count(1)
    expect(chat.locator(".live-turn")).to_have_count(0)
    chat.evaluate("window.__sameDocument = true")

    # ---- Riley hands back with a note: the assistant is back, and answers Dana's next question
    console.fill("#ws-return-note", NOTE)
    console.click("#ws-return")
    expect(transcript.locator('.ws-news[data-event="ended"]')).to_contain_text("handed the conversation back")
    expect(console.locator("#ws-reply")).to_be_hidden()
    expect(workspace).to_have_attribute("data-status", "CLOSED")
    back = chat.locator('.handoff-update[data-event="handoff.returned_to_bot"]')
    expect(back).to_contain_text("The assistant is back")
    expect(status).to_be_hidden()

    chat.fill("#message", AFTER)
    with chat.expect_response(is_chat_post, timeout=REPLY_TIMEOUT_MS) as answered:
        chat.click("#send")
    assert answered.value.status == 200, answered.value.text()
    answer = chat.locator(".reply").last.locator(".reply-text")
    expect(answer).to_contain_text("1043", timeout=REPLY_TIMEOUT_MS)
    assert answer.inner_text().startswith("[simulated model]")
    assert model.requests > calls
    assert chat.evaluate("window.__sameDocument") is True
    screenshot(chat, "05-chat-assistant-back")
    screenshot(console, "06-console-handed-back")

    # ---- read back through the API: handed back by Riley; the reply stored as a person's; the trail verifies
    lead = {"Authorization": f"Bearer {local_stack.tokens['leads'][0]['token']}"}
    with httpx.Client(base_url=local_stack.url, timeout=30) as http:
        ticket = http.get(f"/api/handoffs/{handoff_id}", headers=lead).json()
        assert (ticket["status"], ticket["closedAs"], ticket["assignee"]) == ("CLOSED", "returned_to_bot", "agent-1")
        verify = http.get(f"/api/audit/verify?conversationId={conversation_id}", headers=lead).json()
        assert verify["status"] == "ok", verify
    chat_watch.assert_clean(chat)
    console_watch.settle(console)
    busy = [e for e in console_watch.errors if "status of 409" in e and "/messages" in e]  # the browser's own line
    assert len(busy) == 1 and [e for e in console_watch.errors if e not in busy] == [], console_watch.errors


# ------------------------------------------------------------------ the chat page against a scripted feed
#
# What the chat page makes of a hand-off's events, each case at once (the rest of the API is the stack's): history
# older than the page is state, not lines; a person's name and words are only ever text; the page's own message to
# a person is shown once; one sent from elsewhere shows as the customer's, never as the assistant working; who
# joined, stepped away, and the assistant back; and the page stops following once no person has the conversation.

FAKE_CONVERSATION = "conv_01JTAKEOVERTEST00000000000"
HOSTILE_NAME = "Sam <b>x</b>"
HOSTILE_TEXT = '<img src=x onerror="window.__pwned = 1"> on it'
LATER_TEXT = "<script>window.__pwned = 2</script> sorted, the refund is on its way"


def _at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}.000Z"


def _event(kind: str, second: int, turn_id: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"cursor": f"c{second}", "type": kind, "at": _at(second), "turnId": turn_id, **fields}


class ScriptedFeed:
    """The feed's polls, held until the test answers each (as a long poll waits for an event)."""

    def __init__(self) -> None:
        self.waiting: list[Any] = []
        self.urls: list[str] = []

    def hold(self, route: Any) -> None:
        self.urls.append(route.request.url)
        self.waiting.append(route)

    def answer(self, pg: Any, events: list[dict[str, Any]], cursor: str) -> None:
        for _ in range(WAIT_MS // 50):
            if self.waiting:
                break
            pg.wait_for_timeout(50)
        assert self.waiting, "the page did not poll the feed"
        self.waiting.pop(0).fulfill(json={"events": events, "nextCursor": cursor})


def test_chat_page_with_a_person_against_a_scripted_feed(
    local_stack: LocalStack, page: tuple[Any, PageWatch], screenshot: Callable[[Any, str], Path]
) -> None:
    import re

    from playwright.sync_api import Route, expect

    pg, watch = page
    pg.add_init_script("window.SUPPORT_AGENT_WEBSOCKET = false")  # the scripted feed is the long poll's
    feed = ScriptedFeed()
    posts: list[dict[str, Any]] = []
    urls: list[str] = []
    pg.on("request", lambda r: urls.append(r.url))
    view = {
        "conversationId": FAKE_CONVERSATION,
        "createdAt": _at(1),
        "messages": [
            {"seq": 1, "role": "user", "createdAt": _at(1), "text": "I need a person."},
            {"seq": 2, "role": "assistant", "createdAt": _at(2), "text": "A teammate will follow up here."},
            {"seq": 3, "role": "person", "createdAt": _at(3), "text": HOSTILE_TEXT, "author": HOSTILE_NAME},
        ],
        "refunds": [],
    }

    def chat_post(route: Route) -> None:
        if route.request.method != "POST":
            route.fallback()
            return
        posts.append(route.request.post_data_json)
        route.fulfill(
            status=202,
            json={
                "conversationId": FAKE_CONVERSATION,
                "owner": "person",
                "status": "assigned",
                "eventsUrl": f"/api/conversations/{FAKE_CONVERSATION}/events",
            },
        )

    pg.route(re.compile(rf"/api/conversations/{FAKE_CONVERSATION}/events\?"), feed.hold)
    pg.route(re.compile(rf"/api/conversations/{FAKE_CONVERSATION}$"), lambda route: route.fulfill(json=view))
    pg.route(re.compile(r"/api/chat$"), chat_post)
    pg.goto(f"{local_stack.url}/")
    pg.evaluate(f"sessionStorage.setItem('supportAgent.conversationId', '{FAKE_CONVERSATION}')")
    pg.click("#signin-customer-7")
    expect(pg.locator("#conversation-id")).to_have_text(FAKE_CONVERSATION)

    # The catch-up: the hand-off's news older than the history sets the state, with no lines; the person's message
    # of the history is not shown twice.
    feed.answer(
        pg,
        [
            _event("handoff.opened", 2, handoffId="hof_1"),
            _event("handoff.assigned", 2, handoffId="hof_1", by=HOSTILE_NAME),
            _event("message", 3, role="person", text=HOSTILE_TEXT, author=HOSTILE_NAME),
        ],
        "c3",
    )
    feed.answer(pg, [], "c3")
    status = pg.locator("#handoff-status")
    expect(status).to_have_text(f"{HOSTILE_NAME} from support is answering this conversation.")
    person = pg.locator(".message.person")
    expect(person).to_have_count(1)
    expect(person.locator(".who")).to_have_text(HOSTILE_NAME)
    expect(person.locator(".message-text")).to_have_text(HOSTILE_TEXT)
    expect(pg.locator(".handoff-update")).to_have_count(0)

    # The page's message to the person: 202 owner person, shown as sent, no turn polled.
    pg.fill("#message", "Are you there?")
    pg.click("#send")
    expect(pg.locator(".message.user .sent-note")).to_have_text(f"Sent — {HOSTILE_NAME} will reply here.")
    expect(pg.locator("#send")).to_be_enabled()
    assert posts == [{"conversationId": FAKE_CONVERSATION, "message": "Are you there?"}], posts

    # Live: that message again (its turn never runs), the person's reply, one sent from the customer's phone; then
    # the person steps away, another joins, and hands back.
    feed.answer(
        pg,
        [
            _event("turn.started", 9, "turn_09"),
            _event("message", 9, "turn_09", role="user", text="Are you there?"),
            _event("message", 10, role="person", text=LATER_TEXT, author=HOSTILE_NAME),
            _event("turn.started", 11, "turn_11"),
            _event("message", 11, "turn_11", role="user", text="from my phone"),
            _event("handoff.released", 12, handoffId="hof_1"),
            _event("handoff.assigned", 13, handoffId="hof_1", by="Jo"),
            _event("handoff.returned_to_bot", 14, handoffId="hof_1"),
        ],
        "c14",
    )
    lines = pg.locator(".handoff-update")
    expect(lines).to_have_count(3)
    assert lines.evaluate_all("els => els.map(e => [e.dataset.event, e.innerText.split('\\n').pop()])") == [
        [
            "handoff.released",
            f"{HOSTILE_NAME} stepped away; the next person from support will pick this up.",
        ],
        ["handoff.assigned", "Jo from support joined."],
        ["handoff.returned_to_bot", "The assistant is back: it answers your next message."],
    ]
    expect(status).to_be_hidden()
    expect(person).to_have_count(2)
    expect(person.last.locator(".message-text")).to_have_text(LATER_TEXT)
    users = pg.locator(".message.user .message-text")
    assert users.all_inner_texts() == ["I need a person.", "Are you there?", "from my phone"]
    expect(pg.locator(".live-turn, .reply[data-turn-id]")).to_have_count(0)  # no turn ran: nothing shown as one
    assert pg.locator("#transcript img, #transcript b, #transcript script").count() == 0
    assert pg.evaluate("window.__pwned") is None
    screenshot(pg, "01-scripted-handoff")

    # The assistant answers again: nothing to follow, no further poll; the turn record was never polled.
    pg.wait_for_timeout(1500)
    assert len(feed.urls) == 3, feed.urls
    assert ["waitSeconds=0" in u for u in feed.urls] == [True, True, False], feed.urls
    assert not any("/turns/" in u for u in urls), urls
    watch.assert_clean(pg)
