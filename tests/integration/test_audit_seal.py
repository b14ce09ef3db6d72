"""AuditSealFunction and the Object Lock bucket on the template deployed into moto (the bucket's versioning
and Object Lock applied after the deploy, as devstack.stack repairs them): the real audit stream sealed,
verification against the seal, a chain rewritten with its owner's head caught, sealed heads undeletable."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from support_agent.audit.chain import Head
from support_agent.audit.seal import Seal, key
from support_agent.store.audit import AuditStore
from support_agent.store.dynamo import to_item
from tests.integration.conftest import Api
from tests.integration.test_audit_watcher_stream import Stream, a_turn_with_audited_tools
from tests.reliability.test_audit_chain import rehash


def bucket(api: Api) -> str:
    return api.stack.physical_ids["AuditSealBucket"]


def header_head(api: Api, cid: str) -> Head:
    item = boto3.client("dynamodb").get_item(
        TableName=api.stack.physical_ids["ConversationsTable"], Key=to_item({"conversation_id": cid, "seq": 0})
    )["Item"]
    return Head(int(item["audit_n"]["N"]), item["audit_hash"]["S"], item["audit_event"]["S"])


def sealed_turn(api: Api) -> tuple[str, dict[str, Any]]:
    """A turn whose audit rows went through the stream into the seal function. (conversation, its answer)"""
    stream = Stream(api.stack.physical_ids["AuditTable"])
    cid = a_turn_with_audited_tools(api)
    event = stream.event()
    api.use_function("AuditSealFunction")
    out = api.handlers["AuditSealFunction"](event, None)
    return cid, {"out": out, "event": event}


def versions(api: Api, stream: str) -> list[dict[str, Any]]:
    out = boto3.client("s3").list_object_versions(Bucket=bucket(api), Prefix=f"heads/{stream}/")
    return list(out.get("Versions", []))


def test_the_bucket_is_locked_as_the_template_says(api: Api) -> None:
    s3 = boto3.client("s3")
    assert s3.get_bucket_versioning(Bucket=bucket(api))["Status"] == "Enabled"
    lock = s3.get_object_lock_configuration(Bucket=bucket(api))["ObjectLockConfiguration"]
    assert lock["ObjectLockEnabled"] == "Enabled"
    assert {k: lock["Rule"]["DefaultRetention"][k] for k in ("Mode", "Days")} == {"Mode": "COMPLIANCE", "Days": 400}


def test_each_streams_newest_head_is_sealed_and_verify_checks_against_it(api: Api) -> None:
    cid, sealed = sealed_turn(api)
    assert sealed["out"] == {"batchItemFailures": []}
    head = header_head(api, cid)
    (version,) = versions(api, cid)  # one head per stream per batch: the newest
    assert version["Key"] == key(cid, head.n)
    body = boto3.client("s3").get_object(Bucket=bucket(api), Key=version["Key"])["Body"].read()
    assert Seal.parse(body).head == head
    # The approval the turn asked for is a stream of its own, sealed in the same batch.
    streams = {r["dynamodb"]["NewImage"]["stream"]["S"] for r in sealed["event"]["Records"]}
    assert any(s.startswith("approval#") for s in streams)
    assert all(versions(api, s) for s in streams)

    status, verified, _ = api.call("GET", f"/api/audit/verify?conversationId={cid}", token=api.lead())
    assert status == 200, verified
    assert (verified["status"], verified["sealedThrough"]) == ("ok", head.n)
    assert verified["sealedAt"] and verified["sealedAt"] == Seal.parse(body).sealed_at
    assert all(s["sealedAt"] for s in verified["streams"])

    # A replay of the batch (Lambda retries) seals the same heads at the same keys: the seal never moves.
    api.use_function("AuditSealFunction")
    assert api.handlers["AuditSealFunction"](sealed["event"], None) == {"batchItemFailures": []}
    # With If-None-Match: * the replay's puts are refused (412) and taken as done: no second version.
    assert [v["Key"] for v in versions(api, cid)] == [key(cid, head.n)]


def rewritten_with_its_head(api: Api) -> tuple[str, list[dict[str, Any]]]:
    """A sealed turn, then a forger with write access to both tables: a row changed, the chain recomputed from
    it, the owner's head moved. (conversation, the rows as rewritten)"""
    cid, _ = sealed_turn(api)
    ddb, table = boto3.client("dynamodb"), api.stack.physical_ids["AuditTable"]
    rows = AuditStore(ddb, table).list_stream(cid)
    rows[0]["outcome"] = "error"
    rehash(rows, 0)
    for row in rows:
        ddb.put_item(TableName=table, Item=to_item(row))
    ddb.update_item(
        TableName=api.stack.physical_ids["ConversationsTable"],
        Key=to_item({"conversation_id": cid, "seq": 0}),
        UpdateExpression="SET audit_hash = :h",
        ExpressionAttributeValues=to_item({":h": rows[-1]["hash"]}),
    )
    return cid, rows


def test_a_chain_rewritten_with_its_owners_head_is_caught_by_the_seal(api: Api) -> None:
    cid, rows = rewritten_with_its_head(api)
    ddb, table = boto3.client("dynamodb"), api.stack.physical_ids["AuditTable"]
    e = api.stack.function_env("ApprovalsFunction")
    unsealed = AuditStore(ddb, table, e["CONVERSATIONS_TABLE"], e["APPROVALS_TABLE"], e["CUSTOMER_DATA_TABLE"])
    assert unsealed.verify_stream(cid)["status"] == "ok"  # the chain and the head alone cannot tell

    _, verified, _ = api.call("GET", f"/api/audit/verify?conversationId={cid}", token=api.lead())
    assert verified["status"] == "broken"
    assert verified["firstBreak"] == {"eventId": rows[-1]["event_id"], "kind": "changed", "stream": cid}


def test_a_put_over_the_sealed_key_does_not_move_the_seal(api: Api) -> None:
    """Issue 30 finding 6: Object Lock keeps versions, not keys, and the reader took the newest version: one
    PutObject of the forged head at the sealed key turned the rewritten chain's ``broken`` into ``ok``. The bucket
    policy refuses that put (tests/unit/test_template.py; moto ignores policies), and the reader takes the key's
    oldest version, so the seal stays where it was even when such a put gets through."""
    cid, rows = rewritten_with_its_head(api)
    (version,) = versions(api, cid)
    forged = Seal(cid, Head(int(rows[-1]["n"]), rows[-1]["hash"], rows[-1]["event_id"]), "2026-12-03T11:00:00Z")
    boto3.client("s3").put_object(
        Bucket=bucket(api), Key=version["Key"], Body=forged.body(), ChecksumAlgorithm="SHA256"
    )
    assert len(versions(api, cid)) == 2  # moto took it: what a role without the bucket policy could do

    _, verified, _ = api.call("GET", f"/api/audit/verify?conversationId={cid}", token=api.lead())
    assert verified["status"] == "broken"
    assert verified["firstBreak"] == {"eventId": rows[-1]["event_id"], "kind": "changed", "stream": cid}


def test_a_sealed_head_cannot_be_deleted_and_a_delete_marker_does_not_hide_it(api: Api) -> None:
    cid, _ = sealed_turn(api)
    s3 = boto3.client("s3")
    (version,) = versions(api, cid)
    with pytest.raises(ClientError) as refused:
        s3.delete_object(Bucket=bucket(api), Key=version["Key"], VersionId=version["VersionId"])
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    # A delete without a version id only adds a marker: a plain listing loses the key, verification does not.
    s3.delete_object(Bucket=bucket(api), Key=version["Key"])
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket(api), Prefix=f"heads/{cid}/")
    _, verified, _ = api.call("GET", f"/api/audit/verify?conversationId={cid}", token=api.lead())
    assert (verified["status"], verified["sealedThrough"]) == ("ok", header_head(api, cid).n)
