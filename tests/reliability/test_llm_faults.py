"""Property 7: the model API misbehaves in every way we know, through the real AnthropicClient.

Each model call of a turn meets a drawn sequence of wire faults before (maybe) an answer: 429 with and
without retry-after (0, 1, 2.5, 30, 3600, garbage, an HTTP date), a spend-limit 429 and a billing 400,
529, 500/502/503/504, 408, a refused request (401), read and connect timeouts (which take the time they
were given), connection resets, a 200 that is not JSON or not a message, unknown stop reasons. Time is a
fake clock that sleeps and timeouts advance, so deadlines are exact.

After each turn: it ended within its deadline, with an answer or a contract error (503 with a Retry-After
between 1 s and an hour, or 502) and nothing else; every request sent was one the API accepts; the history
is valid and audited; and once the breaker's cool-down has passed, the next message on the same
conversation gets an answer.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.errors import ModelRefused, ModelUnavailable
from support_agent.llm.anthropic import AnthropicClient
from support_agent.llm.base import LlmResponse
from support_agent.llm.breaker import CircuitBreaker
from support_agent.llm.retry import RetryPolicy
from support_agent.messages import Deadline, Usage
from tests.reliability.checks import MotoSnapshot, World, check_conversation, sdk_problems
from tests.reliability.conftest import CI, SLOW
from tests.reliability.figures import count
from tests.support.harness import Harness
from tests.support.transport import lenient_json, message_json

TURN_SECONDS = 27.0 - 1.5  # the handler's deadline: min(Lambda remaining, 27 s) minus the persist reserve
COOLDOWN = 30.0
_ids = itertools.count(1)


def _err(status: int, kind: str, message: str = "nope", headers: dict[str, str] | None = None) -> Any:
    return ("status", status, {"type": "error", "error": {"type": kind, "message": message}}, headers or {})


FAULTS: list[Any] = [
    _err(429, "rate_limit_error"),
    _err(429, "rate_limit_error", headers={"retry-after": "0"}),
    _err(429, "rate_limit_error", headers={"retry-after": "1"}),
    _err(429, "rate_limit_error", headers={"retry-after": "2.5"}),
    _err(429, "rate_limit_error", headers={"retry-after": "30"}),
    _err(429, "rate_limit_error", headers={"retry-after": "3600"}),
    _err(429, "rate_limit_error", headers={"retry-after": "soon"}),
    _err(429, "rate_limit_error", headers={"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"}),
    _err(429, "rate_limit_error", "You have reached your specified API usage limits (spend limit)."),
    _err(400, "billing_error", "Your credit balance is too low."),
    _err(529, "overloaded_error"),
    _err(500, "api_error"),
    _err(502, "api_error"),
    _err(503, "api_error"),
    _err(504, "api_error"),
    _err(408, "timeout_error"),
    _err(401, "authentication_error", "invalid x-api-key"),
    ("read_timeout",),
    ("connect_timeout",),
    ("reset",),
    ("refused",),
    ("raw", b"<html>502 Bad Gateway</html>"),
    ("raw", b'{"type": "message", "content": "not a list"}'),
    ("raw", b'{"id": "msg", "content": [], "stop_reason": null}'),
]
ANSWERS = ["tool", "answer", "banana_stop", "pause"]


@dataclass
class Wire:
    """The Messages API endpoint: plays back per-attempt steps; records and validates every request."""

    h: Harness
    steps: list[Any] = field(default_factory=list)
    requests: int = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        body = json.loads(request.content)
        assert sdk_problems(body) == [], sdk_problems(body)
        step = self.steps.pop(0) if self.steps else ("answer",)
        timeout = request.extensions.get("timeout", {})
        kind = step[0]
        if kind == "status":
            return lenient_json(step[1], step[2], step[3])
        if kind == "read_timeout":
            self.h.clock.advance(float(timeout.get("read") or 25))
            raise httpx.ReadTimeout("read timed out", request=request)
        if kind == "connect_timeout":
            self.h.clock.advance(float(timeout.get("connect") or 3))
            raise httpx.ConnectTimeout("connect timed out", request=request)
        if kind == "reset":
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
        if kind == "refused":
            raise httpx.ConnectError("[Errno 111] Connection refused")
        if kind == "raw":
            return httpx.Response(200, content=step[1], headers={"content-type": "application/json"})
        self.h.clock.advance(0.5)  # a real answer takes a moment
        last = body["messages"][-1]["content"]
        answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        if kind == "tool" and not answered and body.get("tool_choice") != {"type": "none"}:
            use = {
                "type": "tool_use",
                "id": f"toolu_llm{next(_ids):06d}",
                "name": "lookup_order",
                "input": {"order_id": 1042},
            }
            return lenient_json(200, message_json(LlmResponse("tool_use", [use], Usage(50, 10))))
        stop = {"banana_stop": "banana", "pause": "pause_turn"}.get(kind, "end_turn")
        text = [{"type": "text", "text": "Order 1042 was delivered."}]
        return lenient_json(200, message_json(LlmResponse(stop, text, Usage(50, 10))))


calls = st.lists(
    st.tuples(st.lists(st.sampled_from(FAULTS), max_size=5), st.sampled_from(ANSWERS)), min_size=1, max_size=3
)


def _client(h: Harness, wire: Wire) -> AnthropicClient:
    return AnthropicClient(
        api_key="sk-ant-test",
        model="claude-test",
        transport=httpx.MockTransport(wire),
        policy=RetryPolicy(
            max_retries=h.settings.llm_max_retries,
            breaker=CircuitBreaker(5, COOLDOWN, clock=h.clock),
            sleep=h.clock.advance,
        ),
    )


def _property(h: Harness) -> Any:
    wire = Wire(h)
    h.agent.llm = _client(h, wire)
    world = World.of_settings(h.ddb, h.settings)
    snapshot = MotoSnapshot()

    @given(plan=calls)
    def prop(plan: list[tuple[list[Any], str]]) -> None:
        snapshot.restore()
        h.clock.advance(COOLDOWN + 1)  # whatever the previous example did to the breaker is over
        wire.steps = [s for faults, answer in plan for s in (*faults, (answer,))]
        began = h.clock()
        cid = None
        try:
            result = h.agent.run_turn(
                _me(), 7, None, "Where is order 1042?", f"req-{next(_ids)}", Deadline.after(TURN_SECONDS, h.clock)
            )
            cid = result.conversation_id
            count("7-llm-faults", turns_answered=1, **{f"stop_{result.stop_reason}": 1})
        except ModelUnavailable as exc:
            assert exc.retry_after is not None and 1 <= exc.retry_after <= 3600, exc.retry_after
            count("7-llm-faults", turns_503=1)
        except ModelRefused:
            count("7-llm-faults", turns_502=1)
        elapsed = h.clock() - began
        assert elapsed <= TURN_SECONDS + 1e-6, f"the turn took {elapsed:.2f}s of a {TURN_SECONDS}s deadline"
        count("7-llm-faults", faults_served=sum(len(f) for f, _ in plan), http_requests=wire.requests)
        wire.requests = 0
        ids = world.conversation_ids()
        assert len(ids) <= 1
        cid = cid or (ids[0] if ids else None)
        if cid is not None:
            check_conversation(world, cid, h.agent.tools.specs)
        # Usable afterwards: once the cool-down is over the same conversation (or a new one) answers.
        h.clock.advance(COOLDOWN + 1)
        wire.steps = [("answer",)]
        again = h.agent.run_turn(_me(), 7, cid, "Any news?", f"req-{next(_ids)}", Deadline.after(TURN_SECONDS, h.clock))
        assert again.stop_reason == "end_turn"
        check_conversation(world, again.conversation_id, h.agent.tools.specs)
        wire.steps = []

    return prop


def _me() -> Any:
    from support_agent.auth import Principal

    return Principal("customer-7", "customer", 7)


def test_llm_faults_every_turn_ends_in_time_and_the_conversation_stays_usable(harness: Harness) -> None:
    settings(parent=CI)(_property(harness))()


@pytest.mark.slow
def test_llm_faults_long(harness: Harness) -> None:
    settings(parent=SLOW)(_property(harness))()


def test_breaker_opens_fails_fast_then_recovers(harness: Harness) -> None:
    """Five turns that exhaust their retries open the breaker; the sixth fails without a request; after the
    cool-down one trial request closes it again."""
    h = harness
    wire = Wire(h)
    h.agent.llm = _client(h, wire)

    def ask() -> Any:
        return h.agent.run_turn(_me(), 7, None, "hello", f"req-{next(_ids)}", Deadline.after(TURN_SECONDS, h.clock))

    for _ in range(5):
        wire.steps = [_err(529, "overloaded_error")] * (h.settings.llm_max_retries + 1)
        with pytest.raises(ModelUnavailable):
            ask()
    sent = wire.requests
    began = h.clock()
    with pytest.raises(ModelUnavailable) as fast:
        ask()
    assert wire.requests == sent and h.clock() == began, "an open breaker still called the API"
    assert fast.value.retry_after is not None and 1 <= fast.value.retry_after <= COOLDOWN
    h.clock.advance(COOLDOWN)
    wire.steps = [("answer",)]
    assert ask().stop_reason == "end_turn"
    wire.steps = [("answer",)]
    assert ask().stop_reason == "end_turn" and wire.requests == sent + 2
    count("7-llm-faults", breaker_cycles=1)
