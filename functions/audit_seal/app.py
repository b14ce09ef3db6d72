"""AuditSealFunction: the audit table's stream → each appended stream's newest head, put in the Object Lock
bucket (support_agent/audit/seal.py). Logic lives in the layer."""

from typing import Any

from support_agent import wiring
from support_agent.audit.seal import seal_records
from support_agent.observability import metrics, observed


@observed()
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    # ReportBatchItemFailures: Lambda replays from the first record of a stream whose head could not be put.
    failed = seal_records(event.get("Records") or [], wiring.seal_writer())
    return {"batchItemFailures": [{"itemIdentifier": seq} for seq in failed]}
