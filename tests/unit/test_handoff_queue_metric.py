"""The support inbox's health, measured by the approval sweep: how long the oldest OPEN hand-off has waited for a
person (``OldestOpenHandoffAge``, the alarm's metric) and how many hand-offs are OPEN and ASSIGNED.

Hand-offs are opened by the real store (an MCP call's ticket for set ages, an escalation in a conversation for
the claim), moved by store/takeover.py, and measured on the template's moto tables.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from support_agent import observability as obs
from support_agent.agent.loop import TurnResult
from support_agent.approvals.sweep import ApprovalSweeper
from support_agent.auth import Principal
from support_agent.clock import iso, parse_iso
from support_agent.store.approvals import ApprovalStore
from support_agent.store.handoffs import HandoffStore
from support_agent.store.takeover import Takeover
from tests.support.approvals import put_pending_approval
from tests.support.harness import Harness
from tests.support.scripted import answer, tool_use, tools

T = datetime(2030, 5, 1, 12, 0, 0, tzinfo=UTC)
DANA = Principal("agent-1", "support_staff", None, name="Dana")
LEAD = Principal("lead-1", "support_lead", None)


def _queue(h: Harness, at: datetime) -> dict[str, list[float]]:
    """One sweep run at ``at``: the hand-off metrics it emitted."""
    obs.metrics.clear_metrics()
    store = ApprovalStore(h.ddb, h.settings.approvals_table, h.settings.customer_data_table, h.settings.audit_table)
    ApprovalSweeper(store, h.ddb, h.sqs, h.queue_url, 168, 300, clock=lambda: at).run()
    names = (obs.OLDEST_OPEN_HANDOFF_AGE, obs.OPEN_HANDOFFS, obs.ASSIGNED_HANDOFFS)
    out = {name: list(m["Value"]) for name, m in obs.metrics.metric_set.items() if name in names}
    obs.metrics.clear_metrics()
    return out


def _measured(age: float, open_: int, assigned: int) -> dict[str, list[float]]:
    return {obs.OLDEST_OPEN_HANDOFF_AGE: [age], obs.OPEN_HANDOFFS: [open_], obs.ASSIGNED_HANDOFFS: [assigned]}


def _store(h: Harness) -> HandoffStore:
    return HandoffStore(h.ddb, h.settings.approvals_table, h.settings.conversations_table, h.settings.audit_table)


def _mcp_ticket(h: Harness, customer_id: int, opened: datetime) -> str:
    """An MCP call's ticket (no conversation) opened at ``opened``: it waits in the same queue."""
    ticket, created = _store(h).open(
        f"mcp_{customer_id}",
        1,
        customer_id,
        "wants a person",
        "mcp",
        "tu_1",
        "req-1",
        iso(opened),
        f"mcp#{customer_id}",
    )
    assert created
    return ticket.handoff_id


def _takeover(h: Harness) -> Takeover:
    s = h.settings
    return Takeover(h.ddb, s.approvals_table, s.conversations_table, s.audit_table)


def test_an_empty_inbox_reports_zero_whatever_approvals_wait(harness: Harness) -> None:
    env = {
        "CUSTOMER_DATA_TABLE": harness.settings.customer_data_table,
        "APPROVALS_TABLE": harness.settings.approvals_table,
        "AUDIT_TABLE": harness.settings.audit_table,
    }
    # A PENDING approval two hours old shares the table and its by_status index: it is no hand-off.
    put_pending_approval(harness.ddb, env, 7, 77_001, 1_000, iso(T - timedelta(hours=2)), "late")
    assert _queue(harness, T) == _measured(0, 0, 0)


def test_the_oldest_open_handoff_sets_the_age(harness: Harness) -> None:
    for customer, minutes in ((21, 1), (22, 50), (23, 10)):
        _mcp_ticket(harness, customer, T - timedelta(minutes=minutes))
    # The longest-waiting ticket of all was closed by a lead: it no longer counts.
    closed = _mcp_ticket(harness, 24, T - timedelta(hours=5))
    _takeover(harness).close(closed, LEAD, iso(T - timedelta(hours=1)))
    assert _queue(harness, T) == _measured(50 * 60, 3, 0)
    assert _queue(harness, T + timedelta(minutes=15)) == _measured(65 * 60, 3, 0)


def test_a_claimed_handoff_no_longer_counts_and_a_released_one_counts_from_its_opening(harness: Harness) -> None:
    h = harness
    h.model.script = [tools(tool_use("escalate_to_human", {"reason": "wants a person"})), answer("A teammate.")]
    result = h.turn("I want a human")
    assert isinstance(result, TurnResult)
    hid = result.trace[0]["toolCalls"][0]["result"]["handoff_id"]
    t = _takeover(h)
    ticket = _store(h).get(hid)
    assert ticket is not None and ticket.status == "OPEN"
    opened = parse_iso(ticket.created_at)

    assert _queue(h, opened + timedelta(minutes=20)) == _measured(20 * 60, 1, 0)
    t.claim(hid, DANA, iso(opened + timedelta(minutes=21)))
    assert _queue(h, opened + timedelta(minutes=30)) == _measured(0, 0, 1)
    t.release(hid, DANA, iso(opened + timedelta(minutes=31)))
    # Back in the queue: its customer has been waiting since the hand-off opened, not since the release.
    assert _queue(h, opened + timedelta(minutes=40)) == _measured(40 * 60, 1, 0)
    t.claim(hid, DANA, iso(opened + timedelta(minutes=41)))
    t.hand_back(hid, DANA, iso(opened + timedelta(minutes=45)))
    assert _queue(h, opened + timedelta(minutes=50)) == _measured(0, 0, 0)


def test_a_queue_that_cannot_be_read_leaves_the_sweep_green(harness: Harness) -> None:
    """Like the approvals' age: a missing datapoint is not a failed run (the sweep's own work is done)."""

    class Broken(HandoffStore):
        def oldest_open(self) -> None:
            raise RuntimeError("throttled")

    store = ApprovalStore(harness.ddb, harness.settings.approvals_table)
    broken = Broken(harness.ddb, harness.settings.approvals_table, "", "")
    obs.metrics.clear_metrics()
    sweeper = ApprovalSweeper(
        store, harness.ddb, harness.sqs, harness.queue_url, 168, 300, clock=lambda: T, handoffs=broken
    )
    assert sweeper.run().errors == 0
    assert obs.OLDEST_OPEN_HANDOFF_AGE not in obs.metrics.metric_set
    assert obs.OLDEST_PENDING_APPROVAL_AGE in obs.metrics.metric_set
    obs.metrics.clear_metrics()
