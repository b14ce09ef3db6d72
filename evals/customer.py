"""The simulated customer: plays a task against the stack over HTTP, as the chat page would.

`ScriptedCustomer` plays the task's turns word for word (deterministic: what CI runs). `ModelCustomer` lets an LLM
play the customer from the task's goal and what they know, through the project's own model adapters, until it
writes the stop marker or reaches the task's turn limit. Both speak only the public API with the trial's customer
token: ``POST /api/chat`` (a 202 is followed to its end), and the Confirm and Decline of a proposal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from evals.task import Task
from support_agent.llm.base import LlmClient
from support_agent.messages import Deadline

STOP = "###DONE###"
CONFIRM, DECLINE = "###CONFIRM###", "###DECLINE###"
TURN_WAIT_SECONDS = 90.0  # how long a turn handed to the queue may take before the customer gives up
POLL_SECONDS = 0.3
MODEL_CALL_SECONDS = 60.0


class TrialLike(Protocol):
    """What the customer needs of a seeded trial (evals/seed.py `Trial`)."""

    @property
    def token(self) -> str: ...

    def fill(self, text: str) -> str: ...


@dataclass
class Conversation:
    """What the customer saw: each turn's raw answer, the assistant's replies, and what went wrong."""

    conversation_ids: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)  # the assistant's reply to each turn that had one
    turns: list[dict[str, Any]] = field(default_factory=list)  # the /api/chat answers (a 202's: once it ended)
    presses: list[dict[str, Any]] = field(default_factory=list)  # the proposal views a Confirm or Decline answered
    errors: list[str] = field(default_factory=list)  # "<status> <code>: <message>" of each failed request
    error_statuses: list[int] = field(default_factory=list)  # the failed turns' HTTP statuses, in order
    said: list[str] = field(default_factory=list)  # what the customer wrote (the model-driven one's words)

    @property
    def final_reply(self) -> str:
        return self.replies[-1] if self.replies else ""


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json().get("error") or {}
    except ValueError:
        error = {}
    code = error.get("code", "") if isinstance(error, dict) else ""
    message = error.get("message", "") if isinstance(error, dict) else ""
    return f"{response.status_code} {code}: {message or response.text[:200]}".strip()


class _Chat:
    """The HTTP side both customers share: one conversation at a time, the trial's token on every request."""

    def __init__(self, task: Task, trial: TrialLike, client: httpx.Client) -> None:
        self.task, self.trial, self.client = task, trial, client
        self.conversation = Conversation()
        self.conversation_id: str | None = None

    @property
    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.trial.token}"}

    def say(self, text: str, *, respond_async: bool = False) -> str | None:
        """One message; the assistant's reply (None: no reply — an error, or a person owns the conversation)."""
        conv = self.conversation
        conv.said.append(text)
        body: dict[str, Any] = {"message": text}
        if self.conversation_id:
            body["conversationId"] = self.conversation_id
        headers = {**self._auth, **({"Prefer": "respond-async"} if respond_async else {})}
        response = self.client.post("/api/chat", json=body, headers=headers)
        if response.status_code >= 400:
            conv.errors.append(_error_text(response))
            conv.error_statuses.append(response.status_code)
            return None
        answer = response.json()
        self._joined(answer.get("conversationId"))
        if response.status_code == 202:
            location = response.headers.get("location")
            if not location:  # a person answers: the message is stored for them, no turn ran
                conv.turns.append(answer)
                return None
            answer = self._until_done(location)
            if answer is None:
                return None
        conv.turns.append(answer)
        reply = answer.get("reply")
        if isinstance(reply, str):
            conv.replies.append(reply)
            return reply
        return None

    def _joined(self, conversation_id: Any) -> None:
        if isinstance(conversation_id, str) and conversation_id:
            self.conversation_id = conversation_id
            if conversation_id not in self.conversation.conversation_ids:
                self.conversation.conversation_ids.append(conversation_id)

    def _until_done(self, location: str) -> dict[str, Any] | None:
        """The turn's 200 body once the worker ended it; None (an error recorded) when it failed or took too long."""
        deadline = time.monotonic() + TURN_WAIT_SECONDS
        record: dict[str, Any] = {}
        while time.monotonic() < deadline:
            polled = self.client.get(location, headers=self._auth)
            if polled.status_code >= 400:
                self.conversation.errors.append(_error_text(polled))
                self.conversation.error_statuses.append(polled.status_code)
                return None
            record = polled.json()
            if record.get("status") == "completed" and isinstance(record.get("response"), dict):
                return dict(record["response"])
            if record.get("status") not in ("running", None):
                break
            time.sleep(POLL_SECONDS)
        self.conversation.errors.append(f"turn {record.get('turnId', location)} ended {record.get('status', 'late')}")
        self.conversation.error_statuses.append(504 if record.get("status") == "running" else 500)
        return None

    def press(self, verb: str) -> dict[str, Any] | None:
        """Confirm or Decline on the newest proposal of the conversation, as the chat page's card does."""
        conv = self.conversation
        if self.conversation_id is None:
            conv.errors.append(f"{verb}: no conversation yet")
            return None
        view = self.client.get(f"/api/conversations/{self.conversation_id}", headers=self._auth)
        proposals = view.json().get("proposals") or [] if view.status_code == 200 else []
        if not proposals:
            conv.errors.append(f"{verb}: no proposal to {verb}")
            return None
        newest = proposals[-1]  # oldest first
        url = f"/api/conversations/{self.conversation_id}/proposals/{newest['proposalId']}/{verb}"
        response = self.client.post(url, headers=self._auth)
        if response.status_code >= 400:
            conv.errors.append(_error_text(response))
            return None
        decided: dict[str, Any] = response.json()
        conv.presses.append(decided)
        return decided

    def new_conversation(self) -> None:
        self.conversation_id = None


class ScriptedCustomer(_Chat):
    """Plays ``task.turns`` in order, each text with the trial's ids filled in."""

    def run(self) -> Conversation:
        for turn in self.task.turns:
            if turn.new_conversation:
                self.new_conversation()
            if turn.say is not None:
                self.say(self.trial.fill(turn.say), respond_async=turn.respond_async)
            elif turn.press is not None:
                self.press(turn.press)
        return self.conversation


def system_prompt(task: Task, trial: TrialLike) -> str:
    """Who the customer is, what they want and know, and the stop rule."""
    knows = trial.fill(task.knows) if task.knows else "nothing beyond your goal"
    return (
        f"You are {trial.fill('{name}')}, a customer of an online shop, chatting with the shop's support assistant. "
        "You are the customer, never the assistant: write only what you would type in the chat, one short message "
        "at a time, in plain words.\n\n"
        f"Your goal: {trial.fill(task.goal)}\n"
        f"What you know: {knows}\n\n"
        "Only use order numbers and amounts you know. Do not give up on your goal at the first obstacle, but do "
        "not invent facts either. The assistant's messages come to you as the user's.\n"
        f"When the assistant has prepared a change that waits for your Confirm or Decline button, write {CONFIRM} "
        f"or {DECLINE} alone to press it.\n"
        f"Stop rule: when your goal is met, or you abandon it, write {STOP} alone as your message."
    )


OPENING = "(The support chat is open. Write your first message to the assistant.)"


class ModelCustomer(_Chat):
    """An LLM plays the customer from ``task.goal`` and ``task.knows``: each of its messages is sent as the
    customer's, each assistant reply goes back to it as the user's text; it ends on `STOP` or after
    ``task.limits.max_turns`` of its messages."""

    def __init__(self, task: Task, trial: TrialLike, client: httpx.Client, llm: LlmClient) -> None:
        super().__init__(task, trial, client)
        self.llm = llm
        self.system = system_prompt(task, trial)
        self.stopped = False  # it wrote the stop marker (else: the turn limit ended it)

    def run(self) -> Conversation:
        history: list[dict[str, Any]] = [{"role": "user", "content": OPENING}]
        for _ in range(self.task.limits.max_turns):
            answer = self.llm.create(self.system, history, [], deadline=Deadline.after(MODEL_CALL_SECONDS))
            text = answer.text().strip()
            if not text or STOP in text:
                self.stopped = True
                break
            history.append({"role": "assistant", "content": text})
            history.append({"role": "user", "content": self._act(text)})
        return self.conversation

    def _act(self, text: str) -> str:
        """Carries out the customer's message; what the assistant (or the page) answered, for the LLM."""
        if text in (CONFIRM, DECLINE):
            verb = "confirm" if text == CONFIRM else "decline"
            decided = self.press(verb)
            if decided is None:
                return f"(the {verb} button did nothing: {self.conversation.errors[-1]})"
            outcome = decided.get("outcome")
            return f"(you pressed {verb.title()}: the change is {decided.get('status')}; outcome: {outcome})"
        before = len(self.conversation.errors)
        reply = self.say(text)
        if reply is not None:
            return reply
        if len(self.conversation.errors) > before:
            return f"(the chat showed an error: {self.conversation.errors[-1]})"
        return "(your message was passed to a support teammate; no answer yet)"
