"""Translation between the canonical history and each wire format: property-based round trips.

Histories are generated in the shape the loop sends (alternating roles, request-merged: tool results
first in the user message that answers the calls, text blocks non-empty) and must survive
canonical → OpenAI → canonical and canonical → Bedrock body exactly; every OpenAI request must pass
the simulated server's OpenAI validator, every Bedrock body the `anthropic` SDK's request types.
Responses survive OpenAI completion → `LlmResponse` the same way. The lossy corners are pinned by
example tests: text/tool-call order within a message, `stop_sequence`, cache writes, thinking blocks.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devstack.simulated_model.openai_facade import OpenAIError, canonical_messages, openai_completion, validate_openai
from support_agent.agent import history as hist
from support_agent.agent.model_output import TOOL_USE_ID
from support_agent.llm.base import LlmRequest, LlmResponse
from support_agent.llm.translate import (
    ERROR_PREFIX,
    INVALID_ARGUMENTS,
    bedrock_body,
    openai_messages,
    openai_request,
    openai_tool_choice,
    parse_openai_response,
    tool_input,
)
from support_agent.messages import Usage
from tests.support.sdk_judge import sdk_params

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies -------------------------------------------------------------------------------------

names = st.from_regex(r"[a-z][a-z_]{0,20}", fullmatch=True)
ids = st.from_regex(r"(toolu_|call_)[A-Za-z0-9_-]{1,24}", fullmatch=True)
texts = st.text(min_size=1, max_size=40).filter(lambda t: t.strip() != "")
scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
inputs = st.dictionaries(st.text(max_size=12), json_values, max_size=4)
# Tool result content: any text that does not itself start with the error prefix (ours are fenced).
result_texts = st.text(max_size=60).filter(lambda t: not t.startswith(ERROR_PREFIX))


def text_block(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


@st.composite
def assistant_messages(draw: st.DrawFn) -> dict[str, Any]:
    said = [text_block(t) for t in draw(st.lists(texts, max_size=2))]
    call_ids = draw(st.lists(ids, max_size=3, unique=True))
    uses = [{"type": "tool_use", "id": i, "name": draw(names), "input": draw(inputs)} for i in call_ids]
    if not said and not uses:
        said = [text_block(draw(texts))]
    return {"role": "assistant", "content": said + uses}


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Alternating user/assistant messages as the loop sends them, every tool call answered, every
    tool_use id unique in the conversation (the API refuses a repeat; the loop never stores one)."""
    out: list[dict[str, Any]] = []
    used: set[str] = set()
    for _ in range(draw(st.integers(1, 4))):
        pending = [b["id"] for b in out[-1]["content"] if b["type"] == "tool_use"] if out else []
        results = [
            {"type": "tool_result", "tool_use_id": i, "content": draw(result_texts), "is_error": draw(st.booleans())}
            for i in pending
        ]
        said = [text_block(t) for t in draw(st.lists(texts, min_size=0 if results else 1, max_size=2))]
        out.append({"role": "user", "content": results + said})
        assistant = draw(assistant_messages())
        for block in assistant["content"]:
            if block["type"] == "tool_use":
                while block["id"] in used:
                    block["id"] += "_"
                used.add(block["id"])
        out.append(assistant)
    if draw(st.booleans()):  # end on the assistant's answered calls plus a new user message, or not
        pending = [b["id"] for b in out[-1]["content"] if b["type"] == "tool_use"]
        results = [{"type": "tool_result", "tool_use_id": i, "content": "ok", "is_error": False} for i in pending]
        out.append({"role": "user", "content": [*results, text_block(draw(texts))]})
    elif any(b["type"] == "tool_use" for b in out[-1]["content"]):
        out.pop()  # a history the loop sends never ends with unanswered calls
    return out


def tools_for(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    called = {b["name"] for m in history for b in m["content"] if b["type"] == "tool_use"}
    return [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in sorted(called | {"x"})]


def strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


# -- canonical history <-> OpenAI --------------------------------------------------------------------


@PROPERTY
@given(histories(), st.text(min_size=1, max_size=30))
def test_openai_round_trip_is_lossless(history: list[dict[str, Any]], system: str) -> None:
    assert hist.problems(history) == []  # the generator makes what the loop makes
    wire = openai_messages(system, history)
    assert canonical_messages(wire) == (system, history)
    # JSON on the wire: arguments are strings, and the whole thing survives serialisation.
    assert canonical_messages(json.loads(json.dumps(wire))) == (system, history)


@PROPERTY
@given(histories(), st.sampled_from([None, {"type": "auto"}, {"type": "none"}, {"type": "any"}]))
def test_every_openai_request_passes_the_openai_validator(
    history: list[dict[str, Any]], choice: dict[str, Any] | None
) -> None:
    body = openai_request("gpt-test", 64, LlmRequest("sys", history, tools_for(history), choice))
    validate_openai(body)
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    for message in body["messages"]:
        for call in message.get("tool_calls", []):
            assert isinstance(call["function"]["arguments"], str)
            assert isinstance(json.loads(call["function"]["arguments"]), dict)


@PROPERTY
@given(histories())
def test_bedrock_body_is_the_canonical_history(history: list[dict[str, Any]]) -> None:
    tools = tools_for(history)
    body = bedrock_body(64, LlmRequest("sys", history, tools, {"type": "none"}))
    assert body["anthropic_version"] == "bedrock-2023-05-31" and "model" not in body
    assert strip_cache_control(body["messages"]) == history
    assert body["tool_choice"] == {"type": "none"}
    sdk_view = {k: v for k, v in body.items() if k != "anthropic_version"} | {"model": "m"}
    assert sdk_params().validate_python(sdk_view)


# -- responses ----------------------------------------------------------------------------------------


@st.composite
def responses(draw: st.DrawFn) -> LlmResponse:
    said = [text_block(draw(texts))] if draw(st.booleans()) else []
    uses = [
        {"type": "tool_use", "id": i, "name": draw(names), "input": draw(inputs)}
        for i in draw(st.lists(ids, max_size=3, unique=True))
    ]
    if uses:
        stop = draw(st.sampled_from(["tool_use", "max_tokens"]))
    else:
        stop = draw(st.sampled_from(["end_turn", "max_tokens", "refusal"]))
    usage = Usage(draw(st.integers(0, 10**6)), draw(st.integers(0, 10**5)), draw(st.integers(0, 10**6)), 0)
    return LlmResponse(stop, said + uses, usage, draw(names))


@PROPERTY
@given(responses())
def test_openai_response_round_trip_is_lossless(response: LlmResponse) -> None:
    completion = json.loads(json.dumps(openai_completion(response, completion_id="chatcmpl-1")))
    assert completion["usage"]["prompt_tokens"] == (
        response.usage.input_tokens + response.usage.cache_read_input_tokens
    )
    assert parse_openai_response(completion) == response


@PROPERTY
@given(json_values)
def test_a_hostile_completion_is_a_value_error_or_a_response_never_a_crash(data: Any) -> None:
    for body in (data, {"choices": [{"message": data, "finish_reason": data}], "usage": data}):
        try:
            out = parse_openai_response(body)
        except ValueError:
            continue
        assert isinstance(out, LlmResponse) and isinstance(out.content, list)


@PROPERTY
@given(st.text(max_size=80) | json_values)
def test_tool_arguments_never_raise_and_are_always_an_object(arguments: Any) -> None:
    value = tool_input(arguments)
    assert isinstance(value, dict)
    if isinstance(arguments, str) and arguments.strip():
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            assert value == parsed
        else:
            assert list(value) == [INVALID_ARGUMENTS] and arguments[:1000] in value[INVALID_ARGUMENTS]


@pytest.mark.slow
@SLOW
@given(histories(), st.text(min_size=1, max_size=30))
def test_openai_round_trip_long_run(history: list[dict[str, Any]], system: str) -> None:
    assert canonical_messages(openai_messages(system, history)) == (system, history)
    validate_openai(openai_request("m", 64, LlmRequest(system, history, tools_for(history), {"type": "none"})))


# -- the mapping, pinned by example ---------------------------------------------------------------------


def test_the_openai_request_shape() -> None:
    history = [
        {"role": "user", "content": "Where is order 1042?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {"order_id": 1042}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "<fenced/>", "is_error": True},
                {"type": "text", "text": "Hm?"},
            ],
        },
    ]
    tools = [{"name": "lookup_order", "description": "d", "input_schema": {"type": "object"}, "cache_control": {}}]
    body = openai_request(
        "gpt-x", 99, LlmRequest("Be kind.", history, tools, {"type": "none"}), max_tokens_param="max_tokens"
    )
    assert body == {
        "model": "gpt-x",
        "max_tokens": 99,
        "messages": [
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "Where is order 1042?"},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": '{"order_id":1042}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "ERROR: <fenced/>"},
            {"role": "user", "content": "Hm?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "lookup_order", "description": "d", "parameters": {"type": "object"}},
            }
        ],
        "tool_choice": "none",
    }
    assert "max_completion_tokens" in openai_request(
        "m", 5, LlmRequest("s", history, tools, None), max_tokens_param="max_completion_tokens"
    )
    assert "tool_choice" not in openai_request("m", 5, LlmRequest("s", history, tools, None))
    assert "tools" not in openai_request(
        "m", 5, LlmRequest("s", history, [], {"type": "none"})
    )  # choice only with tools


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, None),
        ({"type": "none"}, "none"),
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "tool", "name": "lookup_order"}, {"type": "function", "function": {"name": "lookup_order"}}),
    ],
)
def test_tool_choice_mapping(choice: dict[str, Any] | None, expected: Any) -> None:
    assert openai_tool_choice(choice) == expected


def test_disable_parallel_tool_use_maps_to_parallel_tool_calls() -> None:
    tools = [{"name": "t", "input_schema": {"type": "object"}}]
    body = openai_request(
        "m",
        5,
        LlmRequest("s", [{"role": "user", "content": "q"}], tools, {"type": "auto", "disable_parallel_tool_use": True}),
    )
    assert (body["tool_choice"], body["parallel_tool_calls"]) == ("auto", False)


def completion(message: dict[str, Any], finish: str | None = "stop", usage: Any = None) -> dict[str, Any]:
    return {"id": "chatcmpl-x", "choices": [{"message": message, "finish_reason": finish}], "usage": usage}


def test_usage_input_is_prompt_minus_cached_and_never_negative() -> None:
    usage = {"prompt_tokens": 2000, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 1536}}
    out = parse_openai_response(completion({"role": "assistant", "content": "hi"}, usage=usage))
    assert out.usage == Usage(464, 30, 1536, 0)
    odd = {"prompt_tokens": 10, "completion_tokens": None, "prompt_tokens_details": {"cached_tokens": 20}}
    assert parse_openai_response(completion({"content": "hi"}, usage=odd)).usage == Usage(0, 0, 20, 0)
    assert parse_openai_response(completion({"content": "hi"})).usage == Usage()


def test_refusal_field_and_content_filter_are_refusals() -> None:
    out = parse_openai_response(completion({"role": "assistant", "content": None, "refusal": "I can't."}))
    assert (out.stop_reason, out.text()) == ("refusal", "I can't.")
    out = parse_openai_response(completion({"role": "assistant", "content": None}, "content_filter"))
    assert (out.stop_reason, out.content) == ("refusal", [])


def test_unusable_tool_call_ids_get_a_stable_stand_in() -> None:
    call = {"id": "call with spaces/../", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    msg = {"role": "assistant", "content": None, "tool_calls": [call, {**call, "id": None}, {"function": {}}]}
    a, b = parse_openai_response(completion(msg, "tool_calls")), parse_openai_response(completion(msg, "tool_calls"))
    assert a == b and len(a.tool_uses()) == 2  # the call without a function name is dropped
    first, second = (u["id"] for u in a.tool_uses())
    assert first != second and all(u["id"].startswith("call_") for u in a.tool_uses())
    assert TOOL_USE_ID.match(first) and TOOL_USE_ID.match(second)  # the loop keeps them


def test_arguments_sent_as_an_object_or_empty_are_accepted() -> None:
    assert tool_input({"order_id": 1}) == {"order_id": 1}
    assert tool_input("") == {} and tool_input("  ") == {} and tool_input(None) == {}
    marker = tool_input('{"order_id": 10')[INVALID_ARGUMENTS]
    assert "not valid JSON" in marker and '{"order_id": 10' in marker
    assert "not a JSON object" in tool_input("[1]")[INVALID_ARGUMENTS]
    assert len(tool_input("x" * 5000)[INVALID_ARGUMENTS]) < 1200  # the raw text is clipped


def test_the_lossy_corners() -> None:
    # Text after a tool call is sent before it (OpenAI has one content field); thinking is dropped.
    message = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
            {"type": "text", "text": "after"},
        ],
    }
    (wire,) = openai_messages("", [message])
    assert wire["content"] == "after" and wire["tool_calls"][0]["id"] == "t1"
    _, (back,) = canonical_messages([wire])
    assert back["content"] == [
        {"type": "text", "text": "after"},
        {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
    ]
    # stop_sequence reads back as end_turn; a cache write counts as plain prompt tokens.
    response = LlmResponse("stop_sequence", [text_block("x")], Usage(10, 1, 5, 7), "m")
    out = parse_openai_response(openai_completion(response, completion_id="c"))
    assert (out.stop_reason, out.usage) == ("end_turn", Usage(17, 1, 5, 0))


def test_a_validator_that_can_fail() -> None:
    """The OpenAI validator used as a judge above refuses what OpenAI refuses."""
    good = openai_request("m", 5, LlmRequest("s", [{"role": "user", "content": "q"}], [], None))
    validate_openai(good)
    unanswered = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "user", "content": "next"},
        ],
    }
    stray = {
        "model": "m",
        "messages": [{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "c9", "content": "x"}],
    }
    object_args = json.loads(json.dumps(unanswered))
    object_args["messages"][1]["tool_calls"][0]["function"]["arguments"] = {}
    choice_without_tools = {**good, "tool_choice": "none"}
    for bad in (unanswered, stray, object_args, choice_without_tools):
        with pytest.raises(OpenAIError):
            validate_openai(bad)
