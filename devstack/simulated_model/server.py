"""The server: the request → reply function (``SimulatedModel``) and the HTTP server around it.

``POST /v1/messages`` (JSON, or server-sent events with ``"stream": true``), ``POST
/v1/chat/completions``, ``POST /model/{modelId}/invoke`` (Bedrock's InvokeModel), ``GET /health``; anything else
a 404 in the Messages API's error shape.
Every reply carries ``x-simulated-model: true``.

``SIMULATED_MODEL_DELAY_SECONDS`` (``make dev``; ``--delay-seconds`` standalone) makes every model answer
wait that long first, so a slow model — a turn that outlasts the synchronous request and is handed over
to the worker — can be seen locally. The adapters send no header of ours, so the delay is per server,
not per request. A streamed answer (either API) spreads that delay over its text pieces instead: the
handler writes the stream frame by frame (chunked), pausing before each piece of text, so ``make dev``
shows the reply being written; a plain answer, and a refused streamed one, still wait up front.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from devstack.background_server import BackgroundServer, LocalHttpServer, serve_until_interrupted
from devstack.simulated_model.bedrock_facade import (
    BedrockError,
    as_bedrock,
    check_bedrock_headers,
    model_id,
    parse_bedrock_body,
)
from devstack.simulated_model.faults import Faults
from devstack.simulated_model.message import build_message, digest, is_text_event, sse_frames, stream_events
from devstack.simulated_model.openai_facade import (
    OpenAIError,
    build_completion,
    check_openai_headers,
    chunk_frames,
    completion_chunks,
    parse_openai_body,
)
from devstack.simulated_model.wire import ApiError, check_headers, parse_body

log = logging.getLogger(__name__)

DELAY_VARIABLE = "SIMULATED_MODEL_DELAY_SECONDS"


def delay_from(environ: Mapping[str, str]) -> float:
    """``SIMULATED_MODEL_DELAY_SECONDS`` as seconds (unset or empty: 0); a value that is not a finite number
    of seconds, at least 0, is refused with the variable's name."""
    raw = environ.get(DELAY_VARIABLE, "").strip()
    try:
        seconds = float(raw) if raw else 0.0
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{DELAY_VARIABLE}={raw!r}: give seconds, a number from 0 (e.g. 5 or 2.5)")
    return seconds


SSE = "text/event-stream; charset=utf-8"


@dataclass
class Reply:
    status: int
    content_type: str
    body: bytes
    paced: list[tuple[float, bytes]] | None = None  # a stream written piece by piece: (seconds before, piece)


def _streamed(frames: list[tuple[bool, bytes]], delay: float) -> Reply:
    """A stream whose ``delay`` is spread over its text frames (True); without text, it is waited first."""
    body = b"".join(frame for _, frame in frames)
    if delay <= 0:
        return Reply(200, SSE, body)
    texts = sum(1 for text, _ in frames if text) or 1
    paced = [(delay / texts if text else 0.0, frame) for text, frame in frames]
    if not any(text for text, _ in frames):
        paced[0] = (delay, paced[0][1])
    return Reply(200, SSE, body, paced)


def _asks_stream(raw: bytes) -> bool:
    """Whether the request says ``"stream": true`` (a body that does not parse is refused later)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("stream") is True


def _error(exc: ApiError) -> Reply:
    return Reply(exc.status, "application/json", json.dumps(exc.body()).encode("utf-8"))


def _json(status: int, value: Any) -> Reply:
    return Reply(status, "application/json", json.dumps(value, ensure_ascii=False).encode("utf-8"))


class SimulatedModel:
    """The request → reply function, with the per-server call counter behind the ids; ``delay_seconds``:
    how long each model answer (either API, errors included) waits before it is sent, or, streamed, spread
    over its text; ``sleep`` does a paced stream's waits (a test may watch them)."""

    def __init__(self, delay_seconds: float = 0.0) -> None:
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self.delay_seconds = delay_seconds
        self.sleep: Callable[[float], None] = time.sleep
        self.requests = 0  # POSTs answered (or refused): what a test counts to prove a call was not made
        self.faults = Faults()  # armed by a test or an evaluation task (faults.py); none by default

    def post(self, path: str, headers: Mapping[str, str], raw: bytes) -> Reply:
        """The reply to ``POST path`` (without its query); a refusal in its API's error shape."""
        with self._lock:
            self.requests += 1
        if model_id(path) is not None:
            return self._invoke(path, headers, raw)
        endpoint = path.rstrip("/")
        if endpoint not in ("/v1/messages", "/v1/chat/completions"):
            return _error(ApiError(404, "not_found_error", f"Not found: POST {path}"))
        streamed = _asks_stream(raw)
        try:
            if not streamed and self.delay_seconds > 0:  # a slow model: each request's own thread waits
                time.sleep(self.delay_seconds)
            self._fault(endpoint, raw)
            if endpoint == "/v1/messages":
                return self._message(headers, raw)
            return self._chat_completion(headers, raw)
        except ApiError as exc:
            if streamed and self.delay_seconds > 0:  # no text to spread it over
                time.sleep(self.delay_seconds)
            return _error(exc)

    def _fault(self, endpoint: str, raw: bytes) -> None:
        """An armed fault (faults.py): a late answer, or an error in the endpoint's API shape."""
        fault = self.faults.take(raw)
        if fault is None:
            return
        if fault.delay_seconds > 0:
            time.sleep(fault.delay_seconds)
        error = fault.error()
        if error is not None and endpoint == "/v1/chat/completions":
            raise OpenAIError(error.status, error.message, error.error_type)
        if error is not None:
            raise error

    def _message(self, headers: Mapping[str, str], raw: bytes) -> Reply:
        check_headers(headers)
        body = parse_body(raw)
        message = build_message(body, self._next())
        if body.get("stream"):
            events = stream_events(message)
            return _streamed(list(zip(map(is_text_event, events), sse_frames(events), strict=True)), self.delay_seconds)
        return _json(200, message)

    def _invoke(self, path: str, headers: Mapping[str, str], raw: bytes) -> Reply:
        """Bedrock's InvokeModel: the same brain and faults, the answer's ``model`` the path's."""
        model = str(model_id(path))
        try:
            if self.delay_seconds > 0:
                time.sleep(self.delay_seconds)
            check_bedrock_headers(headers)
            try:
                self._fault("/v1/messages", raw)
            except ApiError as exc:
                raise as_bedrock(exc) from None
            body = parse_bedrock_body(raw, model)
            return _json(200, build_message(body, self._next()) | {"model": model})
        except BedrockError as exc:
            return _error(exc)

    def _chat_completion(self, headers: Mapping[str, str], raw: bytes) -> Reply:
        """The same brain behind the OpenAI wire format."""
        check_openai_headers(headers)
        body = parse_openai_body(raw)
        completion = build_completion(body, self._next(), int(time.time()))
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return _streamed(chunk_frames(completion_chunks(completion, include_usage)), self.delay_seconds)
        return _json(200, completion)

    def _next(self) -> int:
        """The call's number on this server: it makes the ids unique per call."""
        with self._lock:
            return next(self._counter)


class _HttpServer(LocalHttpServer):
    model: SimulatedModel


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "SimulatedModel/1.0"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms stalls
    server: _HttpServer

    def do_POST(self) -> None:
        raw = self._read_body()
        self._send(self.server.model.post(self.path.split("?", 1)[0], dict(self.headers.items()), raw))

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] in ("/", "/health"):
            info = {
                "simulated": True,
                "api": "Anthropic Messages API and OpenAI chat completions (simulated)",
                "endpoint": "POST /v1/messages",
                "openaiEndpoint": "POST /v1/chat/completions",
                "bedrockEndpoint": "POST /model/{modelId}/invoke",
            }
            self._send(_json(200, info))
            return
        self._send(_error(ApiError(404, "not_found_error", f"Not found: GET {self.path.split('?', 1)[0]}")))

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("content-type", reply.content_type)
        if reply.paced is None:
            self.send_header("content-length", str(len(reply.body)))
        else:
            self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", "req_sim_" + digest(str(id(reply)), self.path)[:16])
        self.send_header("x-simulated-model", "true")
        if reply.content_type.startswith("text/event-stream"):
            self.send_header("cache-control", "no-cache")
        self.end_headers()
        if reply.paced is None:
            self.wfile.write(reply.body)
            return
        for wait, piece in reply.paced:  # written and flushed one by one, so the client reads each as it comes
            if wait > 0:
                self.server.model.sleep(wait)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("simulated model: " + format, *args)


class SimulatedModelServer(BackgroundServer):
    """A running simulated model; ``url`` is the base URL (``ANTHROPIC_BASE_URL``)."""

    name = "simulated-model"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, delay_seconds: float = 0.0) -> None:
        self.model = SimulatedModel(delay_seconds)  # `model.delay_seconds` may be changed while it runs
        super().__init__(host, port, _Handler, _HttpServer, model=self.model)


def start(host: str = "127.0.0.1", port: int = 0, delay_seconds: float = 0.0) -> SimulatedModelServer:
    """Start the simulated model on a background thread (port 0: a free port), each answer ``delay_seconds``
    late (``delay_from(os.environ)`` reads ``SIMULATED_MODEL_DELAY_SECONDS``)."""
    return SimulatedModelServer(host, port, delay_seconds).start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the simulated Anthropic Messages API model.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4600)
    parser.add_argument(
        "--delay-seconds",
        type=float,
        default=None,
        help=f"wait this long before each answer (default: {DELAY_VARIABLE} from the environment, else 0)",
    )
    args = parser.parse_args(argv)
    try:
        delay = delay_from(os.environ if args.delay_seconds is None else {DELAY_VARIABLE: str(args.delay_seconds)})
    except ValueError as exc:
        parser.error(str(exc))
    server = start(args.host, args.port, delay)
    print(
        f"simulated model on {server.url} (POST /v1/messages, POST /v1/chat/completions); "
        f"set ANTHROPIC_BASE_URL={server.url} or OPENAI_BASE_URL={server.url}/v1",
        flush=True,
    )
    serve_until_interrupted(server)
