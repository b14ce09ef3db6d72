"""The payment port's keys and types, the ledger-only adapter, the factory, the Stripe key and the wiring."""

from __future__ import annotations

import json
from typing import Any

import boto3
import httpx
import pydantic
import pytest

from support_agent import wiring
from support_agent.config import Settings, load_settings
from support_agent.errors import ServiceError
from support_agent.refunds.keys import attempt_key, split_attempt_key
from support_agent.refunds.provider.factory import LazyProvider, lazy_provider, payment_provider_from_settings
from support_agent.refunds.provider.none import LedgerOnly, ledger_refund_id
from support_agent.refunds.provider.port import (
    OutcomeUnknown,
    PaymentProvider,
    ProviderRefund,
    ProviderRefused,
    ProviderUnavailable,
    RefundAttempt,
    refund_metadata,
)
from support_agent.refunds.provider.stripe import StripeProvider
from support_agent.refunds.provider.stripe_key import stripe_key

PI = "pi_demo_1042"
APPROVAL = "apr_01JZ0000000000000000000000"

# ------------------------------------------------------------------ keys


def test_attempt_keys_round_trip() -> None:
    direct = "conv_01JZ:12:toolu_01AbC"
    assert attempt_key(direct, 3) == "conv_01JZ:12:toolu_01AbC#3"
    assert split_attempt_key(attempt_key(direct, 3)) == (direct, 3)
    assert split_attempt_key(f"{APPROVAL}#1") == (APPROVAL, 1)


@pytest.mark.parametrize(
    "key",
    ["", "apr_1", "apr_1#", "apr_1#0", "apr_1#-1", "apr_1#x", "#1", "a#b#1", "apr_1#\u0661", "x" * 254 + "#1"],
)
def test_what_is_not_an_attempt_key(key: str) -> None:
    with pytest.raises(ValueError):
        split_attempt_key(key)


def test_refund_metadata_is_derived_from_the_attempt_key() -> None:
    meta = refund_metadata(f"{APPROVAL}#2", {"approval_id": APPROVAL, "customer_id": 7})  # type: ignore[dict-item]
    assert meta == {"approval_id": APPROVAL, "customer_id": "7", "refund_key": APPROVAL, "attempt": "2"}
    assert refund_metadata(f"{APPROVAL}#2", {"refund_key": APPROVAL, "attempt": "2"})["attempt"] == "2"
    for bad in ({"refund_key": "apr_other"}, {"attempt": "1"}, {f"k{i}": "v" for i in range(49)}, {"k": "v" * 501}):
        with pytest.raises(ValueError):
            refund_metadata(f"{APPROVAL}#2", bad)


def test_a_provider_refund_is_frozen_and_strict() -> None:
    refund = ProviderRefund.model_validate(
        {"id": "re_1", "status": "canceled", "amount": 5, "currency": "usd", "payment_intent": None, "extra": 1}
    )
    assert (refund.payment_intent, refund.metadata, refund.alive, refund.refund_key) == ("", {}, False, "")
    with pytest.raises(pydantic.ValidationError):
        refund.status = "succeeded"  # type: ignore[misc]
    for bad in ({"amount": "5"}, {"amount": 5.5}, {"status": "refunded"}, {"id": ""}):
        with pytest.raises(pydantic.ValidationError):
            ProviderRefund.model_validate({"id": "re_1", "status": "pending", "amount": 5, "currency": "usd", **bad})


def test_the_errors_are_service_errors_with_what_a_caller_needs() -> None:
    refused = ProviderRefused("amount_too_large", "x" * 900, status=400)
    assert isinstance(refused, ServiceError) and refused.definitive and refused.status == 400
    assert len(refused.message) == 500
    assert ProviderRefused("<script>", "m").code == "unknown"  # only identifier-like codes travel on
    assert ProviderUnavailable("down").retry_after == 5
    assert OutcomeUnknown("timeout").reason == "timeout"
    assert {e.kind for e in (refused, ProviderUnavailable("x"), OutcomeUnknown("y"))} == {
        "payment_refused",
        "payment_unavailable",
        "payment_outcome_unknown",
    }


# ------------------------------------------------------------------ none: the ledger only


def test_the_ledger_only_refund_is_a_synthetic_success_stable_per_refund_key() -> None:
    none = LedgerOnly()
    first = none.refund(RefundAttempt(f"{APPROVAL}#1", PI, 18900, "USD", {"approval_id": APPROVAL}))
    again = none.refund(RefundAttempt(f"{APPROVAL}#2", PI, 18900, "USD", {"approval_id": APPROVAL}))
    assert first.model_dump() == {
        "id": ledger_refund_id(APPROVAL),
        "status": "succeeded",
        "amount": 18900,
        "currency": "usd",
        "payment_intent": PI,
        "metadata": {"approval_id": APPROVAL, "refund_key": APPROVAL, "attempt": "1"},
        "failure_reason": "",
        "created": 0,
    }
    assert again.id == first.id and first.id.startswith("ledger_")  # one refund, whatever the attempt
    assert none.refund(RefundAttempt("conv_1:3:toolu_1#1", PI, 100, "usd", {})).id != first.id


def test_the_ledger_only_adapter_knows_nothing_it_did_not_make_and_validates_as_stripe() -> None:
    none = LedgerOnly()
    assert none.find(APPROVAL, PI) is None
    assert none.list_for_intent(PI) == [] and none.list_created_since(0) == []  # nothing to reconcile with
    with pytest.raises(ProviderRefused) as caught:
        none.retrieve(ledger_refund_id(APPROVAL))
    assert caught.value.code == "resource_missing"
    with pytest.raises(ValueError):
        none.refund(RefundAttempt(f"{APPROVAL}#1", PI, 0, "usd", {}))
    with pytest.raises(ValueError):
        none.refund(RefundAttempt(APPROVAL, PI, 100, "usd", {}))  # a refund key is not an attempt key


# ------------------------------------------------------------------ settings and the factory


def test_settings_default_to_ledger_only_refunds() -> None:
    settings = load_settings({})
    assert (settings.payment_provider, settings.stripe_api_base) == ("none", "https://api.stripe.com")
    assert (settings.stripe_connect_timeout, settings.stripe_read_timeout, settings.stripe_max_retries) == (3, 10, 2)
    assert "sk_live" not in repr(load_settings({"STRIPE_API_KEY": "sk_live_secret"}))
    with pytest.raises(pydantic.ValidationError):
        load_settings({"PAYMENT_PROVIDER": "paypal"})


def test_the_factory_builds_the_configured_adapter() -> None:
    assert isinstance(payment_provider_from_settings(Settings()), LedgerOnly)
    settings = load_settings(
        {
            "PAYMENT_PROVIDER": "stripe",
            "STRIPE_API_BASE": "http://127.0.0.1:4600/",
            "STRIPE_API_KEY": "sk_test_1",
            "STRIPE_CONNECT_TIMEOUT": "1.5",
            "STRIPE_READ_TIMEOUT": "7",
            "STRIPE_MAX_RETRIES": "4",
        }
    )
    stripe = payment_provider_from_settings(settings)
    assert isinstance(stripe, StripeProvider)
    assert stripe.base_url == "http://127.0.0.1:4600"
    assert (stripe.policy.connect_timeout, stripe.policy.read_timeout, stripe.policy.max_retries) == (1.5, 7.0, 4)
    assert stripe._headers()["Authorization"] == "Bearer sk_test_1"


def test_a_lazy_provider_is_built_once_on_first_use() -> None:
    built: list[PaymentProvider] = []

    def build() -> PaymentProvider:
        built.append(LedgerOnly())
        return built[-1]

    lazy = LazyProvider("none", build)
    assert built == []
    lazy.refund(RefundAttempt(f"{APPROVAL}#1", PI, 1, "usd", {}))
    assert lazy.find(APPROVAL, PI) is None
    with pytest.raises(ProviderRefused):
        lazy.retrieve("re_1")
    assert len(built) == 1 and lazy.provider is built[0]
    assert lazy_provider(Settings()).name == "none"


# ------------------------------------------------------------------ the key from Secrets Manager


@pytest.mark.parametrize("secret", ["sk_test_plain", json.dumps({"api_key": "sk_test_plain"})])
def test_the_stripe_key_is_read_from_its_secret_on_first_use(aws: None, secret: str) -> None:
    sm = boto3.client("secretsmanager")
    arn = sm.create_secret(Name="stripe", SecretString=secret)["ARN"]
    settings = load_settings({"PAYMENT_PROVIDER": "stripe", "STRIPE_API_KEY_SECRET_ARN": arn})
    calls: list[int] = []

    def client() -> Any:
        calls.append(1)
        return sm

    key = stripe_key(settings, client)
    assert callable(key) and calls == []  # nothing read at build time
    assert key() == "sk_test_plain"
    assert stripe_key(load_settings({"STRIPE_API_KEY": "sk_env", "STRIPE_API_KEY_SECRET_ARN": arn})) == "sk_env"


def test_an_unreadable_secret_is_unavailable_and_sends_nothing(aws: None) -> None:
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:missing-AbCdEf"
    seen: list[httpx.Request] = []
    settings = load_settings({"PAYMENT_PROVIDER": "stripe", "STRIPE_API_KEY_SECRET_ARN": arn})
    stripe = StripeProvider.from_settings(
        settings, transport=httpx.MockTransport(lambda r: seen.append(r) or httpx.Response(500)), secrets_client=None
    )
    with pytest.raises(ProviderUnavailable, match="Stripe API key secret"):
        stripe.refund(RefundAttempt(f"{APPROVAL}#1", PI, 100, "usd", {}))
    assert seen == []


# ------------------------------------------------------------------ the wiring


def test_the_services_share_one_lazy_provider_that_uses_the_test_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYMENT_PROVIDER", "stripe")
    monkeypatch.setenv("STRIPE_API_KEY", "sk_test_wired")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    seen: list[httpx.Request] = []

    def stripe(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = {"id": "re_w", "status": "succeeded", "amount": 100, "currency": "usd", "payment_intent": PI}
        return httpx.Response(200, json=body)

    wiring.reset(payments_transport=httpx.MockTransport(stripe))
    payments = wiring.payments()
    assert isinstance(payments, LazyProvider) and payments._provider is None  # built on the first call only
    assert wiring.chat_services().payments is payments
    assert wiring.lead_services().payments is payments
    assert payments.refund(RefundAttempt(f"{APPROVAL}#1", PI, 100, "usd", {})).id == "re_w"
    assert [r.headers["authorization"] for r in seen] == ["Bearer sk_test_wired"]
    assert isinstance(payments.provider, StripeProvider)
