"""An instant model server for the benchmarks: the same scripted turn, as fast as HTTP allows.

Speaks the Anthropic Messages API (``POST /v1/messages``, JSON or ``"stream": true`` SSE) and,
for openai-agents, OpenAI Chat Completions (``POST /v1/chat/completions``, JSON or SSE) — the
compatibility endpoint Anthropic offers for the OpenAI SDK. Stateless: the reply depends only on how
many assistant messages follow the newest user text, so every client walks the same 3-iteration
turn — ``lookup_order`` 1042, ``list_invoices`` for 1042, then a text answer — every time. Runs in
its own process (``python -m bench.instant_model``) so its CPU never competes with a client's GIL.
Usage reports input tokens as request bytes / 4, enough for budgets and cache estimates.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER = "Order 1042 was delivered on 2 May; invoice 5001 of 189.00 USD is paid."
SCRIPT = (("lookup_order", {"order_id": 1042}), ("list_invoices", {"order_id": 1042}))


def _is_user_text(message: dict[str, Any]) -> bool:
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    return any(isinstance(b, dict) and b.get("type") == "text" for b in content or [])


def step(messages: list[dict[str, Any]], tools_allowed: bool) -> tuple[str, dict[str, Any]] | None:
    """The tool call to make next, or None for the final text."""
    last_user = max((i for i, m in enumerate(messages) if _is_user_text(m)), default=0)
    rounds = sum(1 for m in messages[last_user:] if m.get("role") == "assistant")
    if not tools_allowed or rounds >= len(SCRIPT):
        return None
    return SCRIPT[rounds]


# -- Anthropic Messages API ---------------------------------------------------------------------


# Unique per server, as the API's own ids are: the API refuses a conversation in which a tool_use id
# repeats, and a history budget that trims old turns would otherwise bring back ids already used.
_TOOL_USE_IDS = itertools.count(1)


def anthropic_reply(body: dict[str, Any], size: int) -> dict[str, Any]:
    messages = body.get("messages", [])
    allowed = bool(body.get("tools")) and (body.get("tool_choice") or {}).get("type") != "none"
    nxt = step(messages, allowed)
    if nxt is None:
        content: list[dict[str, Any]] = [{"type": "text", "text": ANSWER}]
        stop = "end_turn"
    else:
        name, args = nxt
        content = [{"type": "tool_use", "id": f"toolu_bench{next(_TOOL_USE_IDS):08d}", "name": name, "input": args}]
        stop = "tool_use"
    return {
        "id": f"msg_bench{len(messages):05d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "bench"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": size // 4, "output_tokens": 12 + len(json.dumps(content)) // 4},
    }


def anthropic_sse(message: dict[str, Any]) -> bytes:
    out = []

    def event(name: str, data: dict[str, Any]) -> None:
        out.append(f"event: {name}\ndata: {json.dumps(data)}\n\n")

    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
    event("message_start", {"type": "message_start", "message": start})
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            event(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
            )
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            empty = {**block, "input": {}}
            event("content_block_start", {"type": "content_block_start", "index": i, "content_block": empty})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
        event("content_block_stop", {"type": "content_block_stop", "index": i})
    event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        },
    )
    event("message_stop", {"type": "message_stop"})
    return "".join(out).encode()


# -- OpenAI Chat Completions -----------------------------------------------------------------------


def openai_reply(body: dict[str, Any], size: int) -> dict[str, Any]:
    messages = body.get("messages", [])
    as_anthropic = [
        {"role": "user", "content": m.get("content") or ""} if m.get("role") == "user" else {"role": "assistant"}
        for m in messages
        if m.get("role") in ("user", "assistant")
    ]
    nxt = step(as_anthropic, bool(body.get("tools")) and body.get("tool_choice") != "none")
    if nxt is None:
        message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
        finish = "stop"
    else:
        name, args = nxt
        call = {
            "id": f"call_bench{len(messages):05d}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-bench{len(messages):05d}",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "bench"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": size // 4, "completion_tokens": 12, "total_tokens": size // 4 + 12},
    }


def openai_sse(reply: dict[str, Any]) -> bytes:
    choice = reply["choices"][0]
    message = choice["message"]
    base = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        chunks.append({"index": 0, "delta": {"tool_calls": [{"index": 0, **call}]}, "finish_reason": None})
    else:
        chunks.append({"index": 0, "delta": {"content": message["content"]}, "finish_reason": None})
    chunks.append({"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]})
    out = [f"data: {json.dumps(base | {'choices': [c]})}\n\n" for c in chunks]
    out.append(f"data: {json.dumps(base | {'choices': [], 'usage': reply['usage']})}\n\n")
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


# -- the server -----------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse one connection, as they would in Lambda
    disable_nagle_algorithm = True  # else each small response waits out the client's delayed ACK (~40 ms)
    wbufsize = -1  # headers and body leave in one write

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.loads(raw or b"{}")
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/chat/completions"):
            reply = openai_reply(body, len(raw))
            payload = openai_sse(reply) if body.get("stream") else json.dumps(reply).encode()
        elif path.endswith("/messages"):
            message = anthropic_reply(body, len(raw))
            payload = anthropic_sse(message) if body.get("stream") else json.dumps(message).encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream" if body.get("stream") else "application/json")
        self.send_header("content-length", str(len(payload)))
        self.send_header("request-id", "req_bench")
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients closing kept-alive connections at exit is normal here, not worth a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(port: int = 0) -> ThreadingHTTPServer:
    server = Server(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = serve(args.port)
    print(server.server_address[1], flush=True)  # the parent reads the port from the first line
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
