"""Who answers a conversation, under random interleavings (issue 32): the bot, or the person holding its hand-off.

One conversation; random steps: the customer's messages (through the chat path's turn lifecycle, some handed
to the worker at once or when the synchronous time runs short, some crashing at a checkpoint with the process
dead, its lease left to expire), claims, releases, reassignments, replies (with and without Idempotency-Keys),
hand-backs and closes by agents and a lead, the clock moving past leases, the worker running queued turns (or
dying in them), the turn sweep resending them, and a claim landing *during* a model call. The scripted model
escalates when the customer writes HUMAN, looks an order up on ORDER, and answers otherwise.

After every step:

* **the model is never called while a person owns the conversation**: inside the model, the header read then
  names no ``answerer``, and names a hand-off only if the running turn opened it itself (its escalation's own
  final answer); every request it is sent is a valid Messages API history of user and assistant only;
* **never two owners**: at most one hand-off of the conversation is not CLOSED, and the header agrees with it
  (``open_handoff_id`` = it; ``answerer`` = its assignee exactly while ASSIGNED; neither when all are closed);
  each change of owner succeeds or is refused exactly as who-may-do-what says (store/takeover.py);
* **the feed is the stored history**: read from the start, one ``message`` event per stored message with text,
  in seq order, with its role and (a person's) author; every ``handoff.*`` notification once, in order;
* **the history stays valid**: `history.problems` over the stored messages as the model sees them (`for_model`)
  is empty, once a crashed turn's open tool calls are answered (at the end, after the next turn's repair, they
  are: no open call is left).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.agent import history as hist
from support_agent.agent.lifecycle import Answered, Ask, Kept, Running, TurnLifecycle
from support_agent.agent.turn_sweep import TurnSweeper
from support_agent.agent.worker import TurnWorker
from support_agent.auth import Principal
from support_agent.clock import iso
from support_agent.errors import Conflict, IdempotencyKeyReused, LeaseHeld, NotPermitted
from support_agent.feed import PAGE_EVENTS, Cursor, Feed
from support_agent.messages import Deadline, Message
from support_agent.store.conversations import StoredMessage
from support_agent.store.dynamo import from_item, to_values
from support_agent.store.handoffs import Handoff, HandoffConflict, HandoffStore
from support_agent.store.ratelimit import RateLimiter
from support_agent.store.takeover import Takeover
from support_agent.store.turns import TurnStore
from tests.reliability.checks import MotoSnapshot
from tests.reliability.conftest import CI, SLOW
from tests.reliability.figures import count
from tests.support.harness import Crash, Harness, make_harness
from tests.support.scripted import answer, tool_use, tools

ME = Principal("customer-7", "customer", 7)
PEOPLE = {
    "dana": Principal("agent-1", "support_staff", None, name="Dana"),
    "sam": Principal("agent-2", "support_staff", None, name="Sam"),
    "lead": Principal("lead-1", "support_lead", None, name="Lee"),
}
CHECKPOINTS = ("after_model_call", "after_write_ahead", "after_tool:0", "after_results_write")
WORDS = {"plain": "is it still on its way", "HUMAN": "I want a HUMAN", "ORDER": "where is my ORDER"}
NOTES = {
    "claim": "handoff.assigned",
    "reassign": "handoff.assigned",
    "release": "handoff.released",
    "hand_back": "handoff.returned_to_bot",
    "close": "handoff.closed",
}
SLOW_CALL_SECONDS = 13  # a model call this long leaves less of SYNC_TURN_SECONDS (20) than a call's budget (8)

WHO = st.sampled_from(["holder", "holder", "dana", "sam", "lead"])  # holder: whoever holds it now (else Dana)
CRASH = st.sampled_from([*[None] * 8, *CHECKPOINTS])
SAY_HOW = (
    st.booleans(),  # Prefer: respond-async (handed to the worker before the first model call)
    CRASH,
    st.sampled_from([None, None, "dana", "sam"]),  # who claims during a model call, once the turn has escalated
    st.booleans(),  # the first model call is slow: the turn is handed over before the next
)
SAY = st.tuples(st.just("say"), st.sampled_from(["plain", "HUMAN", "HUMAN", "ORDER"]), *SAY_HOW)
# Each example starts by escalating, in the request (maybe handed over after the escalation, maybe claimed during
# the call that follows it).
FIRST = st.tuples(st.just("say"), st.just("HUMAN"), st.just(False), st.just(None), *SAY_HOW[2:])
CLAIM = st.tuples(st.just("claim"), WHO)
REPLY = st.tuples(st.just("reply"), WHO, st.sampled_from([None, "k1", "k2"]), st.integers(0, 1))
STEP = st.one_of(  # repeated branches weigh more
    SAY,
    SAY,
    SAY,
    CLAIM,
    CLAIM,
    CLAIM,
    REPLY,
    REPLY,
    REPLY,
    st.tuples(st.just("release"), WHO),
    st.tuples(st.just("reassign"), st.sampled_from(["lead", "lead", "holder"]), st.sampled_from(["dana", "sam"])),
    st.tuples(st.just("hand_back"), WHO, st.booleans()),
    st.tuples(st.just("close"), WHO),
    st.tuples(st.just("wait"), st.just(None)),
    st.tuples(st.just("worker"), CRASH),
    st.tuples(st.just("sweep"), st.just(None)),
)


def at(h: Harness) -> str:
    return iso(datetime.fromtimestamp(h.clock(), UTC))


def text_of(content: list[dict[str, Any]]) -> str:
    return "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")


@dataclass
class Started:
    """What a turn began with: the hand-offs that existed (any other it may meet it opened itself), and who is
    to claim during one of its model calls."""

    known: frozenset[str]
    inject: Principal | None


class Run:
    """One conversation driven step by step, with what the checks expect of it."""

    def __init__(self, h: Harness, queue_url: str, dlq_url: str) -> None:
        s = h.settings
        self.h, self.queue_url = h, queue_url
        self.turns = TurnStore(h.ddb, s.conversations_table)
        limiter = RateLimiter(h.ddb, s.conversations_table, 10**6, h.clock)
        self.life = TurnLifecycle(s, h.agent, self.turns, h.conversations, limiter, h.sqs, h.clock, lambda: at(h))
        self.worker = TurnWorker(self.life)
        self.sweeper = TurnSweeper(
            self.turns, h.conversations, h.sqs, queue_url, dlq_url, s.lease_seconds, h.clock, lambda: at(h)
        )
        self.t = Takeover(h.ddb, s.approvals_table, s.conversations_table, s.audit_table)
        self.tickets = HandoffStore(h.ddb, s.approvals_table, s.conversations_table, s.audit_table)
        self.cid = ""
        self.hids: list[str] = []  # the conversation's hand-offs, in the order they opened
        self.notes: list[tuple[str, str, str | None]] = []  # the handoff.* notifications expected: type, id, by
        self.keys: dict[tuple[str, str], str] = {}  # (hand-off, Idempotency-Key) -> the text it stored
        self.authors: dict[int, Principal] = {}  # a person's message's seq -> who wrote it
        self.started: dict[str, Started] = {}  # handed-over turns, by turn id
        self.running = Started(frozenset(), None)  # the turn running now
        self.slow = False
        self.dead = False  # the process crashed: nothing of it runs any more (its lease is left)
        self.violations: list[str] = []
        self.stats: Counter[str] = Counter()
        self._n = itertools.count(1)
        h.model.on_call = self.on_call
        h.agent.checkpoint = self.checkpoint
        release = type(h.conversations).release_lease.__get__(h.conversations)  # the store's own, not a wrapper
        h.conversations.release_lease = lambda *a, **k: None if self.dead else release(*a, **k)  # type: ignore[method-assign]

    # -- the model and the crashes ---------------------------------------------------------------------------

    def decide(self, messages: list[Message]) -> Any:
        """Escalate on HUMAN, look an order up on ORDER (the customer's newest words), else answer."""
        last = messages[-1]
        said = text_of(hist.blocks(last)) if last["role"] == "user" else ""
        if "HUMAN" in said:
            return tools(tool_use("escalate_to_human", {"reason": "the customer asked for a person"}))
        if "ORDER" in said:
            return tools(tool_use("lookup_order", {"order_id": 1042}))
        return answer(f"bot answer {next(self._n)}")

    def on_call(self) -> None:
        """Inside the model call: who answers, read as the call starts; then maybe a claim lands."""
        h = self.h
        self.stats["model_calls"] += 1
        request = h.model.requests[-1]
        if found := hist.problems(request.messages):
            self.violations.append(f"the model was sent an invalid history: {found}")
        if not self.cid:
            return  # the conversation's first turn: nothing can be open yet
        header = h.conversations.get_header(self.cid)
        assert header is not None
        if header.answerer is not None:
            self.violations.append(f"model called while {header.answerer} answers")
        if header.open_handoff_id is not None and header.open_handoff_id in self.running.known:
            self.violations.append(f"model called while hand-off {header.open_handoff_id} was open at turn start")
        if self.slow:
            self.slow = False
            h.clock.advance(SLOW_CALL_SECONDS)
        who = self.running.inject
        if who is not None and header.open_handoff_id is not None and header.answerer is None:
            self.running = Started(self.running.known, None)
            self.discover()
            self.change("claim", who)  # lands between the call's start and its answer
            self.stats["claims_during_a_model_call"] += 1

    def checkpoint(self, step: str) -> None:
        if step in self.h.crash_at:
            self.h.crash_at.discard(step)
            self.dead = True
            raise Crash(step)

    @contextmanager
    def crashing(self, at_step: str | None) -> Iterator[None]:
        self.h.crash_at = {at_step} if at_step else set()
        self.h.model.script = [self.decide] * 50
        try:
            yield
        except Crash:
            self.stats["crashes"] += 1
        finally:
            self.h.crash_at, self.dead, self.slow = set(), False, False
            self.running = Started(frozenset(), None)

    # -- the customer --------------------------------------------------------------------------------------------

    def say(self, kind: str, at_once: bool, crash: str | None, inject: str | None, slow: bool) -> None:
        h = self.h
        n = next(self._n)
        header = h.conversations.get_header(self.cid) if self.cid else None
        named = header is not None and header.open_handoff_id is not None
        leased = header is not None and bool(header.lease_owner) and header.lease_expires_at >= int(h.clock())
        calls = len(h.model.requests)
        self.running = Started(frozenset(self.hids), PEOPLE[inject] if inject else None)
        self.slow = slow
        ask = Ask(ME, 7, self.cid or None, f"{WORDS[kind]} ({n})", f"req-{n}", at_once=at_once)
        out: Any = None
        with self.crashing(crash):
            injected = self.stats["claims_during_a_model_call"]
            try:
                out = self.life.start(ask, Deadline.after(20, h.clock), Deadline.after(27, h.clock))
            except LeaseHeld:
                assert leased, "LeaseHeld with no live lease"
                self.stats["refused_lease_held"] += 1
                return
            if isinstance(out, Running):
                self.started[out.turn.turn_id] = self.running
                self.stats["handed_over"] += 1
            elif isinstance(out, Kept):
                assert named, "a message was kept for a person while the header named no hand-off"
                assert len(h.model.requests) == calls
                self.stats["kept_for_a_person"] += 1
            else:
                assert isinstance(out, Answered)
                assert not named, "the bot answered while the header named a hand-off"
                if self.stats["claims_during_a_model_call"] > injected:
                    assert out.body["stopReason"] == "handed_to_person", out.body
                self.stats["answered"] += 1
        if out is not None and not self.cid:
            self.cid = out.turn.conversation_id

    def work(self, crash: str | None) -> None:
        """The worker runs the queued turns (the first may die at ``crash``)."""
        for message in self.drain():
            with self.crashing(crash):
                crash = None
                self.running = self.started.get(message["turnId"], Started(frozenset(self.hids), None))
                outcome = self.worker.run(message)
                assert outcome in ("completed", "failed", "stale", "not_taken"), outcome
                self.stats[f"worker_{outcome}"] += 1

    def sweep(self) -> None:
        self.h.clock.advance(2 * self.h.settings.lease_seconds + 1)  # past the lease and the turn's check
        self.sweeper.run()
        self.stats["sweeps"] += 1

    def drain(self) -> list[dict[str, Any]]:
        out = []
        while msgs := self.h.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages"):
            for m in msgs:
                out.append(json.loads(m["Body"]))
                self.h.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
        return out

    # -- the people ---------------------------------------------------------------------------------------------

    def who(self, name: str) -> Principal:
        """``holder``: whoever holds the newest hand-off now (Dana when no one does)."""
        if name != "holder":
            return PEOPLE[name]
        ticket = self.tickets.get(self.hids[-1]) if self.hids else None
        held = ticket.assignee if ticket is not None and ticket.status == "ASSIGNED" else None
        return next((p for p in PEOPLE.values() if p.sub == held), PEOPLE["dana"])

    def change(self, kind: str, who: Principal, arg: Any = None) -> None:
        """A change of owner on the newest hand-off, checked against who may make it (store/takeover.py)."""
        if not self.hids:
            self.stats["no_handoff_yet"] += 1
            return
        hid = self.hids[-1]
        ticket = self.tickets.get(hid)
        assert ticket is not None
        expected = _expected(kind, who, ticket)
        now = at(self.h)
        calls: dict[str, Callable[[], Handoff]] = {
            "claim": lambda: self.t.claim(hid, who, now),
            "release": lambda: self.t.release(hid, who, now),
            "reassign": lambda: self.t.reassign(hid, who, arg.sub if arg else "", arg.name if arg else None, now),
            "hand_back": lambda: self.t.hand_back(hid, who, now, "context for the bot" if arg else None),
            "close": lambda: self.t.close(hid, who, now),
        }
        try:
            changed = calls[kind]()
        except (HandoffConflict, NotPermitted, Conflict) as exc:
            assert type(exc) is expected, (kind, who.sub, ticket.status, ticket.assignee, exc)
            self.stats[f"{kind}s_refused"] += 1
            return
        assert expected is None, (kind, who.sub, ticket.status, ticket.assignee, "succeeded")
        by = None
        if kind in ("claim", "reassign"):
            holder = who if kind == "claim" else arg
            assert (changed.status, changed.assignee) == ("ASSIGNED", holder.sub)
            by = holder.display_name
        elif kind == "release":
            assert (changed.status, changed.assignee) == ("OPEN", None)
        else:
            assert (changed.status, changed.closed_as) == (
                "CLOSED",
                "returned_to_bot" if kind == "hand_back" else "closed",
            )
        self.notes.append((NOTES[kind], hid, by))
        self.stats[f"{kind}s"] += 1

    def reply(self, who: Principal, key: str | None, variant: int) -> None:
        if not self.hids:
            self.stats["no_handoff_yet"] += 1
            return
        h, hid = self.h, self.hids[-1]
        text = f"{who.name} writes, take {variant}"
        ticket, header = self.tickets.get(hid), h.conversations.get_header(self.cid)
        assert ticket is not None and header is not None
        stored = h.conversations.load(self.cid, from_seq=header.next_seq - 1)
        expected: type[Exception] | str | None = None
        if key is not None and (hid, key) in self.keys:
            expected = "replayed" if self.keys[hid, key] == text else IdempotencyKeyReused
        elif ticket.status != "ASSIGNED":
            expected = HandoffConflict
        elif ticket.assignee != who.sub:
            expected = NotPermitted
        elif header.lease_owner and header.lease_expires_at >= int(h.clock()):
            expected = LeaseHeld
        elif stored and stored[-1].role == "assistant" and hist.tool_uses(stored[-1].as_message()):
            expected = Conflict  # after a crashed turn's open tool call: the next turn's repair comes first
        try:
            sent = self.t.reply(hid, who, text, at(h), key)
        except (HandoffConflict, NotPermitted, LeaseHeld, Conflict, IdempotencyKeyReused) as exc:
            assert type(exc) is expected, (who.sub, ticket.status, ticket.assignee, exc)
            self.stats["replies_refused"] += 1
            return
        assert sent.replayed == (expected == "replayed"), (expected, sent)
        assert expected in (None, "replayed"), expected
        assert (sent.message.role, text_of(sent.message.content), sent.message.author) == ("person", text, who.sub)
        if not sent.replayed:
            assert sent.message.seq == header.next_seq
            self.authors[sent.message.seq] = who
            if key is not None:
                self.keys[hid, key] = text
        self.stats["replies_replayed" if sent.replayed else "replies"] += 1

    # -- the checks ---------------------------------------------------------------------------------------------

    def discover(self) -> None:
        """Hand-offs the conversation's turns opened since the last look (each announced as it opened)."""
        out = self.h.ddb.scan(
            TableName=self.h.settings.approvals_table,
            FilterExpression="entity = :e AND conversation_id = :c",
            ExpressionAttributeValues=to_values({":e": "HANDOFF", ":c": self.cid}),
            ConsistentRead=True,
        )
        for hid in sorted(from_item(i)["approval_id"] for i in out.get("Items", [])):
            if hid not in self.hids:
                self.hids.append(hid)
                self.notes.append(("handoff.opened", hid, None))
                self.stats["handoffs_opened"] += 1

    def check(self, *, settled: bool = False) -> None:
        assert not self.violations, self.violations
        self.discover()
        self.check_owner()
        stored = self.h.conversations.load(self.cid)
        self.check_feed(stored)
        messages = [hist.for_model(m) for m in stored]
        gap = hist.unanswered_tool_uses(stored)
        assert not (settled and gap), "a crashed turn's tool calls are still open after the next turn"
        if gap is not None:  # what the next turn's repair will store: results for the open calls
            results = [{"type": "tool_result", "tool_use_id": u["id"], "content": "(repaired)"} for u in gap[1]]
            messages.append({"role": "user", "content": results})
        assert hist.problems(messages) == [], (hist.problems(messages), [m.role for m in stored])

    def check_owner(self) -> None:
        tickets = [self.tickets.get(hid) for hid in self.hids]
        live = [t for t in tickets if t is not None and t.status != "CLOSED"]
        assert len(live) <= 1, [(t.handoff_id, t.status) for t in live]
        header = self.h.conversations.get_header(self.cid)
        assert header is not None
        if not live:
            assert (header.open_handoff_id, header.answerer) == (None, None)
            return
        ticket = live[0]
        assert header.open_handoff_id == ticket.handoff_id
        holder = f"person:{ticket.assignee}" if ticket.status == "ASSIGNED" else None
        assert header.answerer == holder and (ticket.assignee is None) == (ticket.status == "OPEN")

    def check_feed(self, history: list[StoredMessage]) -> None:
        h = self.h
        feed = Feed(h.ddb, h.settings.conversations_table, verbose=True, clock=h.clock, sleep=lambda _s: None)
        events: list[dict[str, Any]] = []
        cursor = Cursor(self.cid)
        while True:  # page after page; a page short of PAGE_EVENTS is all there is now
            page = feed.read(cursor, 7).events
            events.extend(page)
            if len(page) < PAGE_EVENTS:
                break
            cursor = Cursor.decode(page[-1]["cursor"], self.cid)
        said = [(e["role"], e["text"], e.get("author")) for e in events if e["type"] == "message"]
        stored = [m for m in history if text_of(m.content)]
        for m in stored:
            if m.role == "person":
                who = self.authors[m.seq]
                assert (m.author, m.author_name) == (who.sub, who.display_name)
        assert said == [(m.role, text_of(m.content), m.author_name if m.role == "person" else None) for m in stored]
        notes = [(e["type"], e["handoffId"], e.get("by")) for e in events if e["type"].startswith("handoff.")]
        assert notes == self.notes


def _expected(kind: str, who: Principal, ticket: Handoff) -> type[Exception] | None:
    """What the change must raise (None: it succeeds): claim OPEN; release and hand back ASSIGNED by its holder
    or a lead; reassign by a lead, OPEN or ASSIGNED; close OPEN by a lead, ASSIGNED by its holder or a lead."""
    lead = who.role == "support_lead"
    holds = ticket.status == "ASSIGNED" and (ticket.assignee == who.sub or lead)
    if kind == "claim":
        return None if ticket.status == "OPEN" else HandoffConflict
    if kind == "reassign":
        if not lead:
            return NotPermitted
        return None if ticket.status in ("OPEN", "ASSIGNED") else HandoffConflict
    if kind in ("release", "hand_back"):
        if ticket.status != "ASSIGNED":
            return HandoffConflict
        return None if holds else NotPermitted
    if ticket.status == "CLOSED":
        return HandoffConflict
    return None if holds or (ticket.status == "OPEN" and lead) else NotPermitted


def step(run: Run, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "say":
        run.say(*op[1:])
    elif kind == "reply":
        run.reply(run.who(op[1]), op[2], op[3])
    elif kind == "reassign":
        run.change("reassign", run.who(op[1]), PEOPLE[op[2]])
    elif kind in ("claim", "release", "close"):
        run.change(kind, run.who(op[1]))
    elif kind == "hand_back":
        run.change("hand_back", run.who(op[1]), op[2])
    elif kind == "wait":
        run.h.clock.advance(run.h.settings.lease_seconds + 1)
    elif kind == "worker":
        run.work(op[1])
    else:
        run.sweep()


def settle(run: Run) -> None:
    """Every handed-over turn ended (the sweep resends or fails them), every lease free; then the customer writes
    once more: that turn's repair answers any call a crashed turn left open."""
    for _ in range(4):
        run.sweep()
        run.work(None)
    run.say("plain", False, None, None, False)


def _property(h: Harness, queue_url: str, dlq_url: str) -> Any:
    snapshot = MotoSnapshot()

    @given(first=FIRST, steps=st.lists(STEP, min_size=6, max_size=20))
    def prop(first: tuple[Any, ...], steps: list[tuple[Any, ...]]) -> None:
        snapshot.restore()
        run = Run(h, queue_url, dlq_url)
        run.drain()  # nothing left queued by the previous example
        run.say("plain", False, None, None, False)  # the conversation, answered by the bot
        assert run.cid
        for op in [first, *steps]:
            step(run, op)
            run.check()
        settle(run)
        run.check(settled=True)
        count("takeover", examples=1, steps=1 + len(steps), **run.stats)

    return prop


@pytest.fixture
def takeover_harness(aws: None) -> Iterator[tuple[Harness, str, str]]:
    sqs = boto3.client("sqs")
    queue_url = sqs.create_queue(QueueName="TurnQueue")["QueueUrl"]
    dlq_url = sqs.create_queue(QueueName="TurnDLQ")["QueueUrl"]
    h = make_harness(TURN_QUEUE_URL=queue_url, TURN_DLQ_URL=dlq_url)
    yield h, queue_url, dlq_url
    h.model.on_call = None


def test_one_owner_and_no_model_call_while_a_person_answers(takeover_harness: tuple[Harness, str, str]) -> None:
    settings(parent=CI, max_examples=max(10, CI.max_examples // 3))(_property(*takeover_harness))()


@pytest.mark.slow
def test_one_owner_and_no_model_call_while_a_person_answers_long(
    takeover_harness: tuple[Harness, str, str],
) -> None:
    settings(parent=SLOW, max_examples=SLOW.max_examples // 4)(_property(*takeover_harness))()
