"""support_agent.approvals.flow: RefundFlow execution names and input, checked before Step Functions sees them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from support_agent.approvals.flow import MAX_EXECUTION_NAME, execution_name, flow_input
from support_agent.ids import ULID_RE, new_approval_id

APPROVAL = "apr_01JF3R0000000000000000000Z"
# A valid ULID for the refused shapes below: fixed, since parametrize ids must be the same in every
# pytest-xdist worker (a ulid() per process would make each worker collect different tests).
ULID = "01M8YHDSNN3N6JT2BFH3CBPWY7"


def test_execution_names() -> None:
    assert execution_name(APPROVAL) == APPROVAL
    assert execution_name(APPROVAL, 0) == APPROVAL
    assert execution_name(APPROVAL, 1) == f"{APPROVAL}-r1"
    assert execution_name(APPROVAL, 12) == f"{APPROVAL}-r12"
    fresh = new_approval_id()
    assert execution_name(fresh, 3) == f"{fresh}-r3"
    assert len(execution_name(APPROVAL, 10**9)) <= MAX_EXECUTION_NAME


def test_the_refused_shapes_start_from_a_valid_id() -> None:
    assert execution_name(f"apr_{ULID}") == f"apr_{ULID}"
    assert flow_input(f"apr_{ULID}")["approvalId"] == f"apr_{ULID}"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "apr_",
        "apr_short",
        f"conv_{ULID}",
        f"apr_{ULID.lower()}",
        f"apr_{ULID}\n",  # `$` alone would accept a trailing newline
        f" apr_{ULID}",
        f"apr_{ULID}:x",
        f"apr_{ULID}#1",
        f"apr_{ULID}-r1",  # an execution name is not an approval id
        f"apr_{ULID}{'X' * 60}",
        "apr_01JF3R000000000000000000IL",  # I and L are not in the ULID alphabet
    ],
)
def test_anything_but_apr_ulid_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        execution_name(bad)
    with pytest.raises(ValueError):
        flow_input(bad)


@pytest.mark.parametrize("retry", [-1, True, 1.0, "1", None])
def test_retry_must_be_a_non_negative_int(retry: Any) -> None:
    with pytest.raises(ValueError):
        execution_name(APPROVAL, retry)


def test_an_over_long_name_is_refused() -> None:
    with pytest.raises(ValueError):
        execution_name(APPROVAL, 10**60)


def test_flow_input_is_unique_per_start() -> None:
    """A repeated start must differ from the first, so Step Functions refuses it (ExecutionAlreadyExists)."""
    first, second = flow_input(APPROVAL), flow_input(APPROVAL)
    assert set(first) == {"approvalId", "startId"}
    assert first["approvalId"] == second["approvalId"] == APPROVAL
    assert all(re.fullmatch(ULID_RE, i["startId"]) for i in (first, second))
    assert first != second
