"""The daily rollup and GET /api/reports/daily on the template deployed into moto.

One day of outcome items, refund ledger rows, approvals and hand-off tickets is written directly into the stack's
tables (the day of tests/unit/test_rollup.py, with the keys the tables need, and neighbours on the days around it
that must not count); DailyRollupFunction's handler runs on a fixed clock; the report equals the hand-computed
figures. Leads only; CSV; bad ranges 400; a completed day's metrics emitted once.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from devstack.stack import Stack
from support_agent import wiring
from support_agent.config import get_settings
from support_agent.store.dynamo import to_item
from tests.integration.conftest import Api
from tests.support.metrics import emf_total
from tests.unit.test_rollup import APPROVALS, DAY, LEDGER, OUTCOMES, TICKETS

# The first run after the day settled (SETTLE: two hours past midnight).
AFTER_DAY = datetime(2030, 3, 2, 3, 0, tzinfo=UTC)


def seed_day(stack: Stack, day: str = DAY, ddb: Any = None) -> None:
    """The hand-made day's items in the deployed tables (idempotent: the same keys each time); ``day`` replaces
    DAY in every time stamp."""
    ddb = boto3.client("dynamodb") if ddb is None else ddb
    tables = stack.physical_ids
    swap = (lambda v: v.replace(DAY, day)) if day != DAY else (lambda v: v)

    def put(table: str, item: dict[str, Any]) -> None:
        item = {k: swap(v) if isinstance(v, str) else v for k, v in item.items()}
        ddb.put_item(TableName=tables[table], Item=to_item(item))

    for n, o in enumerate(OUTCOMES):
        put("ConversationsTable", {**o, "conversation_id": f"outcome#conv_{day}_{n}"})
    # Neighbours: a day earlier, a day later (never counted).
    put("ConversationsTable", {**OUTCOMES[0], "conversation_id": f"outcome#conv_{day}_x", "quiet_day": "2030-02-28"})
    for n, row in enumerate(LEDGER):
        put("CustomerDataTable", {**row, "customer_id": 4242, "sk": f"LEDGER#{day}#{n}", "ledger": "LEDGER"})
    put(
        "CustomerDataTable",
        {
            **LEDGER[0],
            "customer_id": 4242,
            "sk": "LEDGER#x",
            "ledger": "LEDGER",
            "created_at": "2030-02-28T23:59:59.999Z",
        },
    )
    for n, approval in enumerate(APPROVALS):
        put(
            "ApprovalsTable",
            {
                **approval,
                "approval_id": f"apr_{day}_{n}",
                "entity": "APPROVAL",
                "customer_id": 4242,
                "order_id": 1,
                "approval_ref": "x",
            },
        )
    put(
        "ApprovalsTable",
        {**APPROVALS[0], "approval_id": f"apr_{day}_x", "entity": "APPROVAL", "created_at": "2030-03-02T00:00:00.000Z"},
    )
    for n, ticket in enumerate(TICKETS):
        put("ApprovalsTable", {**ticket, "approval_id": f"hof_{day}_{n}", "entity": "HANDOFF", "customer_id": 4242})


def run_rollup(api: Api, now: datetime, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """DailyRollupFunction's handler (its environment, its metrics flush) with the job's clock at ``now``."""
    api.use_function("DailyRollupFunction")
    monkeypatch.setattr(wiring, "rollup_job", lambda: wiring.build_rollup_job(get_settings(), clock=lambda: now))
    out: dict[str, Any] = api.handlers["DailyRollupFunction"]({"source": "aws.events", "id": "evt-1"}, None)
    return out


def raw(api: Api, path: str, token: str) -> tuple[int, str, dict[str, str]]:
    """A GET whose body is not JSON (the CSV): the handler's answer as it is."""
    api.use_function("ApprovalsFunction")
    handler = api.handlers["ApprovalsFunction"]
    seen: list[dict[str, Any]] = []

    def keep(event: dict[str, Any], context: Any) -> dict[str, Any]:
        out = handler(copy.deepcopy(event), context)
        seen.append(out)
        return {**out, "body": json.dumps(out.get("body", ""))}

    api.handlers["ApprovalsFunction"] = keep
    try:
        status, _body, headers = api.call("GET", path, token=token)
    finally:
        api.handlers["ApprovalsFunction"] = handler
    return status, seen[0]["body"], headers


def test_the_report_is_the_hand_computed_day(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_day(api.stack)
    assert run_rollup(api, AFTER_DAY, monkeypatch)["days"] == ["2030-03-01", "2030-03-02"]
    status, body, _ = api.call("GET", f"/api/reports/daily?from={DAY}&to={DAY}", token=api.lead())
    assert status == 200, body
    assert (body["from"], body["to"]) == (DAY, DAY)
    (day,) = body["days"]
    assert day["complete"] is True
    assert (day["conversations"], day["turns"]) == (6, 13)
    assert day["outcomes"] == {"resolved_by_agent": 2, "escalated": 2, "abandoned": 1, "waiting_on_lead": 1}
    assert day["escalation_reasons"] == {"after_refusal": 1, "requested": 1}
    assert (day["resolution_rate"], day["escalation_rate"]) == (0.3333, 0.3333)
    assert (day["csat"], day["thumbs_up_share"]) == (0.6667, 0.75)
    refunds = day["refunds"]
    assert (refunds["direct_requested"], refunds["direct_refunded"], refunds["approved_refunded"]) == (3, 2, 2)
    assert (refunds["held_requested"], refunds["held_rejected"], refunds["held_expired"]) == (5, 1, 1)
    assert refunds["refunded"] == 4 and refunds["refunded_cents"] == {"EUR": 1_000, "USD": 3_700}
    assert refunds["decision"] == {"count": 3, "median_s": 600, "p95_s": 7_200}
    assert refunds["settlement"] == {"count": 4, "median_s": 60, "p95_s": 630}
    handoffs = day["handoffs"]
    assert (handoffs["opened"], handoffs["claimed"], handoffs["closed"], handoffs["returned_to_bot"]) == (4, 3, 1, 1)
    assert handoffs["to_claim"] == {"count": 3, "median_s": 300, "p95_s": 1_200}
    assert day["actions"] == {"cancel_order": 2, "change_address": 2}
    assert day["cost_per_conversation_usd"] == round(0.004255 / 6, 6)
    assert day["cost_per_resolved_usd"] == round(0.004255 / 2, 6)
    # Counts only: the stored item holds no customer, comment or conversation.
    item = boto3.client("dynamodb").get_item(
        TableName=api.stack.physical_ids["ConversationsTable"],
        Key=to_item({"conversation_id": "rollup#daily", "seq": 20300301}),
    )["Item"]
    stored = json.dumps(item)
    assert "4242" not in stored and "conv_" not in stored and "wet" not in stored and "words" not in stored


def test_the_default_range_is_the_last_14_days_and_absent_days_are_left_out(api: Api) -> None:
    status, body, _ = api.call("GET", "/api/reports/daily", token=api.lead())
    assert status == 200, body
    first, last = datetime.fromisoformat(body["from"]), datetime.fromisoformat(body["to"])
    assert (last - first).days == 13 and body["to"] == datetime.now(UTC).date().isoformat()
    assert all(d["day"] != DAY for d in body["days"])


def test_csv_download(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_day(api.stack)
    run_rollup(api, AFTER_DAY, monkeypatch)
    status, text, headers = raw(api, f"/api/reports/daily?from=2030-02-28&to={DAY}&format=csv", api.lead())
    assert status == 200, text
    lowered = {k.lower(): v for k, v in headers.items()}
    assert lowered["content-type"].startswith("text/csv")
    assert lowered["content-disposition"] == 'attachment; filename="reports-daily-2030-02-28-2030-03-01.csv"'
    header, *rows = [line.split(",") for line in text.splitlines()]
    by_day = {r[0]: dict(zip(header, r, strict=True)) for r in rows}
    assert by_day[DAY]["conversations"] == "6" and by_day[DAY]["refunded_cents.USD"] == "3700"
    assert by_day[DAY]["refunds.settlement.p95_s"] == "630"


@pytest.mark.parametrize(
    ("sub", "role", "customer"), [("customer-7", "customer", 7), ("agent-1", "support_staff", None)]
)
def test_leads_only(api: Api, sub: str, role: str, customer: int | None) -> None:
    status, body, _ = api.call("GET", "/api/reports/daily", token=api.token(sub, role, customer))
    assert status == 403 and body["error"]["code"] == "forbidden"
    status, body, _ = api.call("GET", "/api/reports/daily", token=None)
    assert status == 401


@pytest.mark.parametrize(
    "query",
    [
        "from=2030-01-01&to=2030-04-03",  # 93 days
        "from=2030-03-02&to=2030-03-01",
        "from=2030-02-30",
        "to=tomorrow",
        "from=2030-03-01T00:00",
        "format=xml",
    ],
)
def test_bad_ranges_are_400_json(api: Api, query: str) -> None:
    status, body, _ = api.call("GET", f"/api/reports/daily?{query}", token=api.lead())
    assert status == 400 and body["error"]["code"] == "bad_request", body


def test_a_completed_days_metrics_are_emitted_once(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_day(api.stack, "2030-05-01")
    during = run_rollup(api, datetime(2030, 5, 1, 18, 0, tzinfo=UTC), monkeypatch)
    assert during["emitted"] == ["2030-04-30"]  # yesterday, complete; the day itself has not ended
    just_after = run_rollup(api, datetime(2030, 5, 2, 1, 0, tzinfo=UTC), monkeypatch)
    assert just_after["emitted"] == []  # ended, not yet settled
    capsys.readouterr()
    first = run_rollup(api, datetime(2030, 5, 2, 3, 0, tzinfo=UTC), monkeypatch)
    out = capsys.readouterr().out
    assert first["emitted"] == ["2030-05-01"]
    assert emf_total(out, "ResolutionRate") == 0.3333 and emf_total(out, "Conversations") == 6
    assert emf_total(out, "ThumbsDownShare") == 0.25 and emf_total(out, "Csat") == 0.6667
    assert emf_total(out, "EscalationRate") == 0.3333 and emf_total(out, "RefundedCents") == 4_700
    again = run_rollup(api, datetime(2030, 5, 2, 4, 0, tzinfo=UTC), monkeypatch)
    out = capsys.readouterr().out
    assert again["emitted"] == [] and emf_total(out, "ResolutionRate") == 0
