"""A turn, step by step (docs/ARCHITECTURE.md): lease, load, repair, then model → write-ahead → tools → results.

No DynamoDB transaction is open across a model call; the assistant content is stored before any
tool runs; the tool results and their audit rows are stored in one transaction. A crash anywhere
leaves a history that the next turn's repair completes without repeating a side effect.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from support_agent import observability as obs
from support_agent.agent import history as hist
from support_agent.agent.model_output import sanitize_content
from support_agent.agent.prompt import with_handback
from support_agent.agent.untrusted import fence
from support_agent.auth import Principal
from support_agent.clock import utc_now
from support_agent.config import Settings
from support_agent.errors import (
    Conflict,
    LeaseLost,
    ModelError,
    ModelUnavailable,
    NotFound,
    ServiceError,
    TokenBudgetExhausted,
)
from support_agent.ids import new_conversation_id
from support_agent.llm.base import LlmClient, LlmResponse, TextSink
from support_agent.messages import Block, Deadline, Message, Usage
from support_agent.pricing import estimate_usd, price_table
from support_agent.store.audit import AuditRecord
from support_agent.store.conversations import BOT_ANSWERS, ConversationStore, Header, StoredMessage
from support_agent.tools.registry import ToolContext, ToolOutcome, ToolSource

if TYPE_CHECKING:
    from support_agent.agent.handover import HandOver

Step = Literal["run_tools", "resume", "resume_if_cut", "stop"]

STOP_REASON_STEPS: dict[str, Step] = {
    "tool_use": "run_tools",  # run the calls; their results go back to the model
    "pause_turn": "resume",  # a long turn paused: ask the model to go on
    "max_tokens": "resume_if_cut",  # cut off: ask again if tool calls were cut, else the cut text is the reply
    "end_turn": "stop",
    "stop_sequence": "stop",
    "refusal": "stop",
}
"""What follows a model answer, by its stop reason; any other reason stops as ``end_turn``.

Tool calls run only on ``run_tools``: under any other step each one is answered "not executed", so
the stored history stays valid whatever the model sent.
"""

MIN_MODEL_SECONDS = 1.0
NOT_EXECUTED_AFTER_CRASH = "not executed: the previous turn was interrupted; call the tool again if still needed"

REPLIES = {
    "max_iterations": "I could not finish this within the steps I am allowed for one message. "
    "Please tell me how you would like to continue.",
    "deadline": "I ran out of time working on this. Please ask again and I will pick up where I left off.",
    "refusal": "I'm sorry, I can't help with that request.",
    "max_tokens": "My answer was cut short. Please ask again if you need more.",
    "budget": "This conversation has reached its length limit. Please start a new conversation.",
    "handed_to_person": "A member of our support team has joined this conversation and will reply here.",
}


@dataclass
class ToolCallTrace:
    id: str
    name: str
    input: Any
    result: Any
    is_error: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "input": self.input,
            "result": self.result,
            "isError": self.is_error,
        }


class ReplyStream(TextSink, Protocol):
    """Where a turn's reply text goes while the model writes it (sockets/deltas.py): every model call of the turn
    feeds it, and the turn closes it before it returns (its last pieces flushed, bounded; what it answers is
    not the turn's business)."""

    def close(self) -> object: ...


OpenStream = Callable[[str, str, int], ReplyStream | None]
"""(conversation id, turn id, characters of the turn's text already stored) → the turn's stream, or None when
nobody follows the conversation."""


@dataclass(frozen=True)
class KeptForPerson:
    """No turn ran: a person answers the conversation (its hand-off is open), so the customer's message was stored
    for them and the model was not called (store/takeover.py). ``assigned``: someone holds it (else it is queued)."""

    conversation_id: str
    handoff_id: str
    assigned: bool


@dataclass
class TurnResult:
    conversation_id: str
    reply: str
    stop_reason: str
    iterations: int
    usage: Usage
    trace: list[dict[str, Any]] = field(default_factory=list)


class Agent:
    def __init__(
        self,
        settings: Settings,
        llm: LlmClient,
        conversations: ConversationStore,
        tools: ToolSource,
        *,
        clock: Callable[[], float] = time.time,
        now: Callable[[], str] = utc_now,
        checkpoint: Callable[[str], None] | None = None,
        decisions: Callable[[int, str], Iterable[Any]] | None = None,
        streams: OpenStream | None = None,
    ) -> None:
        self.settings = settings
        self.llm = llm
        self.model = settings.llm_model  # the model asked; each answer names the one that replied
        self.conversations = conversations
        self.tools = tools
        self.clock = clock
        self.now = now
        # A seam for fault-injection tests: called at each step a crash could interrupt.
        self.checkpoint = checkpoint or (lambda _step: None)
        # The customer's decisions on proposed actions (customer id, conversation id → proposals): told to the model
        # as notes from the system in the history (agent/history.py `with_notes`), one Query per turn.
        self.decisions = decisions or (lambda _customer, _conversation: ())
        # The reply's text to the conversation's followers as it is written (None: never streamed).
        self.streams = streams

    # -- the turn -----------------------------------------------------------------------------

    def run_turn(
        self,
        principal: Principal,
        customer_id: int,
        conversation_id: str | None,
        message: str,
        request_id: str,
        deadline: Deadline,
        *,
        new_id: str | None = None,
        stored: Callable[[], None] | None = None,
        handover: HandOver | None = None,
        turn_id: str | None = None,
    ) -> TurnResult | KeptForPerson:
        """``new_id``: the id a new conversation gets (allocated with the turn's record, so that a resend
        cannot start a second one). ``stored`` is called once, at the turn's first write. ``turn_id`` is
        written on every message the turn stores (the event feed's attribution). While the conversation's hand-off
        is open the model is not called: the message is kept for the person (`KeptForPerson`)."""
        lease_until = int(self.clock()) + self.settings.lease_seconds
        if conversation_id is None:
            # Nothing is stored until the first write-ahead: a turn that fails before it leaves no trace.
            conversation_id = new_id or new_conversation_id()
            header = self.conversations.new_header(conversation_id, customer_id, self.now())
            unsaved_lease: int | None = lease_until
        else:
            unsaved_lease = None
            try:
                header = self.conversations.acquire_lease(
                    conversation_id, customer_id, request_id, int(self.clock()), lease_until
                )
            except ServiceError:
                raise  # not found, or the lease is not ours
            except Exception:
                # The lease may have been written with its answer lost: free it (conditional on owning it).
                self.conversations.release_lease(conversation_id, request_id)
                raise
        obs.logger.append_keys(conversation_id=conversation_id)  # on every log line from here on
        try:
            turn = _Turn(self, principal, customer_id, header, request_id, deadline, unsaved_lease, stored)
            if header.open_handoff_id:
                kept = turn.keep_for_person(message)
                if kept is not None:
                    return kept
                turn = _Turn(self, principal, customer_id, turn.header, request_id, deadline, None, turn.first_write)
            turn.handover = handover
            turn.turn_id = turn_id
            turn.lease_lost = self._lease_keeper(conversation_id, request_id, lease_until)
            return turn.run(message)
        finally:
            self.conversations.release_lease(conversation_id, request_id)  # a no-op once the lease was passed on

    def _lease_keeper(self, conversation_id: str, owner: str, lease_until: int) -> Callable[[], bool]:
        """The synchronous path's answer to "may the lease be gone?", asked before each tool. Its lease is not
        renewed while it runs (the turn hands over long before it would lapse), but a model call that overstays
        can bring it near its end: then it is renewed, conditional on still being ``owner``'s — a lease another
        turn took (and whose repair answered this turn's calls) reports lost."""
        until = lease_until

        def lost() -> bool:
            nonlocal until
            now = int(self.clock())
            if now < until - self.settings.lease_seconds // 3:
                return False
            until = now + self.settings.lease_seconds
            return not self.conversations.renew_lease(conversation_id, owner, until)

        return lost

    def resume_turn(
        self,
        principal: Principal,
        customer_id: int,
        conversation_id: str,
        owner: str,
        message: str | None,
        message_seq: int | None,
        carried: dict[str, Any] | None,
        deadline: Deadline,
        turn_id: str | None = None,
        lease_lost: Callable[[], bool] | None = None,
    ) -> TurnResult:
        """The worker's part of a handed-over turn, under the lease ``owner`` took over: the same loop, from the
        stored history. ``message`` goes at ``message_seq`` unless it is stored already (the synchronous part,
        or an earlier worker that died, stored it); ``carried``: the synchronous part's iterations, usage and
        trace. The lease stays held: the caller releases it once the turn's record says how it ended, or a
        duplicate delivery could take the lease over while the record still says running, and run the turn
        again (agent/lifecycle.py `resume`)."""
        header = self.conversations.get_header(conversation_id)
        if header is None:
            raise NotFound("conversation not found")
        if message_seq is None or header.next_seq > message_seq:
            message = None
        obs.logger.append_keys(conversation_id=conversation_id)
        turn = _Turn(self, principal, customer_id, header, owner, deadline, None, carried=carried)
        turn.turn_id = turn_id
        if lease_lost is not None:
            turn.lease_lost = lease_lost
        return turn.run(message)


class _Turn:
    """State of one turn; lives only while the lease is held."""

    def __init__(
        self,
        agent: Agent,
        principal: Principal,
        customer_id: int,
        header: Header,
        request_id: str,
        deadline: Deadline,
        unsaved_lease: int | None,
        stored: Callable[[], None] | None = None,
        *,
        carried: dict[str, Any] | None = None,
    ) -> None:
        self.agent = agent
        self.handover: HandOver | None = None  # set on the synchronous path when a queue is configured
        self.turn_id: str | None = None  # the turn record's id, written on each stored message
        self.first_write = stored  # called once, at the first write (then None)
        self.settings = agent.settings
        self.principal = principal
        self.customer_id = customer_id
        self.header = header
        self.conversation_id = header.conversation_id
        self.request_id = request_id
        self.deadline = deadline
        self.unsaved_lease = unsaved_lease  # a new conversation's lease, written with its first messages
        self.next_seq = header.next_seq
        self.audit_head = header.audit  # the conversation stream's head, advanced with each append's rows
        self.usage = Usage()
        self.trace: list[dict[str, Any]] = []
        # A handed-over turn goes on where the synchronous part stopped: its iterations, usage and trace.
        carried = carried or {}
        self.first_iteration = int(carried.get("iterations", 0))
        self.carried_usage = Usage(**carried.get("usage", {}))
        self.trace.extend(carried.get("trace", []))
        self.tool_calls = 0
        self.answered_by = ""  # the model that answered, for the cost estimate
        self.metrics = obs.TurnMetrics()  # sent once, when the turn ends (ok or not)
        # Whether the lease may no longer be ours, asked before each tool: the worker's keeper says so; the
        # synchronous path's lease could not be renewed as it neared its end (`Agent._lease_keeper`).
        self.lease_lost: Callable[[], bool] = lambda: False
        # A support teammate's hand-back note, as staff context (agent/prompt.py); the header read with the lease.
        self.system = with_handback(header.handback_note, header.handback_by)
        self.header_fresh = True  # the header was read just now: the first model call need not ask who answers
        self.stream: ReplyStream | None = None  # the reply's text as written, when the conversation has followers

    # persistence -------------------------------------------------------------------------

    def _append(
        self,
        messages: list[Message],
        usage: Usage | None = None,
        audit: list[AuditRecord] | None = None,
        title: str | None = None,
        now: str | None = None,
        only_if: tuple[str, dict[str, Any]] = ("", {}),
    ) -> list[StoredMessage]:
        with obs.span("persist", messages=len(messages), audit_rows=len(audit or [])):
            # The rows are chained on the conversation's stream by the store, after the head this turn last wrote.
            stored, self.audit_head = self.agent.conversations.append(
                self.conversation_id,
                self.request_id,
                self.next_seq,
                messages,
                now=now or self.agent.now(),
                usage=usage,
                audit=audit,
                title=title,
                create=self.header if self.unsaved_lease is not None else None,
                lease_until=self.unsaved_lease or 0,
                audit_head=self.audit_head,
                turn_id=self.turn_id,
                only_if=only_if,
            )
        self.unsaved_lease = None
        self.next_seq += len(messages)
        first_write, self.first_write = self.first_write, None
        if first_write is not None:
            first_write()
        return stored

    def _ctx(self, seq: int, tool_use_id: str) -> ToolContext:
        return ToolContext(
            self.principal,
            self.customer_id,
            self.conversation_id,
            seq,
            tool_use_id,
            self.request_id,
            self.agent.now(),
            self.deadline,
            # Every money write carries it: this turn's lease, still ours and unexpired (the owner is request_id).
            fence=self.agent.conversations.lease_check(self.conversation_id, self.request_id, int(self.agent.clock())),
        )

    def _audit(self, use: Block, outcome: ToolOutcome, now: str) -> AuditRecord:
        """The call's row; it names the streams its effect wrote, as the tool's outcome says (an approval, a
        hand-off, a refund key, a proposal), so the conversation's trail follows them (store/audit.py
        `conversation_trail`), and the support policy's version a declared action's answer says it applied."""
        version = outcome.result.get("policy_version") if isinstance(outcome.result, dict) else None
        return AuditRecord(
            stream=self.conversation_id,
            action="tool_call",
            actor=self.principal.sub,
            outcome=outcome.outcome,
            customer_id=self.customer_id,
            created_at=now,
            tool=str(use.get("name", ""))[:64],
            input=use.get("input"),
            output=outcome.result,
            conversation_id=self.conversation_id,
            request_id=self.request_id,
            tool_use_id=str(use.get("id")),
            approval_id=outcome.streams.approval_id,
            handoff_id=outcome.streams.handoff_id,
            refund_key=outcome.streams.refund_key,
            proposal_id=outcome.streams.proposal_id,
            policy_version=version if isinstance(version, int) and not isinstance(version, bool) else None,
        )

    def _store_results(self, pairs: list[tuple[Block, ToolOutcome]]) -> Message:
        """One user message with every tool_result, plus one audit row per call, atomically (and at one time)."""
        now = self.agent.now()
        content = [
            {
                "type": "tool_result",
                "tool_use_id": use["id"],
                "content": fence(outcome.result, self.settings.tool_output_max_chars),
                "is_error": outcome.is_error,
            }
            for use, outcome in pairs
        ]
        audit = [self._audit(u, o, now) for u, o in pairs]
        stored = self._append([{"role": "user", "content": content}], audit=audit, now=now)
        self.agent.checkpoint("after_results_write")
        return stored[0].as_message()

    # repair --------------------------------------------------------------------------------

    def _repair(self, history: list[StoredMessage]) -> Message | None:
        """Answer the tool calls a crashed turn left open: recorded outcome, or 'not executed'."""
        gap = hist.unanswered_tool_uses(history)
        if gap is None:
            return None
        assistant, uses = gap
        pairs = []
        for use in uses:
            # By the call's key alone: its stored input may be erased ({}) or refused by today's model.
            recorded = self.agent.tools.recorded(str(use.get("name", "")), self._ctx(assistant.seq, use["id"]))
            pairs.append((use, recorded or ToolOutcome({"error": NOT_EXECUTED_AFTER_CRASH}, True, "not_executed")))
        return self._store_results(pairs)

    # who answers (store/takeover.py) ---------------------------------------------------------

    def keep_for_person(self, message: str) -> KeptForPerson | None:
        """The customer's message, stored for the person who answers (after repairing what a crashed turn left
        open), conditioned on the hand-off still being open. None when it was closed or handed back meanwhile:
        ``header`` is read again, and the bot answers."""
        self._repair(self.agent.conversations.load(self.conversation_id))
        handoff_id = str(self.header.open_handoff_id)
        user: Message = {"role": "user", "content": [{"type": "text", "text": message}]}
        try:
            self._append([user], only_if=("open_handoff_id = :h", {":h": handoff_id}))
        except Conflict:
            header = self.agent.conversations.get_header(self.conversation_id)
            if header is None or header.open_handoff_id or header.lease_owner != self.request_id:
                raise
            self.header = header
            return None
        return KeptForPerson(self.conversation_id, handoff_id, bool(self.header.answerer))

    def _person_answers(self) -> bool:
        """Asked before every model call: a person may have claimed the conversation since the turn began."""
        if self.header_fresh:
            self.header_fresh = False
            return bool(self.header.answerer)
        return self.agent.conversations.answerer(self.conversation_id) is not None

    def _taken_over(self, pending_user: Message | None, message: str | None, iteration: int) -> TurnResult:
        """A person took the conversation over during this turn: no more model calls. The customer's message is
        kept (stored, unanswered by the model) if it was not yet; what ran is stored already."""
        if pending_user is not None:
            self._append([pending_user], title=message[:80] if message else None)
        return self._result("handed_to_person", iteration, None)

    def _write_ahead(
        self, pending_user: Message | None, assistant: Message, usage: Usage, title: str | None
    ) -> list[StoredMessage] | None:
        """The model's answer (with the customer's message, the first time), stored before any tool runs, while no
        person answers; None when a person claimed the conversation during the call (the answer is dropped)."""
        try:
            return self._append(
                ([pending_user] if pending_user else []) + [assistant],
                usage=usage,
                title=title,
                only_if=(BOT_ANSWERS, {}),
            )
        except Conflict:
            if self.agent.conversations.answerer(self.conversation_id) is None:
                raise
            return None

    # the loop ------------------------------------------------------------------------------

    def run(self, message: str | None) -> TurnResult:
        try:
            return self._run(message)
        finally:
            if self.stream is not None:
                self.stream.close()  # before the turn returns: Lambda freezes the thread that posts
            self.metrics.flush()

    def _open_stream(self, history: list[StoredMessage]) -> ReplyStream | None:
        """Asked once a turn. A new conversation has no follower yet; a resumed turn's text goes on after what its
        earlier model calls stored."""
        if self.agent.streams is None or self.turn_id is None or self.unsaved_lease is not None:
            return None
        written = sum(
            len(str(b.get("text", "")))
            for m in history
            if m.turn_id == self.turn_id and m.role == "assistant"
            for b in m.content
            if b.get("type") == "text"
        )
        return self.agent.streams(self.conversation_id, self.turn_id, written)

    def _hand_over(self, pending_user: Message | None, iteration: int) -> None:
        """Pass the turn to the worker (agent/handover.py); raises HandedOver."""
        assert self.handover is not None
        if self.unsaved_lease is not None:  # a new conversation: its header, leased to us, so the lease can pass
            self._append([])
        usage = self.carried_usage + self.usage
        carried = {"iterations": iteration, "usage": usage.__dict__, "trace": self.trace}
        message_seq = self.next_seq if pending_user is not None else None
        self.handover.pass_on(self.conversation_id, self.request_id, message_seq, carried)

    def _run(self, message: str | None) -> TurnResult:
        history = self.agent.conversations.load(self.conversation_id)
        self.stream = self._open_stream(history)
        decided = self.agent.decisions(self.customer_id, self.conversation_id) if hist.proposed_in(history) else ()
        notes = hist.decision_notes(decided)
        mapped, trailing = hist.with_notes(history, notes)
        messages = hist.RequestHistory(mapped)
        repaired = self._repair(history)
        if repaired is not None:
            messages.add(repaired)
        if trailing is not None:  # after the repair: a tool call's results come first
            messages.add(trailing)
        if self.header.usage.total >= self.settings.conversation_token_budget:
            raise TokenBudgetExhausted("this conversation has used its token budget; start a new one")
        pending_user: Message | None = None
        if message is not None:
            pending_user = {"role": "user", "content": [{"type": "text", "text": message}]}
        last: LlmResponse | None = None
        stop = "max_iterations"
        iteration = self.first_iteration
        while iteration < self.settings.max_iterations:
            if self.handover is not None and self.handover.due():
                self._hand_over(pending_user, iteration)
            if self.deadline.remaining() < MIN_MODEL_SECONDS:
                if pending_user is not None:
                    raise ModelUnavailable("no time left to ask the model", retry_after=1)
                stop = "deadline"
                break
            if self.header.usage.total + self.usage.total >= self.settings.conversation_token_budget:
                stop = "budget"
                break
            if self._person_answers():
                return self._taken_over(pending_user, message, iteration)
            iteration += 1
            final = iteration == self.settings.max_iterations
            request = messages.request(pending_user, self.settings.history_token_budget)
            try:
                response = self._call_model(request, final, iteration)
            except ServiceError:
                # Nothing of this turn stored yet: fail cleanly, the client may resend. Otherwise the
                # history is complete and valid; if time ran out, say so rather than fail.
                if pending_user is None and self.deadline.remaining() < MIN_MODEL_SECONDS:
                    stop = "deadline"
                    break
                raise
            self.agent.checkpoint("after_model_call")
            last = response
            self.usage += response.usage
            # Write-ahead: the assistant's content is stored before any of its tool calls runs.
            assistant = {"role": "assistant", "content": sanitize_content(response.content, messages.tool_use_ids)}
            title = message[:80] if pending_user and message else None
            stored = self._write_ahead(pending_user, assistant, response.usage, title)
            if stored is None:
                return self._taken_over(pending_user, message, iteration)
            pending_user = None
            for m in stored:
                messages.add(m.as_message())
            self.agent.checkpoint("after_write_ahead")
            step = STOP_REASON_STEPS.get(response.stop_reason, "stop")
            calls, results = self._run_tools(stored[-1], response.stop_reason, step, final, iteration)
            if results is not None:
                messages.add(results)
            self.trace.append(
                {
                    "iteration": iteration,
                    "stopReason": response.stop_reason,
                    "toolCalls": [c.as_json() for c in calls],
                }
            )
            if step == "stop" or (step == "resume_if_cut" and not calls):
                stop = response.stop_reason if response.stop_reason in STOP_REASON_STEPS else "end_turn"
                break
            if final:
                break  # the model would go on, but the turn has no step left: max_iterations
        return self._result(stop, iteration, last)

    def _call_model(self, request: list[Message], final: bool, iteration: int) -> LlmResponse:
        """One model call, traced, logged and measured the same way whichever adapter answers."""
        provider, model = self.settings.llm_provider, self.agent.model
        started = time.perf_counter()
        with obs.span("model_call", provider=provider, model=model, iteration=iteration) as span:
            try:
                response = self.agent.llm.create(
                    self.system,
                    request,
                    self.agent.tools.specs,
                    {"type": "none"} if final else None,  # the last iteration: words, no tool calls
                    deadline=self.deadline,
                    text=self.stream,
                )
            except ServiceError as exc:
                outcome = "unavailable" if isinstance(exc, ModelUnavailable) else "error"
                span.annotate(outcome=outcome)
                obs.model_call(
                    provider=provider,
                    model=model,
                    iteration=iteration,
                    latency_ms=obs.ms_since(started),
                    retries=exc.retries if isinstance(exc, ModelError) else 0,
                    outcome=outcome,
                    error=exc.kind,
                    tally=self.metrics,
                )
                raise
            span.annotate(outcome="ok", stop_reason=response.stop_reason)
        self.answered_by = response.model or model
        obs.model_call(
            provider=provider,
            model=self.answered_by,
            iteration=iteration,
            latency_ms=obs.ms_since(started),
            retries=response.retries,
            outcome="ok",
            usage=response.usage,
            stop_reason=response.stop_reason,
            tally=self.metrics,
        )
        return response

    def _execute(self, use: Block, seq: int, iteration: int) -> ToolOutcome:
        started = time.perf_counter()
        name = str(use.get("name", ""))
        with obs.span(f"tool:{name[:64]}", tool=name[:64], iteration=iteration) as span:
            outcome = self.agent.tools.execute(use["name"], use.get("input"), self._ctx(seq, use["id"]))
            span.annotate(outcome=outcome.outcome)
        self._dispatched(use, iteration, outcome, obs.ms_since(started))
        return outcome

    def _dispatched(self, use: Block, iteration: int, outcome: ToolOutcome, latency_ms: int) -> None:
        obs.tool_dispatch(
            tool=str(use.get("name", "")),
            tool_use_id=str(use.get("id", "")),
            iteration=iteration,
            outcome=outcome.outcome,
            is_error=outcome.is_error,
            latency_ms=latency_ms,
            tally=self.metrics,
        )

    def _not_run(self, stop_reason: str, step: Step, final: bool) -> ToolOutcome | None:
        """Why a tool call is answered without running, or None when it may run."""
        if step != "run_tools":
            why = (
                "the tool call was cut off by the output limit"
                if stop_reason == "max_tokens"
                else f"tool calls are not run when the model stops with {stop_reason[:32]!r}"
            )
            return ToolOutcome({"error": f"not executed: {why}"}, True, "not_executed")
        if final:
            return ToolOutcome(
                {"error": "not executed: no more tool calls in this turn; answer the customer with what you have"},
                True,
                "limit",
            )
        if self.tool_calls >= self.settings.max_tool_calls_per_turn:
            return ToolOutcome(
                {"error": f"not executed: at most {self.settings.max_tool_calls_per_turn} tool calls per message"},
                True,
                "limit",
            )
        return None

    def _run_tools(
        self, assistant: StoredMessage, stop_reason: str, step: Step, final: bool, iteration: int
    ) -> tuple[list[ToolCallTrace], Message | None]:
        uses = hist.tool_uses(assistant.as_message())
        if not uses:
            return [], None
        pairs: list[tuple[Block, ToolOutcome]] = []
        for index, use in enumerate(uses):
            skipped = self._not_run(stop_reason, step, final)
            if skipped is not None:
                self._dispatched(use, iteration, skipped, 0)
                pairs.append((use, skipped))
                continue
            if self.lease_lost():
                # The next turn (or the sweep's worker) may hold the lease and answer this call "not executed":
                # run nothing more. What ran before is recorded by its own effects; the repair finds it.
                raise LeaseLost("the conversation's lease was lost; this turn stops before running a tool")
            self.tool_calls += 1
            pairs.append((use, self._execute(use, assistant.seq, iteration)))
            self.agent.checkpoint(f"after_tool:{index}")
        results = self._store_results(pairs)
        return [ToolCallTrace(u["id"], u["name"], u.get("input"), o.result, o.is_error) for u, o in pairs], results

    def _result(self, stop: str, iterations: int, last: LlmResponse | None) -> TurnResult:
        text = last.text().strip() if last is not None else ""
        if stop == "budget":
            stop, reply = "max_tokens", REPLIES["budget"]
        elif stop in ("max_iterations", "deadline", "handed_to_person"):
            reply = REPLIES[stop]
        else:
            reply = text or REPLIES.get(stop, "(no answer)")
        obs.turn_end(
            stop_reason=stop,
            iterations=iterations,
            tool_calls=self.tool_calls,
            usage=self.usage,
            cost_usd=estimate_usd(
                self.answered_by or self.settings.model_id, self.usage, price_table(self.settings.price_table)
            ),
            tally=self.metrics,
        )
        return TurnResult(
            self.conversation_id,
            reply,
            stop,
            iterations,
            self.carried_usage + self.usage,
            self.trace if self.settings.transparency == "verbose" else [],
        )
