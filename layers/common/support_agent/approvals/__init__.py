"""The approval workflow: lead decisions, notifying the leads and sweeping stale approvals."""
