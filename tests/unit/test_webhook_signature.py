"""``Stripe-Signature`` verification (refunds/webhooks.py), checked against Stripe's own SDK as the reference.

Stripe's scheme: ``t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">``, one ``v1`` per signing secret
while a secret is being rolled. What the SDK accepts we accept (and what our simulated Stripe signs, the
SDK accepts); a wrong secret, a changed body, a stale or missing or malformed header are refused.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

import pytest
import stripe

from devstack.simulated_stripe.webhooks import sign as simulated_sign
from support_agent.contract import status_and_code
from support_agent.refunds import webhooks as webhook
from support_agent.refunds.webhooks import (
    BadSignature,
    WebhookSecretUnavailable,
    secrets_of,
    signature,
    verify_signature,
)

NOW = 1_780_000_000
SECRET = "whsec_test_current_0123456789"
OLD = "whsec_test_previous_9876543210"
BODY = json.dumps(
    {"id": "evt_1", "object": "event", "type": "refund.updated", "data": {"object": {"id": "re_1"}}}, indent=2
).encode()


def header(secret: str = SECRET, t: int = NOW, body: bytes = BODY) -> str:
    return f"t={t},v1={signature(body, secret, t)}"


def test_a_valid_signature_is_accepted_and_returns_its_timestamp() -> None:
    assert verify_signature(BODY, header(), [SECRET], NOW) == NOW


def test_the_sdk_and_our_simulated_stripe_agree_with_us() -> None:
    """Three implementations, one scheme: the SDK's header passes our check, ours pass the SDK's."""
    sdk_header = stripe.WebhookSignature.generate_signature_header(BODY.decode(), SECRET, timestamp=NOW)
    assert verify_signature(BODY, sdk_header, [SECRET], NOW) == NOW
    for ours in (header(), simulated_sign(BODY, SECRET, NOW)):
        assert stripe.WebhookSignature.verify_header(BODY, ours, SECRET) is True
        assert verify_signature(BODY, ours, [SECRET], NOW) == NOW
    assert simulated_sign(BODY, SECRET, NOW) == header()


@pytest.mark.parametrize(
    ("signed_with", "we_hold"),
    [
        ([OLD, SECRET], [SECRET]),  # Stripe rolling: both sign, we already hold only the new one
        ([OLD, SECRET], [OLD]),  # ... or still only the old one
        ([OLD], [OLD, SECRET]),  # we hold both (STRIPE_WEBHOOK_SECRET="old,new"), Stripe still signs with the old
        ([SECRET], [OLD, SECRET]),  # ... and after the roll, with the new
    ],
)
def test_rotated_secrets(signed_with: list[str], we_hold: list[str]) -> None:
    signed = simulated_sign(BODY, ",".join(signed_with), NOW)
    assert signed.count("v1=") == len(signed_with)
    assert verify_signature(BODY, signed, we_hold, NOW) == NOW


def test_secrets_are_comma_separated_in_the_setting() -> None:
    assert secrets_of(f" {OLD} , {SECRET},") == [OLD, SECRET]
    assert secrets_of("") == []


@pytest.mark.parametrize(
    ("case", "make", "message"),
    [
        ("wrong secret", lambda: (BODY, header("whsec_someone_else")), "no signature matches"),
        ("tampered body", lambda: (BODY.replace(b"re_1", b"re_2"), header()), "no signature matches"),
        ("body re-serialised", lambda: (json.dumps(json.loads(BODY)).encode(), header()), "no signature matches"),
        ("stale", lambda: (BODY, header(t=NOW - 301)), "tolerance"),
        ("from the future", lambda: (BODY, header(t=NOW + 301)), "tolerance"),
        ("missing", lambda: (BODY, None), "missing"),
        ("empty", lambda: (BODY, ""), "missing"),
        ("not key=value", lambda: (BODY, "garbage"), "malformed"),
        ("no timestamp", lambda: (BODY, f"v1={signature(BODY, SECRET, NOW)}"), "malformed"),
        ("two timestamps", lambda: (BODY, f"t={NOW},{header()}"), "malformed"),
        ("timestamp not a number", lambda: (BODY, f"t=now,v1={signature(BODY, SECRET, NOW)}"), "malformed"),
        ("no v1", lambda: (BODY, f"t={NOW}"), "no v1"),
        ("only a v0", lambda: (BODY, f"t={NOW},v0={signature(BODY, SECRET, NOW)}"), "no v1"),
        ("v1 of another timestamp", lambda: (BODY, f"t={NOW},v1={signature(BODY, SECRET, NOW - 1)}"), "no signature"),
    ],
)
def test_refused(case: str, make: Any, message: str) -> None:
    body, value = make()
    with pytest.raises(BadSignature, match=message) as refused:
        verify_signature(body, value, [SECRET], NOW)
    assert status_and_code(refused.value) == (400, "bad_request"), case


def test_the_tolerance_is_300_seconds_either_way() -> None:
    assert verify_signature(BODY, header(t=NOW - 300), [SECRET], NOW) == NOW - 300
    assert verify_signature(BODY, header(t=NOW + 300), [SECRET], NOW) == NOW + 300


def test_a_missing_secret_is_ours_to_fix_not_a_400() -> None:
    """No secret configured: the request may well be genuine, so not a 400 Stripe would give up on."""
    with pytest.raises(WebhookSecretUnavailable):
        verify_signature(BODY, header(), [], NOW)
    assert status_and_code(WebhookSecretUnavailable("x"))[0] == 500
    with pytest.raises(BadSignature):  # but an unsigned request is refused as such
        verify_signature(BODY, None, [], NOW)


def test_every_candidate_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(webhook.hmac, "compare_digest", spy)
    two = f"t={NOW},v1={'0' * 64},v1={signature(BODY, SECRET, NOW)}"
    assert verify_signature(BODY, two, [OLD, SECRET], NOW) == NOW
    assert len(compared) == 4  # 2 candidates x 2 secrets: no early exit on the first match
