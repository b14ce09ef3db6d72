"""Tool registry: pydantic input models become ``input_schema``; every failure becomes ``is_error``.

The model only proposes a call. The registry validates it (extra properties forbidden, so a
``customer_id`` smuggled into the arguments is refused), and the tool receives the customer id
from the verified principal through `ToolContext`, never from its input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from support_agent.auth import Principal
from support_agent.messages import Deadline
from support_agent.store.audit import Streams

In = TypeVar("In", bound=BaseModel)


class ToolError(Exception):
    """A business failure the model can act on (unknown order, amount too high, ...)."""


@dataclass(frozen=True)
class ToolContext:
    principal: Principal
    customer_id: int
    conversation_id: str
    seq: int  # seq of the stored assistant message holding the tool_use
    tool_use_id: str
    request_id: str
    now: str
    deadline: Deadline | None = None  # the turn's: a call outside AWS (the payment provider) stays within it
    # An MCP call's (mcp/our_tools.py): its keys are ("mcp", customer id, the hashed idempotency key or a fresh id) in
    # place of (conversation, seq, tool_use_id); no conversation owns what it writes (no feed is told), and
    # ``held`` (no idempotency key) makes a refund of any amount wait for a lead, an identical one pending
    # answered by its approval.
    origin: str = "chat"
    held: bool = False
    # A chat turn's: a TransactWriteItems ConditionCheck that the turn still holds its conversation's lease
    # (`ConversationStore.lease_check`), added to every money write; None outside a turn (MCP: its keys fence it).
    fence: dict[str, Any] | None = None

    @property
    def owner_conversation_id(self) -> str:
        """The conversation that owns what this call writes (its feed hears of decisions); "" for MCP's."""
        return "" if self.origin == "mcp" else self.conversation_id


@dataclass(frozen=True)
class ToolOutcome:
    result: dict[str, Any]
    is_error: bool
    outcome: str  # ok | error | invalid_input | unknown_tool | not_executed | limit | recorded
    # The audit streams the call's effect wrote (an approval, a hand-off, a refund key), as its tool says
    # (`Tool.streams`): the call's audit row names them, whoever writes it (the loop, the MCP server).
    streams: Streams = field(default_factory=Streams)


@dataclass(frozen=True)
class Tool(Generic[In]):
    name: str
    description: str
    input_model: type[In]
    run: Callable[[In, ToolContext], dict[str, Any]]
    # For tools with an effect: the result this call recorded, if it ran before a crash. It is found by
    # the call's key in the context alone, never by the stored input (erasure blanks it, a stricter
    # input model may refuse it, and "not executed" would then make the model run the effect again).
    recorded: Callable[[ToolContext], dict[str, Any] | None] | None = None
    # For tools with an effect: the audit streams a result (new or recorded) says the call wrote.
    streams: Callable[[dict[str, Any], ToolContext], Streams] | None = None

    def outcome(self, result: dict[str, Any], ctx: ToolContext, outcome: str) -> ToolOutcome:
        """``result`` as the call's outcome (an error when it carries one), with the streams it wrote."""
        streams = self.streams(result, ctx) if self.streams is not None else Streams()
        return ToolOutcome(result, bool(result.get("error")), outcome, streams)

    def spec(self) -> dict[str, Any]:
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return {"name": self.name, "description": self.description, "input_schema": schema}


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "input"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


class ToolSource(Protocol):
    """What the loop calls tools through: the registry itself, or the same tools over MCP in process
    (mcp/inprocess.py), either followed by outside servers' (mcp/outside.py). The loop cannot tell which it holds."""

    @property
    def specs(self) -> list[dict[str, Any]]: ...

    def execute(self, name: str, raw: Any, ctx: ToolContext) -> ToolOutcome: ...

    def recorded(self, name: str, ctx: ToolContext) -> ToolOutcome | None: ...


class ToolRegistry:
    def __init__(self, tools: list[Tool[Any]]) -> None:
        self._tools = {t.name: t for t in tools}
        self._specs = [t.spec() for t in tools]

    @property
    def specs(self) -> list[dict[str, Any]]:
        """Tool definitions in a fixed order, built once: a stable prompt-cache prefix."""
        return self._specs

    def names(self) -> list[str]:
        return list(self._tools)

    def _parse(self, name: str, raw: Any) -> tuple[Tool[Any], BaseModel] | ToolOutcome:
        tool = self._tools.get(name)
        if tool is None:
            return ToolOutcome(
                {"error": f"unknown tool '{name[:64]}'; available tools: {', '.join(self._tools)}"},
                True,
                "unknown_tool",
            )
        if not isinstance(raw, dict):
            return ToolOutcome({"error": "tool input must be a JSON object"}, True, "invalid_input")
        try:
            return tool, tool.input_model.model_validate(raw)
        except ValidationError as exc:
            return ToolOutcome({"error": f"invalid input: {_validation_message(exc)}"}, True, "invalid_input")

    def validated(self, name: str, raw: Any) -> dict[str, Any] | ToolOutcome:
        """The input as the tool would get it (JSON values, defaults filled in), or why it is refused: what an
        MCP idempotency key is bound to (mcp/our_tools.py), so two spellings of one input are one call."""
        parsed = self._parse(name, raw)
        return parsed if isinstance(parsed, ToolOutcome) else parsed[1].model_dump(mode="json")

    def execute(self, name: str, raw: Any, ctx: ToolContext) -> ToolOutcome:
        parsed = self._parse(name, raw)
        if isinstance(parsed, ToolOutcome):
            return parsed
        tool, args = parsed
        try:
            result = tool.run(args, ctx)
        except ToolError as exc:
            return ToolOutcome({"error": str(exc)}, True, "error")
        # A refusal recorded with its details (a refund the provider refused) is an error, and wrote its streams.
        return tool.outcome(result, ctx, "error" if result.get("error") else "ok")

    def recorded(self, name: str, ctx: ToolContext) -> ToolOutcome | None:
        """What a call that may have run before a crash did, if it left a record: by
        ``(conversation_id, seq, tool_use_id)`` only, so its input is neither needed nor validated."""
        tool = self._tools.get(name)
        if tool is None or tool.recorded is None:
            return None
        result = tool.recorded(ctx)
        return None if result is None else tool.outcome(result, ctx, "recorded")
