"""Property 8 (b) for the reports (issue 35): DailyRollupFunction's job and GET /api/reports/daily, each run under its
own deployed role with moto enforcing IAM (the helpers of test_least_privilege_runtime.py).

The rollup uses exactly what its role grants (the three indexes, UpdateItem of `rollup#` items only) and is refused a
Scan, a PutItem and the approvals' items. The
report route makes one kind of call, a Query of ConversationsTable (the `rollup#daily` partition: reports/store.py),
within ApprovalsFunction's grants.
"""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
import pytest

from devstack.stack import Stack
from support_agent import wiring
from support_agent.config import get_settings
from support_agent.store.dynamo import to_item
from tests.integration.conftest import Api
from tests.integration.test_reports_api import seed_day
from tests.reliability.test_least_privilege_runtime import (
    Recorder,
    as_function,
    check_pairs,
    credentials_for,
    denied,
)
from tests.unit.test_template import granted_pairs

DAY = "2030-06-01"


@pytest.fixture(scope="module")
def recorder(stack: Stack) -> Recorder:
    return Recorder(stack)


def test_the_rollup_and_the_report_under_their_own_roles(
    api: Api, stack: Stack, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_day(stack, DAY)
    tables = stack.physical_ids
    after = datetime(2030, 6, 2, 3, 0, tzinfo=UTC)
    with as_function(api, "DailyRollupFunction", credentials_for(stack, "DailyRollupFunction"), recorder, monkeypatch):
        monkeypatch.setattr(wiring, "rollup_job", lambda: wiring.build_rollup_job(get_settings(), clock=lambda: after))
        out = api.handlers["DailyRollupFunction"]({"source": "aws.events", "id": "evt-lp"}, None)
        assert out["days"] == [DAY, "2030-06-02"] and out["emitted"] == [DAY], out
        used = set(recorder.pairs)
        keys = sorted(recorder.conversation_keys)
        ddb = boto3.client("dynamodb")
        refused = {
            "scan": denied(lambda: ddb.scan(TableName=tables["ConversationsTable"], Limit=1)),
            "put": denied(
                lambda: ddb.put_item(
                    TableName=tables["ConversationsTable"],
                    Item=to_item({"conversation_id": "rollup#daily", "seq": 1}),
                )
            ),
            "get approval": denied(
                lambda: ddb.get_item(TableName=tables["ApprovalsTable"], Key=to_item({"approval_id": "apr_x"}))
            ),
        }
    assert all(refused.values()), refused
    assert keys and all(key.startswith("rollup#") for _action, key in keys), keys
    check_pairs(stack, "DailyRollupFunction", used)

    lead = api.lead()
    with as_function(api, "ApprovalsFunction", credentials_for(stack, "ApprovalsFunction"), recorder, monkeypatch):
        status, body, _ = api.call("GET", f"/api/reports/daily?from={DAY}&to={DAY}", token=lead)
        used = set(recorder.pairs)
    assert status == 200 and body["days"][0]["conversations"] == 6, body
    assert used == {("dynamodb:Query", "ConversationsTable")}, used
    assert used <= granted_pairs(stack.template, "ApprovalsFunction")
