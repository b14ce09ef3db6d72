"""Streaming in the HTTP adapters (issue 36): with a text sink, the Anthropic and OpenAI-compatible clients ask for a
stream, feed its text to the sink as it arrives, and answer exactly the `LlmResponse` the plain call answers.

Served by httpx.MockTransport: each case's message is written once, answered plain (JSON) and streamed (server-sent
events in the shape the providers send, one recorded verbatim); no network, no sleeping.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from support_agent.errors import ModelRefused, ModelUnavailable
from support_agent.llm.anthropic import AnthropicClient
from support_agent.llm.base import LlmResponse
from support_agent.llm.bedrock import BedrockClient
from support_agent.llm.messages_api import parse_response
from support_agent.llm.openai import OpenAIClient
from support_agent.llm.retry import RetryPolicy
from support_agent.llm.streaming import sse_events
from support_agent.llm.translate import parse_openai_response
from support_agent.messages import Deadline, Usage

SYSTEM = "You are a support agent."
HISTORY: list[dict[str, Any]] = [{"role": "user", "content": "Where is order 1042? And refund 1043."}]
TOOLS: list[dict[str, Any]] = [
    {"name": "lookup_order", "description": "Look up an order.", "input_schema": {"type": "object"}},
]


class Sink:
    """A `TextSink` that records what it is told, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def delta(self, piece: str) -> None:
        self.calls.append(piece)

    def restart(self) -> None:
        self.calls.append("<restart>")

    def text(self) -> str:
        return "".join(c for c in self.calls if c != "<restart>")


class Answers:
    """A MockTransport handler answering each request with the next body of a list, recording the requests."""

    def __init__(self, *bodies: Callable[[dict[str, Any]], httpx.Response]) -> None:
        self.bodies = list(bodies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.bodies.pop(0)(json.loads(request.content))

    def sent(self, index: int = -1) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.requests[index].content)
        return body


def sse(raw: str) -> Callable[[dict[str, Any]], httpx.Response]:
    return lambda _: httpx.Response(200, content=raw.encode(), headers={"content-type": "text/event-stream"})


def plain(data: dict[str, Any]) -> Callable[[dict[str, Any]], httpx.Response]:
    return lambda _: httpx.Response(200, json=data)


def error(status: int, data: dict[str, Any]) -> Callable[[dict[str, Any]], httpx.Response]:
    return lambda _: httpx.Response(status, json=data)


def policy(max_retries: int = 3) -> RetryPolicy:
    return RetryPolicy(max_retries=max_retries, sleep=lambda _: None, random=lambda: 0.5)


def anthropic(answers: Answers, max_retries: int = 3) -> AnthropicClient:
    transport = httpx.MockTransport(answers)
    return AnthropicClient(api_key="k", model="claude-test", transport=transport, policy=policy(max_retries))


def openai(answers: Answers) -> OpenAIClient:
    transport = httpx.MockTransport(answers)
    return OpenAIClient(api_key="k", model="gpt-test", base_url="http://llm/v1", transport=transport, policy=policy())


# -- the Messages API ---------------------------------------------------------------------------------------------


def frame(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def split(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def block_events(index: int, block: dict[str, Any]) -> list[str]:
    """One block's start, deltas and stop, as the API streams it."""
    opening: dict[str, Any] = {"type": block["type"]}
    deltas: list[dict[str, Any]] = []
    if block["type"] == "text":
        opening["text"] = ""
        deltas = [{"type": "text_delta", "text": p} for p in split(block["text"], 7)]
    elif block["type"] == "thinking":
        opening |= {"thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": p} for p in split(block["thinking"], 9)]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        opening |= {"id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": ""}]
        deltas += [{"type": "input_json_delta", "partial_json": p} for p in split(json.dumps(block["input"]), 5)]
    out = [frame("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening})]
    out += [frame("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
    return [*out, frame("content_block_stop", {"type": "content_block_stop", "index": index})]


def message_sse(message: dict[str, Any], cut_after: int | None = None) -> str:
    """``message`` as the Messages API streams it; ``cut_after``: that many frames, then an overloaded error."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    frames = [frame("message_start", {"type": "message_start", "message": start}), ": keep-alive\n\n"]
    frames.append(frame("ping", {"type": "ping"}))
    for index, block in enumerate(message["content"]):
        frames += block_events(index, block)
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    frames.append(frame("message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 77}}))
    frames.append(frame("message_stop", {"type": "message_stop"}))
    if cut_after is not None:
        overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        frames = [*frames[:cut_after], frame("error", overloaded)]
    return "".join(frames)


def message(*content: dict[str, Any], stop_reason: str = "end_turn") -> dict[str, Any]:
    usage = {"input_tokens": 412, "output_tokens": 77, "cache_read_input_tokens": 300, "cache_creation_input_tokens": 9}
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-1",
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def use(tid: str, order_id: int) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "lookup_order", "input": {"order_id": order_id, "note": 'ü "x"'}}


THINKING = {
    "type": "thinking",
    "thinking": "The customer names two orders; look up the first.",
    "signature": "EqQBCkYI==",
}
MESSAGES = {
    "text only": message(text("Order 1042 was delivered on Monday, and 1043 is on its way.")),
    "text and a tool call": message(text("Let me look that up."), use("toolu_1", 1042), stop_reason="tool_use"),
    "two tool calls": message(text("One moment."), use("toolu_1", 1042), use("toolu_2", 1043), stop_reason="tool_use"),
    "thinking first": message(THINKING, text("Looking."), use("toolu_1", 1042), stop_reason="tool_use"),
    "a tool call alone": message(use("toolu_1", 1042), stop_reason="tool_use"),
}


@pytest.mark.parametrize("case", MESSAGES)
def test_anthropic_streamed_equals_plain(case: str) -> None:
    data = MESSAGES[case]
    answers, sink = Answers(plain(data), sse(message_sse(data))), Sink()
    client = anthropic(answers)
    unstreamed = client.create(SYSTEM, HISTORY, TOOLS)
    streamed = client.create(SYSTEM, HISTORY, TOOLS, text=sink)
    assert streamed == unstreamed == parse_response(data)
    assert sink.calls == [p for b in data["content"] if b["type"] == "text" for p in split(b["text"], 7)]
    assert answers.sent(1) == {**answers.sent(0), "stream": True}
    assert "stream" not in answers.sent(0)


# Recorded from the Messages API (its streaming documentation's tool use example), ids shortened.
RECORDED = """event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":", let's check the weather for San Francisco, CA:"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"location\\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \\"San"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" Francisc"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"o,"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" CA\\""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":", "}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\\"unit\\": \\"fah"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"renheit\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"""  # noqa: E501 (verbatim)


def test_a_recorded_anthropic_stream() -> None:
    answers, sink = Answers(sse(RECORDED)), Sink()
    response = anthropic(answers).create(SYSTEM, HISTORY, TOOLS, text=sink)
    assert response == LlmResponse(
        stop_reason="tool_use",
        content=[
            text("Okay, let's check the weather for San Francisco, CA:"),
            {
                "type": "tool_use",
                "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "name": "get_weather",
                "input": {"location": "San Francisco, CA", "unit": "fahrenheit"},
            },
        ],
        usage=Usage(input_tokens=472, output_tokens=89),
        model="claude-sonnet-4-5-20250929",
    )
    assert sink.calls == ["Okay", ", let's check the weather for San Francisco, CA:"]


def test_a_tool_input_cut_by_the_output_limit_keeps_what_it_had() -> None:
    whole = message_sse(message(use("toolu_1", 1042), stop_reason="max_tokens"))
    frames = whole.split("\n\n")
    first_fragment = next(i for i, f in enumerate(frames) if '"partial_json": "{' in f)
    cut = frames[: first_fragment + 1] + [f for f in frames if "message_delta" in f or "message_stop" in f]
    response = anthropic(Answers(sse("\n\n".join(cut) + "\n\n"))).create(SYSTEM, HISTORY, TOOLS, text=Sink())
    assert response.stop_reason == "max_tokens" and response.tool_uses()[0]["input"] == {}


def test_an_overloaded_error_mid_stream_is_retried_and_the_sink_restarted() -> None:
    data = MESSAGES["text and a tool call"]
    answers, sink = Answers(sse(message_sse(data, cut_after=6)), sse(message_sse(data))), Sink()
    response = anthropic(answers).create(SYSTEM, HISTORY, TOOLS, text=sink)
    assert response == replace(parse_response(data), retries=1)
    first = split("Let me look that up.", 7)[:2]  # what the cut stream had delivered
    assert sink.calls == [*first, "<restart>", *split("Let me look that up.", 7)]
    assert len(answers.requests) == 2 and answers.sent(0) == answers.sent(1)


def test_no_restart_when_the_failed_attempt_delivered_no_text() -> None:
    data = MESSAGES["text only"]
    overloaded = error(529, {"type": "error", "error": {"type": "overloaded_error"}})
    answers, sink = Answers(overloaded, sse(message_sse(data))), Sink()
    assert anthropic(answers).create(SYSTEM, HISTORY, TOOLS, text=sink).retries == 1
    assert "<restart>" not in sink.calls and sink.text() == data["content"][0]["text"]


def test_a_refusal_inside_the_stream_is_not_retried() -> None:
    invalid = {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}}
    answers = Answers(sse(frame("error", invalid)), sse(message_sse(MESSAGES["text only"])))
    with pytest.raises(ModelRefused, match="HTTP 400 invalid_request_error"):
        anthropic(answers).create(SYSTEM, HISTORY, TOOLS, text=Sink())
    assert len(answers.requests) == 1


@pytest.mark.parametrize(
    ("answer", "error_class"),
    [
        (error(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}), ModelRefused),
        (error(400, {"type": "error", "error": {"type": "billing_error", "message": "no credit"}}), ModelUnavailable),
    ],
)
def test_an_error_status_before_the_stream_is_mapped_as_without_one(
    answer: Callable[[dict[str, Any]], httpx.Response], error_class: type[Exception]
) -> None:
    answers = Answers(answer)
    with pytest.raises(error_class):
        anthropic(answers).create(SYSTEM, HISTORY, TOOLS, text=Sink())
    assert len(answers.requests) == 1


def test_a_stream_that_never_ends_is_retried_until_the_attempts_run_out() -> None:
    truncated = message_sse(MESSAGES["text only"]).split("event: message_delta")[0]
    answers, sink = Answers(*[sse(truncated)] * 2), Sink()
    with pytest.raises(ModelUnavailable, match="malformed stream") as caught:
        anthropic(answers, max_retries=1).create(SYSTEM, HISTORY, TOOLS, text=sink)
    assert caught.value.retries == 1 and sink.calls.count("<restart>") == 1


def test_a_stream_still_running_at_the_deadline_is_given_up() -> None:
    now = [0.0]
    deadline = Deadline(at=5.0, clock=lambda: now[0])

    class Slow(Sink):
        def delta(self, piece: str) -> None:
            super().delta(piece)
            now[0] += 2.0  # each piece takes two seconds to arrive

    answers = Answers(sse(message_sse(MESSAGES["text only"])))
    with pytest.raises(ModelUnavailable):
        anthropic(answers).create(SYSTEM, HISTORY, TOOLS, deadline=deadline, text=Slow())
    assert len(answers.requests) == 1


class Raising(Sink):
    def __init__(self, on: str) -> None:
        super().__init__()
        self.on = on

    def delta(self, piece: str) -> None:
        super().delta(piece)
        if self.on == "delta":
            raise RuntimeError("the socket is gone")

    def restart(self) -> None:
        super().restart()
        raise RuntimeError("the socket is gone")


def test_a_raising_sink_never_fails_the_call_and_is_not_called_again(caplog: pytest.LogCaptureFixture) -> None:
    data = MESSAGES["two tool calls"]
    sink = Raising("delta")
    response = anthropic(Answers(sse(message_sse(data)))).create(SYSTEM, HISTORY, TOOLS, text=sink)
    assert response == parse_response(data)
    assert sink.calls == ["One mom"]
    assert [r.message for r in caplog.records if "text sink" in r.message] == [
        "text sink failed; the reply's text is no longer streamed to it"
    ]


def test_a_sink_raising_on_restart_never_fails_the_retry() -> None:
    data = MESSAGES["text only"]
    sink = Raising("restart")
    response = anthropic(Answers(sse(message_sse(data, cut_after=6)), sse(message_sse(data)))).create(
        SYSTEM, HISTORY, TOOLS, text=sink
    )
    assert response.text() == data["content"][0]["text"] and response.retries == 1
    assert sink.calls[-1] == "<restart>"  # dropped from there on


def test_a_server_that_ignores_stream_still_answers_and_the_text_comes_at_once() -> None:
    data = MESSAGES["text and a tool call"]
    sink = Sink()
    assert anthropic(Answers(plain(data))).create(SYSTEM, HISTORY, TOOLS, text=sink) == parse_response(data)
    assert sink.calls == ["Let me look that up."]


# -- OpenAI chat completions -----------------------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> str:
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test-1"}
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    return f"data: {json.dumps({**head, 'choices': choices, **extra})}\n\n"


def call_fragment(index: int, **fields: Any) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, **fields}]}


USAGE = {
    "prompt_tokens": 900,
    "completion_tokens": 41,
    "total_tokens": 941,
    "prompt_tokens_details": {"cached_tokens": 512},
}


def completion(content: str | None, calls: list[tuple[str, str]], finish: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": "lookup_order", "arguments": args}}
            for i, (_, args) in enumerate(calls)
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test-1",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": USAGE,
    }


OPENAI_STREAMS: dict[str, tuple[dict[str, Any], str, list[str]]] = {
    "text only": (
        completion("Order 1042 was delivered.", [], "stop"),
        chunk({"role": "assistant", "content": "", "refusal": None})
        + "".join(chunk({"content": p}) for p in ["Order ", "1042 was ", "delivered."])
        + chunk({}, "stop")
        + chunk(None, usage=USAGE)
        + "data: [DONE]\n\n",
        ["Order ", "1042 was ", "delivered."],
    ),
    "text and a tool call": (
        completion("Let me look.", [("", '{"order_id": 1042}')], "tool_calls"),
        chunk({"role": "assistant", "content": "Let me"})
        + chunk({"content": " look."})
        + chunk(call_fragment(0, id="call_0", type="function", function={"name": "lookup_order", "arguments": ""}))
        + chunk(call_fragment(0, function={"arguments": '{"order_'}))
        + chunk(call_fragment(0, function={"arguments": 'id": 1042}'}))
        + chunk({}, "tool_calls")
        + chunk(None, usage=USAGE)
        + "data: [DONE]\n\n",
        ["Let me", " look."],
    ),
    "two tool calls, their fragments interleaved": (
        completion(None, [("", '{"order_id": 1042}'), ("", '{"order_id": 1043}')], "tool_calls"),
        chunk({"role": "assistant", "content": None})
        + chunk(call_fragment(0, id="call_0", type="function", function={"name": "lookup_order", "arguments": '{"o'}))
        + chunk(call_fragment(1, id="call_1", type="function", function={"name": "lookup_order", "arguments": ""}))
        + chunk(call_fragment(1, function={"arguments": '{"order_id": 1043}'}))
        + chunk(call_fragment(0, function={"arguments": 'rder_id": 1042}'}))
        + chunk({}, "tool_calls")
        + chunk(None, usage=USAGE)
        + "data: [DONE]\n\n",
        [],
    ),
}


@pytest.mark.parametrize("case", OPENAI_STREAMS)
def test_openai_streamed_equals_plain(case: str) -> None:
    data, raw, pieces = OPENAI_STREAMS[case]
    answers, sink = Answers(plain(data), sse(raw)), Sink()
    client = openai(answers)
    unstreamed = client.create(SYSTEM, HISTORY, TOOLS)
    streamed = client.create(SYSTEM, HISTORY, TOOLS, text=sink)
    assert streamed == unstreamed == parse_openai_response(data)
    assert streamed.usage.cache_read_input_tokens == 512 and streamed.usage.input_tokens == 388
    assert sink.calls == pieces
    assert answers.sent(1) == {**answers.sent(0), "stream": True, "stream_options": {"include_usage": True}}


def test_an_error_chunk_inside_an_openai_stream_is_retried() -> None:
    _, raw, pieces = OPENAI_STREAMS["text only"]
    broken = chunk({"content": "Order "}) + 'data: {"error": {"message": "upstream died", "type": "server_error"}}\n\n'
    answers, sink = Answers(sse(broken), sse(raw)), Sink()
    response = openai(answers).create(SYSTEM, HISTORY, TOOLS, text=sink)
    assert response.text() == "Order 1042 was delivered." and response.retries == 1
    assert sink.calls == ["Order ", "<restart>", *pieces]


# -- what does not stream ----------------------------------------------------------------------------------------


def test_bedrock_accepts_a_sink_and_ignores_it() -> None:
    data = MESSAGES["text and a tool call"]

    class Runtime:
        def invoke_model(self, **params: Any) -> dict[str, Any]:
            assert "stream" not in json.loads(params["body"])
            return {"body": _Body(json.dumps(data).encode())}

    sink = Sink()
    client = BedrockClient(model_id="anthropic.claude-test", client=Runtime(), policy=policy())
    assert client.create(SYSTEM, HISTORY, TOOLS, text=sink) == parse_response(data)
    assert sink.calls == []


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self) -> bytes:
        return self.data


# -- the event reader -----------------------------------------------------------------------------------------


def test_server_sent_events_are_read_as_the_format_says() -> None:
    lines = [
        "event: a",
        "data: {",
        "data: 1}",
        "",
        ": comment",
        "",
        "data:bare",
        "",
        "id: 7",
        "event: b",
        "data: x",
    ]
    events: Iterator[tuple[str, str]] = sse_events(lines)
    assert list(events) == [("a", "{\n1}"), ("message", "bare"), ("b", "x")]
