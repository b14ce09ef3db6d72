"""Streaming over real HTTP against the simulated model (issue 36): both wire formats stream the same answer as the
plain call, and with `SIMULATED_MODEL_DELAY_SECONDS` a streamed answer arrives piece by piece (what `make dev` shows).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devstack.simulated_model import SimulatedModel, SimulatedModelServer, start
from devstack.simulated_model import server as server_module
from support_agent.llm.anthropic import AnthropicClient
from support_agent.llm.base import LlmResponse
from support_agent.llm.http_client import HttpClient
from support_agent.llm.openai import OpenAIClient
from tests.unit.test_llm_streaming import Sink
from tests.unit.test_simulated_model import TOOLS

MODEL = "claude-sonnet-4-5"
QUESTIONS = [
    "Hi there!",
    "Where is my order 1042? Also refund it.",
    "Please refund orders 1042 and 1043",
    "I want to talk to a human",
]
BEARER = {"authorization": "Bearer sim"}


@pytest.fixture(scope="module")
def server() -> Iterator[SimulatedModelServer]:
    s = start(port=0)
    yield s
    s.stop()


def client(provider: str, server: SimulatedModelServer) -> HttpClient:
    if provider == "anthropic":
        return AnthropicClient(api_key="sim", model=MODEL, base_url=server.url)
    return OpenAIClient(api_key="sim", model=MODEL, base_url=f"{server.url}/v1")


def without_ids(response: LlmResponse) -> tuple[Any, ...]:
    """Ids differ per call (the server counts its calls); everything else must be the same."""
    content = [{k: v for k, v in b.items() if k != "id"} for b in response.content]
    return content, response.stop_reason, response.usage, response.model, response.retries


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("question", QUESTIONS)
def test_streamed_equals_plain_over_http(server: SimulatedModelServer, provider: str, question: str) -> None:
    llm, sink = client(provider, server), Sink()
    history = [{"role": "user", "content": question}]
    try:
        unstreamed = llm.create("You are the shop's support assistant.", history, TOOLS)
        streamed = llm.create("You are the shop's support assistant.", history, TOOLS, text=sink)
    finally:
        llm.close()
    assert without_ids(streamed) == without_ids(unstreamed)
    assert streamed.usage.input_tokens > 0 and streamed.usage.output_tokens > 0
    assert sink.text() == streamed.text() and "<restart>" not in sink.calls
    assert len(sink.calls) > 1  # it came in pieces, not whole


def test_the_openai_face_streams_as_openai_does(server: SimulatedModelServer) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "order 1042"}], "tools": openai_tools()}
    url = f"{server.url}/v1/chat/completions"
    r = httpx.post(url, json={**body, "stream": True, "stream_options": {"include_usage": True}}, headers=BEARER)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    frames = [f.removeprefix("data: ") for f in r.text.split("\n\n") if f]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]][-1] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] > 0
    assert all(c["usage"] is None for c in chunks[:-1])
    fragments = [t for c in chunks[:-1] for t in c["choices"][0]["delta"].get("tool_calls", [])]
    assert fragments[0]["id"].startswith("call_") and fragments[0]["function"]["name"] == "lookup_order"
    assert json.loads("".join(f["function"]["arguments"] for f in fragments)) == {"order_id": 1042}
    without_usage = httpx.post(url, json={**body, "stream": True}, headers=BEARER)
    assert '"usage"' not in without_usage.text and without_usage.text.endswith("data: [DONE]\n\n")
    refused = httpx.post(url, json={**body, "stream_options": {"include_usage": True}}, headers=BEARER)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "stream_options"


def openai_tools() -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}
        for t in TOOLS
        if "input_schema" in t
    ]


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        (
            "/v1/messages",
            {"model": MODEL, "max_tokens": 512, "messages": [{"role": "user", "content": "hello"}]},
            {"x-api-key": "sim", "anthropic-version": "2023-06-01"},
        ),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}, BEARER),
    ],
)
def test_a_slow_streamed_answer_spreads_its_delay_over_its_text(
    path: str, body: dict[str, Any], headers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plain answer waits up front; the streamed one pauses only before each of its text pieces."""
    up_front: list[float] = []
    monkeypatch.setattr(server_module.time, "sleep", up_front.append)
    model = SimulatedModel(delay_seconds=1.2)
    plain = model.post(path, headers, json.dumps(body).encode())
    assert (plain.status, plain.paced, up_front) == (200, None, [1.2])
    up_front.clear()
    reply = model.post(path, headers, json.dumps({**body, "stream": True}).encode())
    assert reply.status == 200 and reply.paced is not None and up_front == []
    assert b"".join(frame for _, frame in reply.paced) == reply.body
    waits = [wait for wait, _ in reply.paced]
    text_frames = [frame for wait, frame in reply.paced if wait > 0]
    assert sum(waits) == pytest.approx(1.2) and len(text_frames) > 1
    marker = b'"type":"text_delta"' if path == "/v1/messages" else b'"delta":{"content":"'
    assert all(marker in f for f in text_frames) and len(text_frames) == reply.body.count(marker)
    assert SimulatedModel().post(path, headers, json.dumps({**body, "stream": True}).encode()).paced is None


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_paced_stream_reaches_the_sink_before_the_server_has_written_it_all(provider: str) -> None:
    """The server holds its second text piece until the client's sink has seen the first: were the stream read
    whole before any text went to the sink, the hold would run out (and say so) instead of being released."""
    first_piece_seen = threading.Event()
    released: list[bool] = []

    class Watching(Sink):
        def delta(self, piece: str) -> None:
            super().delta(piece)
            first_piece_seen.set()

    def hold(seconds: float) -> None:
        if len(released) < 2:  # before the first text frame nothing has been sent; hold the second one
            released.append(len(released) == 0 or first_piece_seen.wait(10))

    with start(port=0, delay_seconds=0.5) as server:
        server.model.sleep = hold
        llm, sink = client(provider, server), Watching()
        try:
            response = llm.create("system", [{"role": "user", "content": "Hi there!"}], TOOLS, text=sink)
        finally:
            llm.close()
    assert released == [True, True]
    assert sink.text() == response.text() and len(sink.calls) > 2
