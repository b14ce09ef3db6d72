"""The chat page over the WebSocket (docs/API.md#websocket), in a real browser against the local stack.

With the simulated model paced (its SIMULATED_MODEL_DELAY_SECONDS, set on the running stack's model for these tests
only: the stack is shared), the reply is seen being written: the streamed text grows through several partial states,
then the stored message replaces it; the tool steps show while the turn runs; a new conversation's first message
streams too (sent with ``Prefer: respond-async`` and followed over the socket), and no long poll runs while the
socket is up. With the socket unavailable (the ticket refused, or a socket URL nothing answers), the page answers
through the long poll as before. Waits are generous; nothing here is timed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.local import LocalStack

DELAY_SECONDS = 1.5  # per model call, spread over its text: a few words every ~100-200 ms
REPLY_TIMEOUT_MS = 45_000
LONG_POLL = re.compile(r"/api/conversations/[^/?]+/events\?waitSeconds=20")

# Every state of the page's streamed text and of the running turn's tool steps, in order, as the DOM changes.
RECORDER = """
(() => {
  window.__stream = [];
  const snap = () => {
    const live = document.querySelector('.live-turn[data-state="running"]');
    const el = live && live.querySelector('.stream-text');
    const text = el && !el.hidden ? el.textContent : '';
    const steps = live ? live.querySelectorAll('.progress-step').length : 0;
    const last = window.__stream[window.__stream.length - 1];
    if (!last || last.text !== text || last.steps !== steps) window.__stream.push({ text: text, steps: steps });
  };
  const all = { subtree: true, childList: true, characterData: true, attributes: true };
  new MutationObserver(snap).observe(document, all);
})();
"""


@pytest.fixture
def paced(local_stack: LocalStack) -> Iterator[LocalStack]:
    """The stack's simulated model writing slowly, for this test only."""
    assert local_stack.model is not None
    model = local_stack.model.model
    before, model.delay_seconds = model.delay_seconds, DELAY_SECONDS
    try:
        yield local_stack
    finally:
        model.delay_seconds = before


def sign_in(pg: Any, stack: LocalStack, live: str) -> None:
    from playwright.sync_api import expect

    pg.goto(f"{stack.url}/")
    pg.click("#signin-customer-7")
    expect(pg.locator("#app")).to_be_visible()
    expect(pg.locator("body")).to_have_attribute("data-live", live, timeout=REPLY_TIMEOUT_MS)


def send(pg: Any, text: str) -> None:
    from playwright.sync_api import expect

    pg.fill("#message", text)
    pg.click("#send")
    expect(pg.locator("#send")).to_be_enabled(timeout=REPLY_TIMEOUT_MS)
    expect(pg.locator("#chat-error")).to_be_hidden()


def stored_reply(pg: Any, stack: LocalStack) -> str:
    """The last assistant text stored in the open conversation, read through the API."""
    cid = pg.locator("#conversation-id").inner_text()
    token = next(c["token"] for c in stack.tokens["customers"] if c["customerId"] == 7)
    view = pg.request.get(f"{stack.url}/api/conversations/{cid}", headers={"Authorization": f"Bearer {token}"}).json()
    return str([m for m in view["messages"] if m["role"] == "assistant" and m.get("text")][-1]["text"])


def chat(url: str) -> bool:
    return url.endswith("/api/chat")


def growth(states: list[dict[str, Any]]) -> list[str]:
    """The longest run of streamed texts in which each extends the one before (one model call being written)."""
    best: list[str] = []
    run: list[str] = []
    for text in (s["text"] for s in states if s["text"]):
        run = [*run, text] if run and text.startswith(run[-1]) and text != run[-1] else [text]
        if len(run) > len(best):
            best = run
    return best


def assert_written_then_replaced(pg: Any, stack: LocalStack) -> None:
    states: list[dict[str, Any]] = pg.evaluate("window.__stream.splice(0)")
    written = growth(states)
    assert len(written) >= 3, f"the reply was not seen being written: {states}"
    final = pg.locator(".reply").last.locator(".reply-text").inner_text()
    assert final == stored_reply(pg, stack)
    assert final.startswith(written[-1]) or final.endswith(written[-1]), (written, final)
    assert pg.locator(".stream-text").count() == 0  # the streamed text is gone: the stored message replaced it
    steps_at = next((i for i, s in enumerate(states) if s["steps"]), None)
    last_text = max(i for i, s in enumerate(states) if s["text"])
    assert steps_at is not None and steps_at < last_text, f"no tool step shown before the reply ended: {states}"


def test_the_reply_is_seen_being_written_over_the_socket(paced: LocalStack, page: tuple[Any, Any]) -> None:
    pg, watch = page
    chats: list[tuple[str | None, int]] = []
    long_polls: list[str] = []
    pg.on("response", lambda r: chats.append((r.request.headers.get("prefer"), r.status)) if chat(r.url) else None)
    pg.on("request", lambda r: long_polls.append(r.url) if LONG_POLL.search(r.url) else None)
    pg.add_init_script(RECORDER)
    sign_in(pg, paced, "socket")

    send(pg, "Where is my order 1042?")  # a new conversation: its first turn handed to the worker, followed live
    assert chats == [("respond-async", 202)]
    assert_written_then_replaced(pg, paced)
    assert "1042" in pg.locator(".reply").last.inner_text()

    send(pg, "What are the invoices for it?")  # the chat function's own turn, streamed as it runs
    assert chats[1:] == [(None, 200)]
    assert_written_then_replaced(pg, paced)
    assert pg.locator(".reply").count() == 2
    assert long_polls == []  # the socket followed the conversation: no long poll ran
    watch.assert_clean(pg)


def _ticket_refused(route: Any) -> None:
    route.fulfill(status=503, json={"error": {"code": "unavailable", "message": "no socket today"}})


def _dead_socket(route: Any) -> None:
    route.fulfill(status=200, json={"ticket": "t", "url": "ws://127.0.0.1:9/", "expiresIn": 60})  # nothing listens


def _respond_async(route: Any) -> None:
    route.continue_(headers={**route.request.headers, "prefer": "respond-async"})


@pytest.mark.parametrize("blocked", [_ticket_refused, _dead_socket], ids=["ticket-refused", "dead-socket"])
def test_without_the_socket_the_page_answers_through_the_long_poll(
    local_stack: LocalStack, page: tuple[Any, Any], blocked: Any
) -> None:
    from playwright.sync_api import expect

    pg, watch = page
    tickets: list[str] = []
    long_polls: list[str] = []
    pg.on("request", lambda r: tickets.append(r.url) if r.url.endswith("/api/ws-ticket") else None)
    pg.on("request", lambda r: long_polls.append(r.url) if LONG_POLL.search(r.url) else None)
    pg.route("**/api/ws-ticket", blocked)
    pg.goto(f"{local_stack.url}/")
    pg.click("#signin-customer-7")
    expect(pg.locator("#app")).to_be_visible()

    send(pg, "Where is my order 1043?")  # a new conversation, answered by the chat request itself
    expect(pg.locator(".reply")).to_have_count(1)
    assert tickets, "the page never asked for a socket"

    # The next turn answered 202 (as a long turn is): only the event feed can show its steps and its reply.
    pg.route("**/api/chat", _respond_async)
    send(pg, "What are the invoices for it?")
    expect(pg.locator(".reply")).to_have_count(2)
    assert pg.locator(".reply").last.locator(".reply-text").inner_text() == stored_reply(pg, local_stack)
    expect(pg.locator('.reply .progress-step[data-tool="list_invoices"]')).to_have_count(1)
    assert long_polls, "the reply did not come through the long poll"
    assert pg.locator("body").get_attribute("data-live") != "socket"
    watch.settle(pg)
    unexpected = [e for e in watch.errors if "ws-ticket" not in e and "WebSocket" not in e and "503" not in e]
    assert unexpected == []


def test_the_socket_dropped_mid_turn_the_page_finishes_it_through_the_long_poll_then_the_socket(
    paced: LocalStack, page: tuple[Any, Any]
) -> None:
    """API Gateway closes connections at its limits (10 idle minutes, 2 hours): one closed while the reply is being
    written. The page follows the feed from its last cursor over the long poll, shows the turn once (its reply the
    stored one, each tool step once), and is back on a socket for the next turn."""
    from playwright.sync_api import expect

    pg, watch = page
    long_polls: list[str] = []
    pg.on("request", lambda r: long_polls.append(r.url) if LONG_POLL.search(r.url) else None)
    pg.add_init_script(RECORDER)
    sign_in(pg, paced, "socket")
    assert paced.websocket is not None

    pg.fill("#message", "Where is my order 1042?")
    pg.click("#send")
    pg.wait_for_function("window.__stream.some(s => s.text)", timeout=REPLY_TIMEOUT_MS)  # being written
    assert paced.websocket.drop_connections() >= 1
    expect(pg.locator("#send")).to_be_enabled(timeout=REPLY_TIMEOUT_MS)
    expect(pg.locator(".reply")).to_have_count(1)
    reply = pg.locator(".reply").last
    assert reply.locator(".reply-text").inner_text() == stored_reply(pg, paced)
    assert reply.locator('.progress-step[data-tool="lookup_order"]').count() == 1
    assert pg.locator(".stream-text").count() == 0
    assert long_polls, "the turn was not followed through the long poll once the socket closed"

    expect(pg.locator("body")).to_have_attribute("data-live", "socket", timeout=REPLY_TIMEOUT_MS)  # reconnected
    polled = len(long_polls)
    pg.evaluate("window.__stream.splice(0)")
    send(pg, "What are the invoices for it?")
    assert_written_then_replaced(pg, paced)
    assert pg.locator(".reply").count() == 2
    assert long_polls[polled:] == []  # the socket followed the second turn
    watch.settle(pg)
    assert [e for e in watch.errors if "WebSocket" not in e] == []


def test_an_idle_page_keeps_its_socket_with_pings_that_api_gateway_answers(
    local_stack: LocalStack, page: tuple[Any, Any]
) -> None:
    """The keepalive, its 5 minutes shortened to 300 ms: each ping is answered with a pong, the socket stays the
    page's way to follow, and the next turn is still followed over it."""
    from playwright.sync_api import expect

    pg, watch = page
    frames: list[tuple[str, str]] = []

    def watched(ws: Any) -> None:
        ws.on("framesent", lambda payload: frames.append(("sent", str(payload))))
        ws.on("framereceived", lambda payload: frames.append(("received", str(payload))))

    pg.on("websocket", watched)
    pg.add_init_script("window.SUPPORT_AGENT_SOCKET_KEEPALIVE_MS = 300;")
    sign_in(pg, local_stack, "socket")
    pg.wait_for_timeout(2_000)  # idle: about six keepalives
    pings = [f for f in frames if f == ("sent", '{"action":"ping"}')]
    pongs = [f for f in frames if f[0] == "received" and f[1].replace(" ", "") == '{"type":"pong"}']
    assert len(pings) >= 3 and len(pongs) >= len(pings) - 1, frames
    assert pg.locator("body").get_attribute("data-live") == "socket"
    send(pg, "Where is my order 1043?")
    expect(pg.locator(".reply")).to_have_count(1)
    assert pg.locator(".reply").last.locator(".reply-text").inner_text() == stored_reply(pg, local_stack)
    watch.assert_clean(pg)
