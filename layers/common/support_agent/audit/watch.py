"""The audit watcher: every change to the audit table arrives on its DynamoDB stream; rows are only ever
appended (``attribute_not_exists``), so a MODIFY or a REMOVE of an audit row is tampering — a plain
``PutItem`` over an existing row, an ``UpdateItem`` or a ``DeleteItem`` by some role that holds them.

Each one is counted (``AuditRowsTampered``, alarmed at > 0) and logged as an error line with the row's key
(``stream``, ``event_id``), the event name, the stream record's id and sequence number and, when DynamoDB
names one, who made it (``userIdentity``: only the service's own TTL deletions carry it). Never the row's
content: the images stay in the stream (24 h) and in the point-in-time backups, for the operator
(docs/OPERATIONS.md "AuditTamperAlarm").

The audit table has no TTL, so no removal is expected from DynamoDB itself either: a REMOVE made by the
service (``userIdentity.principalId`` ``dynamodb.amazonaws.com``) would mean someone enabled TTL on the
audit table — it is counted like any other. INSERTs are the trail growing and are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from support_agent import observability as obs

TAMPERING = frozenset({"MODIFY", "REMOVE"})


@dataclass(frozen=True)
class Change:
    """One stream record, reduced to what may be logged: the key and how it changed."""

    event_name: str
    stream: str | None
    event_id: str | None
    record_id: str | None  # the stream record's eventID
    sequence_number: str | None
    by: str | None  # userIdentity.principalId: present only for DynamoDB's own (TTL) deletions

    @property
    def tampering(self) -> bool:
        return self.event_name in TAMPERING


def _string(attribute: Any) -> str | None:
    """A key attribute in DynamoDB JSON (``{"S": "..."}``); None when it is not there."""
    if isinstance(attribute, Mapping):
        for kind in ("S", "N"):
            if isinstance(attribute.get(kind), str):
                return str(attribute[kind])
    return None


def read(record: Mapping[str, Any]) -> Change:
    """The loggable part of a stream record, in the Lambda event shape. Never touches the images."""
    ddb = record.get("dynamodb") or {}
    keys = ddb.get("Keys") or {}
    identity = record.get("userIdentity") or {}
    return Change(
        event_name=str(record.get("eventName") or ""),
        stream=_string(keys.get("stream")),
        event_id=_string(keys.get("event_id")),
        record_id=record.get("eventID"),
        sequence_number=ddb.get("SequenceNumber"),
        by=identity.get("principalId") if isinstance(identity, Mapping) else None,
    )


def check(record: Mapping[str, Any]) -> Change | None:
    """Count and log the record if it changed or removed an audit row; None for an append (INSERT).

    An unknown event name is treated as tampering too: the watcher fails loud, never quiet.
    """
    change = read(record)
    if change.event_name == "INSERT":
        return None
    obs.logger.error(
        "audit_row_tampered",
        extra={"event": "audit_row_tampered", **{k: v for k, v in asdict(change).items() if v is not None}},
    )
    obs.emit(obs.AUDIT_ROWS_TAMPERED)
    return change
