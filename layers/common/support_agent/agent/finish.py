"""A turn's end, written once for every path that ends one: the chat request, the worker, the turn sweep.

A turn ends with a domain result: the loop's ``TurnResult``, or the ``ServiceError`` that stopped it. Its record
keeps the answer a resend of its request gets (store/turns.py), so the result is rendered here, once, into what
is stored: ``turn_answer`` is the 200 body whoever finished the turn (the chat function sends it as it is; the
worker's is read back by ``GET …/turns/{turnId}`` and the event feed), an error is its status and body from the
contract's one table (contract.py). No HTTP types: the edges send what this wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from support_agent.clock import utc_now
from support_agent.contract import error_body, status_and_code
from support_agent.errors import ServiceError
from support_agent.store.turns import Turn, TurnStore

if TYPE_CHECKING:
    from support_agent.agent.loop import KeptForPerson, TurnResult

TURN_FAILED = "turn_failed"  # the code of a handed-over turn the sweep gave up on (its status: 500)


def turn_answer(result: TurnResult, turn_id: str, *, verbose: bool) -> dict[str, Any]:
    """A completed turn's answer (the 200 body): the same whether the chat function or the worker finished it.
    ``verbose`` (TRANSPARENCY=verbose) adds the tool calls' trace."""
    out: dict[str, Any] = {
        "conversationId": result.conversation_id,
        "turnId": turn_id,
        "reply": result.reply,
        "stopReason": result.stop_reason,
        "iterations": result.iterations,
        "inputTokens": result.usage.input_tokens,
        "outputTokens": result.usage.output_tokens,
        "cacheReadInputTokens": result.usage.cache_read_input_tokens,
        "cacheCreationInputTokens": result.usage.cache_creation_input_tokens,
    }
    if verbose:
        out["trace"] = result.trace
    return out


def kept_answer(kept: KeptForPerson) -> dict[str, Any]:
    """The 202 body of a message kept for a person (no turn ran: no ``turnId``, no ``Location``): who answers, and
    where their reply will show."""
    return {
        "conversationId": kept.conversation_id,
        "owner": "person",
        "status": "assigned" if kept.assigned else "queued",
        "eventsUrl": f"/api/conversations/{kept.conversation_id}/events",
    }


@dataclass(frozen=True)
class TurnEnds:
    """The ways a running turn's record ends; each is the last write of the turn."""

    turns: TurnStore
    now: Callable[[], str] = field(default=utc_now)

    def completed(self, turn: Turn, result: TurnResult, *, verbose: bool) -> dict[str, Any]:
        """``completed`` with its answer, which is returned: the chat function sends exactly what is stored."""
        body = turn_answer(result, turn.turn_id, verbose=verbose)
        self.turns.finish(turn, 200, body, self.now())
        return body

    def kept(self, turn: Turn, kept: KeptForPerson) -> dict[str, Any]:
        """``delivered``: the message was kept for a person; a resend with its key gets this 202 again."""
        body = kept_answer(kept)
        self.turns.finish(turn, 202, body, self.now())
        return body

    def failed(self, turn: Turn, exc: ServiceError) -> None:
        """``failed`` after something was stored (the history moved): a resend gets this error, not a second turn."""
        status, _code = status_and_code(exc)
        self.turns.finish(turn, status, error_body(exc), self.now())

    def refused(self, turn: Turn, key: str | None, exc: ServiceError) -> None:
        """Turned away before anything was stored: the record says why, and the key is free again."""
        status, _code = status_and_code(exc)
        self.turns.release(turn, key, status, error_body(exc), self.now())

    def given_up(self, turn: Turn, why: str) -> bool:
        """The turn sweep's end of a handed-over turn that stopped: ``failed`` (500 ``turn_failed``), announced in
        the conversation's feed in the same write. False when the turn ended meanwhile."""
        body = {"error": {"code": TURN_FAILED, "message": why}}
        return self.turns.finish(turn, 500, body, self.now(), announce=True)
