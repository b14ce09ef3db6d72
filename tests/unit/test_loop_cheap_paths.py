"""The loop's cheaper paths keep what they replaced (issue 21, "The loop", round two).

`to_item`/`to_values` write str, int and bool attributes without boto3's `TypeSerializer`, and must give
exactly what it gives; the Logger no longer has Powertools try `json.loads` on every event name, and must
still log a JSON message decoded; the results message and its audit rows now take one timestamp, that of
their transaction. No timing here: each assertion compares outputs.
"""

from __future__ import annotations

import itertools
import json
import logging
from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer
from hypothesis import given
from hypothesis import strategies as st

from support_agent import observability as obs
from support_agent.store.dynamo import to_item, to_values
from tests.support.harness import Harness
from tests.support.scripted import answer, tool_use, tools

_scalars = (
    st.text(max_size=20)
    | st.integers(min_value=-(10**40), max_value=10**40)  # past 38 digits boto3 refuses: so must we
    | st.booleans()
    | st.none()
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
    | st.binary(max_size=8)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


def _boto3(serialize: Any, values: dict[str, Any]) -> dict[str, Any] | Exception:
    try:
        return serialize(values)
    except Exception as exc:  # the same error class is the expectation
        return exc


@given(st.dictionaries(st.text(min_size=1, max_size=8), _values, max_size=8))
def test_to_item_and_to_values_are_boto3s_serializer(values: dict[str, Any]) -> None:
    ser = TypeSerializer()
    for ours, theirs in (
        (to_item, lambda v: {k: ser.serialize(x) for k, x in v.items() if x is not None}),
        (to_values, lambda v: {k: ser.serialize(x) for k, x in v.items()}),
    ):
        expected, got = _boto3(theirs, values), _boto3(ours, values)
        if isinstance(expected, Exception):
            assert type(got) is type(expected)
        else:
            assert got == expected


def test_a_bool_stays_a_bool_and_a_decimal_goes_through_boto3() -> None:
    assert to_item({"a": True, "b": 0, "c": Decimal("1.50")}) == {
        "a": {"BOOL": True},
        "b": {"N": "0"},
        "c": {"N": "1.50"},
    }


def _message_of(msg: str) -> Any:
    record = logging.makeLogRecord({"msg": msg, "levelname": "INFO", "funcName": "f", "lineno": 1})
    return json.loads(obs.logger.registered_formatter.format(record))["message"]


def test_an_event_name_is_logged_as_is_without_a_json_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real = json.loads

    def spy(text: Any, *args: Any, **kwargs: Any) -> Any:
        if text in ("model_call", "123"):
            parsed.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", spy)
    assert _message_of("model_call") == "model_call"
    assert _message_of("123") == "123"  # text, as our messages are: only objects and arrays are decoded
    assert parsed == []


def test_a_json_message_is_still_logged_decoded_and_a_broken_one_as_text() -> None:
    assert _message_of('{"event": "x", "n": 1}') == {"event": "x", "n": 1}
    assert _message_of("[1, 2]") == [1, 2]
    assert _message_of("{not json") == "{not json"


def test_the_results_message_and_its_audit_rows_share_their_write_time(harness: Harness) -> None:
    ticks = itertools.count()
    harness.agent.now = lambda: f"2026-01-01T00:00:{next(ticks):02d}.000Z"
    harness.model.script = [
        tools(tool_use("lookup_order", {"order_id": 1042}), tool_use("list_invoices", {})),
        answer("Delivered."),
    ]
    cid = harness.turn("Where is order 1042?").conversation_id
    messages = harness.conversations.load(cid)
    results = next(m for m in messages if m.role == "user" and m.content[0].get("type") == "tool_result")
    rows = [r for r in harness.audit.list_stream(cid) if r.get("action") == "tool_call"]
    assert len(rows) == 2 and {r["created_at"] for r in rows} == {results.created_at}
    ahead = [m.created_at for m in messages if m.role == "assistant"]
    assert results.created_at not in ahead  # each write still has its own time
