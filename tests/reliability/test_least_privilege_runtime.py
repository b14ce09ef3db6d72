"""Property 8 (b): each function's code, run under its own role's permissions, with moto enforcing IAM.

Layer (a), the static proof, is tests/unit/test_template.py: an evaluator over every role of the translated
template requires each function's exact (action, resource) set to equal what it may do (with the forbidden
pairs listed there: the chat function cannot update or delete audit rows nor start RefundFlow, the notifier
cannot write orders). This is layer (b), at runtime, against the template deployed into moto:

* for each function an IAM user gets that function's deployed role policy, resources rewritten to ``*``
  (moto authorises every DynamoDB call against ``*``), and, where the role may Put/Update/ConditionCheck,
  ``dynamodb:TransactWriteItems`` (moto authorises the API name; AWS authorises each item, which the
  recorder below checks instead);
* with IAM enforcement on (`enable_iam_authentication`), the function's handler serves its routes or
  events with those credentials: everything it does succeeds;
* the same credentials are refused (AccessDenied) for what the function must never do;
* every AWS call the code made is recorded as (action, resource) — a TransactWriteItems as one pair per
  item — and must be within what the static evaluator says the role grants: resource-level least
  privilege at runtime, which moto alone cannot check. Granted pairs no code path used are reported.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.core.authorization import enable_iam_authentication

from devstack.seed import put_order
from devstack.stack import Stack
from support_agent import wiring
from support_agent.audit.seal import SealWriter, newest_heads
from support_agent.store.audit import AuditStore
from support_agent.store.dynamo import to_item
from tests.integration.conftest import Api
from tests.integration.test_audit_watcher_stream import Stream
from tests.reliability.figures import count
from tests.support.scripted import answer, tool_use, tools
from tests.unit.test_template import KEY_PREFIXES, granted_pairs

Pair = tuple[str, str]
# What a function may do to a notification's item of the Conversations table (``note#<conversation id>``).
NOTE_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
ITEM_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "ConditionCheck": "ConditionCheckItem",
    "Delete": "DeleteItem",
}
S3_ACTIONS = {"ListObjectVersions": "ListBucketVersions", "ListObjectsV2": "ListBucket"}
# The IAM action (what the role grants) -> the name moto authorises the same call by (a GetObject of a version
# is s3:GetObjectVersion in AWS, s3:GetObject in moto; ListObjectVersions is s3:ListBucketVersions in AWS).
MOTO_S3_NAMES = {"s3:ListBucketVersions": "s3:ListObjectVersions", "s3:GetObjectVersion": "s3:GetObject"}
SERVICE_PREFIX = {
    "dynamodb": "dynamodb",
    "sqs": "sqs",
    "sns": "sns",
    "sfn": "states",
    "secrets manager": "secretsmanager",
}


class Recorder:
    """(action, logical target) of every AWS call made through boto3's default session while on, by the
    thread running as the function: a RefundFlow execution the function started runs PaymentsFunction
    on moto's own thread (devstack.lambda_bridge), and its calls are PaymentsFunction's, not this one's."""

    def __init__(self, stack: Stack) -> None:
        self.on = False
        self.thread = 0
        self.pairs: set[Pair] = set()
        # (action, partition key) of every item of the Conversations table read or written: whose items a role
        # bounded by dynamodb:LeadingKeys touched (moto does not evaluate the condition; tests here check it).
        self.conversation_keys: set[Pair] = set()
        self._types = {k: r["Type"] for k, r in stack.template["Resources"].items()}
        self._names = {v: k for k, v in stack.physical_ids.items()}
        self._names.update({v.rsplit("/", 1)[-1]: k for v, k in list(self._names.items()) if v.startswith("http")})

    def _target(self, value: str) -> str:
        """The evaluator's name for a resource: the logical id, ``ref:<id>`` for topics and state machines."""
        logical = self._names.get(value) or self._names.get(value.rsplit("/", 1)[-1])
        if logical is None:
            return value
        by_ref = self._types.get(logical) in ("AWS::SNS::Topic", "AWS::StepFunctions::StateMachine")
        return f"ref:{logical}" if by_ref else logical

    def __call__(self, event_name: str, params: dict[str, Any], **_: Any) -> None:
        if not self.on or threading.get_ident() != self.thread:
            return
        _, service, operation = event_name.split(".", 2)
        prefix = SERVICE_PREFIX.get(service, service)
        if operation == "TransactWriteItems":
            for item in params["TransactItems"]:
                ((kind, body),) = item.items()
                self.pairs.add((f"dynamodb:{ITEM_ACTIONS[kind]}", self._target(body["TableName"])))
                self._conversation_key(f"dynamodb:{ITEM_ACTIONS[kind]}", body)
            return
        if service == "s3":  # the IAM action (not the API's name) on the bucket or the object's key prefix
            action = S3_ACTIONS.get(operation, operation)
            if operation == "GetObject" and params.get("VersionId"):
                action = "GetObjectVersion"
            target = self._target(params["Bucket"])
            if "Key" in params:
                target += "/heads/*" if str(params["Key"]).startswith("heads/") else f"/{params['Key']}"
            self.pairs.add((f"s3:{action}", target))
            return
        if "TableName" in params:
            target = self._target(params["TableName"])
            if params.get("IndexName"):
                target += f"/index/{params['IndexName']}"
            self._conversation_key(f"{prefix}:{operation}", params)
        else:
            ref = params.get("QueueUrl") or params.get("TopicArn") or params.get("stateMachineArn") or ""
            ref = ref or (params.get("Name", "") if service == "ssm" else "")  # the support policy's parameter
            target = self._target(ref)
        self.pairs.add((f"{prefix}:{operation}", target))

    def _conversation_key(self, action: str, body: dict[str, Any]) -> None:
        key = body.get("Key") or body.get("Item") or {}
        if self._target(str(body.get("TableName", ""))) == "ConversationsTable" and "conversation_id" in key:
            self.conversation_keys.add((action, str(key["conversation_id"]["S"])))

    def notes_only(self, actions: tuple[str, ...] = NOTE_ACTIONS) -> bool:
        """Every item of the Conversations table the function touched with ``actions`` was a notification's
        (``note#<conversation id>``: what the role's LeadingKeys condition allows), and there was one."""
        touched = [key for action, key in self.conversation_keys if action in actions]
        return bool(touched) and all(key.startswith("note#") for key in touched)

    def run(self, forbidden: dict[str, Callable[[], Any]], notes: tuple[str, ...] | None = None) -> Run:
        """What the function did so far, and which of the ``forbidden`` calls IAM refuses it (tried now: call this
        under ``as_function``). With ``notes``, whether those actions touched only notifications (``notes_only``)."""
        used, keys = set(self.pairs), sorted(self.conversation_keys)
        notes_only = None if notes is None else self.notes_only(notes)
        return Run(used, {name: denied(call) for name, call in forbidden.items()}, notes_only, keys)

    def prefixes_used(self, function: str) -> dict[str, set[str]]:
        """Per action the static test bounds by ``dynamodb:LeadingKeys`` (its KEY_PREFIXES), the declared prefixes
        the keys the function touched began with. A key none begins with fails: AWS would refuse that call."""
        declared = KEY_PREFIXES[function]["ConversationsTable"]
        used: dict[str, set[str]] = {}
        for action, key in self.conversation_keys:
            if action in declared:
                matching = {p for p in declared[action] if key.startswith(p)}
                assert matching, f"{function}: {action} of {key!r}, outside its LeadingKeys {declared[action]}"
                used.setdefault(action, set()).update(matching)
        return used


@dataclass
class Run:
    """A function's calls under its own role and its refused ones, read while IAM was enforced."""

    used: set[Pair]
    refused: dict[str, bool]
    notes_only: bool | None  # None: not asked
    conversation_keys: list[tuple[str, str]]

    def check(self, stack: Stack, function: str) -> None:
        """Every forbidden call refused; the Conversations table touched only for notifications (when asked); the
        calls within the role's grants, every grant used (`check_pairs`)."""
        assert all(self.refused.values()), self.refused
        assert self.notes_only is not False, self.conversation_keys
        check_pairs(stack, function, self.used)


@pytest.fixture(scope="module")
def recorder(stack: Stack) -> Recorder:
    return Recorder(stack)


def runtime_policy(stack: Stack, function: str) -> dict[str, Any]:
    """The deployed role's policy with resources as moto evaluates them."""
    iam = boto3.client("iam")
    role = stack.physical_ids[stack.template["Resources"][function]["Properties"]["Role"]["Fn::GetAtt"][0]]
    statements = []
    for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        doc = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
        doc = doc if isinstance(doc, dict) else json.loads(doc)
        statements += doc["Statement"] if isinstance(doc["Statement"], list) else [doc["Statement"]]
    actions = sorted({a for s in statements if s["Effect"] == "Allow" for a in _list(s["Action"])})
    if {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"} & set(actions):
        actions.append("dynamodb:TransactWriteItems")
    # moto authorises S3 by the API's name, AWS by the IAM action's: the name moto checks for each granted action.
    actions += [MOTO_S3_NAMES[a] for a in actions if a in MOTO_S3_NAMES]
    return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}


def _list(v: Any) -> list[str]:
    return v if isinstance(v, list) else [v]


def credentials_for(stack: Stack, function: str) -> dict[str, str]:
    iam = boto3.client("iam")
    user = f"runtime-{function}"[:64]
    if user in {u["UserName"] for u in iam.list_users()["Users"]}:  # another test of this module made it
        key = iam.create_access_key(UserName=user)["AccessKey"]
        return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="role", PolicyDocument=json.dumps(runtime_policy(stack, function)))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}


@contextmanager
def as_function(
    api: Api, function: str, creds: dict[str, str], rec: Recorder, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """The function's environment and credentials, IAM enforced, calls recorded."""
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    api.overrides = {**api.overrides, **creds}
    api.current = ""  # re-apply the environment (and drop cached clients) on the next call
    api.use_function(function)
    # A fresh default session: botocore caches the credentials it resolved, and the recorder hooks in here.
    boto3.DEFAULT_SESSION = None
    events = boto3._get_default_session().events
    events.register("provide-client-params.*.*", rec, unique_id="rel-recorder")
    rec.pairs, rec.conversation_keys, rec.on, rec.thread = set(), set(), True, threading.get_ident()
    try:
        with enable_iam_authentication():
            yield
    finally:
        rec.on = False
        events.unregister("provide-client-params.*.*", unique_id="rel-recorder")
        boto3.DEFAULT_SESSION = None
        api.overrides = {k: v for k, v in api.overrides.items() if k not in creds}
        api.current = ""
        wiring.reset()


def denied(call: Any) -> bool:
    """True when IAM refused the call (moto answers JSON-protocol services with the query-style XML)."""
    try:
        call()
    except ClientError as exc:
        error = exc.response["Error"]
        return error["Code"] in ("AccessDenied", "AccessDeniedException") or (
            error["Code"] == "403" and "<Code>AccessDenied</Code>" in error.get("Message", "")
        )
    return False


# Granted but not exercised here, for a reason outside the code paths these tests drive.
NOT_EXERCISED = {
    # Only with the AnthropicApiKeySecretArn parameter (a direct key is used here).
    ("secretsmanager:GetSecretValue", "param:AnthropicApiKeySecretArn"): "secret configured",
    # Only with PaymentProvider=stripe and the StripeApiKeySecretArn parameter (this stack refunds with `none`).
    ("secretsmanager:GetSecretValue", "param:StripeApiKeySecretArn"): "stripe secret configured",
    # Only with the McpServers parameter (an outside server's credential; read in tests/integration/test_mcp_client.py).
    ("secretsmanager:GetSecretValue", "secret:<stack>/mcp/*"): "outside MCP servers configured",
    # Only with LLM_PROVIDER=bedrock.
    ("bedrock:InvokeModel", "param:BedrockModelArns"): "bedrock provider",
    ("bedrock:InvokeModel", "param:BedrockInferenceProfileArn"): "bedrock provider",
    # Used by the Lambda service's event source mapping, under the function's role, not by its code.
    **{
        (f"sqs:{a}", queue): "event source mapping"
        for queue in ("ApprovalQueue", "TurnQueue")
        for a in ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes")
    },
    # The chat function's turns in its own test end within SyncTurnSeconds; a handed-over turn's send is
    # exercised in test_long_turn_functions_under_their_own_roles.
    ("sqs:SendMessage", "TurnQueue"): "only when a turn is handed over",
    **{
        (f"dynamodb:{a}", "AuditTable.StreamArn"): "event source mapping"
        for a in ("DescribeStream", "GetShardIterator", "GetRecords")
    },
    ("sqs:SendMessage", "AuditSealDLQ"): "the mapping's on-failure destination (the Lambda service sends)",
    ("sqs:SendMessage", "ScheduledRunsDLQ"): "a scheduled run's dead-letter queue (the Lambda service sends)",
    # A reply's text deltas are posted only to a conversation someone follows (tests/integration/test_reply_deltas.py
    # and test_socket_push.py post them); moto checks no execute-api action: the posts reach devstack's gateway.
    ("execute-api:ManageConnections", "WebSocketApi/<stage>/POST/@connections"): "a subscribed connection",
    # Who follows the conversation is read by the delta publisher's own thread once text flows; the recorder
    # follows the function's thread only (tests/integration/test_reply_deltas.py exercises the read).
    ("dynamodb:Query", "ConnectionsTable/index/subscribers"): "read from the delta posting thread",
    # Only when the policy's newest version does not validate (tests/unit/test_policy_source.py walks it).
    ("ssm:GetParameterHistory", "SupportPolicyParameter"): "a malformed newest policy version",
}


def check_pairs(stack: Stack, function: str, used: set[Pair]) -> None:
    """Used within granted (nothing beyond the role); granted within used + explained (nothing unneeded)."""
    granted = granted_pairs(stack.template, function)
    beyond = used - granted
    assert not beyond, f"{function} made calls its role does not grant: {sorted(beyond)}"
    unused = granted - used - set(NOT_EXERCISED)
    assert not unused, f"{function}'s role grants what none of its code paths used: {sorted(unused)}"
    count("8-least-privilege", **{f"{function}_pairs_used": len(used), f"{function}_pairs_granted": len(granted)})


# -- the functions ------------------------------------------------------------------------------------------


def test_chat_function_under_its_own_role(
    api: Api, stack: Stack, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = credentials_for(stack, "ChatFunction")
    api.model.script = [
        answer("Hello."),  # the first turn makes the conversation; the second asks who follows it (text deltas)
        tools(tool_use("lookup_order", {"order_id": 1042}), tool_use("list_invoices", {})),
        tools(
            tool_use("request_refund", {"order_id": 1043, "amount_cents": 500, "reason": "late"}),
            tool_use("request_refund", {"order_id": 1044, "amount_cents": 16000, "reason": "broken"}),
            tool_use("escalate_to_human", {"reason": "wants a person"}),
        ),
        answer("Done."),
    ]
    with as_function(api, "ChatFunction", creds, recorder, monkeypatch):
        status, body, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "hello"})
        assert status == 200, body
        status, body, _ = api.call("POST", "/api/chat", {"conversationId": body["conversationId"], "message": "refund"})
        assert status == 200, body
        cid, turn = body["conversationId"], body["turnId"]
        assert all(not c["isError"] for it in body["trace"] for c in it["toolCalls"]), body["trace"]
        # The hand-off is open: the next message is kept for the person (no model call), under the same role.
        status, body, _ = api.call("POST", "/api/chat", {"conversationId": cid, "message": "thanks"})
        assert (status, body["owner"]) == (202, "person"), body
        assert api.call("GET", "/api/conversations")[0] == 200
        assert api.call("GET", f"/api/conversations/{cid}")[0] == 200
        # The customer's ratings (store/ratings.py): the items, the counter, and the outcome's re-derivation asked.
        for rating in ({"turnId": turn, "thumb": "up"}, {"score": 4, "comment": "quick"}):
            status, body, _ = api.call("POST", f"/api/conversations/{cid}/rating", rating)
            assert status == 200, body
        ddb, sfn = boto3.client("dynamodb"), boto3.client("stepfunctions")
        audit = stack.physical_ids["AuditTable"]
        forbidden = {
            "DeleteItem on the audit table": lambda: ddb.delete_item(
                TableName=audit, Key={"stream": {"S": cid}, "event_id": {"S": "x"}}
            ),
            "StartExecution of RefundFlow": lambda: sfn.start_execution(
                stateMachineArn=stack.physical_ids["RefundFlow"], name="apr_forbidden", input="{}"
            ),
            "Scan of customer data": lambda: ddb.scan(TableName=stack.physical_ids["CustomerDataTable"]),
            "BatchWriteItem": lambda: ddb.batch_write_item(
                RequestItems={audit: [{"DeleteRequest": {"Key": {"stream": {"S": cid}, "event_id": {"S": "x"}}}}]}
            ),
            "sns:Publish to the leads": lambda: boto3.client("sns").publish(
                TopicArn=stack.physical_ids["LeadsTopic"], Message="x"
            ),
        }
        run = recorder.run(forbidden)
    run.check(stack, "ChatFunction")
    count("8-least-privilege", ChatFunction_forbidden_refused=len(run.refused))


def _approval(stack: Stack, status: str, created_at: str, **extra: Any) -> str:
    from support_agent.ids import new_approval_id

    aid = new_approval_id()
    ddb = boto3.client("dynamodb")
    oid = 90_000 + len(aid) + int(datetime.now(UTC).timestamp() * 1000) % 9_000
    put_order(ddb, stack.physical_ids["CustomerDataTable"], 7, oid, 9000, available_cents=0, reserved_cents=9000)
    ddb.put_item(
        TableName=stack.physical_ids["ApprovalsTable"],
        Item=to_item(
            {
                "approval_id": aid,
                "entity": "APPROVAL",
                "status": status,
                "customer_id": 7,
                "order_id": oid,
                "amount_cents": 9000,
                "currency": "USD",
                "reason": "r",
                "conversation_id": "conv_01JF3Q0000000000000000000Z",
                "created_at": created_at,
                **extra,
            }
        ),
    )
    return aid


def test_approvals_function_under_its_own_role(
    api: Api, stack: Stack, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC).isoformat()
    pending = [_approval(stack, "PENDING", now) for _ in range(2)]
    # A cancellation's refund waiting for a lead: its rejection opens a hand-off (the ticket put).
    cancellation = _approval(stack, "PENDING", now, action="cancel_order")
    failed = [_approval(stack, "FAILED", now, decided_by="lead-1") for _ in range(2)]
    api.model.script = [
        tools(
            tool_use("escalate_to_human", {"reason": "person"}),
            # A direct refund: verifying the conversation reads its refund key's head from the ledger row.
            tool_use("request_refund", {"order_id": 1043, "amount_cents": 100, "reason": "late"}),
        ),
        answer("ok"),
    ]
    _, body, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "a person please"})
    handoff = body["trace"][0]["toolCalls"][0]["result"]["handoff_id"]
    assert body["trace"][0]["toolCalls"][1]["result"]["status"] in ("REFUNDED", "REFUND_IN_PROGRESS"), body
    api.model.script = [answer("Hello Sam.")]
    sam = api.token("customer-8", "customer", 8)
    assert api.call("POST", "/api/chat", {"conversationId": None, "message": "hi"}, token=sam)[0] == 200
    # The conversation's head sealed, as the seal function would: verification reads that version.
    audit_table = stack.physical_ids["AuditTable"]
    cid = body["conversationId"]
    seal_rows = AuditStore(boto3.client("dynamodb"), audit_table).list_stream(cid)
    for stream, head in newest_heads(seal_rows).items():
        SealWriter(boto3.client("s3"), stack.physical_ids["AuditSealBucket"], lambda: "2026-12-03T00:00:00Z").put(
            stream, head
        )
    creds = credentials_for(stack, "ApprovalsFunction")
    monkeypatch.setitem(api.overrides, "APPROVAL_WAIT_SECONDS", "0")
    lead = api.lead()
    reply, key = {"message": "Riley here."}, {"Idempotency-Key": "least-privilege"}
    with as_function(api, "ApprovalsFunction", creds, recorder, monkeypatch):
        for method, path, ok, *given in [
            ("GET", "/api/approvals", 200),
            ("GET", "/api/approvals?status=PENDING", 200),
            ("GET", f"/api/approvals/{pending[0]}", 200),
            ("POST", f"/api/approvals/{pending[0]}/approve", 202),
            ("POST", f"/api/approvals/{pending[1]}/reject", 200),
            ("POST", f"/api/approvals/{cancellation}/reject", 200),
            ("POST", f"/api/approvals/{failed[0]}/retry", 202),
            ("POST", f"/api/approvals/{failed[1]}/release", 200),
            # The trail first, as before the inbox steps existed (its seal read ran there, and still does).
            ("GET", f"/api/audit?conversationId={body['conversationId']}", 200),
            ("GET", f"/api/audit/verify?conversationId={body['conversationId']}", 200),
            ("GET", "/api/audit?customerId=7", 200),
            ("GET", "/api/handoffs", 200),
            # The inbox: a claim, a reply and its resend (the key read back), the transcript, a hand-back.
            ("GET", f"/api/handoffs/{handoff}", 200),
            ("POST", f"/api/handoffs/{handoff}/claim", 200),
            ("POST", f"/api/handoffs/{handoff}/messages", 201, reply, key),
            ("POST", f"/api/handoffs/{handoff}/messages", 201, reply, key),
            ("GET", f"/api/handoffs/{handoff}/conversation", 200),
            ("POST", f"/api/handoffs/{handoff}/release", 200),
            ("POST", f"/api/handoffs/{handoff}/close", 200),
            ("POST", "/api/customers/8/erase", 200),
        ]:
            sent = given[0] if given else ({} if method == "POST" else None)
            got, out, _ = api.call(method, path, sent, token=lead, headers=given[1] if given else None)
            assert got in (ok, 200), (method, path, got, out)
        ddb = boto3.client("dynamodb")
        forbidden = {
            "DeleteItem": lambda: ddb.delete_item(
                TableName=stack.physical_ids["AuditTable"], Key={"stream": {"S": "x"}, "event_id": {"S": "x"}}
            ),
            "sqs:SendMessage": lambda: boto3.client("sqs").send_message(
                QueueUrl=stack.physical_ids["ApprovalQueue"], MessageBody="{}"
            ),
            "sns:Publish": lambda: boto3.client("sns").publish(TopicArn=stack.physical_ids["LeadsTopic"], Message="x"),
        }
        run = recorder.run(forbidden)
    run.check(stack, "ApprovalsFunction")
    # Its GetItem/PutItem on the Conversations table: the decisions' notifications (`note#`), a person's reply
    # (the header and the message, `conv_`) and its key (`idem#handoff#`), each needed; its UpdateItem there is
    # also the hand-off's header and erasure's tombstones (unbounded, as before).
    assert recorder.prefixes_used("ApprovalsFunction") == KEY_PREFIXES["ApprovalsFunction"]["ConversationsTable"]


def test_notifier_and_sweep_under_their_own_roles(
    api: Api, stack: Stack, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = _approval(stack, "PENDING", datetime.now(UTC).isoformat())
    old = (datetime.now(UTC) - timedelta(hours=200)).isoformat()
    _approval(stack, "PENDING", old)  # for the sweep to expire
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    _approval(stack, "PENDING", hour_ago)  # never notified
    _approval(stack, "APPROVED", hour_ago, decided_by="lead-1", decided_at=hour_ago)  # its flow never started
    for function, event in [
        ("ApprovalNotifierFunction", {"Records": [_sqs_record(fresh)]}),
        ("ApprovalSweepFunction", {"source": "aws.scheduler"}),
    ]:
        creds = credentials_for(stack, function)
        with as_function(api, function, creds, recorder, monkeypatch):
            out = api.handlers[function](event, None)
            if function == "ApprovalNotifierFunction":
                assert out == {"batchItemFailures": []}, out
            else:
                assert out["expired"] >= 1 and out["requeued"] >= 1 and out["flows_started"] >= 1, out
                assert out["errors"] == 0, out
            used = set(recorder.pairs)
            # The sweep: the expiry's notification and nothing else of the table; the notifier: nothing of it.
            notes_only = (
                recorder.notes_only() if function == "ApprovalSweepFunction" else not recorder.conversation_keys
            )
            refused = _backend_refusals(stack, function)
        assert all(refused.values()), (function, refused)
        assert notes_only, (function, sorted(recorder.conversation_keys))
        check_pairs(stack, function, used)


def test_payments_function_under_its_own_role(
    api: Api, stack: Stack, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RefundFlow's refund step, invoked as Step Functions invokes it: an approved refund, a replay, and a
    refund whose order lost its reservation (the ConditionCheck's path)."""
    approved = _approval(stack, "APPROVED", datetime.now(UTC).isoformat(), decided_by="lead-1")
    time.sleep(0.002)  # _approval numbers orders by the millisecond
    lost = _approval(stack, "APPROVED", datetime.now(UTC).isoformat(), decided_by="lead-1")
    assert _order_of(stack, approved) != _order_of(stack, lost)
    boto3.client("dynamodb").update_item(
        TableName=stack.physical_ids["CustomerDataTable"],
        Key=to_item({"customer_id": 7, "sk": f"ORDER#{_order_of(stack, lost)}"}),
        UpdateExpression="SET reserved_cents = :z, available_cents = :t",
        ExpressionAttributeValues={":z": {"N": "0"}, ":t": {"N": "9000"}},
    )
    creds = credentials_for(stack, "PaymentsFunction")
    with as_function(api, "PaymentsFunction", creds, recorder, monkeypatch):
        handler = api.handlers["PaymentsFunction"]
        assert handler({"approvalId": approved, "execution": approved}, None)["status"] == "REFUNDED"
        assert handler({"approvalId": approved, "execution": f"{approved}-x"}, None)["replayed"] is True
        assert handler({"approvalId": lost, "execution": lost}, None)["status"] == "FAILED"
        ddb, orders = boto3.client("dynamodb"), stack.physical_ids["CustomerDataTable"]
        forbidden = {
            "DeleteItem": lambda: ddb.delete_item(TableName=orders, Key=to_item({"customer_id": 7, "sk": "ORDER#1"})),
            "Query": lambda: ddb.query(
                TableName=orders,
                KeyConditionExpression="customer_id = :c",
                ExpressionAttributeValues={":c": {"N": "7"}},
            ),
            "StartExecution": lambda: boto3.client("stepfunctions").start_execution(
                stateMachineArn=stack.physical_ids["RefundFlow"], name="x", input="{}"
            ),
            "sqs:SendMessage": lambda: boto3.client("sqs").send_message(
                QueueUrl=stack.physical_ids["ApprovalQueue"], MessageBody="{}"
            ),
        }
        run = recorder.run(
            forbidden, notes=NOTE_ACTIONS
        )  # the REFUNDED and FAILED decisions' notifications, nothing else
    run.check(stack, "PaymentsFunction")


def test_seal_function_under_its_own_role(
    api: Api, stack: Stack, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit stream's appends sealed, then the batch replayed (its puts refused, 412, the heads read back);
    the role can put and read heads and nothing else: no listing, no delete, no read of the audit table. (moto
    does not authorise PutObjectRetention before acting on it: that the role lacks it is the static
    evaluator's to prove.)"""
    reader = Stream(stack.physical_ids["AuditTable"])
    api.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("ok")]
    _, body, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "order 1042?"})
    event = reader.event()
    assert event["Records"]
    bucket = stack.physical_ids["AuditSealBucket"]
    creds = credentials_for(stack, "AuditSealFunction")
    with as_function(api, "AuditSealFunction", creds, recorder, monkeypatch):
        assert api.handlers["AuditSealFunction"](event, None) == {"batchItemFailures": []}
        assert api.handlers["AuditSealFunction"](event, None) == {"batchItemFailures": []}  # a replay
        s3 = boto3.client("s3")
        sealed = f"heads/{body['conversationId']}/"
        forbidden = {
            "s3:ListBucketVersions": lambda: s3.list_object_versions(Bucket=bucket, Prefix=sealed),
            "s3:DeleteObject": lambda: s3.delete_object(Bucket=bucket, Key=f"{sealed}x.json"),
            "dynamodb:Query": lambda: boto3.client("dynamodb").query(
                TableName=stack.physical_ids["AuditTable"],
                KeyConditionExpression="#s = :s",
                ExpressionAttributeNames={"#s": "stream"},
                ExpressionAttributeValues={":s": {"S": body["conversationId"]}},
            ),
        }
        run = recorder.run(forbidden)
    assert run.used == {("s3:PutObject", "AuditSealBucket/heads/*"), ("s3:GetObject", "AuditSealBucket/heads/*")}
    run.check(stack, "AuditSealFunction")


def test_long_turn_functions_under_their_own_roles(
    api: Api, stack: Stack, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn handed over by the chat function, finished by the worker, and the turn sweep restarting a stopped
    turn and ending a dead-lettered one — each under its own role; nothing beyond the role, and the sweep's
    grants all used."""
    sqs, ddb = boto3.client("sqs"), boto3.client("dynamodb")
    turns_table, queue = stack.physical_ids["ConversationsTable"], stack.physical_ids["TurnQueue"]

    def delete_a_turn_item() -> Any:  # as the function under test (a client made at the call)
        return boto3.client("dynamodb").delete_item(
            TableName=turns_table, Key=to_item({"conversation_id": "x", "seq": 0})
        )

    chat = credentials_for(stack, "ChatFunction")
    started: list[dict[str, Any]] = []
    with as_function(api, "ChatFunction", chat, recorder, monkeypatch):
        for _ in range(3):
            status, body, _ = api.call("POST", "/api/chat", {"message": "hi"}, headers={"prefer": "respond-async"})
            assert status == 202, body
            started.append(body)
        used = set(recorder.pairs)
    assert ("sqs:SendMessage", "TurnQueue") in used
    assert used <= granted_pairs(stack.template, "ChatFunction")
    messages = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    assert len(messages) == 3
    first = next(m for m in messages if json.loads(m["Body"])["turnId"] == started[0]["turnId"])

    worker = credentials_for(stack, "TurnWorkerFunction")
    api.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("Delivered.")]
    with as_function(api, "TurnWorkerFunction", worker, recorder, monkeypatch):
        event = {"Records": [{"messageId": first["MessageId"], "receiptHandle": "x", "body": first["Body"]}]}
        assert api.handlers["TurnWorkerFunction"](event, None) == {"batchItemFailures": []}
        # (Sending to TurnQueue is refused by the resource scope, which moto does not evaluate: test_template.)
        run = recorder.run(
            {
                "DeleteItem": delete_a_turn_item,
                "StartExecution": lambda: boto3.client("stepfunctions").start_execution(
                    stateMachineArn=stack.physical_ids["RefundFlow"], name="x", input="{}"
                ),
            }
        )
    assert all(run.refused.values()), run.refused
    assert ("dynamodb:ConditionCheckItem", "ConversationsTable") in run.used  # the take-over's check
    assert run.used <= granted_pairs(stack.template, "TurnWorkerFunction")

    # Turn 2 stopped (its lease lapsed, its check due); turn 3's message dead-lettered.
    second, third = started[1], started[2]
    for turn in (second,):
        ddb.update_item(
            TableName=turns_table,
            Key=to_item({"conversation_id": turn["conversationId"], "seq": 0}),
            UpdateExpression="SET lease_expires_at = :past",
            ExpressionAttributeValues=to_item({":past": 1}),
        )
    from support_agent.store.turns import TurnStore

    ddb.update_item(
        TableName=turns_table,
        Key=to_item(TurnStore._turn_key(second["conversationId"], second["turnId"])),
        UpdateExpression="SET lease_check_at = :past",
        ExpressionAttributeValues=to_item({":past": 1}),
    )
    body3 = json.dumps({"turnId": third["turnId"], "conversationId": third["conversationId"], "token": "t"})
    sqs.send_message(QueueUrl=stack.physical_ids["TurnDLQ"], MessageBody=body3)
    sweep = credentials_for(stack, "TurnSweepFunction")
    with as_function(api, "TurnSweepFunction", sweep, recorder, monkeypatch):
        out = api.handlers["TurnSweepFunction"]({"source": "aws.scheduler"}, None)
        run = recorder.run({"DeleteItem": delete_a_turn_item})
    assert (out["restarted"], out["dead_lettered"]) == (1, 1), out
    run.check(stack, "TurnSweepFunction")
    # Every item it touched is one its LeadingKeys allow, and each allowed prefix was needed.
    assert recorder.prefixes_used("TurnSweepFunction") == KEY_PREFIXES["TurnSweepFunction"]["ConversationsTable"]

    # A hand-off a staff member holds, for their feed of it below.
    api.model.script = [tools(tool_use("escalate_to_human", {"reason": "a person"})), answer("A teammate will join.")]
    _, escalated, _ = api.call("POST", "/api/chat", {"message": "a person please"})
    handoff = escalated["trace"][0]["toolCalls"][0]["result"]["handoff_id"]
    dana = api.token("agent-1", "support_staff", None, extra={"name": "Dana"})
    assert api.call("POST", f"/api/handoffs/{handoff}/claim", token=dana)[0] == 200

    # The feed of the finished turn, under EventsFunction's role: reads, its reader's counter and (a poll that may
    # wait) its waiting slot; no write else. Updates only `rate#` and `poll#` items (its LeadingKeys). And the
    # staff member's feed of the hand-off they hold: the hand-off read, their own counter and slot.
    events = credentials_for(stack, "EventsFunction")
    with as_function(api, "EventsFunction", events, recorder, monkeypatch):
        status, held, _ = api.call("GET", f"/api/handoffs/{handoff}/events?waitSeconds=1", token=dana)
        assert status == 200 and "handoff.assigned" in [e["type"] for e in held["events"]], held
        cid = started[0]["conversationId"]
        ticket_status, ticket, _ = api.call("POST", "/api/ws-ticket")  # the WebSocket's ticket (ticket#: PutItem)
        assert ticket_status == 200 and ticket["ticket"], ticket
        status, body, _ = api.call("GET", f"/api/conversations/{cid}/events?waitSeconds=1")
        updated = {key for action, key in recorder.conversation_keys if action == "dynamodb:UpdateItem"}
        run = recorder.run(
            {
                # PutItem it holds (the WebSocket tickets, on the Connections table: scoped statically by
                # KEY_PREFIXES); a batch write it holds nowhere.
                "BatchWriteItem": lambda: boto3.client("dynamodb").batch_write_item(
                    RequestItems={
                        turns_table: [{"PutRequest": {"Item": to_item({"conversation_id": "note#x", "seq": 1})}}]
                    }
                ),
                "DeleteItem": delete_a_turn_item,
            }
        )
    assert status == 200 and body["events"][-1]["type"] == "turn.completed", body
    assert {key.split("#", 1)[0] for key in updated} == {"rate", "poll"}, updated
    run.check(stack, "EventsFunction")
    assert recorder.prefixes_used("EventsFunction") == KEY_PREFIXES["EventsFunction"]["ConversationsTable"]


def _order_of(stack: Stack, approval_id: str) -> int:
    item = boto3.client("dynamodb").get_item(
        TableName=stack.physical_ids["ApprovalsTable"], Key=to_item({"approval_id": approval_id})
    )["Item"]
    return int(item["order_id"]["N"])


def _backend_refusals(stack: Stack, function: str) -> dict[str, bool]:
    """What neither back-end function may do: delete orders; the notifier: write orders, start RefundFlow.

    (The sweep may PutItem audit rows, and moto judges every PutItem against ``*``: that it cannot put
    orders is the static evaluator's to prove.)
    """
    ddb, orders = boto3.client("dynamodb"), stack.physical_ids["CustomerDataTable"]
    order = to_item({"customer_id": 7, "sk": "ORDER#1", "order_id": 1})
    writes = {"PutItem on orders": denied(lambda: ddb.put_item(TableName=orders, Item=order))}
    return {
        **(writes if function == "ApprovalNotifierFunction" else {}),
        "DeleteItem": denied(
            lambda: ddb.delete_item(TableName=orders, Key=to_item({"customer_id": 7, "sk": "ORDER#1"}))
        ),
        # The sweep starts the flows of approvals whose StartExecution failed; the notifier never may.
        **(
            {}
            if function == "ApprovalSweepFunction"
            else {
                "StartExecution": denied(
                    lambda: boto3.client("stepfunctions").start_execution(
                        stateMachineArn=stack.physical_ids["RefundFlow"], name="x", input="{}"
                    )
                )
            }
        ),
    }


def _sqs_record(approval_id: str) -> dict[str, Any]:
    return {
        "messageId": "m-1",
        "receiptHandle": "r-1",
        "body": json.dumps({"approvalId": approval_id}),
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "0",
            "SenderId": "x",
            "ApproximateFirstReceiveTimestamp": "0",
        },
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:ApprovalQueue",
        "awsRegion": "us-east-1",
    }


def _mcp_call(api: Api, request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """One JSON-RPC request to POST /mcp (stateless handshake era: no initialize needed), its result."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
    token = api.token("customer-8", customer_id=8)  # the other tests of this module use customer 7's orders
    status, body, _ = api.call("POST", "/mcp", message, token=token, headers=headers)
    assert status == 200 and "result" in body, (status, body)
    return body["result"]


def test_mcp_function_under_its_own_role(
    api: Api, stack: Stack, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP server's tools under McpFunction's role: every grant used, nothing beyond it (no turn queue,
    no model, no Query of the conversations), and no delete anywhere."""
    creds = credentials_for(stack, "McpFunction")
    key = {"_meta": {"support-agent/idempotency-key": "lp-refund-1"}}
    calls = [
        ("tools/list", None),
        ("tools/call", {"name": "lookup_order", "arguments": {"order_id": 2001}}),
        ("tools/call", {"name": "list_invoices", "arguments": {}}),
        (
            "tools/call",
            {"name": "request_refund", "arguments": {"order_id": 2002, "amount_cents": 500, "reason": "late"}, **key},
        ),
        (
            "tools/call",
            {"name": "request_refund", "arguments": {"order_id": 2001, "amount_cents": 700, "reason": "broken"}},
        ),
        ("tools/call", {"name": "escalate_to_human", "arguments": {"reason": "wants a person"}}),
    ]
    with as_function(api, "McpFunction", creds, recorder, monkeypatch):
        results = [_mcp_call(api, i, method, params) for i, (method, params) in enumerate(calls, start=1)]
        ddb, audit = boto3.client("dynamodb"), stack.physical_ids["AuditTable"]
        forbidden = {
            "DeleteItem on the audit table": lambda: ddb.delete_item(
                TableName=audit, Key={"stream": {"S": "mcp#8"}, "event_id": {"S": "x"}}
            ),
            # moto enforces IAM per action, not per resource: that the role reaches no turn queue and no
            # conversation Query is the static evaluator's to prove (tests/unit/test_template.py ALLOWED).
            "StartExecution of RefundFlow": lambda: boto3.client("stepfunctions").start_execution(
                stateMachineArn=stack.physical_ids["RefundFlow"], name="apr_mcp_forbidden", input="{}"
            ),
            "Scan of customer data": lambda: ddb.scan(TableName=stack.physical_ids["CustomerDataTable"]),
            "sns:Publish to the leads": lambda: boto3.client("sns").publish(
                TopicArn=stack.physical_ids["LeadsTopic"], Message="x"
            ),
        }
        run = recorder.run(forbidden)
    assert results[0]["tools"], results[0]
    assert all(not r.get("isError") for r in results[1:]), [r for r in results[1:] if r.get("isError")]
    run.check(stack, "McpFunction")
    # Its holder and its rate counter, nothing else of the Conversations table (what its LeadingKeys allow).
    assert recorder.prefixes_used("McpFunction") == KEY_PREFIXES["McpFunction"]["ConversationsTable"]
    count("8-least-privilege", McpFunction_forbidden_refused=len(run.refused))
