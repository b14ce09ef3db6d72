"""The event feed tells exactly what is stored, in order, from any cursor.

For random conversations — turns with tool calls, tool errors, the per-turn cap, deadlines, model failures,
crashes at each checkpoint and the next turn's repair, and notifications written between and during turns — the
feed read from the start (page after page) must:

* reconstruct the stored messages exactly (each text, each tool_use with its input, each tool_result with its
  result and error flag, in seq order), each event naming the turn that stored the message;
* start each turn before its first stored step, and end each turn that ended (completed, failed, interrupted) once,
  in turn order, after its last step; a refused turn says nothing;
* hold every notification once, in number order, merged by time with the turns' events;
* resume from every event's cursor with exactly the events after it;
* read quiet, be the same events less what ``QUIET_HIDES`` names of each tool call.

Concurrent writers: threads announcing decisions while a turn runs all land, numbered 1..n without a gap.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.agent.finish import TurnEnds
from support_agent.agent.untrusted import unfence
from support_agent.auth import Principal
from support_agent.clock import utc_now
from support_agent.errors import ModelUnavailable, ServiceError
from support_agent.feed import QUIET_HIDES, Cursor, Feed
from support_agent.ids import new_conversation_id
from support_agent.messages import Deadline
from support_agent.store.notifications import Notification, NotificationStore
from support_agent.store.turns import TurnStore, fingerprint, turn_ms
from tests.reliability.checks import MotoSnapshot
from tests.reliability.conftest import CI, SLOW
from tests.reliability.figures import count
from tests.reliability.test_concurrency_races import run_all
from tests.support.harness import Crash, Harness, make_harness
from tests.support.scripted import answer, tool_use, tools

ME = Principal("customer-7", "customer", 7)
CHECKPOINTS = ("after_model_call", "after_write_ahead", "after_tool:0", "after_results_write")
_ids = itertools.count(1)

# One model step: a tool call that works, one that fails, two at once, an answer, or the model failing.
STEP = st.sampled_from(["lookup", "missing", "two", "answer", "down"])
TURN = st.tuples(
    st.lists(STEP, min_size=1, max_size=5),
    st.sampled_from([None, None, None, *CHECKPOINTS]),  # a crash, sometimes
    st.booleans(),  # the clock jumps past the deadline during the first model call
    st.integers(min_value=0, max_value=2),  # notifications written during the turn
)


def _response(step: str, n: int) -> Any:
    if step == "lookup":
        return tools(tool_use("lookup_order", {"order_id": 1042}, f"toolu_{n}a"))
    if step == "missing":
        return tools(tool_use("lookup_order", {"order_id": 9999}, f"toolu_{n}b"))
    if step == "two":
        return tools(
            tool_use("lookup_order", {"order_id": 1042}, f"toolu_{n}c"),
            tool_use("list_invoices", {"order_id": 1043}, f"toolu_{n}d"),
        )
    if step == "down":
        return ModelUnavailable("the model is down")
    return answer(f"answer {n}")


class Conversation:
    """Turns run as the chat route runs them: a turn record claimed, the loop, the record finished (or left
    running when the process dies)."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.turns = TurnStore(h.ddb, h.settings.conversations_table)
        self.notes = NotificationStore(h.ddb, h.settings.conversations_table)
        self.cid: str | None = None
        self.noted = 0

    def note(self) -> None:
        assert self.cid is not None
        self.noted += 1
        data = {"approvalId": f"apr_{self.noted}", "orderId": 1042, "amountCents": 100, "status": "REFUNDED"}
        self.notes.transact(
            [], Notification(conversation_id=self.cid, type="approval.decided", at=utc_now(), data=data)
        )

    def turn(self, steps: list[str], crash: str | None, late: bool, notes_during: int) -> None:
        h, n = self.h, next(_ids)
        script = [_response(step, n * 10 + i) for i, step in enumerate(steps)] + [answer(f"final {n}")] * 3
        h.model.script = script
        calls = itertools.count()

        def during() -> None:
            i = next(calls)
            if late and i == 0:
                h.clock.advance(60)  # past the turn's deadline: the loop stops with `deadline`
            if self.cid is not None and i < notes_during:
                self.note()  # a lead decides while the turn runs

        h.model.on_call = during
        new_id = None if self.cid else new_conversation_id()
        message = f"message {n}"
        claim = self.turns.claim(
            7,
            ME.sub,
            None,
            fingerprint(self.cid, message),
            self.cid or str(new_id),
            new_id is not None,
            message,
            now=utc_now(),
            now_epoch=int(h.clock()),
            running_seconds=60,
        )
        turn = claim.turn
        assert turn is not None
        stored: list[bool] = []
        h.crash_at = {crash} if crash else set()
        try:
            result = h.agent.run_turn(
                ME,
                7,
                self.cid,
                message,
                f"req-feed-{n}",
                Deadline.after(27, h.clock),
                new_id=new_id,
                stored=lambda: stored.append(True),
                turn_id=turn.turn_id,
            )
        except Crash:
            h.clock.advance(120)  # the process died: its turn record stays running, past running_until
            self.cid = self.cid or (new_id if stored else None)
            return
        except ServiceError as exc:
            if stored:
                TurnEnds(self.turns).failed(turn, exc)
                self.cid = self.cid or new_id
            else:
                TurnEnds(self.turns).refused(turn, None, exc)
            return
        finally:
            h.model.on_call = None
            h.crash_at = set()
        self.cid = result.conversation_id
        TurnEnds(self.turns).completed(turn, result, verbose=True)


def everything(feed: Feed, cursor: Cursor) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while page := feed.read(cursor, 7).events:
        out.extend(page)
        cursor = Cursor.decode(page[-1]["cursor"], cursor.conversation_id)
    return out


def expected_steps(h: Harness, cid: str) -> list[tuple[Any, ...]]:
    """What the stored messages say, derived here independently of the feed."""
    out: list[tuple[Any, ...]] = []
    for m in h.conversations.load(cid):
        text = "".join(b.get("text", "") for b in m.content if b.get("type") == "text")
        if text:
            out.append(("message", m.turn_id, m.role, text))
        for b in m.content:
            if b.get("type") == "tool_use":
                out.append(("tool.requested", m.turn_id, b["id"], b["name"], b["input"]))
            elif b.get("type") == "tool_result":
                result = unfence(b.get("content"))
                out.append(("tool.finished", m.turn_id, b["tool_use_id"], bool(b.get("is_error", False)), result))
    return out


def steps_of(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for e in events:
        if e["type"] == "message":
            out.append(("message", e["turnId"], e["role"], e["text"]))
        elif e["type"] == "tool.requested":
            out.append(("tool.requested", e["turnId"], e["toolUseId"], e["name"], e["input"]))
        elif e["type"] == "tool.finished":
            out.append(("tool.finished", e["turnId"], e["toolUseId"], e["isError"], e["result"]))
    return out


def check_feed(h: Harness, c: Conversation) -> dict[str, int]:
    assert c.cid is not None
    feed = Feed(h.ddb, h.settings.conversations_table, verbose=True, clock=h.clock, sleep=lambda _s: None)
    got = everything(feed, Cursor(c.cid))
    # Every stored step, in order, from the turn that stored it.
    assert steps_of(got) == expected_steps(h, c.cid)
    # Each turn starts once, right before its first step; steps follow the turn that started last.
    started: list[str] = []
    current = None
    for e in got:
        if e["type"] == "turn.started":
            started.append(e["turnId"])
            current = e["turnId"]
        elif e["type"] in ("message", "tool.requested", "tool.finished"):
            assert e["turnId"] == current, e
    runs = [m.turn_id for m in h.conversations.load(c.cid)]
    assert started == [t for i, t in enumerate(runs) if i == 0 or runs[i - 1] != t]
    # Each turn that ended ends once, in turn order, after its last step; refused turns say nothing.
    now = int(h.clock())
    expected_ends = []
    for t in sorted(c.turns.turns_of(c.cid), key=lambda t: turn_ms(t.turn_id)):
        if t.status == "completed":
            expected_ends.append((t.turn_id, "turn.completed"))
        elif t.status == "failed" or t.interrupted(now):
            expected_ends.append((t.turn_id, "turn.failed"))
        elif t.status == "running":
            break  # still running: nothing after it has ended yet either
    ends = [(e["turnId"], e["type"]) for e in got if e["type"] in ("turn.completed", "turn.failed")]
    assert ends == expected_ends
    for turn_id, kind in ends:
        at = next(i for i, e in enumerate(got) if e["type"] == kind and e["turnId"] == turn_id)
        assert all(e["turnId"] != turn_id for e in got[at + 1 :] if e["type"] != "approval.decided")
    # Notifications: each once, in number order.
    decided = [e["approvalId"] for e in got if e["type"] == "approval.decided"]
    assert decided == [f"apr_{i}" for i in range(1, c.noted + 1)]
    # Resume from every cursor: exactly what follows.
    for i, e in enumerate(got):
        assert everything(feed, Cursor.decode(e["cursor"], c.cid)) == got[i + 1 :], i
    # Quiet: the same events at the same cursors, less what QUIET_HIDES names of each tool call (feed.py).
    quiet = Feed(h.ddb, h.settings.conversations_table, verbose=False, clock=h.clock, sleep=lambda _s: None)
    hidden = [{k: v for k, v in e.items() if k not in QUIET_HIDES or not e["type"].startswith("tool.")} for e in got]
    assert everything(quiet, Cursor(c.cid)) == hidden
    return {"events": len(got), "turns_ended": len(ends), "notifications": len(decided)}


def _property(h: Harness) -> Any:
    snapshot = MotoSnapshot()

    @given(turns=st.lists(TURN, min_size=1, max_size=4), notes_between=st.lists(st.booleans(), max_size=4))
    def prop(turns: list[tuple[list[str], str | None, bool, int]], notes_between: list[bool]) -> None:
        snapshot.restore()
        c = Conversation(h)
        for i, (steps, crash, late, during) in enumerate(turns):
            c.turn(steps, crash, late, during)
            if c.cid is not None and i < len(notes_between) and notes_between[i]:
                c.note()
        if c.cid is None:
            return  # nothing was ever stored: there is no conversation to follow
        count("feed", conversations=1, **check_feed(h, c))

    return prop


@pytest.fixture
def feed_harness(aws: None) -> Harness:
    return make_harness(MAX_TOOL_CALLS_PER_TURN="3")


def test_the_feed_is_the_stored_history_from_any_cursor(feed_harness: Harness) -> None:
    settings(parent=CI, max_examples=max(10, CI.max_examples // 3))(_property(feed_harness))()


@pytest.mark.slow
def test_the_feed_is_the_stored_history_from_any_cursor_long(feed_harness: Harness) -> None:
    settings(parent=SLOW, max_examples=SLOW.max_examples // 4)(_property(feed_harness))()


def test_concurrent_announcements_and_a_turn_all_land_in_one_order(feed_harness: Harness, atomic_moto: None) -> None:
    h = feed_harness
    c = Conversation(h)
    c.turn(["lookup", "answer"], None, False, 0)
    assert c.cid is not None
    cid = c.cid

    def announce(i: int) -> None:
        data = {"approvalId": f"apr_t{i}", "orderId": 1042, "amountCents": 100, "status": "REJECTED"}
        c.notes.transact([], Notification(conversation_id=cid, type="approval.decided", at=utc_now(), data=data))

    out = run_all([lambda: c.turn(["two", "answer"], None, False, 0), *[lambda i=i: announce(i) for i in range(6)]])
    assert not [o for o in out if isinstance(o, BaseException)], out
    numbers = [n.n for n in c.notes.of(cid)]
    assert numbers == list(range(1, 7))  # none lost to the counter race, no gap, no duplicate
    feed = Feed(h.ddb, h.settings.conversations_table, verbose=True, clock=h.clock, sleep=lambda _s: None)
    got = everything(feed, Cursor(cid))
    assert sorted(e["approvalId"] for e in got if e["type"] == "approval.decided") == [f"apr_t{i}" for i in range(6)]
    assert [e["type"] for e in got].count("turn.completed") == 2
    assert steps_of(got) == expected_steps(h, cid)
