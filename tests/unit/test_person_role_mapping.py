"""A support teammate's messages reach each wire format as the model's own side, marked, and nothing else does.

A conversation is built on the turn harness through the real paths: an escalation turn, a person's replies
(store/takeover.py; role ``person``), customer messages kept for them (consecutive user messages), two replies in
a row and one right after the bot's answer (consecutive assistant/person messages), then a hand-back with a note.
The bot's next turn then goes out through each real adapter — the Anthropic Messages API, an OpenAI-compatible
endpoint and Bedrock (InvokeModel with the Messages body: llm/bedrock.py says why not Converse) — on the wires of
tests/unit/test_llm_conformance.py, which also judge every body (the `anthropic` SDK's request types, the
simulated server's OpenAI validator). On the wire: only user and assistant turns (OpenAI: plus its system and
tool messages), alternating where the format requires it, each person's text once, in order, in an assistant
turn and marked with their name; the hand-back note only in the system part.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from support_agent.agent.loop import KeptForPerson, TurnResult
from support_agent.auth import Principal
from support_agent.clock import iso
from support_agent.store.handoffs import HandoffStore
from support_agent.store.takeover import Takeover
from tests.support.harness import Harness
from tests.support.scripted import answer, tool_use, tools
from tests.unit.test_llm_conformance import PROVIDERS, WIRES, Wire, _bedrock_runtime
from tests.unit.test_llm_conformance import answer as wire_answer

DANA = Principal("agent-1", "support_staff", None, name="Dana")
NOTE = "Refunded 12.00 by hand on order 1042; do not offer more."
MARK = "(support teammate Dana wrote:)"
# What is said, in order: (who, text). "bot" is the model's own answer, "person" Dana's, "user" the customer's.
SAID = [
    ("user", "I want a human"),
    ("bot", "A teammate will follow up here."),
    ("person", "Hi, Dana here."),  # right after the bot's answer: two assistant-side messages in a row
    ("user", "hello??"),
    ("user", "my order is 1042"),  # kept for Dana: two customer messages in a row
    ("person", "Checking it now."),
    ("person", "Refund done."),  # two replies in a row
    ("user", "one more question"),  # after the hand-back: the bot's turn, through the adapter under test
]


def _now(h: Harness) -> str:
    return iso(datetime.fromtimestamp(h.clock(), UTC))


@pytest.fixture(params=PROVIDERS)
def wire(request: pytest.FixtureRequest) -> Iterator[Wire]:
    _bedrock_runtime()  # a fresh Stubber on the shared bedrock-runtime client
    w: Wire = WIRES[request.param]()
    yield w
    assert w.steps == [], "script steps left unused"


def handed_back_conversation(h: Harness) -> str:
    """The conversation of SAID up to the last message, handed back to the bot with NOTE."""
    s = h.settings
    h.model.script = [tools(tool_use("escalate_to_human", {"reason": "wants a person"})), answer(SAID[1][1])]
    first = h.turn(SAID[0][1])
    assert isinstance(first, TurnResult)
    cid = first.conversation_id
    handoff = HandoffStore(h.ddb, s.approvals_table, s.conversations_table, s.audit_table).open_for(cid)
    assert handoff is not None
    t = Takeover(h.ddb, s.approvals_table, s.conversations_table, s.audit_table)
    t.claim(handoff.handoff_id, DANA, _now(h))
    for who, text in SAID[2:-1]:
        if who == "person":
            t.reply(handoff.handoff_id, DANA, text, _now(h))
        else:
            assert isinstance(h.turn(text, cid), KeptForPerson)
    t.hand_back(handoff.handoff_id, DANA, _now(h), NOTE)
    assert [m.role for m in h.conversations.load(cid)][-5:] == ["person", "user", "user", "person", "person"]
    return cid


def _texts(content: Any) -> list[str]:
    """The texts of a message's content in any of the three formats (a string, or text blocks/parts)."""
    if isinstance(content, str):
        return [content]
    return [b["text"] for b in content or [] if b.get("type") == "text"]


def turns_of(provider: str, body: dict[str, Any]) -> tuple[str, list[tuple[str, list[str]]]]:
    """(the system part's text, [(role, texts)] of the conversation's messages) of a wire body."""
    if provider == "openai":
        system = [m for m in body["messages"] if m["role"] == "system"]
        assert len(system) == 1 and body["messages"][0] is system[0]
        rest = [m for m in body["messages"][1:] if m["role"] != "tool"]
        return system[0]["content"], [(m["role"], _texts(m.get("content"))) for m in rest]
    system_text = "".join(b["text"] for b in body["system"])
    return system_text, [(m["role"], _texts(m["content"])) for m in body["messages"]]


def test_a_persons_messages_on_each_wire(harness: Harness, wire: Wire) -> None:
    h = harness
    cid = handed_back_conversation(h)
    h.agent.llm = wire.client(h.clock)
    wire.steps = [wire_answer("Of course, what is it?")]
    back = h.turn(SAID[-1][1], cid)
    assert isinstance(back, TurnResult) and back.reply == "Of course, what is it?"
    body = wire.requests[-1]
    system, turns = turns_of(wire.name, body)

    # Only user and assistant (OpenAI: its system message first, and its tool messages).
    allowed = {"user", "assistant", "system", "tool"} if wire.name == "openai" else {"user", "assistant"}
    assert {m["role"] for m in body["messages"]} <= allowed
    roles = [m["role"] for m in body["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles  # never two user or assistant in a row
    if wire.name != "openai":
        assert roles[0] == "user" and roles[-1] == "user"

    # Every text once, in order, on its side; a person's marked with their name, the bot's and customer's not.
    expected = [
        ("user" if who == "user" else "assistant", f"{MARK} {text}" if who == "person" else text) for who, text in SAID
    ]
    sent = [(role, text) for role, texts in turns for text in texts if text]
    assert sent == expected
    assert sum(text.startswith(MARK) for _, text in sent) == 3
    # The consecutive ones went as one turn each: bot + person, user + user, person + person.
    grouped = [texts for role, texts in turns if len(texts) > 1]
    assert [SAID[1][1], f"{MARK} {SAID[2][1]}"] in grouped
    assert [SAID[3][1], SAID[4][1]] in grouped
    assert [f"{MARK} {SAID[5][1]}", f"{MARK} {SAID[6][1]}"] in grouped

    # The hand-back note: the system part only, marked as the team's context.
    assert NOTE in system and "handback_note" in system
    assert NOTE not in str(body["messages"][1:] if wire.name == "openai" else body["messages"])
    assert str(body).count(NOTE) == 1


def test_the_model_reads_the_person_as_its_own_side_once_more_after_a_second_turn(harness: Harness, wire: Wire) -> None:
    """The bot's answers after the hand-back join the history; the person's messages keep their mark."""
    h = harness
    cid = handed_back_conversation(h)
    h.agent.llm = wire.client(h.clock)
    wire.steps = [wire_answer("Of course."), wire_answer("You are welcome.")]
    assert isinstance(h.turn(SAID[-1][1], cid), TurnResult)
    assert isinstance(h.turn("thanks", cid), TurnResult)
    _, turns = turns_of(wire.name, wire.requests[-1])
    sent = [(role, text) for role, texts in turns for text in texts if text]
    assert sent[-3:] == [("user", SAID[-1][1]), ("assistant", "Of course."), ("user", "thanks")]
    assert [text for _, text in sent if text.startswith(MARK)] == [f"{MARK} {t}" for w, t in SAID if w == "person"]
    assert all(role == "assistant" for role, text in sent if text.startswith(MARK))
