"""What the two HTTP adapters (Anthropic, OpenAI-compatible) share: one JSON POST per attempt.

An adapter names its URL (`BASE_URL` + `PATH`), its request body (`_body`) and headers (`_headers`), how
to read a 200 (`_parse`) and how to read its error body (`_error`); what an error status means is decided
the same for both (llm/http_errors.py). Timeouts and transport faults are handled here.

With a text sink the attempt asks for a stream instead (`STREAM_FIELDS` added to the body) and reads it as
it arrives (`_stream`), the adapter's `_assembler` turning its events into the same `LlmResponse`. The
error mapping is the same: an error status before the stream, or an error the stream itself reports, is
read as the plain call's would be; a stream cut short, or one still running at the turn's deadline, is
retried like a timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, Required, TypedDict

import httpx

from support_agent.config import Settings
from support_agent.llm.base import LlmRequest, LlmResponse, Seams, TextSink
from support_agent.llm.http_errors import ProviderError, failure
from support_agent.llm.messages_api import encode_body
from support_agent.llm.retry import Attempt, Retryable, RetryingClient, RetryPolicy
from support_agent.llm.streaming import GuardedSink, StreamFault, sse_events
from support_agent.messages import Deadline
from support_agent.outbound import http_client
from support_agent.secrets import key_provider


class HttpOptions(TypedDict, total=False):
    """The keywords every HTTP adapter takes (`HttpClient.__init__`); each adds its own option."""

    api_key: Required[str | Callable[[], str]]
    model: Required[str]
    max_tokens: int
    base_url: str
    transport: httpx.BaseTransport | None
    policy: RetryPolicy | None


def http_options(
    settings: Settings, policy: RetryPolicy, seams: Seams, secret: tuple[str, str], model: str, base_url: str
) -> HttpOptions:
    """An adapter's shared keywords from the settings; ``secret``: its API key, or the secret that holds it."""
    key = key_provider(secret[0], secret[1], seams.secrets_client, settings.api_key_cache_seconds)
    tokens, transport = settings.max_tokens, seams.transport
    return HttpOptions(
        api_key=key, model=model, max_tokens=tokens, base_url=base_url, transport=transport, policy=policy
    )


class Assembler(Protocol):
    """One attempt's stream, event by event (`llm/messages_stream.py`, `llm/openai_stream.py`)."""

    def feed(self, event: str, data: str) -> str: ...  # the text piece the event adds, if any

    def result(self) -> LlmResponse: ...


class HttpClient(RetryingClient):
    """`api_key` may be a callable, so a key kept in Secrets Manager is read on first use, not at import."""

    BASE_URL = ""
    PATH = ""
    RETRYABLE_STATUS: frozenset[int] = frozenset()
    SPENT = "model API spend limit reached"  # the 503's message when `ProviderError.spent`
    STREAM_FIELDS: dict[str, Any] = {"stream": True}  # what a streamed request adds to the body

    def __init__(
        self,
        *,
        api_key: str | Callable[[], str],
        model: str,
        max_tokens: int = 1024,
        base_url: str | None = None,
        transport: httpx.BaseTransport | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        super().__init__(policy)
        self.url = (self.BASE_URL if base_url is None else base_url).rstrip("/") + self.PATH
        self.model = model
        self.max_tokens = max_tokens
        self._api_key = api_key
        self._http = http_client(self.url, transport)

    def _key(self) -> str:
        return self._api_key() if callable(self._api_key) else self._api_key

    def close(self) -> None:
        self._http.close()

    def _request(self, request: LlmRequest, text: TextSink | None = None) -> Attempt:
        key = self._key()
        headers = self._headers(key)  # a configuration fault raises here, before any attempt
        if text is None:
            content = encode_body(self._body(request))
            return lambda deadline: self._post(content, headers, key, deadline)
        content = encode_body(self._body(request) | self.STREAM_FIELDS)
        sink = GuardedSink(text)  # one per call: it remembers what earlier attempts delivered
        return lambda deadline: self._stream(content, headers, key, deadline, sink)

    def _post(self, content: bytes, headers: dict[str, str], key: str, deadline: Deadline | None) -> LlmResponse:
        """One attempt; `key` is only passed on so `_failure` can scrub it from what it logs."""
        try:
            r = self._http.post(self.url, content=content, headers=headers, timeout=self.policy.timeout(deadline))
        except httpx.TransportError as exc:
            raise Retryable(type(exc).__name__) from None
        if r.status_code != 200:
            raise self._failure(r, key)
        try:
            return self._parse(r.json())
        except ValueError as exc:  # in practice a proxy or gateway fault, not our request
            raise Retryable(f"malformed response: {exc}") from None

    def _stream(
        self, content: bytes, headers: dict[str, str], key: str, deadline: Deadline | None, sink: GuardedSink
    ) -> LlmResponse:
        """One streamed attempt: each text piece goes to `sink` as it arrives."""
        sink.begin()
        timeout = self.policy.timeout(deadline)
        try:
            with self._http.stream("POST", self.url, content=content, headers=headers, timeout=timeout) as r:
                if r.status_code != 200:
                    r.read()
                    raise self._failure(r, key)
                if not r.headers.get("content-type", "").startswith("text/event-stream"):
                    return self._unstreamed(r, sink)
                assembler = self._assembler()
                for event, data in sse_events(r.iter_lines()):
                    sink.delta(assembler.feed(event, data))
                    if deadline is not None and deadline.remaining() <= 0:
                        raise Retryable("the stream outlasted the turn's deadline")
                return assembler.result()
        except httpx.TransportError as exc:
            raise Retryable(type(exc).__name__) from None
        except StreamFault as fault:
            raise self._failure(httpx.Response(fault.status, json=fault.body), key) from None
        except ValueError as exc:  # a broken stream: in practice a proxy or gateway fault, not our request
            raise Retryable(f"malformed stream: {exc}") from None

    def _unstreamed(self, r: httpx.Response, sink: GuardedSink) -> LlmResponse:
        """A server that ignored `"stream": true` and answered the plain way: its text goes out at once."""
        r.read()
        response = self._parse(r.json())
        sink.delta(response.text())
        return response

    def _failure(self, r: httpx.Response, key: str) -> Exception:
        return failure(r, self._error(r), key, self.RETRYABLE_STATUS, self.SPENT)

    def _headers(self, key: str) -> dict[str, str]:
        raise NotImplementedError

    def _body(self, request: LlmRequest) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, data: Any) -> LlmResponse:
        raise NotImplementedError

    def _assembler(self) -> Assembler:
        raise NotImplementedError

    def _error(self, r: httpx.Response) -> ProviderError:
        raise NotImplementedError
