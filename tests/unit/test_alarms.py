"""Alarms, the ops topic and the dashboard, checked on the template (moto's CloudFormation skips alarms).

Each alarm is pinned down — metric, namespace, dimensions, statistic, threshold, comparison, and
its actions to the OpsTopic — and the custom metrics it watches must be ones the code emits
(support_agent/observability.py METRICS), from the function whose service name it filters on.
The dashboard is parsed as CloudWatch will see it and must show every metric the code emits.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from devstack.stack import REPO_ROOT, load_template, translate
from support_agent import observability as obs
from support_agent.approvals.sweep import START_GRACE_SECONDS

OPS = {"Ref": "OpsTopic"}
FUNCTIONS = (
    "ChatFunction",
    "ApprovalsFunction",
    "ApprovalNotifierFunction",
    "ApprovalSweepFunction",
    "PaymentsFunction",
    "PaymentsWebhookFunction",
    "PaymentSweepFunction",
    "ReconcileFunction",
    "AuditWatcherFunction",
    "AuditSealFunction",
    "TurnWorkerFunction",
    "TurnSweepFunction",
    "EventsFunction",
    "McpFunction",
    "OutcomeSweepFunction",
    "DailyRollupFunction",
    "SocketFunction",
    "SocketPushFunction",
)

# Which function emits each SupportAgent metric (its POWERTOOLS_SERVICE_NAME is the dimension).
EMITTED_BY = {
    **{
        name: "chat"
        for name in (
            obs.INPUT_TOKENS,
            obs.OUTPUT_TOKENS,
            obs.CACHE_READ_TOKENS,
            obs.CACHE_WRITE_TOKENS,
            obs.MODEL_CALLS,
            obs.MODEL_LATENCY,
            obs.LLM_RETRIES,
            obs.LLM_UNAVAILABLE,
            obs.LLM_ERRORS,
            obs.TURNS,
            obs.ITERATIONS,
            obs.TURN_COST,
            obs.TOOL_CALLS,
            obs.TOOL_ERRORS,
            obs.APPROVALS_CREATED,
            obs.REFUNDS_COMPLETED,
        )
    },
    obs.APPROVALS_APPROVED: "approvals",
    obs.APPROVALS_REJECTED: "approvals",
    obs.APPROVALS_RELEASED: "approvals",
    obs.REFUND_RETRIES: "approvals",
    obs.APPROVALS_EXPIRED: "approval_sweep",
    obs.OLDEST_PENDING_APPROVAL_AGE: "approval_sweep",
    obs.OLDEST_APPROVED_APPROVAL_AGE: "approval_sweep",
    obs.OLDEST_OPEN_HANDOFF_AGE: "approval_sweep",
    obs.OPEN_HANDOFFS: "approval_sweep",
    obs.ASSIGNED_HANDOFFS: "approval_sweep",
    obs.OLDEST_UNSETTLED_REFUND_AGE: "payment_sweep",
    obs.RECONCILIATION_DIFFERENCES: "reconcile",
    obs.AUDIT_ROWS_TAMPERED: "audit_watcher",
    obs.AUDIT_SEAL_FAILURES: "audit_seal",
    obs.MCP_TOOL_REJECTED: "chat",
    obs.POLICY_REFUSED: "chat",
    obs.SOCKET_POSTS_FAILED: "socket_push",
    **{
        name: "daily_rollup"
        for name in (
            obs.RESOLUTION_RATE,
            obs.ESCALATION_RATE,
            obs.THUMBS_DOWN_SHARE,
            obs.CSAT,
            obs.CONVERSATIONS,
            obs.REFUNDED_CENTS,
        )
    },
}
# Metrics more than one function emits (both run the loop and list the outside MCP servers).
ALSO_EMITTED_BY = {obs.MCP_TOOL_REJECTED: {"turn_worker"}, obs.POLICY_REFUSED: {"turn_worker", "mcp"}}

# name -> (namespace, metric, dimensions, statistic, period, threshold, comparison, evaluation periods)
SIMPLE_ALARMS: dict[str, tuple[Any, ...]] = {
    "ApprovalDLQAlarm": (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["ApprovalDLQ", "QueueName"]}}],
        "Maximum",
        300,
        0,
        "GreaterThanThreshold",
        1,
    ),
    "RefundFlowFailedAlarm": (
        "AWS/States",
        "ExecutionsFailed",
        [{"Name": "StateMachineArn", "Value": {"Ref": "RefundFlow"}}],
        "Sum",
        300,
        0,
        "GreaterThanThreshold",
        1,
    ),
    "LlmUnavailableAlarm": (
        "SupportAgent",
        obs.LLM_UNAVAILABLE,
        [{"Name": "service", "Value": "chat"}],
        "Sum",
        300,
        3,
        "GreaterThanOrEqualToThreshold",
        1,
    ),
    # An APPROVED approval unsettled for 30 min: the sweep (every 15 min, 2 min grace) failed to start it.
    "ApprovedRefundStuckAlarm": (
        "SupportAgent",
        obs.OLDEST_APPROVED_APPROVAL_AGE,
        [{"Name": "service", "Value": "approval_sweep"}],
        "Maximum",
        900,
        1800,
        "GreaterThanThreshold",
        1,
    ),
    # A refund REQUESTED or SETTLING past the parameter: the payment sweep (every 5 min) could not settle it.
    "UnsettledRefundAlarm": (
        "SupportAgent",
        obs.OLDEST_UNSETTLED_REFUND_AGE,
        [{"Name": "service", "Value": "payment_sweep"}],
        "Maximum",
        900,
        {"Ref": "UnsettledRefundAlarmSeconds"},
        "GreaterThanThreshold",
        1,
    ),
    # A hand-off queued past the parameter: no one claimed it (the approval sweep measures every 15 min).
    "OldestOpenHandoffAlarm": (
        "SupportAgent",
        obs.OLDEST_OPEN_HANDOFF_AGE,
        [{"Name": "service", "Value": "approval_sweep"}],
        "Maximum",
        900,
        {"Ref": "OldestOpenHandoffAlarmSeconds"},
        "GreaterThanThreshold",
        1,
    ),
    # Any difference the daily reconciliation found; a day's period holds it until the next run.
    "ReconciliationDifferenceAlarm": (
        "SupportAgent",
        obs.RECONCILIATION_DIFFERENCES,
        [{"Name": "service", "Value": "reconcile"}],
        "Maximum",
        86400,
        0,
        "GreaterThanThreshold",
        1,
    ),
    # One overwritten or deleted audit row is enough (the trail is append-only).
    "AuditTamperAlarm": (
        "SupportAgent",
        obs.AUDIT_ROWS_TAMPERED,
        [{"Name": "service", "Value": "audit_watcher"}],
        "Sum",
        300,
        0,
        "GreaterThanThreshold",
        1,
    ),
    # A batch of the audit stream the watcher gave up on (its on-failure destination).
    "AuditWatcherDLQAlarm": (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["AuditWatcherDLQ", "QueueName"]}}],
        "Maximum",
        300,
        0,
        "GreaterThanThreshold",
        1,
    ),
    # One head not sealed is enough to look (it is replayed; the alarm says whether replays succeed).
    "AuditSealFailedAlarm": (
        "SupportAgent",
        obs.AUDIT_SEAL_FAILURES,
        [{"Name": "service", "Value": "audit_seal"}],
        "Sum",
        300,
        0,
        "GreaterThanThreshold",
        1,
    ),
    # A batch of the audit stream the seal function gave up on: those heads were never sealed.
    "AuditSealDLQAlarm": (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["AuditSealDLQ", "QueueName"]}}],
        "Maximum",
        300,
        0,
        "GreaterThanThreshold",
        1,
    ),
    # A completed day's resolution rate below the parameter (the rollup emits it once per day).
    "ResolutionRateAlarm": (
        "SupportAgent",
        obs.RESOLUTION_RATE,
        [{"Name": "service", "Value": "daily_rollup"}],
        "Minimum",
        86400,
        {"Ref": "ResolutionRateAlarmThreshold"},
        "LessThanThreshold",
        1,
    ),
    # A completed day's share of thumbs down above the parameter.
    "ThumbsDownShareAlarm": (
        "SupportAgent",
        obs.THUMBS_DOWN_SHARE,
        [{"Name": "service", "Value": "daily_rollup"}],
        "Maximum",
        86400,
        {"Ref": "ThumbsDownShareAlarmThreshold"},
        "GreaterThanThreshold",
        1,
    ),
    # A batch of the Conversations stream the socket pusher gave up on.
    "SocketPushDLQAlarm": (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["SocketPushDLQ", "QueueName"]}}],
        "Maximum",
        300,
        0,
        "GreaterThanThreshold",
        1,
    ),
    # Stored events not posted to open connections (not a client gone), ten minutes running.
    "SocketPushFailuresAlarm": (
        "SupportAgent",
        "SocketPostsFailed",
        [{"Name": "service", "Value": "socket_push"}],
        "Sum",
        300,
        10,
        "GreaterThanOrEqualToThreshold",
        2,
    ),
    # Pushes a minute or more behind the stream.
    "SocketPushIteratorAgeAlarm": (
        "AWS/Lambda",
        "IteratorAge",
        [{"Name": "FunctionName", "Value": {"Ref": "SocketPushFunction"}}],
        "Maximum",
        300,
        60000,
        "GreaterThanThreshold",
        1,
    ),
    # A handed-over turn the worker failed 3 times: its customer got no answer.
    # Received, not visible: the turn sweep takes each message off within a minute.
    "TurnDLQAlarm": (
        "AWS/SQS",
        "NumberOfMessagesReceived",
        [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["TurnDLQ", "QueueName"]}}],
        "Sum",
        300,
        0,
        "GreaterThanThreshold",
        1,
    ),
    **{
        f"{fn}{metric}Alarm": (
            "AWS/Lambda",
            metric,
            [{"Name": "FunctionName", "Value": {"Ref": fn}}],
            "Sum",
            300,
            0,
            "GreaterThanThreshold",
            1,
        )
        for fn in FUNCTIONS
        for metric in ("Errors", "Throttles")
    },
}
MATH_ALARMS = ("Api5xxRateAlarm", "ApprovalsPendingTooLongAlarm", "McpToolRejectedAlarm", "PolicyRefusedAlarm")


def alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v["Properties"] for k, v in template["Resources"].items() if v["Type"] == "AWS::CloudWatch::Alarm"}


def service_of(cfn: dict[str, Any], function: str) -> str:
    return str(cfn["Resources"][function]["Properties"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"])


def test_every_alarm_is_known_and_notifies_the_ops_topic(cfn: dict[str, Any]) -> None:
    found = alarms(cfn)
    assert set(found) == set(SIMPLE_ALARMS) | set(MATH_ALARMS)
    for name, alarm in found.items():
        assert alarm["AlarmActions"] == [OPS], name
        assert alarm["OKActions"] == [OPS], name
        assert alarm["TreatMissingData"] == "notBreaching", name
        assert "docs/OPERATIONS.md#" in alarm["AlarmDescription"], name


@pytest.mark.parametrize("name", sorted(SIMPLE_ALARMS))
def test_simple_alarm(cfn: dict[str, Any], name: str) -> None:
    alarm = alarms(cfn)[name]
    namespace, metric, dimensions, stat, period, threshold, comparison, periods = SIMPLE_ALARMS[name]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Dimensions"]) == (namespace, metric, dimensions)
    assert (alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == (stat, period, threshold)
    assert (alarm["ComparisonOperator"], alarm["EvaluationPeriods"]) == (comparison, periods)


def test_every_function_has_error_and_throttle_alarms(cfn: dict[str, Any]) -> None:
    functions = {k for k, v in cfn["Resources"].items() if v["Type"] == "AWS::Lambda::Function"}
    assert functions == set(FUNCTIONS)
    watched = {
        (a["MetricName"], a["Dimensions"][0]["Value"]["Ref"])
        for a in alarms(cfn).values()
        if a.get("Namespace") == "AWS/Lambda" and a["MetricName"] != "IteratorAge"  # a stream's lag, not a failure
    }
    assert watched == {(m, fn) for fn in functions for m in ("Errors", "Throttles")}


def _math(alarm: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    by_id = {m["Id"]: m for m in alarm["Metrics"]}
    (returned,) = [m for m in alarm["Metrics"] if m.get("ReturnData", True)]
    return by_id, returned


def test_api_5xx_rate_alarm(cfn: dict[str, Any]) -> None:
    alarm = alarms(cfn)["Api5xxRateAlarm"]
    by_id, returned = _math(alarm)
    stage = [{"Name": "ApiId", "Value": {"Ref": "HttpApi"}}, {"Name": "Stage", "Value": "$default"}]
    for metric_id, metric_name in (("errors", "5xx"), ("requests", "Count")):
        stat = by_id[metric_id]["MetricStat"]
        assert stat["Metric"] == {"Namespace": "AWS/ApiGateway", "MetricName": metric_name, "Dimensions": stage}
        assert (stat["Stat"], stat["Period"]) == ("Sum", 300)
    # A percentage of requests, judged only once there are at least ten in the period.
    assert returned["Expression"] == "IF(requests >= 10, 100 * errors / requests, 0)"
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (5, "GreaterThanThreshold")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (3, 2)
    # The API stage SAM creates for an HttpApi without StageName is $default.
    stages = [
        r for k, r in cfn["Resources"].items() if r["Type"] == "AWS::ApiGatewayV2::Stage" and k != "WebSocketStage"
    ]
    assert [s["Properties"]["StageName"] for s in stages] == ["$default"]


def test_pending_too_long_alarm_watches_the_sweeps_metric_in_hours(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    alarm = alarms(cfn)["ApprovalsPendingTooLongAlarm"]
    by_id, returned = _math(alarm)
    stat = by_id["age"]["MetricStat"]
    assert stat["Metric"] == {
        "Namespace": "SupportAgent",
        "MetricName": obs.OLDEST_PENDING_APPROVAL_AGE,
        "Dimensions": [{"Name": "service", "Value": service_of(cfn, "ApprovalSweepFunction")}],
    }
    assert obs.METRICS[obs.OLDEST_PENDING_APPROVAL_AGE] == "Seconds"
    assert (stat["Stat"], stat["Period"]) == ("Maximum", 3600)
    assert returned["Expression"] == "age / 3600"
    assert alarm["Threshold"] == {"Ref": "PendingApprovalAlarmHours"}
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    param = sam["Parameters"]["PendingApprovalAlarmHours"]
    # Alarm well before the approval would expire on its own.
    assert param["Default"] < sam["Parameters"]["ApprovalTtlHours"]["Default"]


def test_every_runbook_link_has_its_section() -> None:
    """Each alarm's ``docs/OPERATIONS.md#anchor`` names a heading there (GitHub's anchor rules)."""
    text = (REPO_ROOT / "docs" / "OPERATIONS.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in text.splitlines()
        if line.startswith("#")
    }
    linked = {
        m.group(1)
        for alarm in alarms(translate(load_template())).values()
        for m in [re.search(r"docs/OPERATIONS\.md#([a-z0-9-]+)", alarm["AlarmDescription"])]
        if m
    }
    assert {"approvedrefundstuckalarm", "turndlqalarm"} <= linked
    assert linked <= anchors, linked - anchors


def test_approved_stuck_alarm_leaves_the_sweep_time_to_start_the_flow(sam: dict[str, Any]) -> None:
    """It fires only once a sweep run past the grace could have started a flow that never started."""
    alarm = sam["Resources"]["ApprovedRefundStuckAlarm"]["Properties"]
    schedule = sam["Resources"]["ApprovalSweepFunction"]["Properties"]["Events"]["Sweep"]["Properties"]["Schedule"]
    assert schedule == "rate(15 minutes)"
    assert alarm["Threshold"] > START_GRACE_SECONDS + 15 * 60
    assert obs.METRICS[obs.OLDEST_APPROVED_APPROVAL_AGE] == "Seconds"


def test_custom_metric_alarms_watch_what_the_code_emits(cfn: dict[str, Any]) -> None:
    services = {fn: service_of(cfn, fn) for fn in FUNCTIONS}
    assert set(EMITTED_BY.values()) <= set(services.values())
    assert set(EMITTED_BY) == set(obs.METRICS)
    checked = 0
    for alarm in alarms(cfn).values():
        specs = [alarm] + [m["MetricStat"]["Metric"] for m in alarm.get("Metrics", []) if "MetricStat" in m]
        for spec in specs:
            if spec.get("Namespace") != "SupportAgent":
                continue
            assert spec["MetricName"] in obs.METRICS
            services = {EMITTED_BY[spec["MetricName"]], *ALSO_EMITTED_BY.get(spec["MetricName"], ())}
            assert spec["Dimensions"][0]["Name"] == "service" and len(spec["Dimensions"]) == 1
            assert spec["Dimensions"][0]["Value"] in services
            checked += 1
    # LlmUnavailable, OldestPendingApprovalAge, OldestApprovedApprovalAge, OldestUnsettledRefundAge,
    # ReconciliationDifferences, AuditRowsTampered, AuditSealFailures, McpToolRejected (chat and turn_worker)
    # OldestOpenHandoffAge, PolicyRefused (chat, turn_worker and mcp), ResolutionRate and ThumbsDownShare,
    # SocketPostsFailed
    assert checked == 16


def test_oldest_open_handoff_alarm_defaults_to_fifteen_minutes_in_seconds(sam: dict[str, Any]) -> None:
    """The sweep measures every 15 minutes, so a threshold below one run's spacing would only add noise."""
    param = sam["Parameters"]["OldestOpenHandoffAlarmSeconds"]
    assert (param["Type"], param["Default"], param["MinValue"]) == ("Number", 900, 300)
    assert obs.METRICS[obs.OLDEST_OPEN_HANDOFF_AGE] == "Seconds"
    assert obs.METRICS[obs.OPEN_HANDOFFS] == obs.METRICS[obs.ASSIGNED_HANDOFFS] == "Count"


def test_mcp_tool_rejected_alarm_sums_both_functions_that_list_outside_servers(cfn: dict[str, Any]) -> None:
    alarm = alarms(cfn)["McpToolRejectedAlarm"]
    by_id, returned = _math(alarm)
    for metric_id, function in (("chat", "ChatFunction"), ("worker", "TurnWorkerFunction")):
        stat = by_id[metric_id]["MetricStat"]
        assert stat["Metric"] == {
            "Namespace": "SupportAgent",
            "MetricName": obs.MCP_TOOL_REJECTED,
            "Dimensions": [{"Name": "service", "Value": service_of(cfn, function)}],
        }
        assert (stat["Stat"], stat["Period"]) == ("Sum", 300)
    # A period in which only one of them listed still counts (a missing series would blank the sum).
    assert returned["Expression"] == "FILL(chat, 0) + FILL(worker, 0)"
    assert (alarm["Threshold"], alarm["ComparisonOperator"], alarm["EvaluationPeriods"]) == (
        0,
        "GreaterThanThreshold",
        1,
    )


def test_policy_refused_alarm_sums_every_function_that_reads_the_policy(cfn: dict[str, Any]) -> None:
    alarm = alarms(cfn)["PolicyRefusedAlarm"]
    by_id, returned = _math(alarm)
    readers = (("chat", "ChatFunction"), ("worker", "TurnWorkerFunction"), ("mcp", "McpFunction"))
    for metric_id, function in readers:
        stat = by_id[metric_id]["MetricStat"]
        assert stat["Metric"] == {
            "Namespace": "SupportAgent",
            "MetricName": obs.POLICY_REFUSED,
            "Dimensions": [{"Name": "service", "Value": service_of(cfn, function)}],
        }
        assert (stat["Stat"], stat["Period"]) == ("Sum", 300)
    # One refusal in 5 minutes is enough; a period in which only some functions loaded the policy still counts.
    assert returned["Expression"] == "FILL(chat, 0) + FILL(worker, 0) + FILL(mcp, 0)"
    assert (alarm["Threshold"], alarm["ComparisonOperator"], alarm["EvaluationPeriods"]) == (
        1,
        "GreaterThanOrEqualToThreshold",
        1,
    )


def test_namespace_matches_the_functions_environment(sam: dict[str, Any]) -> None:
    env = sam["Globals"]["Function"]["Environment"]["Variables"]
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == obs.NAMESPACE == "SupportAgent"


def test_ops_topic(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    topic = cfn["Resources"]["OpsTopic"]
    assert topic["Type"] == "AWS::SNS::Topic"
    # CloudWatch cannot publish to a topic encrypted under the AWS-managed key alias/aws/sns.
    assert topic["Properties"].get("KmsMasterKeyId") != "alias/aws/sns"
    email = cfn["Resources"]["OpsTopicEmail"]
    assert email["Condition"] == "HasOpsAlertEmail"
    assert email["Properties"] == {"TopicArn": OPS, "Protocol": "email", "Endpoint": {"Ref": "OpsAlertEmail"}}
    assert cfn["Conditions"]["HasOpsAlertEmail"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "OpsAlertEmail"}, ""]}]}
    assert sam["Outputs"]["OpsTopicArn"]["Value"] == OPS


# ------------------------------------------------------------------ the dashboard


def dashboard(cfn: dict[str, Any]) -> dict[str, Any]:
    """The body with each ${X} / ${X.Attr} replaced by a marker naming it, parsed as JSON."""
    (board,) = [r for r in cfn["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    body = board["Properties"]["DashboardBody"]["Fn::Sub"]
    assert isinstance(body, str)
    return dict(json.loads(re.sub(r"\$\{([A-Za-z0-9:.]+)\}", r"<\1>", body)))


def dashboard_metrics(body: dict[str, Any]) -> list[tuple[str, str, dict[str, str]]]:
    out = []
    for widget in body["widgets"]:
        for row in widget["properties"].get("metrics", []):
            fields = [f for f in row if isinstance(f, str)]
            if not fields:  # an expression row
                continue
            assert "." not in fields, "spell every metric out (no '.' shorthand): the test reads them"
            namespace, name, *dims = fields
            out.append((namespace, name, dict(zip(dims[::2], dims[1::2], strict=True))))
    return out


def test_dashboard_shows_every_metric_the_code_emits(cfn: dict[str, Any]) -> None:
    shown = dashboard_metrics(dashboard(cfn))
    ours = {(name, dims.get("service")) for namespace, name, dims in shown if namespace == "SupportAgent"}
    assert ours == set(EMITTED_BY.items()) | {(m, svc) for m, services in ALSO_EMITTED_BY.items() for svc in services}
    for namespace, _name, dims in shown:
        if namespace == "SupportAgent":
            assert set(dims) == {"service"}


def test_dashboard_shows_aws_metrics_of_this_stack(cfn: dict[str, Any]) -> None:
    shown = dashboard_metrics(dashboard(cfn))
    aws = {(ns, name, tuple(sorted(dims.items()))) for ns, name, dims in shown if ns != "SupportAgent"}
    api = (("ApiId", "<HttpApi>"), ("Stage", "$default"))
    assert {("AWS/ApiGateway", m, api) for m in ("Count", "4xx", "5xx", "Latency")} <= aws
    flow = (("StateMachineArn", "<RefundFlow>"),)
    assert {("AWS/States", "ExecutionsSucceeded", flow), ("AWS/States", "ExecutionsFailed", flow)} <= aws
    for queue in (
        "ApprovalQueue",
        "ApprovalDLQ",
        "AuditWatcherDLQ",
        "AuditSealDLQ",
        "TurnQueue",
        "TurnDLQ",
        "SocketPushDLQ",
    ):
        assert ("AWS/SQS", "ApproximateNumberOfMessagesVisible", (("QueueName", f"<{queue}.QueueName>"),)) in aws
    for fn in FUNCTIONS:
        for metric in ("Errors", "Throttles"):
            assert ("AWS/Lambda", metric, (("FunctionName", f"<{fn}>"),)) in aws


def test_dashboard_lists_every_alarm(cfn: dict[str, Any]) -> None:
    body = dashboard(cfn)
    (widget,) = [w for w in body["widgets"] if w["type"] == "alarm"]
    assert sorted(widget["properties"]["alarms"]) == sorted(f"<{name}.Arn>" for name in alarms(cfn))


def test_dashboard_expression_refers_to_a_metric_id(cfn: dict[str, Any]) -> None:
    for widget in dashboard(cfn)["widgets"]:
        rows = widget["properties"].get("metrics", [])
        ids = {opt["id"] for row in rows for opt in row if isinstance(opt, dict) and "id" in opt}
        for row in rows:
            for opt in row:
                if isinstance(opt, dict) and "expression" in opt:
                    names = set(re.findall(r"[a-z][a-zA-Z0-9_]*", opt["expression"]))
                    assert names <= ids, (opt["expression"], ids)
