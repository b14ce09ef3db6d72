"""model_output.sanitize_content: what the hostile-model fuzz found, as plain unit cases, and that a
well-formed answer is stored exactly as it came."""

from __future__ import annotations

import json
import math

from support_agent.agent.model_output import MAX_CONTENT_BYTES, MAX_INPUT_BYTES, MAX_TOOL_USES, sanitize_content

REAL = [
    {"type": "thinking", "thinking": "The customer wants order 1042.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
    {"type": "text", "text": "Let me look that up."},
    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "lookup_order", "input": {"order_id": 1042}},
]


def test_a_well_formed_answer_is_stored_unchanged() -> None:
    assert sanitize_content(json.loads(json.dumps(REAL))) == REAL


def test_blocks_are_rebuilt_from_their_defined_fields() -> None:
    out = sanitize_content(
        [
            {"type": "text", "text": "hi", "citations": "garbage", "cache_control": {"type": "ephemeral"}},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {"order_id": 1}, "extra": 1},
            {"type": "thinking", "thinking": "unsigned"},
            {"type": "redacted_thinking"},
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "forged"},
            {"type": "tool_use", "id": "toolu_2", "name": "request refund now", "input": {}},
            "not a block",
        ]
    )
    assert out == [
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {"order_id": 1}},
    ]


def test_tool_uses_are_capped_and_unique() -> None:
    uses = [{"type": "tool_use", "id": f"toolu_{i % 100}", "name": "lookup_order", "input": {}} for i in range(300)]
    out = sanitize_content(uses)
    assert len(out) == MAX_TOOL_USES and len({b["id"] for b in out}) == MAX_TOOL_USES


def test_the_content_fits_an_item_and_oversized_inputs_do_not_run() -> None:
    out = sanitize_content(
        [
            {"type": "text", "text": "é" * 400_000},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "request_refund",
                "input": {"reason": "r" * (MAX_INPUT_BYTES + 1)},
            },
        ]
    )
    assert len(json.dumps(out, ensure_ascii=False).encode()) <= MAX_CONTENT_BYTES
    assert out[0]["text"].endswith("[…]") and out[1]["input"] == {}


def test_strings_become_valid_unicode_and_numbers_json() -> None:
    out = sanitize_content(
        [
            {"type": "text", "text": "half an emoji \ud83d"},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "request_refund",
                "input": {"amount_cents": math.inf, "x": math.nan},
            },
        ]
    )
    json.dumps(out, allow_nan=False).encode("utf-8")  # raises if either survived
    assert out[0]["text"] == "half an emoji \ufffd"
    assert out[1]["input"] == {"amount_cents": None, "x": None}


def test_nothing_usable_is_still_an_answer() -> None:
    assert sanitize_content([{"type": "text", "text": "   "}, {"type": "image"}]) == [
        {"type": "text", "text": "(no answer)"}
    ]
    assert sanitize_content("not a list") == [{"type": "text", "text": "(no answer)"}]


def test_a_tool_use_id_already_in_the_conversation_is_not_stored_again() -> None:
    """The API refuses any request in which a tool_use id repeats, in any message."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {"order_id": 1}}
    fresh = {**use, "id": "toolu_2"}
    assert sanitize_content([use, fresh], taken={"toolu_1"}) == [fresh]
    assert sanitize_content([use], taken={"toolu_1"}) == [{"type": "text", "text": "(no answer)"}]
    assert sanitize_content([use, fresh]) == [use, fresh]


def test_a_fence_tag_that_happens_to_hold_an_id_is_no_leak() -> None:
    from tests.reliability.checks import leaks

    fenced = '<untrusted-data-730b2001b666b405>\n{"error":"not executed"}\n</untrusted-data-730b2001b666b405>'
    assert leaks(fenced, ["Okafor"], [2001]) == []
    assert leaks(fenced.replace("not executed", "order 2001"), ["Okafor"], [2001]) == ["2001"]
