"""Proposals: an action the customer confirms, decided by the customer's own request, never by the model.

A call of an action whose rule needs the customer's confirmation executes nothing: its eligibility is checked now
(an ineligible call is refused, nothing written), then a PROPOSED item is written (store/proposals.py) and the
tool answers what will happen and until when. Only `ProposalDesk.confirm` or `decline`, called by the routes with
the customer's own token, decides it; no tool can.

Confirming re-checks eligibility under the policy in force now and records that version; ineligible now, the
proposal ends CONFIRMED with the refusal as its outcome and nothing happens. Otherwise it is marked CONFIRMING
first (a conditional write), the action runs keyed by the proposal (each step conditional, so a crash at any step
and a confirm again resumes it, never a second effect), and the outcome is stored at the end. A decided proposal is
answered with its recorded outcome (a second confirm gets the first's; confirm after decline, the decline); one
past ``expires_at`` and never decided is `ProposalExpired`; another customer's, or an unknown one,
`ProposalNotFound` (the same answer).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from support_agent.actions.declaration import Action, Call, Effect, Refused, not_found
from support_agent.auth import Principal
from support_agent.clock import iso, parse_iso
from support_agent.errors import Conflict, NotFound
from support_agent.messages import Deadline
from support_agent.policy.model import AppliedPolicy, PolicyReader
from support_agent.store.customer_data import CustomerDataStore
from support_agent.store.proposals import (
    DECIDED,
    ItemRefused,
    ProposalExists,
    ProposalItem,
    ProposalMoved,
    ProposalStore,
    proposal_id_of,
    proposal_sk,
)

MAX_RACES = 8  # concurrent confirms and declines of one proposal: each lost race means it moved on


class ProposalNotFound(NotFound):
    """No such proposal in this customer's conversation (another customer's: the same answer)."""

    def __init__(self) -> None:
        super().__init__("proposal not found")


class ProposalExpired(Conflict):
    """Past its ``expires_at`` and never decided: nothing can confirm it now."""

    def __init__(self, expires_at: str) -> None:
        super().__init__(f"proposal expired at {expires_at}; ask again for a new one")


@dataclass(frozen=True)
class Proposal:
    """A proposal as the routes show it (the conversation view, the confirm and decline answers)."""

    proposal_id: str
    conversation_id: str
    customer_id: int
    action: str
    input: dict[str, Any]
    summary: str
    status: str  # PROPOSED | CONFIRMING | CONFIRMED | DECLINED | EXPIRED
    created_at: str
    expires_at: str
    policy_version: int
    decided_at: str | None
    decided_policy_version: int | None
    outcome: dict[str, Any] | None
    after_seq: int | None  # the conversation's last message when it was decided: where its note goes

    @classmethod
    def of(cls, item: ProposalItem, now: str | None = None) -> Proposal:
        """``item`` as shown; with ``now``, one past its expiry and never decided shows EXPIRED (unwritten)."""
        status = item.status
        if now is not None and status == "PROPOSED" and expired(item, now):
            status = "EXPIRED"
        return cls(
            item.proposal_id,
            item.conversation_id,
            item.customer_id,
            item.action,
            dict(item.input),
            item.summary,
            status,
            item.created_at,
            item.expires_at,
            item.policy_version,
            item.decided_at,
            item.decided_policy_version,
            item.outcome,
            item.after_seq,
        )


def expired(item: ProposalItem, now: str) -> bool:
    return parse_iso(now) > parse_iso(item.expires_at)


@dataclass(frozen=True)
class ProposalCall:
    """A confirmed proposal's call: its principal and its tool call's keys, so every write it makes (a refund's key
    and request row) is the proposal's own. Outside a turn: no lease to fence, nothing held."""

    principal: Principal
    customer_id: int
    conversation_id: str
    seq: int
    tool_use_id: str
    request_id: str
    now: str
    deadline: Deadline | None = None
    held: bool = False
    fence: dict[str, Any] | None = None

    @property
    def owner_conversation_id(self) -> str:
        return "" if self.conversation_id == "mcp" else self.conversation_id


def proposed_answer(item: ProposalItem) -> dict[str, Any]:
    """What the tool answers for a proposal (a new one, or the same call replayed)."""
    return {
        "status": "PROPOSED",
        "proposal_id": item.proposal_id,
        "action": item.action,
        "order_id": item.order_id,
        "summary": item.summary,
        "expires_at": item.expires_at,
        "policy_version": item.policy_version,
        "message": "Nothing has been done yet: the customer confirms or declines this with the buttons shown.",
    }


@dataclass(frozen=True)
class ProposalDesk:
    """``last_seq``: the conversation's last stored message seq (None: no conversation), for `Proposal.after_seq`."""

    store: ProposalStore
    customer_data: CustomerDataStore
    policy: PolicyReader
    actions: Mapping[str, Action[Any]]
    last_seq: Callable[[str], int | None]

    # -- the tool's side ----------------------------------------------------------------------------------------

    def recorded(self, call: Call) -> dict[str, Any] | None:
        """What the call answered if it ran before (by its keys alone): its proposal, or (confirmed at once, the
        rule needing no confirmation) its outcome."""
        item = self.store.get(call.customer_id, call.conversation_id, proposal_id_of(*_keys(call)))
        if item is None:
            return None
        if item.decided_by == "policy":  # confirmed by the call itself: resumed if a crash stopped it
            return self.run_at_once(item, call)
        return proposed_answer(item)

    def propose(self, action: Action[Any], args: BaseModel, call: Call, applied: AppliedPolicy) -> ProposalItem:
        """A new proposal for this call (or the one it wrote before); `Refused` when the policy refuses it now."""
        pid = proposal_id_of(*_keys(call))
        prior = self.store.get(call.customer_id, call.conversation_id, pid)
        if prior is not None:
            return prior
        order_id = action.order_id(args)
        order = self.customer_data.get_order(call.customer_id, order_id)
        if order is None:
            raise not_found(order_id)
        why = action.eligible(order, args, applied, parse_iso(call.now))
        if why:
            raise Refused(why)
        ttl = timedelta(seconds=applied.policy.proposal_ttl_seconds)
        item = ProposalItem(
            customer_id=call.customer_id,
            sk=proposal_sk(call.conversation_id, pid),
            proposal_id=pid,
            conversation_id=call.conversation_id,
            seq=call.seq,
            tool_use_id=call.tool_use_id,
            action=action.name,
            order_id=order_id,
            input=args.model_dump(mode="json"),
            summary=action.summary(order, args),
            status="PROPOSED",
            created_at=call.now,
            expires_at=iso(parse_iso(call.now) + ttl),
            policy_version=applied.version,
            requested_by=call.principal.sub,
            updated_at=call.now,
        )
        row = item.row(
            "proposal_created",
            call.principal.sub,
            "PROPOSED",
            call.now,
            {"summary": item.summary, "expires_at": item.expires_at},
            input=item.input,
            request_id=call.request_id,
            policy_version=applied.version,
        )
        try:
            return self.store.create(item, row, call.fence)
        except ProposalExists:
            written = self.store.get(call.customer_id, call.conversation_id, pid)
            assert written is not None
            return written

    def run_at_once(self, item: ProposalItem, call: Call) -> dict[str, Any]:
        """A proposal the rule needs no confirmation for, confirmed by the call itself: its outcome."""
        decided = self._confirm(item, call.principal, call.now, "policy")
        return {**(decided.outcome or proposed_answer(decided)), "proposal_id": decided.proposal_id}

    # -- the customer's side (the routes) ------------------------------------------------------------------------

    def decisions(self, customer_id: int, conversation_id: str, now: str) -> list[Proposal]:
        """The conversation's proposals for its next turn, each one past its expiry and never decided first ended
        EXPIRED (written and announced: the feed hears of it, the model is told, as of a decision)."""
        items = self.store.list(customer_id, conversation_id)
        for i, item in enumerate(items):
            if item.status == "PROPOSED" and expired(item, now):
                with contextlib.suppress(ProposalExpired, ProposalMoved):  # ended now, or decided meanwhile
                    self._expire(item, now)
                items[i] = self._reread(item)
        return [Proposal.of(item) for item in items]

    def list(self, customer_id: int, conversation_id: str, now: str | None = None) -> list[Proposal]:
        return [Proposal.of(item, now) for item in self.store.list(customer_id, conversation_id)]

    def confirm(self, principal: Principal, conversation_id: str, proposal_id: str, now: str) -> Proposal:
        return Proposal.of(self._confirm(self._own(principal, conversation_id, proposal_id), principal, now))

    def decline(self, principal: Principal, conversation_id: str, proposal_id: str, now: str) -> Proposal:
        item = self._own(principal, conversation_id, proposal_id)
        for _ in range(MAX_RACES):
            if item.status != "PROPOSED":
                if item.status == "EXPIRED":
                    raise ProposalExpired(item.expires_at)
                return Proposal.of(item)  # decided (or being confirmed): as it is
            if expired(item, now):
                self._expire(item, now)
            outcome = {"status": "DECLINED", "message": "The customer declined; nothing was done."}
            try:
                item = self._end(item, "DECLINED", outcome, principal.sub, now, item.policy_version)
                return Proposal.of(item)
            except ProposalMoved:
                item = self._reread(item)
        raise Conflict("the proposal kept changing; try again")

    # -- inside ---------------------------------------------------------------------------------------------------

    def _own(self, principal: Principal, conversation_id: str, proposal_id: str) -> ProposalItem:
        if principal.role != "customer" or principal.customer_id is None or not proposal_id.startswith("prp_"):
            raise ProposalNotFound()
        item = self.store.get(principal.customer_id, conversation_id, proposal_id)
        if item is None or item.action not in self.actions:
            raise ProposalNotFound()
        return item

    def _reread(self, item: ProposalItem) -> ProposalItem:
        current = self.store.get(item.customer_id, item.conversation_id, item.proposal_id)
        assert current is not None
        return current

    def _confirm(self, item: ProposalItem, principal: Principal, now: str, by: str = "") -> ProposalItem:
        """Begin (eligibility under the current policy), run and end; or resume a CONFIRMING one where it stopped."""
        by = by or principal.sub
        for _ in range(MAX_RACES):
            if item.status in DECIDED:
                if item.status == "EXPIRED":
                    raise ProposalExpired(item.expires_at)
                return item
            try:
                if item.status == "PROPOSED":
                    item = self._begin(item, principal, now, by)
                    if item.status != "CONFIRMING":
                        return item  # refused under the current policy
                return self._run(item, principal, now, by)
            except ProposalMoved:
                item = self._reread(item)
        raise Conflict("the proposal kept changing; try again")

    def _begin(self, item: ProposalItem, principal: Principal, now: str, by: str) -> ProposalItem:
        """PROPOSED -> CONFIRMING with the current policy's version and terms, or -> CONFIRMED refused."""
        if expired(item, now):
            self._expire(item, now)
        action = self.actions[item.action]
        applied = self.policy.current()
        args = action.input_model.model_validate(item.input)
        order = self.customer_data.get_order(item.customer_id, item.order_id)
        why = str(not_found(item.order_id)) if order is None else action.eligible(order, args, applied, parse_iso(now))
        after = self.last_seq(item.conversation_id) if item.owner_conversation_id else None
        if why:
            outcome = {"status": "REFUSED", "error": why, "policy_version": applied.version}
            return self._end(item, "CONFIRMED", outcome, by, now, applied.version, after_seq=after)
        sets = {
            "status": "CONFIRMING",
            "decided_at": now,
            "decided_by": by,
            "decided_policy_version": applied.version,
            "terms": action.terms(applied),
            "after_seq": after,
            "updated_at": now,
        }
        row = item.row(
            "proposal_confirmed", by, "CONFIRMING", now, {"terms": sets["terms"]}, policy_version=applied.version
        )
        return self.store.move(item, {k: v for k, v in sets.items() if v is not None}, [row])

    def _run(self, item: ProposalItem, principal: Principal, now: str, by: str) -> ProposalItem:
        """The confirmed action, keyed by the proposal; then CONFIRMED with its outcome (and the effect's own items)."""
        action = self.actions[item.action]
        args = action.input_model.model_validate(item.input)
        call = ProposalCall(
            principal,
            item.customer_id,
            item.conversation_id,
            item.seq,
            item.tool_use_id,
            f"confirm:{item.proposal_id}",
            now,
        )
        try:
            effect = action.execute(item, args, call)
        except Refused as refused:
            effect = Effect({"status": "REFUSED", "error": str(refused)})
        version = item.decided_policy_version
        outcome = {**effect.outcome, "policy_version": version}
        try:
            return self._end(item, "CONFIRMED", outcome, by, now, version, effect=effect)
        except ItemRefused:  # the order moved on since it was checked (shipped, say): nothing happened
            why = effect.refused or "the order changed"
            return self._end(
                item, "CONFIRMED", {"status": "REFUSED", "error": why, "policy_version": version}, by, now, version
            )

    def _end(
        self,
        item: ProposalItem,
        status: str,
        outcome: dict[str, Any],
        by: str,
        now: str,
        version: int | None,
        *,
        after_seq: int | None = None,
        effect: Effect | None = None,
    ) -> ProposalItem:
        """The proposal's end (CONFIRMED, DECLINED, EXPIRED) with its outcome, its row, its notification, and the
        effect's own items in the same transaction."""
        sets: dict[str, Any] = {"status": status, "outcome": outcome, "updated_at": now}
        if item.decided_at is None:
            after = after_seq if after_seq is not None else self._after(item)
            sets.update(decided_at=now, decided_by=by, decided_policy_version=version, after_seq=after)
        streams = effect.streams if effect is not None else None
        row = item.row(
            _END_ROW[status],
            by,
            str(outcome.get("status", status)),
            now,
            outcome,
            input=effect.audit_input if effect is not None else None,
            policy_version=version,
            approval_id=streams.approval_id if streams else None,
            refund_key=streams.refund_key if streams else None,
        )
        note = item.note(status.lower(), now, status=outcome.get("status", status), outcome=_shown(outcome))
        note = replace(note, data={**note.data, "policyVersion": version}) if note is not None else None
        extra = effect.items if effect is not None else ()
        return self.store.move(item, {k: v for k, v in sets.items() if v is not None}, [row], note=note, extra=extra)

    def _after(self, item: ProposalItem) -> int | None:
        return self.last_seq(item.conversation_id) if item.owner_conversation_id else None

    def _expire(self, item: ProposalItem, now: str) -> None:
        """PROPOSED -> EXPIRED (announced), then `ProposalExpired`; a race lost to a decision: the caller re-reads."""
        outcome = {"status": "EXPIRED", "message": "The proposal expired before the customer confirmed it."}
        self._end(item, "EXPIRED", outcome, "system:expiry", now, item.policy_version)
        raise ProposalExpired(item.expires_at)


_END_ROW = {"CONFIRMED": "proposal_completed", "DECLINED": "proposal_declined", "EXPIRED": "proposal_expired"}


def _keys(call: Call) -> tuple[str, int, str]:
    return call.conversation_id, call.seq, call.tool_use_id


def _shown(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """An outcome as the feed shows it: its status and words, never an effect's details."""
    return {k: v for k, v in outcome.items() if k in ("status", "message", "error", "refund")}
