"""One conformance suite, run unchanged against the three adapters: Anthropic, OpenAI-compatible, Bedrock.

Each adapter talks to its provider's wire format — httpx.MockTransport for the two HTTP APIs, a
botocore Stubber behind a real `bedrock-runtime` client for Bedrock — and the real loop drives it on
moto tables. Tests script *canonical* replies (content blocks, stop reason, usage); each `Wire`
encodes them in its provider's own format without `llm/translate.py`, which is under test (the
Messages API's with the tests' one converter, `tests.support.transport.message_json`; OpenAI's by
hand) and reads the requests back in that format. Every request is also judged from outside: the
`anthropic` SDK's request types (Anthropic, and Bedrock's body) or the simulated server's OpenAI
validator (`devstack.simulated_model.validate_openai`).

Malformed arguments: an OpenAI tool call whose `arguments` are not JSON (or a Messages API gateway
that sends `input` as a string) must end as an `is_error` tool result and the turn go on.
"""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import boto3
import httpx
import pydantic
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.response import StreamingBody
from botocore.stub import Stubber
from moto import mock_aws

from devstack.seed import seed
from devstack.simulated_model import validate_openai
from support_agent.agent import history as hist
from support_agent.agent.untrusted import unfence
from support_agent.config import Settings
from support_agent.contract import status_and_code
from support_agent.errors import ModelRefused, ModelUnavailable
from support_agent.llm.anthropic import AnthropicClient
from support_agent.llm.base import LlmClient, LlmResponse
from support_agent.llm.bedrock import BedrockClient
from support_agent.llm.breaker import CircuitBreaker
from support_agent.llm.factory import ADAPTERS, llm_client_from_settings
from support_agent.llm.openai import OpenAIClient
from support_agent.llm.retry import RetryingClient, RetryPolicy
from support_agent.llm.translate import INVALID_ARGUMENTS
from support_agent.messages import Block, Deadline, Usage
from tests.support.harness import FakeClock, Harness, make_harness
from tests.support.sdk_judge import assert_sdk_valid
from tests.support.transport import message_json

MODEL = "claude-test"
BEDROCK_PROFILE = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-test-v1:0"
SYSTEM = "You are a support agent."
TOOLS: list[dict[str, Any]] = [
    {
        "name": "lookup_order",
        "description": "Look up one of the customer's orders.",
        "input_schema": {"type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]},
    }
]
HISTORY: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Where is order 1042?"}]}]
PROVIDERS = ("anthropic", "openai", "bedrock")

# -- canonical script steps ----------------------------------------------------------------------


@dataclass
class Reply:
    content: list[Block]
    stop: str = "end_turn"  # canonical; `native` overrides with the provider's own value
    usage: Usage = field(default_factory=lambda: Usage(100, 20))
    native: str | None = None


@dataclass
class Fault:
    kind: str  # throttled | unavailable | connection | malformed | invalid | quota
    retry_after: float | None = None


Step = Reply | Fault
_ids = iter(range(1, 1_000_000))


def use(name: str, input: Any, raw: str | None = None) -> Block:
    """A tool call; `raw` is what a broken model sends instead of valid JSON arguments."""
    block: Block = {"type": "tool_use", "id": f"toolu_{next(_ids):05d}", "name": name, "input": input}
    if raw is not None:
        block["raw_arguments"] = raw
    return block


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def tools(*uses: Block, usage: Usage | None = None) -> Reply:
    return Reply([text("Let me check."), *uses], "tool_use", usage or Usage(100, 20))


def answer(value: str, usage: Usage | None = None) -> Reply:
    return Reply([text(value)], "end_turn", usage or Usage(100, 20))


# -- the wires ----------------------------------------------------------------------------------------


class Wire:
    """A provider endpoint answering from `steps`, recording each request body it was sent."""

    name = ""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.requests: list[dict[str, Any]] = []
        self.sleeps: list[float] = []
        self.read_timeouts: list[float] = []  # per HTTP attempt
        self.lock = threading.Lock()

    def next_step(self, body: dict[str, Any]) -> Step:
        with self.lock:
            self.requests.append(body)
            assert self.steps, f"{self.name}: the script ran out of steps"
            return self.steps.pop(0)

    def client(self, clock: FakeClock, max_retries: int = 3) -> LlmClient:
        raise NotImplementedError

    def policy(self, clock: FakeClock, max_retries: int) -> RetryPolicy:
        """Every adapter's retry policy here: fake time, recorded sleeps, jitter fixed at half."""

        def sleep(seconds: float) -> None:
            self.sleeps.append(seconds)
            clock.advance(seconds)

        return RetryPolicy(
            max_retries=max_retries, breaker=CircuitBreaker(100, 30.0, clock=clock), sleep=sleep, random=lambda: 0.5
        )

    # Reading a request in the provider's own format.
    def tool_choice(self, body: dict[str, Any]) -> Any:
        return body.get("tool_choice")

    def banned(self, body: dict[str, Any]) -> bool:
        return bool(body.get("tool_choice") == {"type": "none"})

    def offered(self, body: dict[str, Any]) -> list[str]:
        return [t["name"] for t in body.get("tools", [])]

    def results(self, body: dict[str, Any]) -> list[tuple[str, str, bool]]:
        """(tool call id, content, is_error) of the newest tool results."""
        last = body["messages"][-1]["content"]
        return [(b["tool_use_id"], b["content"], bool(b.get("is_error"))) for b in last if b["type"] == "tool_result"]

    def calls(self, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
        """(id, name, input) of every tool call in the history sent."""
        return [
            (b["id"], b["name"], b["input"])
            for m in body["messages"]
            if m["role"] == "assistant"
            for b in m["content"]
            if b["type"] == "tool_use"
        ]


def _messages_api_json(step: Reply) -> dict[str, Any]:
    content = []
    for block in step.content:
        block = dict(block)
        raw = block.pop("raw_arguments", None)
        if raw is not None:
            block["input"] = raw  # a broken gateway: the arguments as a string
        content.append(block)
    return message_json(LlmResponse(step.native or step.stop, content, step.usage), MODEL, "msg_conformance")


def _strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_control(v) for v in value]
    return value


class HttpWire(Wire):
    """A provider over HTTP, behind the adapter's own httpx.MockTransport: a reply is a 200 with the provider's
    JSON, a fault its own answer (a dropped connection raised)."""

    adapter: Callable[..., LlmClient]  # the client class, built with the provider's ``api_key`` and ``base_url``
    api_key = ""
    base_url = ""

    def client(self, clock: FakeClock, max_retries: int = 3) -> LlmClient:
        return self.adapter(
            api_key=self.api_key,
            model=MODEL,
            base_url=self.base_url,
            transport=httpx.MockTransport(self.handle),
            policy=self.policy(clock, max_retries),
        )

    def handle(self, request: httpx.Request) -> httpx.Response:
        raise NotImplementedError

    def answer(self, request: httpx.Request, scripted: dict[str, Any]) -> httpx.Response:
        """The next step's answer to ``request``; ``scripted``: the body as the script records it."""
        self.read_timeouts.append(request.extensions["timeout"]["read"])
        step = self.next_step(scripted)
        if isinstance(step, Reply):
            return httpx.Response(200, json=self.reply_json(step))
        if step.kind == "connection":
            raise httpx.ConnectError("connection refused")
        if step.kind == "malformed":
            return self.malformed()
        return self.error(step)

    def reply_json(self, step: Reply) -> dict[str, Any]:
        raise NotImplementedError

    def malformed(self) -> httpx.Response:
        raise NotImplementedError

    def error(self, step: Fault) -> httpx.Response:
        raise NotImplementedError


class AnthropicWire(HttpWire):
    name = "anthropic"
    adapter, api_key, base_url = AnthropicClient, "sk-ant-test", "https://anthropic.test"

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert_sdk_valid(body)
        assert request.headers["x-api-key"] == "sk-ant-test"
        return self.answer(request, _strip_cache_control(body))

    def reply_json(self, step: Reply) -> dict[str, Any]:
        return _messages_api_json(step)

    def malformed(self) -> httpx.Response:
        return httpx.Response(200, content=b"<html>502 bad gateway</html>")

    def error(self, step: Fault) -> httpx.Response:
        status, kind, message = {
            "throttled": (429, "rate_limit_error", "slow down"),
            "unavailable": (529, "overloaded_error", "overloaded"),
            "invalid": (400, "invalid_request_error", "messages: bad"),
            "quota": (400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API."),
        }[step.kind]
        headers = {"retry-after": str(step.retry_after)} if step.retry_after is not None else {}
        return httpx.Response(
            status, json={"type": "error", "error": {"type": kind, "message": message}}, headers=headers
        )


OPENAI_FINISH = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length", "refusal": "content_filter"}


class OpenAIWire(HttpWire):
    name = "openai"
    adapter, api_key, base_url = OpenAIClient, "sk-openai-test", "https://gateway.test/v1/"

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert str(request.url) == "https://gateway.test/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer sk-openai-test"
        body = json.loads(request.content)
        validate_openai(body)
        return self.answer(request, body)

    def reply_json(self, step: Reply) -> dict[str, Any]:
        return self.completion(step)

    def malformed(self) -> httpx.Response:
        return httpx.Response(200, json={"object": "chat.completion", "choices": []})

    def error(self, step: Fault) -> httpx.Response:
        status, kind, code, message = {
            "throttled": (429, "requests", "rate_limit_exceeded", "Rate limit reached for requests"),
            "unavailable": (503, "server_error", None, "The server is overloaded"),
            "invalid": (400, "invalid_request_error", None, "Invalid 'messages[1]'"),
            "quota": (429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota."),
        }[step.kind]
        headers = {"retry-after-ms": str(int(step.retry_after * 1000))} if step.retry_after is not None else {}
        error = {"message": message, "type": kind, "param": None, "code": code}
        return httpx.Response(status, json={"error": error}, headers=headers)

    @staticmethod
    def completion(step: Reply) -> dict[str, Any]:
        texts = [b["text"] for b in step.content if b["type"] == "text"]
        calls = [
            {
                "id": b["id"].replace("toolu_", "call_"),
                "type": "function",
                "function": {"name": b["name"], "arguments": b.get("raw_arguments", json.dumps(b["input"]))},
            }
            for b in step.content
            if b["type"] == "tool_use"
        ]
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None, "refusal": None}
        if calls:
            message["tool_calls"] = calls
        u = step.usage
        return {
            "id": "chatcmpl-conformance",
            "object": "chat.completion",
            "created": 1_800_000_000,
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": step.native or OPENAI_FINISH[step.stop]}],
            "usage": {
                # prompt_tokens includes the cached part; OpenAI has no cache-write count.
                "prompt_tokens": u.input_tokens + u.cache_read_input_tokens,
                "completion_tokens": u.output_tokens,
                "total_tokens": u.input_tokens + u.cache_read_input_tokens + u.output_tokens,
                "prompt_tokens_details": {"cached_tokens": u.cache_read_input_tokens},
            },
        }

    def tool_choice(self, body: dict[str, Any]) -> Any:
        return body.get("tool_choice")

    def banned(self, body: dict[str, Any]) -> bool:
        return body.get("tool_choice") == "none"

    def offered(self, body: dict[str, Any]) -> list[str]:
        return [t["function"]["name"] for t in body.get("tools", [])]

    def results(self, body: dict[str, Any]) -> list[tuple[str, str, bool]]:
        out = []
        for m in reversed(body["messages"]):
            if m["role"] == "assistant":
                break
            if m["role"] == "tool":
                error = m["content"].startswith("ERROR: ")
                out.append((m["tool_call_id"], m["content"].removeprefix("ERROR: "), error))
        return out[::-1]

    def calls(self, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
        return [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for m in body["messages"]
            if m["role"] == "assistant"
            for c in m.get("tool_calls") or []
        ]


class _StubbedRuntime:
    """A real `bedrock-runtime` client behind a botocore Stubber, answering the wire's steps.

    Each step is stubbed right before the call it answers (botocore validates the request against
    the service model and the expected parameters); connection faults are raised as botocore does.
    """

    def __init__(self, wire: BedrockWire, real: Any, stubber: Stubber) -> None:
        self.wire = wire
        self.real = real
        self.stubber = stubber

    def invoke_model(self, **params: Any) -> Any:
        body = json.loads(params["body"])
        assert body.pop("anthropic_version") == "bedrock-2023-05-31"
        assert "model" not in body
        assert_sdk_valid({"model": MODEL, **body})
        step = self.wire.next_step(_strip_cache_control(body))
        expected = {"modelId": BEDROCK_PROFILE, "body": params["body"], "contentType": "application/json"}
        expected["accept"] = "application/json"
        if isinstance(step, Reply):
            data = json.dumps(_messages_api_json(step)).encode()
            response = {"body": StreamingBody(io.BytesIO(data), len(data)), "contentType": "application/json"}
            self.stubber.add_response("invoke_model", response, expected)
        elif step.kind == "connection":
            raise EndpointConnectionError(endpoint_url="https://bedrock-runtime.us-east-1.amazonaws.com")
        elif step.kind == "malformed":
            data = b"<html>bad gateway</html>"
            response = {"body": StreamingBody(io.BytesIO(data), len(data)), "contentType": "text/html"}
            self.stubber.add_response("invoke_model", response, expected)
        else:
            code, status = {
                "throttled": ("ThrottlingException", 429),
                "unavailable": ("ServiceUnavailableException", 503),
                "invalid": ("ValidationException", 400),
                "quota": ("ServiceQuotaExceededException", 400),
            }[step.kind]
            self.stubber.add_client_error(
                "invoke_model", code, f"{code} (conformance)", status, expected_params=expected
            )
        return self.real.invoke_model(**params)


class BedrockWire(Wire):
    name = "bedrock"
    # One real client and its Stubber per module: building a client is the slow part.
    runtime: Any = None
    stubber: Stubber | None = None

    def client(self, clock: FakeClock, max_retries: int = 3) -> LlmClient:
        return BedrockClient(
            model_id=BEDROCK_PROFILE,
            max_tokens=1024,
            client=_StubbedRuntime(self, BedrockWire.runtime, BedrockWire.stubber),
            policy=self.policy(clock, max_retries),
        )


WIRES: dict[str, type[Wire]] = {"anthropic": AnthropicWire, "openai": OpenAIWire, "bedrock": BedrockWire}

# -- fixtures -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared() -> Iterator[Harness]:
    """One moto account for the module (tables once); each test re-seeds the orders it may touch."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }.items():
            mp.setenv(key, value)
        mp.delenv("AWS_ENDPOINT_URL", raising=False)
        _bedrock_runtime()
        with mock_aws():
            yield make_harness(MAX_ITERATIONS="4")


@pytest.fixture(params=PROVIDERS)
def wire(request: pytest.FixtureRequest) -> Wire:
    w: Wire = WIRES[request.param]()
    if request.param == "bedrock":
        _bedrock_runtime()
    return w


@pytest.fixture
def h(shared: Harness, wire: Wire) -> Iterator[Harness]:
    seed(shared.ddb, shared.settings.customer_data_table)
    saved = shared.agent.llm
    shared.agent.llm = wire.client(shared.clock)
    yield shared
    shared.agent.llm = saved
    assert wire.steps == [], "script steps left unused"


def stored(h: Harness, cid: str) -> list[dict[str, Any]]:
    return [m.as_message() for m in h.conversations.load(cid)]


def order(h: Harness, order_id: int) -> tuple[int, int, int]:
    o = h.order(order_id)
    return o.available_cents, o.reserved_cents, o.refunded_cents


# -- the loop through each adapter ------------------------------------------------------------------


def test_seed_transcript(h: Harness, wire: Wire) -> None:
    wire.steps = [
        tools(use("lookup_order", {"order_id": 1042}), usage=Usage(1000, 50, 0)),
        tools(
            use("request_refund", {"order_id": 1042, "amount_cents": 18900, "reason": "customer request"}),
            usage=Usage(400, 60, 700),
        ),
        answer("Order 1042 was delivered. The refund of 189.00 needs a teammate's approval.", Usage(210, 77, 700)),
    ]
    r = h.turn("Where is my order 1042? Also refund it.")
    assert (r.stop_reason, r.iterations) == ("end_turn", 3)
    assert r.reply.startswith("Order 1042 was delivered")
    # Usage summed over the turn, cached reads apart from uncached input (OpenAI: prompt - cached).
    assert r.usage == Usage(1610, 187, 1400, 0)
    assert h.conversations.get_header(r.conversation_id).usage == r.usage  # type: ignore[union-attr]
    looked, refund = r.trace[0]["toolCalls"][0], r.trace[1]["toolCalls"][0]
    assert looked["result"]["status"] == "DELIVERED" and not looked["isError"]
    assert refund["result"]["status"] == "PENDING_APPROVAL" and not refund["isError"]
    assert order(h, 1042) == (0, 18900, 0)
    # What the provider saw: the tools offered, its own tool call and the fenced result, no ban.
    first, second, third = wire.requests
    assert wire.offered(first) == [
        "lookup_order",
        "list_invoices",
        "request_refund",
        "escalate_to_human",
        "cancel_order",
        "update_shipping_address",
    ]
    assert all(wire.tool_choice(b) is None for b in wire.requests)
    ((call_id, name, args),) = wire.calls(second)
    assert (name, args) == ("lookup_order", {"order_id": 1042})
    ((result_id, content, is_error),) = wire.results(second)
    assert result_id == call_id and is_error is False
    assert unfence(content)["status"] == "DELIVERED"
    assert [c[1] for c in wire.calls(third)] == ["lookup_order", "request_refund"]
    # The stored history is canonical whatever the provider: Anthropic blocks, valid, ids kept.
    msgs = stored(h, r.conversation_id)
    assert hist.problems(msgs) == []
    assert [b["id"] for m in msgs for b in m["content"] if b["type"] == "tool_use"] == [c[0] for c in wire.calls(third)]


def test_two_tool_calls_in_one_turn(h: Harness, wire: Wire) -> None:
    wire.steps = [
        tools(use("lookup_order", {"order_id": 1042}), use("list_invoices", {"order_id": 1042})),
        answer("Both done."),
    ]
    r = h.turn("Order 1042 and its invoices?")
    assert r.stop_reason == "end_turn"
    assert [(c["name"], c["isError"]) for c in r.trace[0]["toolCalls"]] == [
        ("lookup_order", False),
        ("list_invoices", False),
    ]
    calls = wire.calls(wire.requests[1])
    results = wire.results(wire.requests[1])
    assert [c[0] for c in calls] == [r[0] for r in results]  # each call answered, in order
    assert unfence(results[1][1])["invoices"][0]["invoice_id"] == 5001
    msgs = stored(h, r.conversation_id)
    assert len([b for b in msgs[2]["content"] if b["type"] == "tool_result"]) == 2
    assert hist.problems(msgs) == []


def test_unknown_tool_is_an_error_result_and_the_turn_goes_on(h: Harness, wire: Wire) -> None:
    wire.steps = [tools(use("delete_everything", {"all": True})), answer("I can't do that.")]
    r = h.turn("Delete everything")
    assert (r.stop_reason, r.iterations, r.reply) == ("end_turn", 2, "I can't do that.")
    call = r.trace[0]["toolCalls"][0]
    assert call["isError"] and "unknown tool" in call["result"]["error"]
    ((_, content, is_error),) = wire.results(wire.requests[1])
    assert is_error is True and "unknown tool" in unfence(content)["error"]


@pytest.mark.parametrize(
    "raw",
    ['{"order_id": 1042', "order_id=1042", "[1042]", '"1042"', "null"],
    ids=["truncated", "not-json", "array", "string", "null"],
)
def test_malformed_arguments_are_an_error_result_never_a_crash(h: Harness, wire: Wire, raw: str) -> None:
    wire.steps = [tools(use("lookup_order", {}, raw=raw)), answer("Sorry, which order?")]
    r = h.turn("Where is my order?")
    assert (r.stop_reason, r.iterations) == ("end_turn", 2)
    call = r.trace[0]["toolCalls"][0]
    assert call["isError"] is True and "invalid input" in call["result"]["error"]
    ((_, content, is_error),) = wire.results(wire.requests[1])
    assert is_error is True
    if wire.name == "openai":
        # The adapter surfaces the raw text under a key no tool accepts; the model sees both.
        assert INVALID_ARGUMENTS in call["input"] and raw in call["input"][INVALID_ARGUMENTS]
        assert INVALID_ARGUMENTS in unfence(content)["error"]
    assert hist.problems(stored(h, r.conversation_id)) == []
    # Why the marker is always refused: no tool takes properties it does not declare.
    specs = h.agent.tools.specs
    assert specs and all(t["input_schema"].get("additionalProperties") is False for t in specs)
    assert all(INVALID_ARGUMENTS not in t["input_schema"].get("properties", {}) for t in specs)


def test_the_last_iteration_forbids_tools_in_each_providers_form(h: Harness, wire: Wire) -> None:
    # MAX_ITERATIONS=4 in this module: a model that never stops asking is banned on the 4th call.
    wire.steps = [tools(use("lookup_order", {"order_id": 1042})) for _ in range(4)]
    r = h.turn("loop forever")
    assert (r.stop_reason, r.iterations) == ("max_iterations", 4)
    assert [wire.banned(b) for b in wire.requests] == [False, False, False, True]
    assert {"anthropic": {"type": "none"}, "openai": "none", "bedrock": {"type": "none"}}[wire.name] == (
        wire.tool_choice(wire.requests[-1])
    )
    assert wire.offered(wire.requests[-1])  # tools still defined: the history holds tool calls
    assert r.trace[3]["toolCalls"][0]["isError"] is True  # ignored the ban: not run
    assert hist.problems(stored(h, r.conversation_id)) == []


def _answer_stops() -> list[tuple[str, str, str]]:
    messages_api = [("end_turn", "end_turn"), ("stop_sequence", "stop_sequence"), ("max_tokens", "max_tokens")]
    messages_api += [("refusal", "refusal")]
    openai = [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal")]
    return [
        *[("anthropic", n, s) for n, s in messages_api],
        *[("bedrock", n, s) for n, s in messages_api],
        *[("openai", n, s) for n, s in openai],
    ]


@pytest.mark.parametrize(("provider", "native", "expected"), _answer_stops())
def test_every_answer_stop_reason_reaches_the_turn(shared: Harness, provider: str, native: str, expected: str) -> None:
    w = WIRES[provider]()
    shared.agent.llm = w.client(shared.clock)
    w.steps = [Reply([text("partial answer")], native=native)]
    r = shared.turn("hi")
    assert (r.stop_reason, r.iterations, r.reply) == (expected, 1, "partial answer")
    assert hist.problems(stored(shared, r.conversation_id)) == []


def test_a_tool_call_cut_by_the_output_limit_is_never_run(h: Harness, wire: Wire) -> None:
    wire.steps = [
        Reply([text("Let me"), use("request_refund", {"order_id": 1043})], "max_tokens"),
        answer("Please ask again."),
    ]
    r = h.turn("refund 1043")
    assert (r.trace[0]["stopReason"], r.stop_reason, r.reply) == ("max_tokens", "end_turn", "Please ask again.")
    call = r.trace[0]["toolCalls"][0]
    assert call["isError"] and "not executed" in call["result"]["error"]
    assert order(h, 1043) == (2500, 0, 0)
    assert hist.problems(stored(h, r.conversation_id)) == []


def test_a_transient_fault_mid_turn_is_retried_within_the_turn(h: Harness, wire: Wire) -> None:
    wire.steps = [
        tools(use("lookup_order", {"order_id": 1042})),
        Fault("throttled"),
        Fault("connection"),
        answer("Delivered."),
    ]
    r = h.turn("Where is 1042?")
    assert (r.stop_reason, r.reply) == ("end_turn", "Delivered.")
    assert len(wire.requests) == 4 and len(wire.sleeps) == 2


def test_a_refused_request_fails_the_first_call_and_stores_nothing(h: Harness, wire: Wire) -> None:
    wire.steps = [Fault("invalid")]
    with pytest.raises(ModelRefused):
        h.turn("hello")
    assert len(wire.requests) == 1 and wire.sleeps == []


def test_near_the_deadline_a_fault_is_not_retried_and_nothing_is_stored(h: Harness, wire: Wire) -> None:
    wire.steps = [Fault("unavailable")]
    with pytest.raises(ModelUnavailable):
        h.turn("hello", seconds=1.2)  # a retry would need backoff + margin > 1.2 s
    assert len(wire.requests) == 1 and wire.sleeps == []


@pytest.mark.parametrize(("first", "second"), [(a, b) for a in PROVIDERS for b in PROVIDERS if a != b])
def test_a_conversation_continues_on_another_provider(shared: Harness, first: str, second: str) -> None:
    seed(shared.ddb, shared.settings.customer_data_table)
    a, b = WIRES[first](), WIRES[second]()
    shared.agent.llm = a.client(shared.clock)
    a.steps = [tools(use("lookup_order", {"order_id": 1042})), answer("Order 1042 was delivered.")]
    r1 = shared.turn("Where is my order 1042?")
    shared.agent.llm = b.client(shared.clock)  # a configuration change between turns
    b.steps = [tools(use("list_invoices", {"order_id": 1042})), answer("Invoice 5001.")]
    r2 = shared.turn("And its invoice?", r1.conversation_id)
    assert (r2.conversation_id, r2.reply) == (r1.conversation_id, "Invoice 5001.")
    # The new provider received the old one's tool call and result in its own format (ids kept).
    first_call_id = stored(shared, r1.conversation_id)[1]["content"][1]["id"]
    (old_call, new_call) = b.calls(b.requests[1])
    assert (old_call[0], old_call[1], old_call[2]) == (first_call_id, "lookup_order", {"order_id": 1042})
    assert new_call[1] == "list_invoices"
    assert [c[0] for c in b.calls(b.requests[0])] == [first_call_id]
    shared.agent.llm = a.client(shared.clock)  # and back again
    a.steps = [answer("You're welcome.")]
    assert shared.turn("thanks", r1.conversation_id).reply == "You're welcome."
    assert [c[1] for c in a.calls(a.requests[-1])] == ["lookup_order", "list_invoices"]
    assert hist.problems(stored(shared, r1.conversation_id)) == []


# -- the adapter alone: stop reasons, retries, the deadline ----------------------------------------------


def _native_stops() -> list[tuple[str, str, str, bool]]:
    """(provider, native stop, canonical stop, with a tool call)."""
    messages_api = [
        ("end_turn", "end_turn", False),
        ("stop_sequence", "stop_sequence", False),
        ("max_tokens", "max_tokens", False),
        ("refusal", "refusal", False),
        ("tool_use", "tool_use", True),
        ("pause_turn", "pause_turn", False),
    ]
    openai = [
        ("stop", "end_turn", False),
        ("length", "max_tokens", False),
        ("length", "max_tokens", True),  # cut mid-call: never tool_use, so never run
        ("content_filter", "refusal", False),
        ("tool_calls", "tool_use", True),
        ("function_call", "tool_use", True),
        ("stop", "tool_use", True),  # compatible servers that say "stop" with tool calls
        ("tool_calls", "end_turn", False),  # claims calls, sends none: nothing to run
    ]
    return [
        *[("anthropic", *row) for row in messages_api],
        *[("bedrock", *row) for row in messages_api],
        *[("openai", *row) for row in openai],
    ]


@pytest.mark.parametrize(("provider", "native", "expected", "with_call"), _native_stops())
def test_every_stop_reason_mapping(provider: str, native: str, expected: str, with_call: bool) -> None:
    w = WIRES[provider]()
    _bedrock_runtime()
    content = [text("x")] + ([use("lookup_order", {"order_id": 1})] if with_call else [])
    w.steps = [Reply(content, native=native)]
    out = w.client(FakeClock()).create(SYSTEM, HISTORY, TOOLS)
    assert out.stop_reason == expected
    assert [b["name"] for b in out.tool_uses()] == (["lookup_order"] if with_call else [])


def _bedrock_runtime() -> None:
    """The module's bedrock-runtime client, with a fresh Stubber (nothing left over from a failed test)."""
    if BedrockWire.runtime is None:
        BedrockWire.runtime = boto3.client("bedrock-runtime", region_name="us-east-1")
    if BedrockWire.stubber is not None:
        BedrockWire.stubber.deactivate()
    BedrockWire.stubber = Stubber(BedrockWire.runtime)
    BedrockWire.stubber.activate()


@pytest.fixture
def solo(wire: Wire) -> Wire:
    """A wire for calls straight to the adapter (no loop, no tables)."""
    _bedrock_runtime()
    return wire


def test_usage_is_uncached_input_plus_cached_reads(solo: Wire) -> None:
    solo.steps = [answer("ok", Usage(1200, 34, 800))]
    out = solo.client(FakeClock()).create(SYSTEM, HISTORY, TOOLS)
    assert out.usage == Usage(1200, 34, 800, 0)
    assert out.usage.total == 2034


@pytest.mark.parametrize("kind", ["throttled", "unavailable", "connection", "malformed"])
def test_transient_faults_are_retried_with_backoff(solo: Wire, kind: str) -> None:
    clock = FakeClock()
    solo.steps = [Fault(kind), Fault(kind), answer("ok")]
    response = solo.client(clock).create(SYSTEM, HISTORY, TOOLS, deadline=Deadline.after(27, clock))
    assert response.text() == "ok"
    assert len(solo.requests) == 3
    assert solo.sleeps == [0.25, 0.5]  # full jitter (random 0.5) of 0.5 * 2**n
    assert response.retries == 2


def test_retry_after_is_honoured_where_the_provider_sends_it(solo: Wire) -> None:
    clock = FakeClock()
    solo.steps = [Fault("throttled", retry_after=2.0), answer("ok")]
    solo.client(clock).create(SYSTEM, HISTORY, TOOLS)
    assert solo.sleeps == ([0.25] if solo.name == "bedrock" else [2.0])  # Bedrock sends none: backoff


def test_retries_run_out_into_model_unavailable(solo: Wire) -> None:
    solo.steps = [Fault("unavailable")] * 3
    with pytest.raises(ModelUnavailable) as info:
        solo.client(FakeClock(), max_retries=2).create(SYSTEM, HISTORY, TOOLS)
    assert len(solo.requests) == 3 and status_and_code(info.value)[0] == 503 and info.value.retry_after == 5
    assert info.value.retries == 2  # the error says how often it was retried: the adapter keeps no count


@pytest.mark.parametrize(("kind", "error"), [("invalid", ModelRefused), ("quota", ModelUnavailable)])
def test_faults_that_retrying_cannot_fix_are_not_retried(solo: Wire, kind: str, error: type[Exception]) -> None:
    solo.steps = [Fault(kind), answer("never")]
    with pytest.raises(error) as info:
        solo.client(FakeClock()).create(SYSTEM, HISTORY, TOOLS)
    assert len(solo.requests) == 1 and solo.sleeps == []
    if kind == "quota":  # a spend limit / service quota: clients are told to come back much later
        assert info.value.retry_after == (60 if solo.name == "bedrock" else 3600)  # type: ignore[attr-defined]


def test_an_expired_deadline_sends_nothing(solo: Wire) -> None:
    clock = FakeClock()
    solo.steps = [answer("never")]
    with pytest.raises(ModelUnavailable):
        solo.client(clock).create(SYSTEM, HISTORY, TOOLS, deadline=Deadline.after(0, clock))
    assert solo.requests == []


def test_no_sleep_crosses_the_deadline(solo: Wire) -> None:
    clock = FakeClock()
    # A retry would wait (Bedrock: backoff 0.25 s; the others: retry-after 10 s) + a 1 s margin > 1.2 s.
    solo.steps = [Fault("throttled", retry_after=10.0), answer("never")]
    with pytest.raises(ModelUnavailable):
        solo.client(clock).create(SYSTEM, HISTORY, TOOLS, deadline=Deadline.after(1.2, clock))
    assert len(solo.requests) == 1 and solo.sleeps == []


def test_an_attempt_never_outlives_the_deadline(solo: Wire) -> None:
    """HTTP adapters cap each attempt's timeouts at the time left; Bedrock abandons the call."""
    if solo.name == "bedrock":
        release = threading.Event()
        runtime = _Hanging(release)
        client = BedrockClient(model_id=BEDROCK_PROFILE, client=runtime, policy=RetryPolicy(max_retries=3))
        started = time.monotonic()
        with pytest.raises(ModelUnavailable):
            client.create(SYSTEM, HISTORY, TOOLS, deadline=Deadline.after(0.3))
        release.set()
        assert time.monotonic() - started < 2.0 and runtime.calls == 1
        return
    clock = FakeClock()
    solo.steps = [answer("ok"), answer("ok")]
    client = solo.client(clock)
    client.create(SYSTEM, HISTORY, TOOLS, deadline=Deadline.after(4.0, clock))
    client.create(SYSTEM, HISTORY, TOOLS)
    assert solo.read_timeouts == [pytest.approx(4.0), pytest.approx(25.0)]


class _Hanging:
    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.calls = 0

    def invoke_model(self, **params: Any) -> Any:
        self.calls += 1
        self.release.wait(10)
        raise AssertionError("should have been abandoned")


def test_history_and_tools_are_never_mutated(solo: Wire) -> None:
    history = [
        *copy.deepcopy(HISTORY),
        {"role": "assistant", "content": [text("Checking."), use("lookup_order", {"order_id": 1042})]},
    ]
    history.append(
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": history[1]["content"][1]["id"], "content": "x", "is_error": True}
            ],
        }
    )
    before = copy.deepcopy((history, TOOLS))
    solo.steps = [answer("ok")]
    solo.client(FakeClock()).create(SYSTEM, history, TOOLS, {"type": "none"})
    assert (history, TOOLS) == before
    assert solo.results(solo.requests[0])[0][1:] == ("x", True)


# -- choosing the adapter: the factory ---------------------------------------------------------------------


def _settings(**env: str) -> Settings:
    return Settings.model_validate({"MODEL_ID": "claude-test", "LLM_MAX_RETRIES": "0", **env})


def test_the_factory_builds_the_configured_provider() -> None:
    assert isinstance(llm_client_from_settings(_settings()), AnthropicClient)  # the default
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=OpenAIWire.completion(answer("hi")))

    openai = llm_client_from_settings(
        _settings(
            LLM_PROVIDER="openai",
            OPENAI_BASE_URL="http://localhost:11434/v1",
            OPENAI_MAX_TOKENS_PARAM="max_completion_tokens",
            MAX_TOKENS="77",
        ),
        transport=httpx.MockTransport(handle),
    )
    assert isinstance(openai, OpenAIClient)
    assert openai.create(SYSTEM, HISTORY, TOOLS).text() == "hi"
    (request,) = seen
    assert str(request.url) == "http://localhost:11434/v1/chat/completions"
    assert "authorization" not in request.headers  # no key configured: local servers need none
    body = json.loads(request.content)
    assert (body["model"], body["max_completion_tokens"]) == ("claude-test", 77)  # OPENAI_MODEL empty: MODEL_ID
    named = llm_client_from_settings(_settings(LLM_PROVIDER="openai", OPENAI_MODEL="gpt-4.1"))
    assert isinstance(named, OpenAIClient) and named.model == "gpt-4.1"
    with pytest.raises(pydantic.ValidationError):
        _settings(LLM_PROVIDER="vertex")


def test_the_openai_key_comes_from_its_secret_once() -> None:
    class Secrets:
        calls = 0

        def get_secret_value(self, SecretId: str) -> dict[str, str]:
            Secrets.calls += 1
            assert SecretId == "arn:aws:secretsmanager:us-east-1:1:secret:openai"
            return {"SecretString": json.dumps({"OPENAI_API_KEY": "sk-from-secret"})}

    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return httpx.Response(200, json=OpenAIWire.completion(answer("hi")))

    client = llm_client_from_settings(
        _settings(LLM_PROVIDER="openai", OPENAI_API_KEY_SECRET_ARN="arn:aws:secretsmanager:us-east-1:1:secret:openai"),
        transport=httpx.MockTransport(handle),
        secrets_client=Secrets(),
    )
    assert Secrets.calls == 0  # not at cold start
    client.create(SYSTEM, HISTORY, TOOLS)
    client.create(SYSTEM, HISTORY, TOOLS)
    assert seen == ["Bearer sk-from-secret"] * 2 and Secrets.calls == 1


def test_the_factory_builds_bedrock_lazily_in_the_profiles_region() -> None:
    profile = "arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.anthropic.claude-test-v1:0"
    client = llm_client_from_settings(_settings(LLM_PROVIDER="bedrock", BEDROCK_MODEL_ID=profile))
    assert isinstance(client, BedrockClient)
    assert (client.model_id, client.region, client._client) == (profile, "us-west-2", None)  # nothing built yet
    runtime = client.runtime()
    assert runtime.meta.region_name == "us-west-2" and runtime.meta.service_model.service_name == "bedrock-runtime"
    assert runtime.meta.config.retries["total_max_attempts"] == 1  # our retries only, never stacked
    assert client.runtime() is runtime
    pinned = llm_client_from_settings(
        _settings(LLM_PROVIDER="bedrock", BEDROCK_MODEL_ID=profile, BEDROCK_REGION="eu-west-1")
    )
    assert isinstance(pinned, BedrockClient) and pinned.region == "eu-west-1"
    missing = llm_client_from_settings(_settings(LLM_PROVIDER="bedrock"))
    with pytest.raises(ModelRefused, match="BEDROCK_MODEL_ID"):
        missing.create(SYSTEM, HISTORY, TOOLS)


def test_every_provider_the_settings_accept_is_one_factory_row_given_the_one_policy() -> None:
    """A provider is one row of `ADAPTERS`; whichever is chosen gets the settings' `RetryPolicy` and the
    breaker the caller shares, never keyword arguments of its own."""
    accepted = set(get_args(Settings.model_fields["llm_provider"].annotation))
    assert set(ADAPTERS) == accepted
    shared = CircuitBreaker(3, 10.0)
    env = {"LLM_MAX_RETRIES": "2", "LLM_CONNECT_TIMEOUT": "1.5", "LLM_READ_TIMEOUT": "9", "BEDROCK_MODEL_ID": "m"}
    for provider in sorted(accepted):
        client = llm_client_from_settings(_settings(LLM_PROVIDER=provider, **env), breaker=shared)
        assert isinstance(client, RetryingClient), provider
        policy = client.policy
        assert (policy.max_retries, policy.connect_timeout, policy.read_timeout) == (2, 1.5, 9.0), provider
        assert policy.breaker is shared, provider


def test_cold_start_loads_only_the_chosen_adapter() -> None:
    """Importing the chat path and building the Anthropic client loads neither the OpenAI nor the
    Bedrock adapter, nor the openai SDK; the Bedrock adapter builds no boto3 client until called."""
    code = (
        "import sys, support_agent.wiring\n"
        "from support_agent.config import load_settings\n"
        "from support_agent.llm.factory import llm_client_from_settings\n"
        "llm_client_from_settings(load_settings({}))\n"
        "bad = [m for m in ('support_agent.llm.openai', 'support_agent.llm.bedrock', 'openai') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "c = llm_client_from_settings(load_settings({'LLM_PROVIDER': 'bedrock', 'BEDROCK_MODEL_ID': 'm'}))\n"
        "assert c._client is None and 'openai' not in sys.modules\n"
    )
    layer = Path(__file__).resolve().parents[2] / "layers" / "common"
    env = {**os.environ, "PYTHONPATH": str(layer), "AWS_DEFAULT_REGION": "us-east-1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("code", "status", "retried"),
    [
        ("ThrottlingException", 429, True),
        ("ServiceUnavailableException", 503, True),
        ("ModelNotReadyException", 429, True),
        ("InternalServerException", 500, True),
        ("ModelTimeoutException", 408, True),
        ("ValidationException", 400, False),
        ("AccessDeniedException", 403, False),
        ("ResourceNotFoundException", 404, False),
        ("ModelErrorException", 424, False),
    ],
)
def test_bedrock_error_codes(code: str, status: int, retried: bool) -> None:
    _bedrock_runtime()
    stubber = BedrockWire.stubber
    assert stubber is not None
    stubber.add_client_error("invoke_model", code, "nope", status)
    if retried:
        data = json.dumps(_messages_api_json(answer("ok"))).encode()
        stubber.add_response(
            "invoke_model", {"body": StreamingBody(io.BytesIO(data), len(data)), "contentType": "json"}
        )
    client = BedrockClient(
        model_id=BEDROCK_PROFILE, client=BedrockWire.runtime, policy=RetryPolicy(sleep=lambda _s: None)
    )
    if retried:
        response = client.create(SYSTEM, HISTORY, TOOLS)
        assert response.text() == "ok" and response.retries == 1
    else:
        with pytest.raises(ModelRefused, match=code):
            client.create(SYSTEM, HISTORY, TOOLS)
    stubber.assert_no_pending_responses()
