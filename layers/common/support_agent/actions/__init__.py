"""Declared actions: what the agent may do for a customer, each under the support policy (policy/), each offered as
a tool by its declaration, never named by the loop.

What the outside calls (tools/, mcp/, wiring and the routes through it) is named here, each name imported from its
module on first use (PEP 562): the chat handler's cold start loads none of it (tests/unit/test_chat_import.py).

The modules, in the order an action meets them (each reads the policy through a `PolicyReader`, policy/model.py):

* declaration.py — `Action`: a tool's name, input model, policy rule, eligibility, execution, audit stream, MCP
  exposure and vocabulary; `Refused`, why one may not run, in the customers' words;
* refund.py, cancel.py, address.py — the three declarations: request_refund (today's RefundDesk under its rule),
  cancel_order (the order cancelled and refunded through the refund path, once), update_shipping_address;
* proposals.py — an action the customer confirms: proposed by the tool, decided only by `ProposalDesk.confirm` or
  `decline` (the routes, the customer's own token), executed keyed by the proposal (store/proposals.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from support_agent.actions.address import AddressChange as AddressChange
    from support_agent.actions.address import address_action as address_action
    from support_agent.actions.cancel import Cancellation as Cancellation
    from support_agent.actions.cancel import cancel_action as cancel_action
    from support_agent.actions.declaration import Action as Action
    from support_agent.actions.declaration import Effect as Effect
    from support_agent.actions.declaration import Refused as Refused
    from support_agent.actions.proposals import Proposal as Proposal
    from support_agent.actions.proposals import ProposalDesk as ProposalDesk
    from support_agent.actions.proposals import ProposalExpired as ProposalExpired
    from support_agent.actions.proposals import ProposalNotFound as ProposalNotFound
    from support_agent.actions.proposals import proposed_answer as proposed_answer
    from support_agent.actions.refund import RequestRefundInput as RequestRefundInput
    from support_agent.actions.refund import refund_action as refund_action

# Each public name and the module (under this package) that defines it.
_PUBLIC = {
    "AddressChange": "address",
    "address_action": "address",
    "Cancellation": "cancel",
    "cancel_action": "cancel",
    "Action": "declaration",
    "Effect": "declaration",
    "Refused": "declaration",
    "Proposal": "proposals",
    "ProposalDesk": "proposals",
    "ProposalExpired": "proposals",
    "ProposalNotFound": "proposals",
    "proposed_answer": "proposals",
    "RequestRefundInput": "refund",
    "refund_action": "refund",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:  # a submodule (`from support_agent.actions import cancel`) is then imported as usual
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
