"""The MCP client: an outside server's tools in the loop (allowlist, pins, faults) and TOOL_MODE=mcp beside it.

The outside server is devstack's carrier stub (the official SDK over real HTTP on 127.0.0.1), its token in
moto's Secrets Manager; the loop is the harness's (real stores on moto, a scripted model).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.carrier_mcp import POISONED_DESCRIPTION, CarrierStub
from support_agent.agent.untrusted import unfence
from support_agent.mcp import outside
from support_agent.mcp.allowlist import parse_servers
from support_agent.messages import Deadline
from support_agent.store.audit import AuditStore
from tests.support.carrier import TRACK, with_carrier
from tests.support.harness import Harness
from tests.support.scripted import answer, tool_use, tools

OWN_PARCEL = "CR10430001"  # customer 7's, order 1043
OTHER_PARCEL = "CR20010001"  # customer 8's


@pytest.fixture
def stub() -> Iterator[CarrierStub]:
    with CarrierStub("stub-token-for-tests", slow_seconds=5) as s:
        yield s


@pytest.fixture
def rejected(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every McpToolRejected value the client emits."""
    seen: list[float] = []
    real = outside.emit

    def emit(name: str, value: float = 1) -> None:
        if name == "McpToolRejected":
            seen.append(value)
        real(name, value)

    monkeypatch.setattr(outside, "emit", emit)
    return seen


def names(h: Harness) -> list[str]:
    return [s["name"] for s in h.agent.tools.specs]


def track_turn(h: Harness, number: str = OWN_PARCEL, customer_id: int = 7, **input: Any) -> dict[str, Any]:
    """One turn whose model tracks ``number``; the tool_result block the model got back."""
    h.model.script = [tools(tool_use(TRACK, {"tracking_number": number, **input}, id="toolu_track1")), answer("ok")]
    h.turn("where is my parcel?", customer_id=customer_id)
    block = h.model.requests[1].messages[-1]["content"][0]
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_track1"
    return block


def test_reviewed_tool_is_offered_after_ours_without_the_customer_argument(stub: CarrierStub, harness: Harness) -> None:
    own = list(names(harness))
    with_carrier(harness, stub)
    assert names(harness) == [*own, TRACK]  # cancel_shipment (not read-only) is not offered
    spec = harness.agent.tools.specs[-1]
    assert "customer_id" not in spec["input_schema"]["properties"]
    assert spec["input_schema"]["required"] == ["tracking_number"]
    assert spec["description"] == stub.definitions()[0]["description"]


def test_the_verified_customer_goes_into_the_hidden_argument(stub: CarrierStub, harness: Harness) -> None:
    with_carrier(harness, stub)
    block = track_turn(harness)
    assert not block["is_error"]
    assert unfence(block["content"])["status"] == "IN_TRANSIT"
    assert stub.calls[-1] == ("track_parcel", {"tracking_number": OWN_PARCEL, "customer_id": 7})
    # Another customer's parcel answers like an unknown one: the id is the principal's, not the model's.
    harness.model.requests.clear()
    other = track_turn(harness, OTHER_PARCEL)
    assert other["is_error"] and "no parcel" in json.dumps(unfence(other["content"]))


def test_a_model_supplying_the_customer_argument_is_refused_before_the_server(
    stub: CarrierStub, harness: Harness
) -> None:
    with_carrier(harness, stub)
    harness.model.script = [
        tools(tool_use(TRACK, {"tracking_number": OTHER_PARCEL, "customer_id": 8}, id="toolu_x")),
        answer("ok"),
    ]
    harness.turn("where is parcel CR20010001?")
    block = harness.model.requests[1].messages[-1]["content"][0]
    assert block["is_error"] and "customer_id is filled in" in unfence(block["content"])["error"]
    assert stub.calls == []


def test_input_is_checked_against_the_schema_the_model_saw(stub: CarrierStub, harness: Harness) -> None:
    with_carrier(harness, stub)
    harness.model.script = [tools(tool_use(TRACK, {"tracking_number": 7}, id="toolu_x")), answer("ok")]
    harness.turn("track 7")
    block = harness.model.requests[1].messages[-1]["content"][0]
    assert block["is_error"] and unfence(block["content"])["error"].startswith("invalid input: tracking_number")
    assert stub.calls == []


def test_each_outside_call_is_audited_in_the_conversation(stub: CarrierStub, harness: Harness) -> None:
    with_carrier(harness, stub)
    harness.model.script = [tools(tool_use(TRACK, {"tracking_number": OWN_PARCEL}, id="toolu_a")), answer("ok")]
    cid = harness.turn("where is my parcel?").conversation_id
    rows = [r for r in harness.audit.list_stream(cid) if r["action"] == "tool_call"]
    assert len(rows) == 1
    assert rows[0]["tool"] == TRACK and rows[0]["outcome"] == "ok" and rows[0]["customer_id"] == 7
    assert json.loads(rows[0]["input"]) == {"tracking_number": OWN_PARCEL}
    s = harness.settings
    store = AuditStore(harness.ddb, s.audit_table, s.conversations_table, s.approvals_table, s.customer_data_table)
    assert store.verify_stream(cid)["status"] == "ok"


CHANGES = {
    "description": lambda d: {**d, "description": POISONED_DESCRIPTION},
    "schema": lambda d: {
        **d,
        "inputSchema": {
            **d["inputSchema"],
            "properties": {**d["inputSchema"]["properties"], "note": {"type": "string"}},
        },
    },
    "annotations": lambda d: {**d, "annotations": {**d["annotations"], "title": "Track"}},
    "renamed": lambda d: {**d, "name": "track_parcel_v2"},
    "not_read_only": lambda d: {**d, "annotations": {**d["annotations"], "readOnlyHint": False}},
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_definition_never_reaches_the_model_and_counts(
    stub: CarrierStub, change: str, rejected: list[float]
) -> None:
    entry = parse_servers(json.dumps([{"name": "carrier", "url": stub.url, "tools": PINS}]))[0]
    listed = [CHANGES[change](d) if d["name"] == "track_parcel" else d for d in stub.definitions()]
    accepted, rejections = outside.review(entry, listed)
    assert accepted == []
    reasons = {r.tool: r.reason for r in rejections}
    expected = {
        "renamed": ("track_parcel_v2", "not_allowlisted"),
        "not_read_only": ("track_parcel", "not_read_only"),
    }.get(change, ("track_parcel", "changed"))
    assert reasons[expected[0]] == expected[1]
    assert reasons["cancel_shipment"] == "not_allowlisted"


PINS = {"track_parcel": {"sha256": "ce57bb09e07ca07c1ce12415c2a846c3fec8d981fcd26af674f8f67f6481cfae"}}


def test_a_declined_tool_is_not_counted_but_a_new_one_is(stub: CarrierStub, rejected: list[float]) -> None:
    entry = parse_servers(
        json.dumps([{"name": "carrier", "url": stub.url, "tools": PINS, "declined": ["cancel_shipment"]}])
    )[0]
    new = {**stub.definitions()[0], "name": "reroute_parcel"}
    accepted, rejections = outside.review(entry, [*stub.definitions(), new])
    assert [t.name for t in accepted] == [TRACK]
    assert [(r.tool, r.reason, r.alarming) for r in rejections] == [
        ("cancel_shipment", "declined", False),
        ("reroute_parcel", "not_allowlisted", True),
    ]
    with pytest.raises(ValueError, match="both allowed and declined"):
        parse_servers(json.dumps([{"name": "c", "url": stub.url, "tools": PINS, "declined": ["track_parcel"]}]))


def test_a_tool_listed_twice_is_reviewed_once_the_repeat_rejected(stub: CarrierStub) -> None:
    """The first listing decides; a repeat (here a poisoned one) is never offered, whatever it says."""
    entry = parse_servers(json.dumps([{"name": "carrier", "url": stub.url, "tools": PINS}]))[0]
    track = next(d for d in stub.definitions() if d["name"] == "track_parcel")
    poisoned = CHANGES["description"](track)
    accepted, rejections = outside.review(entry, [track, poisoned, track])
    assert [t.spec["description"] for t in accepted] == [track["description"]]
    assert [(r.tool, r.reason, r.alarming) for r in rejections] == [
        ("track_parcel", "duplicate", True),
        ("track_parcel", "duplicate", True),
    ]


def test_a_server_listing_its_tools_twice_offers_each_once_and_counts_the_repeats(
    stub: CarrierStub, harness: Harness, rejected: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    listed_once = outside.OutsideServer.list_tools
    monkeypatch.setattr(outside.OutsideServer, "list_tools", lambda self: listed_once(self) * 2)
    own = list(names(harness))
    with_carrier(harness, stub)
    assert names(harness) == [*own, TRACK]  # once, not twice
    assert rejected == [2]  # the repeats of track_parcel and of the declined cancel_shipment
    assert not track_turn(harness)["is_error"]


def test_a_non_read_only_tool_is_refused_even_when_pinned(stub: CarrierStub) -> None:
    from support_agent.mcp.pins import tool_pin

    cancel = next(d for d in stub.definitions() if d["name"] == "cancel_shipment")
    entry = parse_servers(
        json.dumps([{"name": "carrier", "url": stub.url, "tools": {"cancel_shipment": {"sha256": tool_pin(cancel)}}}])
    )[0]
    accepted, rejections = outside.review(entry, [cancel])
    assert accepted == [] and rejections[0].reason == "not_read_only"


def test_the_rug_pull_removes_the_tool_at_the_next_refresh_and_raises_the_alarm_metric(
    stub: CarrierStub, harness: Harness, rejected: list[float]
) -> None:
    clock = [0.0]
    with_carrier(harness, stub, refresh_seconds=15)
    source = harness.agent.tools._outside  # type: ignore[attr-defined]
    source._clock = lambda: clock[0]
    source._next_refresh = 15.0
    assert TRACK in names(harness)
    assert rejected == []  # cancel_shipment is declined: reviewed, never offered, not counted
    stub.set_description("track_parcel", POISONED_DESCRIPTION)
    clock[0] = 10.0
    assert TRACK in names(harness)  # not yet listed again
    clock[0] = 16.0
    assert TRACK not in names(harness)
    assert rejected == [1]
    # A model that still calls it (its name was in an earlier request) gets an error, and the server no call.
    block = track_turn(harness)
    assert block["is_error"] and "not available" in unfence(block["content"])["error"]
    assert stub.calls == []
    stub.set_description("track_parcel", None)  # reviewed and restored: offered again at the next refresh
    clock[0] = 40.0
    assert TRACK in names(harness)


def test_a_server_down_at_refresh_keeps_the_tools_it_had_and_calls_fail_softly(
    stub: CarrierStub, harness: Harness
) -> None:
    with_carrier(harness, stub, refresh_seconds=15)
    stub.stop()
    source = harness.agent.tools._outside  # type: ignore[attr-defined]
    source._next_refresh = 0.0
    assert TRACK in names(harness)
    block = track_turn(harness)
    assert block["is_error"] and "unavailable" in unfence(block["content"])["error"]


@pytest.mark.parametrize(
    ("fault", "words"),
    [("garbage", "did not answer as an MCP server"), ("error", "answered with an error"), ("huge", "more than")],
)
def test_faults_become_is_error_results_the_turn_survives(
    stub: CarrierStub, harness: Harness, fault: str, words: str
) -> None:
    with_carrier(harness, stub, timeoutSeconds=3)
    stub.fault = fault
    block = track_turn(harness)
    assert block["is_error"], block
    assert words in unfence(block["content"])["error"]
    assert len(block["content"]) < harness.settings.tool_output_max_chars + 200


def test_a_slow_server_is_cut_at_the_turns_deadline(stub: CarrierStub, harness: Harness) -> None:
    with_carrier(harness, stub)  # the server's own timeout: 5 s
    stub.fault = "slow"
    harness.model.script = [tools(tool_use(TRACK, {"tracking_number": OWN_PARCEL}, id="toolu_s")), answer("ok")]
    started = time.monotonic()
    result = harness.agent.run_turn(
        harness_principal(),
        7,
        None,
        "where is it?",
        "req-slow",
        Deadline.after(3.0),  # 1 s kept for the store
    )
    assert time.monotonic() - started < 4.5
    stored = [m.as_message() for m in harness.conversations.load(result.conversation_id)]
    block = next(b for m in stored for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    assert block["is_error"] and "did not answer within 2.0 s" in unfence(block["content"])["error"]


def test_a_server_that_is_down_at_start_offers_nothing_and_the_turn_goes_on(
    stub: CarrierStub, harness: Harness
) -> None:
    stub.stop()
    own = list(names(harness))
    with_carrier(harness, stub)
    assert names(harness) == own
    harness.model.script = [tools(tool_use(TRACK, {"tracking_number": OWN_PARCEL}, id="toolu_d")), answer("ok")]
    result = harness.turn("where is my parcel?")
    assert result.reply == "ok"


def test_a_wrong_credential_is_an_unavailable_server(stub: CarrierStub, harness: Harness) -> None:
    own = list(names(harness))
    with_carrier(harness, stub, token="not-the-servers-token")
    assert names(harness) == own  # listing answered 401: nothing offered


def test_tool_mode_mcp_with_an_outside_server(stub: CarrierStub, aws: None) -> None:
    from tests.support.harness import make_harness

    h = make_harness(TOOL_MODE="mcp")
    own = [s["name"] for s in h.agent.tools.specs]
    with_carrier(h, stub)
    assert names(h) == [*own, TRACK]
    h.model.script = [
        tools(
            tool_use("lookup_order", {"order_id": 1043}, id="toolu_o"),
            tool_use(TRACK, {"tracking_number": OWN_PARCEL}, id="toolu_t"),
        ),
        answer("ok"),
    ]
    h.turn("where is order 1043?")
    blocks = h.model.requests[1].messages[-1]["content"]
    assert [b["is_error"] for b in blocks] == [False, False]
    assert unfence(blocks[0]["content"])["order_id"] == 1043
    assert unfence(blocks[1]["content"])["order_id"] == 1043


def harness_principal() -> Any:
    from support_agent.auth import Principal

    return Principal("customer-7", "customer", 7)
