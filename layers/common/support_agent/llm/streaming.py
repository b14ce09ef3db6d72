"""What the streaming HTTP adapters share: reading server-sent events, and a sink that cannot fail the call.

A text sink is the loop's business (it posts the deltas to the customer's page); the model call is ours. So
a sink that raises is logged once and dropped for the rest of the call: the reply is still assembled and
answered, only its progress is no longer shown. A retried attempt writes the reply again from its start, so
the sink is told to `restart` first when an earlier attempt delivered any text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from support_agent.llm.base import TextSink

log = logging.getLogger(__name__)


class StreamFault(Exception):
    """An error the provider reported inside a 200 stream: mapped as its `status` would be (llm/http_errors.py)."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


class GuardedSink:
    """The caller's `TextSink` for one call: `begin` each attempt, `delta` each piece."""

    def __init__(self, sink: TextSink) -> None:
        self._sink = sink
        self.delivered = False  # text went out since the last restart
        self.broken = False

    def begin(self) -> None:
        """An attempt starts: if an earlier one delivered text, the sink drops it."""
        if self.delivered:
            self.delivered = False
            self._call(self._sink.restart)

    def delta(self, piece: str) -> None:
        if piece:
            self.delivered = True
            self._call(self._sink.delta, piece)

    def _call(self, method: Callable[..., None], *args: str) -> None:
        if self.broken:
            return
        try:
            method(*args)
        except Exception:  # the sink's fault must never become the model call's
            self.broken = True
            log.warning("text sink failed; the reply's text is no longer streamed to it", exc_info=True)


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(event name, data) of each server-sent event (the WHATWG format; "message" when unnamed)."""
    event, data = "", list[str]()
    for line in lines:
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data = "", []
            continue
        if line.startswith(":"):  # a comment: a keep-alive
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:
        yield event or "message", "\n".join(data)
