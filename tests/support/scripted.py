"""Model doubles for the loop: `FakeModel`, an `LlmClient` whose answers code decides from each request,
and `ScriptedModel`, one that plays back responses and records every request it was sent.

A test's own model (a gated one, an obedient one, a fuzzing one) subclasses `FakeModel` and says only how
it answers the one `LlmRequest` (`Request`) it is sent, in `respond`.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from support_agent.llm.base import LlmClient, LlmRequest, LlmResponse, TextSink
from support_agent.messages import Deadline, Message, Usage

_ids = itertools.count(1)

Step = LlmResponse | Exception | Callable[[list[Message]], LlmResponse]


def tool_use(name: str, input: dict[str, Any] | Any, id: str | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": id or f"toolu_{next(_ids):04d}", "name": name, "input": input}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def reply(stop_reason: str, *blocks: dict[str, Any], usage: Usage | None = None) -> LlmResponse:
    return LlmResponse(stop_reason, list(blocks), usage or Usage(100, 20), "scripted")


def tools(*uses: dict[str, Any], usage: Usage | None = None) -> LlmResponse:
    return reply("tool_use", *uses, usage=usage)


def answer(value: str, usage: Usage | None = None) -> LlmResponse:
    return reply("end_turn", text(value), usage=usage)


def seed_scenario(reason: str, final: str, usages: tuple[Usage, Usage, Usage] | None = None) -> list[Step]:
    """`make demo`'s turn as a script: order 1042 looked up, then refunded in full (189.00: above the threshold, so
    held for a lead) for ``reason``, then the ``final`` answer; each response with its usage when given."""
    first, second, third = usages or (None, None, None)
    return [
        tools(tool_use("lookup_order", {"order_id": 1042}), usage=first),
        tools(tool_use("request_refund", {"order_id": 1042, "amount_cents": 18900, "reason": reason}), usage=second),
        answer(final, third),
    ]


Request = LlmRequest


class FakeModel(LlmClient):
    """An `LlmClient` that answers each request with `respond(request)`; the request is not copied. A text sink
    gets the answer's text in one piece, as an adapter whose server ignored `"stream": true` gives it."""

    def answer(self, request: LlmRequest, deadline: Deadline | None, text: TextSink | None = None) -> LlmResponse:
        response = self.respond(request)
        if text is not None and response.text():
            text.delta(response.text())
        return response

    def respond(self, request: Request) -> LlmResponse:
        raise NotImplementedError


@dataclass
class ScriptedModel(FakeModel):
    script: list[Step] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    on_call: Callable[[], None] | None = None

    def respond(self, request: Request) -> LlmResponse:
        self.requests.append(replace(request, messages=copy.deepcopy(request.messages)))
        if self.on_call:
            self.on_call()
        if not self.script:
            raise AssertionError("the scripted model ran out of responses")
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        if isinstance(step, LlmResponse):
            return step
        return step(request.messages)
