"""ApprovalSweepFunction (EventBridge schedule): expire stale PENDING approvals, re-enqueue un-notified ones."""

from typing import Any

from support_agent.approvals.sweep import default_sweeper


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return default_sweeper().run().as_dict()
