"""Declared actions (actions/) as the registry's tools: the policy read once per call decides how a call runs.

* its rule needs no confirmation and the action can run at once (refunds, by default): it runs, as before;
* its rule needs the customer's confirmation: eligibility now (refused: the tool's error, nothing written), then a
  proposal (``PROPOSED``, actions/proposals.py) that only the customer's own request confirms. Over MCP there is no
  conversation to confirm in: refused (mcp/our_tools.py does not offer it either);
* no confirmation, but no way to run outside a proposal (cancel, address change under such a policy): proposed and
  confirmed by the call itself, so it is still keyed and resumed by the proposal.

Every answer carries the ``policy_version`` it applied; the call's audit row takes it from there (agent/loop.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from support_agent.actions.declaration import Action, Refused
from support_agent.actions.proposals import ProposalDesk, proposed_answer
from support_agent.errors import PolicyUnavailable
from support_agent.policy.model import PolicyReader
from support_agent.store.audit import Streams
from support_agent.tools.registry import Tool, ToolContext, ToolError

POLICY_UNAVAILABLE = (
    "this action cannot be decided right now (the support policy could not be read); nothing was done: offer the "
    "customer a support teammate (escalate_to_human) or to try again later"
)
NOT_OVER_MCP = (
    "this action needs the customer's confirmation in a conversation with the support chat; it is not offered here"
)


def action_tool(action: Action[Any], policy: PolicyReader, desk: ProposalDesk) -> Tool[Any]:
    def run(args: Any, ctx: ToolContext) -> dict[str, Any]:
        try:
            applied = policy.current()
        except PolicyUnavailable:  # nothing is decided without rules; the model can offer a person instead
            raise ToolError(POLICY_UNAVAILABLE) from None
        confirm = action.needs_confirmation(applied)
        try:
            if not confirm and action.execute_now is not None:
                return {**action.execute_now(args, ctx, applied), "policy_version": applied.version}
            if confirm and ctx.origin == "mcp":
                raise ToolError(NOT_OVER_MCP)
            item = desk.propose(action, args, ctx, applied)
            return proposed_answer(item) if confirm else desk.run_at_once(item, ctx)
        except Refused as refused:  # the policy's answer too: the model reads why, the audit row which version said so
            return {"error": str(refused), "policy_version": applied.version}

    def recorded(ctx: ToolContext) -> dict[str, Any] | None:
        prior = desk.recorded(ctx)
        if prior is None and action.recorded is not None:
            prior = action.recorded(ctx)
        return prior

    def streams(result: Mapping[str, Any], ctx: ToolContext) -> Streams:
        proposal_id = result.get("proposal_id")
        if isinstance(proposal_id, str):  # the proposal's stream names what its execution wrote
            return Streams(proposal_id=proposal_id)
        return action.streams(result, ctx) if action.streams is not None else Streams()

    return Tool(action.name, action.description, action.input_model, run, recorded=recorded, streams=streams)


def action_tools(actions: list[Action[Any]], policy: PolicyReader, desk: ProposalDesk) -> list[Tool[Any]]:
    return [action_tool(action, policy, desk) for action in actions]
