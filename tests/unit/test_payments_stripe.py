"""The Stripe adapter against a scripted Stripe (httpx.MockTransport): every retry rule, the requests it
sends (byte-identical across retries and senders), find's pagination and matching, retrieve.

No test sleeps: the policy's ``sleep`` records the waits and its jitter is fixed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest

from support_agent.messages import Deadline
from support_agent.refunds.keys import attempt_key
from support_agent.refunds.provider.port import (
    OutcomeUnknown,
    ProviderRefund,
    ProviderRefused,
    ProviderUnavailable,
    RefundAttempt,
)
from support_agent.refunds.provider.stripe import STRIPE_VERSION, StripeProvider
from support_agent.refunds.provider.stripe_retry import StripePolicy

KEY = "sk_test_123"
PI = "pi_demo_1043"
REFUND_KEY = "conv_01JZ:7:toolu_01"
ATTEMPT = attempt_key(REFUND_KEY, 1)
META = {"conversation_id": "conv_01JZ", "customer_id": "7"}

Step = httpx.Response | type[Exception] | Callable[[httpx.Request], httpx.Response]


class ScriptedStripe:
    """Answers each request with the next step: a response, an httpx exception class to raise, or a callable."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        assert self.steps, f"unexpected request {request.method} {request.url}"
        step = self.steps.pop(0)
        if isinstance(step, type):
            raise step("scripted fault", request=request)  # type: ignore[call-arg]
        return step(request) if callable(step) and not isinstance(step, httpx.Response) else step

    @property
    def bodies(self) -> list[bytes]:
        return [r.content for r in self.requests]


def refund_json(
    id: str = "re_1", status: str = "succeeded", amount: int = 2000, key: str = REFUND_KEY, **meta: str
) -> dict[str, Any]:
    return {
        "id": id,
        "object": "refund",
        "amount": amount,
        "currency": "usd",
        "payment_intent": PI,
        "status": status,
        "metadata": {"refund_key": key, **meta},
        "created": 1_800_000_000,
    }


def ok(body: Any = None, **headers: str) -> httpx.Response:
    return httpx.Response(200, json=refund_json() if body is None else body, headers=headers)


def error(status: int, code: str = "", type_: str = "invalid_request_error", **headers: str) -> httpx.Response:
    body = {"error": {"type": type_, "message": f"scripted {status}", **({"code": code} if code else {})}}
    return httpx.Response(status, json=body, headers={k.replace("_", "-"): v for k, v in headers.items()})


class Waits(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def provider(script: ScriptedStripe, waits: Waits | None = None, **policy: Any) -> StripeProvider:
    return StripeProvider(
        KEY,
        base_url="https://stripe.test",
        policy=StripePolicy(sleep=waits if waits is not None else Waits(), random=lambda: 0.5, **policy),
        transport=httpx.MockTransport(script),
    )


def refund(p: StripeProvider, **kw: Any) -> ProviderRefund:
    return p.refund(RefundAttempt(ATTEMPT, PI, 2000, "USD", META), **kw)


# ------------------------------------------------------------------ the request


def test_a_refund_is_one_form_encoded_post_with_the_attempt_key() -> None:
    script = ScriptedStripe(ok())
    result = refund(provider(script))
    assert result == ProviderRefund(
        id="re_1",
        status="succeeded",
        amount=2000,
        currency="usd",
        payment_intent=PI,
        metadata={"refund_key": REFUND_KEY},
        created=1_800_000_000,
    )
    (request,) = script.requests
    assert (request.method, request.url.path) == ("POST", "/v1/refunds")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["idempotency-key"] == ATTEMPT
    assert request.headers["stripe-version"] == STRIPE_VERSION
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert dict(parse_qsl(request.content.decode())) == {
        "amount": "2000",
        "payment_intent": PI,
        "metadata[refund_key]": REFUND_KEY,
        "metadata[attempt]": "1",
        "metadata[conversation_id]": "conv_01JZ",
        "metadata[customer_id]": "7",
    }
    # Explicit timeouts on every attempt, not httpx's defaults.
    assert request.extensions["timeout"] == {"connect": 3.0, "read": 10.0, "write": 10.0, "pool": 3.0}


def test_the_body_of_an_attempt_is_the_same_bytes_whoever_builds_it() -> None:
    """A repair, a sweep and a replayed execution build the attempt from the row: same inputs, same bytes,
    whatever order the metadata arrives in (Stripe answers idempotency_error to any other body)."""
    first, second = ScriptedStripe(ok()), ScriptedStripe(ok())
    provider(first).refund(
        RefundAttempt(ATTEMPT, PI, 2000, "usd", {"customer_id": "7", "conversation_id": "conv_01JZ"})
    )
    provider(second).refund(
        RefundAttempt(ATTEMPT, PI, 2000, "usd", {"conversation_id": "conv_01JZ", "customer_id": "7"})
    )
    assert first.bodies == second.bodies
    assert first.bodies[0] == (
        b"amount=2000&metadata%5Battempt%5D=1&metadata%5Bconversation_id%5D=conv_01JZ"
        b"&metadata%5Bcustomer_id%5D=7&metadata%5Brefund_key%5D=conv_01JZ%3A7%3Atoolu_01&payment_intent=pi_demo_1043"
    )


@pytest.mark.parametrize(
    ("amount", "metadata"),
    [
        (20.0, META),  # a float is a caller's bug, never rounded
        (True, META),
        (0, META),
        (2000, {"refund_key": "another"}),  # would contradict the attempt key
        (2000, {"attempt": "2"}),
        (2000, {"bad[key]": "x"}),  # would forge another form field
    ],
)
def test_a_malformed_refund_is_refused_before_any_request(amount: Any, metadata: dict[str, str]) -> None:
    script = ScriptedStripe()
    with pytest.raises(ValueError):
        provider(script).refund(RefundAttempt(ATTEMPT, PI, amount, "usd", metadata))
    assert script.requests == []


def test_no_key_configured_sends_nothing() -> None:
    script = ScriptedStripe()
    p = StripeProvider("", policy=StripePolicy(sleep=Waits()), transport=httpx.MockTransport(script))
    with pytest.raises(ProviderUnavailable, match="no Stripe API key"):
        refund(p)
    assert script.requests == []


# ------------------------------------------------------------------ retried with the same key


@pytest.mark.parametrize(
    "fault",
    [
        httpx.ReadTimeout,  # sent, no answer in time
        httpx.RemoteProtocolError,  # the connection reset before an answer
        httpx.ReadError,
        httpx.ConnectError,  # never reached Stripe
        httpx.ConnectTimeout,
        error(409, "idempotency_key_in_use"),  # a request with the key is in flight
        error(429, "rate_limit"),  # not saved by Stripe
        error(500, type_="api_error"),  # not replayed: repeating may still succeed
        error(503, type_="api_error"),
    ],
    ids=lambda f: f.__name__ if isinstance(f, type) else str(f.status_code),
)
def test_transient_faults_are_retried_with_the_same_key_and_bytes(fault: Step) -> None:
    waits = Waits()
    script = ScriptedStripe(fault, ok())
    assert refund(provider(script, waits)).id == "re_1"
    assert len(script.requests) == 2
    assert {r.headers["idempotency-key"] for r in script.requests} == {ATTEMPT}
    assert script.bodies[0] == script.bodies[1]
    assert waits == [0.25]  # full jitter: random (0.5) * base (0.5) * 2**0


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [
        (httpx.ReadTimeout, OutcomeUnknown),  # may have been executed
        (httpx.RemoteProtocolError, OutcomeUnknown),
        (error(409, "idempotency_key_in_use"), OutcomeUnknown),  # the request in flight may refund
        (error(500, type_="api_error"), OutcomeUnknown),
        (httpx.ConnectError, ProviderUnavailable),  # never reached Stripe: nothing happened
        (error(429, "rate_limit"), ProviderUnavailable),  # not executed, not saved
    ],
    ids=lambda f: f.__name__ if isinstance(f, type) else str(getattr(f, "status_code", "")),
)
def test_out_of_retries_the_outcome_says_whether_anything_may_have_happened(fault: Step, outcome: type) -> None:
    waits = Waits()
    script = ScriptedStripe(fault, fault, fault)
    with pytest.raises(outcome):
        refund(provider(script, waits, max_retries=2))
    assert len(script.requests) == 3  # bounded
    assert waits == [0.25, 0.5]  # exponential backoff between them
    assert len(set(script.bodies)) == 1


def test_a_write_that_may_have_executed_once_stays_unknown() -> None:
    """429s after a timeout: the timed-out attempt may have refunded, so the call is not "unavailable"."""
    script = ScriptedStripe(error(429), httpx.ReadTimeout, error(429))
    with pytest.raises(OutcomeUnknown):
        refund(provider(script))


def test_stripe_should_retry_true_repeats_even_a_4xx() -> None:
    script = ScriptedStripe(error(400, "lock_timeout", stripe_should_retry="true"), ok())
    assert refund(provider(script)).id == "re_1"
    assert len(script.requests) == 2


@pytest.mark.parametrize(
    ("status", "outcome", "definitive"),
    [
        (500, ProviderRefused, False),  # Stripe: repeating would be a no-op (it would replay): look it up
        (409, ProviderRefused, False),
        (429, ProviderUnavailable, None),  # not executed
    ],
)
def test_stripe_should_retry_false_stops(status: int, outcome: type, definitive: bool | None) -> None:
    script = ScriptedStripe(error(status, type_="api_error", stripe_should_retry="false"))
    with pytest.raises(outcome) as caught:
        refund(provider(script))
    assert len(script.requests) == 1
    if definitive is not None:
        assert caught.value.definitive is definitive


def test_retry_after_is_honoured_and_a_long_one_ends_the_call() -> None:
    waits = Waits()
    script = ScriptedStripe(error(429, retry_after="2"), ok())
    refund(provider(script, waits))
    assert waits == [2.0]
    script = ScriptedStripe(error(429, retry_after="60"))
    with pytest.raises(ProviderUnavailable) as caught:
        refund(provider(script, waits))
    assert len(script.requests) == 1 and caught.value.retry_after == 60


# ------------------------------------------------------------------ final answers: look it up


def test_a_replayed_500_is_not_retried_but_looked_up() -> None:
    """Stripe saved a 500 for this key: every repeat replays it. Whether a refund exists is for `find`."""
    script = ScriptedStripe(error(500, type_="api_error", idempotent_replayed="true"))
    with pytest.raises(ProviderRefused) as caught:
        refund(provider(script))
    assert len(script.requests) == 1
    assert (caught.value.code, caught.value.status, caught.value.definitive) == ("api_error", 500, False)


@pytest.mark.parametrize(
    ("status", "code", "type_", "definitive"),
    [
        (400, "amount_too_large", "invalid_request_error", True),
        (400, "charge_already_refunded", "invalid_request_error", True),
        (402, "", "card_error", True),  # no code: the error type stands in
        (404, "resource_missing", "invalid_request_error", True),
        (400, "idempotency_error", "idempotency_error", False),  # the key's first request differed
    ],
)
def test_a_refusal_is_final_and_carries_stripes_code(status: int, code: str, type_: str, definitive: bool) -> None:
    script = ScriptedStripe(error(status, code, type_))
    with pytest.raises(ProviderRefused) as caught:
        refund(provider(script))
    assert len(script.requests) == 1
    assert (caught.value.code, caught.value.status) == (code or type_, status)
    assert caught.value.definitive is definitive
    assert caught.value.message == f"scripted {status}"


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_are_unavailable_not_a_refusal(status: int) -> None:
    """Nothing was executed and retrying won't help; "refused" would let a caller conclude "no refund"."""
    script = ScriptedStripe(error(status))
    with pytest.raises(ProviderUnavailable):
        refund(provider(script))
    assert len(script.requests) == 1


def test_an_unreadable_200_is_an_unknown_outcome_not_retried() -> None:
    script = ScriptedStripe(httpx.Response(200, content=b"<html>gateway</html>"))
    with pytest.raises(OutcomeUnknown):
        refund(provider(script))
    script = ScriptedStripe(ok({"id": "re_1", "status": "mystery"}))
    with pytest.raises(OutcomeUnknown):
        refund(provider(script))
    assert len(script.requests) == 1


def test_an_error_body_that_is_not_stripes_still_classifies() -> None:
    script = ScriptedStripe(httpx.Response(400, content=b"bad gateway page"))
    with pytest.raises(ProviderRefused) as caught:
        refund(provider(script))
    assert caught.value.code == "http_400"


# ------------------------------------------------------------------ the caller's deadline


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_no_attempt_after_the_deadline() -> None:
    clock = Clock()
    script = ScriptedStripe()
    with pytest.raises(ProviderUnavailable, match="deadline"):
        refund(provider(script), deadline=Deadline(clock.t - 1, clock))
    assert script.requests == []


def test_no_wait_crosses_the_deadline_and_attempts_are_cut_to_it() -> None:
    clock = Clock()
    waits = Waits()
    script = ScriptedStripe(httpx.ReadTimeout, ok())
    with pytest.raises(OutcomeUnknown, match="no time left"):
        refund(provider(script, waits), deadline=Deadline(clock.t + 1.2, clock))  # 0.25 wait + 1.0 margin > 1.2
    assert waits == [] and len(script.requests) == 1
    assert script.requests[0].extensions["timeout"]["read"] == pytest.approx(1.2)
    assert script.requests[0].extensions["timeout"]["connect"] == pytest.approx(1.2)


# ------------------------------------------------------------------ find and retrieve


def listing(refunds: list[dict[str, Any]], has_more: bool) -> httpx.Response:
    return httpx.Response(200, json={"object": "list", "url": "/v1/refunds", "data": refunds, "has_more": has_more})


def test_find_pages_through_the_intents_refunds_and_matches_the_refund_key() -> None:
    script = ScriptedStripe(
        listing([refund_json("re_9", key="other"), refund_json("re_8", key="other")], has_more=True),
        listing([refund_json("re_7", status="failed"), refund_json("re_6", status="pending")], has_more=False),
    )
    found = provider(script).find(REFUND_KEY, PI)
    assert found is not None and (found.id, found.status) == ("re_6", "pending")
    first, second = script.requests
    assert all((r.method, r.url.path) == ("GET", "/v1/refunds") for r in script.requests)
    assert dict(first.url.params) == {"limit": "100", "payment_intent": PI}
    assert dict(second.url.params) == {"limit": "100", "payment_intent": PI, "starting_after": "re_8"}
    assert "idempotency-key" not in first.headers
    assert first.headers["authorization"] == f"Bearer {KEY}" and first.headers["stripe-version"] == STRIPE_VERSION


@pytest.mark.parametrize("dead", ["failed", "canceled"])
def test_find_ignores_failed_and_canceled_refunds(dead: str) -> None:
    script = ScriptedStripe(listing([refund_json("re_1", status=dead), refund_json("re_2", key="x")], False))
    assert provider(script).find(REFUND_KEY, PI) is None


def test_find_returns_the_newest_of_duplicates_and_logs_them(caplog: pytest.LogCaptureFixture) -> None:
    script = ScriptedStripe(listing([refund_json("re_2"), refund_json("re_1")], False))
    found = provider(script).find(REFUND_KEY, PI)
    assert found is not None and found.id == "re_2"
    assert "duplicate refunds" in caplog.text and "re_1" in caplog.text


def test_find_refuses_an_endless_or_unreadable_list() -> None:
    with pytest.raises(ProviderUnavailable, match="empty page"):
        provider(ScriptedStripe(listing([], True))).find(REFUND_KEY, PI)
    with pytest.raises(ProviderUnavailable, match="unreadable"):
        provider(ScriptedStripe(ok({"data": "nope"}))).find(REFUND_KEY, PI)


def test_reads_are_retried_and_end_unavailable_never_unknown() -> None:
    """A GET changes nothing: out of retries it is "unavailable", whatever the fault."""
    script = ScriptedStripe(httpx.ReadTimeout, error(500, type_="api_error"), httpx.ReadTimeout)
    with pytest.raises(ProviderUnavailable):
        provider(script).find(REFUND_KEY, PI)
    assert len(script.requests) == 3
    script = ScriptedStripe(error(500, type_="api_error", stripe_should_retry="false"))
    with pytest.raises(ProviderUnavailable):
        provider(script).retrieve("re_1")


def test_retrieve_reads_one_refund_and_quotes_its_id() -> None:
    script = ScriptedStripe(ok(refund_json("re_5", status="requires_action")), error(404, "resource_missing"))
    p = provider(script)
    assert p.retrieve("re_5").status == "requires_action"
    with pytest.raises(ProviderRefused) as caught:
        p.retrieve("re_/../charges")
    assert caught.value.code == "resource_missing"
    assert [r.url.raw_path for r in script.requests] == [b"/v1/refunds/re_5", b"/v1/refunds/re_%2F..%2Fcharges"]
    assert all(r.method == "GET" for r in script.requests)


def test_the_log_never_carries_the_key(caplog: pytest.LogCaptureFixture) -> None:
    script = ScriptedStripe(error(500, type_="api_error"), httpx.ReadTimeout, error(409))
    with pytest.raises(OutcomeUnknown):
        refund(provider(script))
    assert caplog.records and KEY not in caplog.text
    assert KEY not in json.dumps([str(r.msg) for r in caplog.records])
