"""update_shipping_address: an order not yet shipped gets a new address, validated, once the customer confirms.

Only in the statuses the policy's ``update_shipping_address`` rule allows (PROCESSING by default) and to a country
in the policy's list. Confirmed, the order's ``shipping_address`` is set by one conditional update (its status
still allowing it) in the same transaction as the proposal's end, so a resume repeats it or finds it done. The
audit row of the confirmation holds the old and the new address; what the customer sees (the outcome, the feed)
holds neither, so quiet mode has nothing of it to hide.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from support_agent.actions.declaration import Action, Call, Effect, not_found
from support_agent.policy.model import AppliedPolicy
from support_agent.refunds.decide import status_words
from support_agent.store.customer_data import CustomerDataStore, Order, order_key, status_in
from support_agent.store.dynamo import to_values
from support_agent.store.proposals import ProposalItem

NAME = "update_shipping_address"
DESCRIPTION = (
    "Change the shipping address of one of the signed-in customer's orders that has not shipped yet (see "
    "lookup_order). Nothing happens when you call it: it answers PROPOSED with what will happen and until when, "
    "and the customer confirms or declines with the buttons shown; never tell the customer it is done before they "
    "confirm. Give the whole new address as the customer wrote it; country is a two-letter code such as US."
)
VOCABULARY = {
    "ADDRESS_UPDATED": "The order will ship to the new address.",
    "REFUSED": "The address could not be changed; nothing was done.",
}


class Address(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    name: str = Field(..., min_length=1, max_length=100, description="Who receives the parcel.")
    line1: str = Field(..., min_length=1, max_length=200, description="Street and number.")
    line2: str | None = Field(None, max_length=200, description="Apartment, suite, etc.")
    city: str = Field(..., min_length=1, max_length=100)
    region: str | None = Field(None, max_length=100, description="State, province or county.")
    postal_code: str = Field(..., min_length=1, max_length=20)
    country: str = Field(..., pattern=r"^[A-Z]{2}$", description="ISO 3166-1 alpha-2 code, e.g. US.")


class UpdateAddressInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: int = Field(..., ge=1, le=2_147_483_647, strict=True, description="The numeric order id.")
    address: Address


def one_line(address: Address) -> str:
    parts = [address.name, address.line1, address.line2, address.city, address.region, address.postal_code]
    return ", ".join(p for p in parts if p) + f", {address.country}"


def address_eligibility(order: Order, args: Any, applied: AppliedPolicy, now: datetime) -> str | None:
    rule = applied.policy.rule(NAME)
    if order.status not in rule.statuses:
        words = status_words(rule.statuses)
        return f"order {order.order_id} is {order.status}; only the address of {words} orders can be changed"
    country = args.address.country
    if country not in applied.policy.countries:
        return f"we do not ship to {country}; we ship to {', '.join(applied.policy.countries)}"
    return None


@dataclass(frozen=True)
class AddressChange:
    customer_data: CustomerDataStore

    def execute(self, item: ProposalItem, args: Any, call: Call) -> Effect:
        order = self.customer_data.get_order(item.customer_id, item.order_id)
        if order is None:
            raise not_found(item.order_id)
        new = args.address.model_dump(mode="json", exclude_none=True)
        allowed, names = status_in(item.statuses)
        update = {
            "Update": {
                "TableName": self.customer_data.table,
                "Key": order_key(item.customer_id, item.order_id),
                "UpdateExpression": "SET shipping_address = :address, address_changed_by = :pid, "
                "address_changed_at = :now",
                "ConditionExpression": allowed,
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": to_values(
                    {**names, ":address": new, ":pid": item.proposal_id, ":now": call.now}
                ),
            }
        }
        outcome = {"status": "ADDRESS_UPDATED", "order_id": item.order_id, "message": VOCABULARY["ADDRESS_UPDATED"]}
        return Effect(
            outcome,
            items=(update,),
            refused=f"order {item.order_id} is no longer {status_words(item.statuses)}; its address was not changed",
            audit_input={"old_address": order.shipping_address, "new_address": new},
        )


def address_action(change: AddressChange) -> Action[Any]:
    def summary(order: Order, args: Any) -> str:
        return f"Change the shipping address of order {order.order_id} to: {one_line(args.address)}."

    return Action(
        name=NAME,
        description=DESCRIPTION,
        input_model=UpdateAddressInput,
        rule=NAME,
        eligible=address_eligibility,
        summary=summary,
        execute=change.execute,
        audit_stream="proposal#<proposal id> (the confirmation's row holds the old and new address)",
        vocabulary=VOCABULARY,
    )
