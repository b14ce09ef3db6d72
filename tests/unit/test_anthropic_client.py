"""AnthropicClient, CircuitBreaker and the factory, against httpx.MockTransport: no network, no sleeping.

Every request body the client sends is validated against the official SDK's request types.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pydantic
import pytest
from anthropic.types import Message as SdkMessage

from support_agent.config import Settings
from support_agent.contract import status_and_code
from support_agent.errors import ModelRefused, ModelUnavailable
from support_agent.llm.anthropic import AnthropicClient, build_body, encode_body, parse_response
from support_agent.llm.base import LlmRequest, LlmResponse
from support_agent.llm.breaker import CircuitBreaker
from support_agent.llm.factory import llm_client_from_settings
from support_agent.llm.retry import RetryPolicy
from support_agent.messages import Deadline
from tests.support.scripted import text, tool_use
from tests.support.sdk_judge import assert_sdk_valid
from tests.support.threads import run_together

API_KEY = "sk-ant-test-0123456789"
SYSTEM = "You are a support agent."
TOOLS: list[dict[str, Any]] = [
    {
        "name": "lookup_order",
        "description": "Look up one of the customer's orders.",
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "integer"}},
            "required": ["order_id"],
        },
    },
    {
        "name": "request_refund",
        "description": "Request a refund.",
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "integer"}, "amount_cents": {"type": "integer"}},
            "required": ["order_id", "amount_cents"],
        },
    },
]
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Where is order 1042?"},
    {"role": "assistant", "content": [text("Let me look."), tool_use("lookup_order", {"order_id": 1042}, "toolu_01")]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "DELIVERED"}]},
]

# -- fakes ---------------------------------------------------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


Step = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


class Script:
    """A MockTransport handler answering from a list, recording (and SDK-validating) each request."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert_sdk_valid(json.loads(request.content))
        with self.lock:
            self.requests.append(request)
            step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, Exception):
            raise step
        if isinstance(step, httpx.Response):
            return step
        return step(request)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


def ok(
    content: list[dict[str, Any]] | None = None,
    stop_reason: str = "end_turn",
    usage: dict[str, Any] | None = None,
) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content if content is not None else [{"type": "text", "text": "Hello."}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage or {"input_tokens": 10, "output_tokens": 5},
        },
    )


def err(status: int, err_type: str, message: str = "nope", headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status,
        json={"type": "error", "error": {"type": err_type, "message": message}},
        headers=headers,
    )


def make_client(
    script: Script,
    t: FakeTime | None = None,
    *,
    max_retries: int = 3,
    breaker: CircuitBreaker | None = None,
    random: Callable[[], float] = lambda: 0.5,
    read_timeout: float = 25.0,
) -> AnthropicClient:
    t = t or FakeTime()
    return AnthropicClient(
        api_key=API_KEY,
        model="claude-test",
        max_tokens=256,
        base_url="https://llm.example/",
        transport=httpx.MockTransport(script),
        policy=RetryPolicy(
            max_retries=max_retries,
            read_timeout=read_timeout,
            breaker=breaker or CircuitBreaker(5, 30.0, clock=t.clock),
            sleep=t.sleep,
            random=random,
        ),
    )


def call(client: AnthropicClient, deadline: Deadline | None = None, **kw: Any) -> LlmResponse:
    return client.create(SYSTEM, HISTORY, TOOLS, kw.get("tool_choice"), deadline=deadline)


# -- the request ---------------------------------------------------------------------------------


def test_url_and_headers() -> None:
    script = Script(ok())
    call(make_client(script))
    (req,) = script.requests
    assert req.method == "POST"
    assert str(req.url) == "https://llm.example/v1/messages"
    assert req.headers["x-api-key"] == API_KEY
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert req.headers["content-type"] == "application/json"


def test_anthropic_version_is_configurable() -> None:
    script = Script(ok())
    client = AnthropicClient(
        api_key=API_KEY, model="m", anthropic_version="2099-01-01", transport=httpx.MockTransport(script)
    )
    client.create(SYSTEM, HISTORY, TOOLS)
    assert script.requests[0].headers["anthropic-version"] == "2099-01-01"


def test_body_has_cache_breakpoints_tools_and_tool_choice() -> None:
    script = Script(ok())
    call(make_client(script), tool_choice={"type": "auto"})
    (body,) = script.bodies()
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 256
    assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    assert [t["name"] for t in body["tools"]] == ["lookup_order", "request_refund"]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["tool_choice"] == {"type": "auto"}
    assert body["messages"][0]["content"] == "Where is order 1042?"  # only the newest message is marked
    assert "cache_control" not in body["messages"][1]["content"][-1]
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert json.dumps(body).count("cache_control") == 3


def test_tool_choice_none_on_last_iteration_and_omitted_when_not_given() -> None:
    script = Script(ok())
    client = make_client(script)
    call(client, tool_choice={"type": "none"})
    call(client)
    first, second = script.bodies()
    assert first["tool_choice"] == {"type": "none"}
    assert "tool_choice" not in second


def test_string_content_of_newest_message_becomes_a_marked_text_block() -> None:
    script = Script(ok())
    make_client(script).create(SYSTEM, [{"role": "user", "content": "Hi"}], TOOLS)
    assert script.bodies()[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}
    ]


def test_inputs_are_never_mutated() -> None:
    history, tools, choice = copy.deepcopy(HISTORY), copy.deepcopy(TOOLS), {"type": "auto"}
    history.append({"role": "assistant", "content": [{"type": "text", "text": "ok"}]})
    history.append({"role": "user", "content": "and now?"})
    before = copy.deepcopy((history, tools, choice))
    script = Script(ok())
    make_client(script).create(SYSTEM, history, tools, choice)
    assert (history, tools, choice) == before
    assert script.bodies()[0]["messages"][-1]["content"][0]["cache_control"] == {"type": "ephemeral"}
    history.append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    history_before = copy.deepcopy(history)
    make_client(script).create(SYSTEM, history, tools)
    assert history == history_before
    assert script.bodies()[1]["messages"][-1]["content"][0]["cache_control"] == {"type": "ephemeral"}


def test_stray_cache_control_is_dropped_so_breakpoints_never_exceed_four() -> None:
    history = copy.deepcopy(HISTORY)
    for msg in history[1:]:
        for block in msg["content"]:
            block["cache_control"] = {"type": "ephemeral"}
    tools = [dict(t, cache_control={"type": "ephemeral"}) for t in TOOLS]
    body = build_body("m", 10, LlmRequest(SYSTEM, history, tools, None))
    assert json.dumps(body).count("cache_control") == 3
    assert_sdk_valid(body)


def test_marks_skip_thinking_and_empty_text_blocks() -> None:
    msg = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "partial"},
            {"type": "text", "text": ""},
        ],
    }
    body = build_body("m", 10, LlmRequest(SYSTEM, [{"role": "user", "content": "q"}, msg], [], None))
    assert body["messages"][-1]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in body["messages"][-1]["content"][1]
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    body = build_body(
        "m",
        10,
        LlmRequest(SYSTEM, [{"role": "assistant", "content": [{"type": "text", "text": "a"}, thinking]}], [], None),
    )
    assert "cache_control" not in body["messages"][-1]["content"][1]
    assert body["messages"][-1]["content"][0]["cache_control"] == {"type": "ephemeral"}


def test_no_tools_sends_neither_tools_nor_tool_choice() -> None:
    body = build_body("m", 10, LlmRequest(SYSTEM, [{"role": "user", "content": "q"}], [], {"type": "none"}))
    assert "tools" not in body and "tool_choice" not in body
    assert_sdk_valid(body)


def test_serialization_is_deterministic_and_compact() -> None:
    a = encode_body(build_body("m", 10, LlmRequest(SYSTEM, HISTORY, TOOLS, {"type": "auto"})))
    b = encode_body(
        build_body("m", 10, LlmRequest(SYSTEM, copy.deepcopy(HISTORY), copy.deepcopy(TOOLS), {"type": "auto"}))
    )
    assert a == b
    assert b", " not in a and b'": ' not in a


def test_per_attempt_timeout_never_outlives_the_deadline() -> None:
    t = FakeTime()
    script = Script(ok())
    make_client(script, t).create(SYSTEM, HISTORY, TOOLS, deadline=Deadline.after(4.0, t.clock))
    timeout = script.requests[0].extensions["timeout"]
    assert timeout["read"] == pytest.approx(4.0)
    assert timeout["connect"] == pytest.approx(3.0)
    script = Script(ok())
    make_client(script, t).create(SYSTEM, HISTORY, TOOLS)
    assert script.requests[0].extensions["timeout"]["read"] == pytest.approx(25.0)


# -- the SDK agrees ------------------------------------------------------------------------------


def test_sdk_validator_rejects_invalid_bodies() -> None:
    """Proof that `assert_sdk_valid` can fail, so its passing on every request means something."""
    good = build_body("m", 10, LlmRequest(SYSTEM, HISTORY, TOOLS, {"type": "auto"}))
    assert_sdk_valid(good)
    bogus_block = copy.deepcopy(good)
    bogus_block["messages"][-1]["content"][0]["type"] = "bogus"
    bogus_cache = copy.deepcopy(good)
    bogus_cache["system"][0]["cache_control"] = {"type": "forever"}
    extra_field = dict(good, temperature_x=1)
    bad_choice = dict(good, tool_choice={"type": "sometimes"})
    for body in (bogus_block, bogus_cache, extra_field, bad_choice):
        with pytest.raises((pydantic.ValidationError, AssertionError)):
            assert_sdk_valid(body)


def test_parser_and_sdk_agree_on_a_realistic_response() -> None:
    raw = {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [
            {"type": "text", "text": "Let me check that order."},
            {"type": "tool_use", "id": "toolu_01A", "name": "lookup_order", "input": {"order_id": 1042}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 2095,
            "output_tokens": 503,
            "cache_creation_input_tokens": 1800,
            "cache_read_input_tokens": 0,
            "service_tier": "standard",
        },
    }
    sdk = SdkMessage.model_validate(raw)
    ours = parse_response(raw)
    assert ours.stop_reason == sdk.stop_reason
    assert ours.model == sdk.model
    assert ours.content == [b.model_dump(exclude_none=True) for b in sdk.content]
    assert ours.usage.input_tokens == sdk.usage.input_tokens
    assert ours.usage.output_tokens == sdk.usage.output_tokens
    assert ours.usage.cache_creation_input_tokens == sdk.usage.cache_creation_input_tokens
    assert ours.usage.cache_read_input_tokens == sdk.usage.cache_read_input_tokens
    assert ours.tool_uses()[0]["input"] == {"order_id": 1042}


def test_usage_parsing_with_cache_tokens_and_missing_or_null_fields() -> None:
    usage = {
        "input_tokens": 12,
        "output_tokens": 34,
        "cache_creation_input_tokens": 56,
        "cache_read_input_tokens": 78,
    }
    r = call(make_client(Script(ok(usage=usage))))
    assert (r.usage.input_tokens, r.usage.output_tokens) == (12, 34)
    assert (r.usage.cache_creation_input_tokens, r.usage.cache_read_input_tokens) == (56, 78)
    assert r.usage.total == 180
    assert r.model == "claude-test" and r.text() == "Hello."
    r = call(make_client(Script(ok(usage={"input_tokens": 3, "cache_read_input_tokens": None}))))
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.cache_read_input_tokens) == (3, 0, 0)
    assert r.usage.cache_creation_input_tokens == 0


# -- retries -------------------------------------------------------------------------------------


def test_429_with_retry_after_then_success_honours_the_header() -> None:
    t = FakeTime()
    script = Script(err(429, "rate_limit_error", headers={"retry-after": "2"}), ok())
    response = call(make_client(script, t))
    assert response.text() == "Hello."
    assert t.sleeps == [2.0]
    assert len(script.requests) == 2
    assert response.retries == 1


@pytest.mark.parametrize("status", [529, 500, 502, 503, 504, 408])
def test_overload_and_server_errors_are_retried(status: int) -> None:
    t = FakeTime()
    kind = "overloaded_error" if status == 529 else "api_error"
    script = Script(err(status, kind), ok())
    client = make_client(script, t)
    assert call(client).stop_reason == "end_turn"
    assert t.sleeps == [0.25]  # full jitter: random() * min(cap, 0.5 * 2**0)
    assert len(script.requests) == 2


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ReadTimeout("read timed out"),
        httpx.ConnectTimeout("connect timed out"),
        httpx.ConnectError("connection refused"),
        httpx.RemoteProtocolError("server disconnected"),
    ],
)
def test_timeouts_and_connection_errors_are_retried(exc: Exception) -> None:
    t = FakeTime()
    script = Script(exc, ok())
    assert call(make_client(script, t)).text() == "Hello."
    assert len(script.requests) == 2 and len(t.sleeps) == 1


def test_backoff_is_exponential_with_full_jitter_and_capped() -> None:
    t = FakeTime()
    script = Script(*[err(503, "api_error")] * 7, ok())
    response = call(make_client(script, t, max_retries=7, random=lambda: 1.0))
    assert t.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert response.retries == 7


def test_malformed_200_body_is_retried_as_a_transient_fault() -> None:
    t = FakeTime()
    script = Script(
        httpx.Response(200, content=b"<html>bad gateway</html>"),
        httpx.Response(200, json={"type": "message", "content": []}),  # no stop_reason
        ok(),
    )
    assert call(make_client(script, t)).text() == "Hello."
    assert len(script.requests) == 3


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
    ],
)
def test_other_4xx_fail_at_once_with_model_error_without_leaking_the_key(status: int, kind: str) -> None:
    t = FakeTime()
    script = Script(err(status, kind, f"bad thing with key {API_KEY}"))
    with pytest.raises(ModelRefused) as info:
        call(make_client(script, t))
    assert len(script.requests) == 1 and t.sleeps == []
    assert API_KEY not in str(info.value) and API_KEY not in info.value.message
    assert str(status) in info.value.message and kind in info.value.message
    assert status_and_code(info.value)[0] == 502


@pytest.mark.parametrize(
    "response",
    [
        err(429, "rate_limit_error", "You have reached your specified API usage limits."),
        err(429, "rate_limit_error", "Monthly spend limit exceeded for this workspace."),
        err(400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API."),
        err(402, "billing_error", "Payment required."),
    ],
)
def test_spend_limit_is_not_retried(response: httpx.Response) -> None:
    t = FakeTime()
    script = Script(response, ok())
    with pytest.raises(ModelUnavailable) as info:
        call(make_client(script, t))
    assert len(script.requests) == 1 and t.sleeps == []
    assert info.value.retry_after == 3600 and status_and_code(info.value)[0] == 503


def test_retries_exhausted_raise_model_unavailable_with_retry_after() -> None:
    t = FakeTime()
    script = Script(err(529, "overloaded_error", headers={"retry-after": "1.5"}))
    with pytest.raises(ModelUnavailable) as info:
        call(make_client(script, t, max_retries=2))
    assert len(script.requests) == 3
    assert t.sleeps == [1.5, 1.5]
    assert info.value.retry_after == 2  # whole seconds, rounded up

    script = Script(httpx.ConnectError("down"))
    with pytest.raises(ModelUnavailable) as info:
        call(make_client(script, FakeTime(), max_retries=1))
    assert len(script.requests) == 2 and info.value.retry_after == 5


def test_huge_retry_after_gives_up_at_once_and_is_clamped() -> None:
    t = FakeTime()
    script = Script(err(429, "rate_limit_error", headers={"retry-after": "3600"}), ok())
    with pytest.raises(ModelUnavailable) as info:
        call(make_client(script, t))
    assert len(script.requests) == 1 and t.sleeps == []
    assert info.value.retry_after == 60


def test_retry_after_longer_than_the_deadline_fails_without_sleeping() -> None:
    t = FakeTime()
    script = Script(err(429, "rate_limit_error", headers={"retry-after": "10"}), ok())
    with pytest.raises(ModelUnavailable) as info:
        call(make_client(script, t), deadline=Deadline.after(5.0, t.clock))
    assert len(script.requests) == 1 and t.sleeps == []
    assert info.value.retry_after == 10


def test_slow_failures_stop_retrying_before_the_deadline() -> None:
    t = FakeTime()

    def slow_timeout(request: httpx.Request) -> httpx.Response:
        t.now += request.extensions["timeout"]["read"]  # the attempt used its whole read timeout
        raise httpx.ReadTimeout("slow")

    script = Script(slow_timeout)
    deadline = Deadline.after(27.0, t.clock)
    with pytest.raises(ModelUnavailable):
        call(make_client(script, t, read_timeout=10.0), deadline=deadline)
    assert t.now <= deadline.at
    assert len(script.requests) == 3  # 10 s + sleep + 10 s + sleep + the rest of the deadline
    assert [r.extensions["timeout"]["read"] for r in script.requests][:2] == [10.0, 10.0]
    assert script.requests[2].extensions["timeout"]["read"] < 10.0


def test_expired_deadline_makes_no_request() -> None:
    t = FakeTime()
    script = Script(ok())
    breaker = CircuitBreaker(1, 30.0, clock=t.clock)
    with pytest.raises(ModelUnavailable):
        call(make_client(script, t, breaker=breaker), deadline=Deadline.after(0.0, t.clock))
    assert script.requests == []
    assert breaker.state == "closed"  # nothing was learned about the provider


# -- the breaker ---------------------------------------------------------------------------------


def test_breaker_opens_fails_fast_then_half_open_success_closes() -> None:
    t = FakeTime()
    breaker = CircuitBreaker(failure_threshold=2, cooldown_seconds=30.0, clock=t.clock)
    script = Script(err(503, "api_error"), err(503, "api_error"), ok())
    client = make_client(script, t, max_retries=0, breaker=breaker)
    for _ in range(2):
        with pytest.raises(ModelUnavailable):
            call(client)
    assert breaker.state == "open" and len(script.requests) == 2

    t.now += 10
    with pytest.raises(ModelUnavailable) as info:
        call(client)
    assert len(script.requests) == 2  # failed fast: no HTTP request
    assert info.value.retry_after == 20

    t.now += 20
    assert breaker.state == "half_open"
    assert call(client).text() == "Hello."
    assert breaker.state == "closed" and len(script.requests) == 3


def test_breaker_half_open_failure_reopens() -> None:
    t = FakeTime()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_seconds=5.0, clock=t.clock)
    script = Script(err(529, "overloaded_error"))
    client = make_client(script, t, max_retries=0, breaker=breaker)
    with pytest.raises(ModelUnavailable):
        call(client)
    t.now += 5
    with pytest.raises(ModelUnavailable):
        call(client)  # the trial call
    assert len(script.requests) == 2
    assert breaker.state == "open"
    with pytest.raises(ModelUnavailable) as info:
        call(client)
    assert len(script.requests) == 2 and info.value.retry_after == 5


def test_breaker_counts_a_retry_sequence_once_and_ignores_model_errors() -> None:
    t = FakeTime()
    breaker = CircuitBreaker(failure_threshold=2, cooldown_seconds=30.0, clock=t.clock)
    script = Script(
        err(503, "api_error"), err(503, "api_error"), err(503, "api_error"), err(400, "invalid_request_error")
    )
    client = make_client(script, t, max_retries=2, breaker=breaker)
    with pytest.raises(ModelUnavailable):
        call(client)  # three attempts, one failure
    assert breaker.state == "closed"
    with pytest.raises(ModelRefused):
        call(client)  # the provider answered: the failure streak is reset
    script.steps = [err(503, "api_error")]
    with pytest.raises(ModelUnavailable):
        call(client)
    assert breaker.state == "closed"


def test_breaker_admits_exactly_one_concurrent_half_open_trial() -> None:
    t = FakeTime()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_seconds=1.0, clock=t.clock)
    breaker.record_failure()
    t.now += 1
    admitted: list[int] = []
    refused: list[int] = []
    barrier = threading.Barrier(16)

    def worker(i: int) -> None:
        barrier.wait()
        try:
            breaker.allow()
            admitted.append(i)
        except ModelUnavailable:
            refused.append(i)

    run_together([lambda i=i: worker(i) for i in range(16)], timeout=None)
    assert len(admitted) == 1 and len(refused) == 15
    breaker.record_success()
    assert breaker.state == "closed"


def test_concurrent_turns_share_one_client() -> None:
    t = FakeTime()
    script = Script(ok())
    client = make_client(script, t)
    results: list[LlmResponse] = []

    def turn() -> None:
        results.append(call(client))

    run_together([turn] * 8, timeout=None)
    assert len(results) == 8 and len(script.requests) == 8
    assert client.policy.breaker.state == "closed"


# -- the factory ---------------------------------------------------------------------------------


class FakeSecrets:
    def __init__(self, value: str | Exception) -> None:
        self.value = value
        self.calls = 0

    def get_secret_value(self, SecretId: str) -> dict[str, str]:
        self.calls += 1
        if isinstance(self.value, Exception):
            raise self.value
        return {"SecretString": self.value}


def _settings(**kw: Any) -> Settings:
    return Settings.model_validate({"MODEL_ID": "claude-test", "LLM_MAX_RETRIES": "0", **kw})


def test_factory_uses_the_key_from_settings() -> None:
    script = Script(ok())
    client = llm_client_from_settings(
        _settings(ANTHROPIC_API_KEY=API_KEY, ANTHROPIC_BASE_URL="https://proxy.example"),
        transport=httpx.MockTransport(script),
    )
    assert isinstance(client, AnthropicClient)
    client.create(SYSTEM, HISTORY, TOOLS)
    assert script.requests[0].headers["x-api-key"] == API_KEY
    assert str(script.requests[0].url) == "https://proxy.example/v1/messages"
    assert script.bodies()[0]["model"] == "claude-test"


@pytest.mark.parametrize(
    "secret", [API_KEY, json.dumps({"ANTHROPIC_API_KEY": API_KEY}), json.dumps({"api_key": API_KEY})]
)
def test_factory_fetches_the_secret_lazily_once(secret: str) -> None:
    secrets = FakeSecrets(secret)
    script = Script(ok())
    client = llm_client_from_settings(
        _settings(ANTHROPIC_API_KEY_SECRET_ARN="arn:aws:secretsmanager:us-east-1:1:secret:k"),
        transport=httpx.MockTransport(script),
        secrets_client=secrets,
    )
    assert secrets.calls == 0
    client.create(SYSTEM, HISTORY, TOOLS)
    client.create(SYSTEM, HISTORY, TOOLS)
    assert secrets.calls == 1
    assert all(r.headers["x-api-key"] == API_KEY for r in script.requests)


def test_factory_secret_failure_is_transient_and_not_cached() -> None:
    secrets = FakeSecrets(RuntimeError("throttled"))
    script = Script(ok())
    client = llm_client_from_settings(
        _settings(ANTHROPIC_API_KEY_SECRET_ARN="arn:aws:secretsmanager:us-east-1:1:secret:k"),
        transport=httpx.MockTransport(script),
        secrets_client=secrets,
    )
    with pytest.raises(ModelUnavailable):
        client.create(SYSTEM, HISTORY, TOOLS)
    secrets.value = API_KEY
    client.create(SYSTEM, HISTORY, TOOLS)
    assert secrets.calls == 2 and len(script.requests) == 1


def test_factory_without_a_key_fails_only_when_called() -> None:
    script = Script(ok())
    client = llm_client_from_settings(_settings(), transport=httpx.MockTransport(script))
    with pytest.raises(ModelRefused, match="not configured"):
        client.create(SYSTEM, HISTORY, TOOLS)
    assert script.requests == []


def test_factory_reads_the_secret_through_boto3(monkeypatch: pytest.MonkeyPatch) -> None:
    moto = pytest.importorskip("moto")
    import boto3

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with moto.mock_aws():
        arn = boto3.client("secretsmanager").create_secret(Name="anthropic", SecretString=API_KEY)["ARN"]
        script = Script(ok())
        client = llm_client_from_settings(
            _settings(ANTHROPIC_API_KEY_SECRET_ARN=arn), transport=httpx.MockTransport(script)
        )
        client.create(SYSTEM, HISTORY, TOOLS)
    assert script.requests[0].headers["x-api-key"] == API_KEY


@pytest.mark.parametrize(
    ("base_url", "verified"),
    [
        ("https://api.anthropic.com", True),
        ("http://127.0.0.1:8787", False),
        ("HTTPS://upper.example", True),
        ("Http://local", False),
    ],
)
def test_tls_verification_is_on_for_https_endpoints(
    base_url: str, verified: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CA bundle is loaded only where TLS happens; an https endpoint is never left unverified."""
    seen: list[Any] = []
    real = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: seen.append(kw.get("verify", True)) or real(**kw))
    AnthropicClient(api_key=API_KEY, model="claude-sonnet-4-5", base_url=base_url).close()
    assert seen == [verified]
