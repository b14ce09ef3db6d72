"""The money functions may write a conversation's notifications and nothing else of the Conversations table.

tests/unit/test_template.py proves each role's (action, resource) pairs; a pair says nothing of the items, so
this checks the bound those pairs leave out: every grant of the functions that announce decisions
(store/notifications.py) on the Conversations table is conditioned on ``dynamodb:LeadingKeys`` ``note#*`` —
the notifications' own partition, as `partition` builds it — except the lead API's older, unconditioned
UpdateItem/Query (hand-off close and erasure), which can neither read nor create an item there.
"""

from __future__ import annotations

from typing import Any

import pytest

from support_agent.store.notifications import partition
from tests.unit.test_template import _role_documents, _role_id, _statements, _target

ANNOUNCERS = (
    "ApprovalsFunction",
    "ApprovalSweepFunction",
    "PaymentsFunction",
    "PaymentsWebhookFunction",
    "PaymentSweepFunction",
)
NOTE_ACTIONS = {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}
BOUND = {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["note#*"]}}
# Granted on the whole table before notifications existed (a hand-off's header, erasure's tombstones).
UNBOUNDED_BEFORE = {"ApprovalsFunction": {"dynamodb:UpdateItem", "dynamodb:Query"}}
# Bound to other items of the table: a person's reply (store/takeover.py), its message and its Idempotency-Key.
OTHER_BOUNDS = {
    "ApprovalsFunction": [
        (
            {"dynamodb:GetItem", "dynamodb:PutItem"},
            {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["conv_*", "idem#handoff#*"]}},
        )
    ]
}


def _on_conversations(cfn: dict[str, Any], function_id: str) -> list[dict[str, Any]]:
    """The role's Allow statements naming the Conversations table itself (not an index)."""
    parameters = set(cfn.get("Parameters", {}))
    found = []
    for document in _role_documents(cfn, _role_id(cfn, function_id)):
        for statement in _statements(document["Statement"]):
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            if statement["Effect"] == "Allow" and "ConversationsTable" in {_target(r, parameters) for r in resources}:
                found.append(statement)
    return found


def _actions(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return set(action if isinstance(action, list) else [action])


def test_the_bound_is_the_notifications_partition() -> None:
    key = partition("conv_01JF3Q0000000000000000000Z")
    assert key.startswith("note#") and not "conv_01JF3Q0000000000000000000Z".startswith("note#")


@pytest.mark.parametrize("function_id", ANNOUNCERS)
def test_notification_grants_are_bounded_to_note_items(cfn: dict[str, Any], function_id: str) -> None:
    statements = _on_conversations(cfn, function_id)
    bounded = [s for s in statements if s.get("Condition") == BOUND]
    assert len(bounded) == 1, statements
    (note,) = bounded
    assert _actions(note) == NOTE_ACTIONS
    assert note["Resource"] == {"Fn::GetAtt": ["ConversationsTable", "Arn"]}  # the table alone, no index
    others = [s for s in statements if s is not note and "Condition" in s]
    assert [(_actions(s), s["Condition"]) for s in others] == OTHER_BOUNDS.get(function_id, [])
    unbounded = set().union(*(_actions(s) for s in statements if s is not note and "Condition" not in s))
    assert unbounded == UNBOUNDED_BEFORE.get(function_id, set()), unbounded
    # Nothing unconditioned reads or creates an item of the table: the bound is the only way to them.
    assert not {"dynamodb:GetItem", "dynamodb:PutItem"} & unbounded


def test_the_bound_is_what_an_unrelated_key_fails() -> None:
    """``ForAllValues:StringLike`` with ``note#*``: the header, a message, a turn record, a rate counter and an
    idempotency key of the same conversation fall outside it (IAM's StringLike: ``*`` any run of characters)."""
    import fnmatch

    cid = "conv_01JF3Q0000000000000000000Z"
    (pattern,) = BOUND["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
    assert fnmatch.fnmatchcase(partition(cid), pattern)
    for other in (cid, f"turn#{cid}", "rate#7#2026", "idem#7#abc", "erasure#run"):
        assert not fnmatch.fnmatchcase(other, pattern), other
