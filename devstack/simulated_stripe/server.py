"""The HTTP server around ``SimulatedStripe``: one thread per connection, so a held answer blocks nobody else."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import socket
from http.server import BaseHTTPRequestHandler
from typing import Any

from devstack.background_server import BackgroundServer, LocalHttpServer, serve_until_interrupted
from devstack.simulated_stripe.api import SimulatedStripe
from devstack.simulated_stripe.wire import Reply

log = logging.getLogger(__name__)
TEST_KEY = "sk_test_simulated_local"  # what make dev hands the functions: any sk_test_ key is accepted


class _HttpServer(LocalHttpServer):
    stripe: SimulatedStripe


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "SimulatedStripe/1.0"
    disable_nagle_algorithm = True
    server: _HttpServer

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] in ("/", "/health"):
            info = {"simulated": True, "api": "Stripe API v1 refunds (simulated)", "endpoint": "POST /v1/refunds"}
            self._send(Reply(200, info))
            return
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _handle(self) -> None:
        raw = self._read_body()
        self._send(self.server.stripe.handle(self.command, self.path, dict(self.headers.items()), raw))

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            data = b""
            while size := int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return data
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, reply: Reply) -> None:
        if reply.drop:  # the refund was made; the client sees the connection reset with no answer
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if reply.hold_seconds:
            self.server.stripe.hold(reply.hold_seconds)
        body = json.dumps(reply.body).encode("utf-8")
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up waiting (its read timeout): nothing to deliver to
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("simulated stripe: " + format, *args)


class SimulatedStripeServer(BackgroundServer):
    """A running simulated Stripe; ``url`` is ``STRIPE_API_BASE``, ``stripe`` the state to inspect and fault."""

    name = "simulated-stripe"

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, stripe: SimulatedStripe | None = None, demo: bool = True
    ) -> None:
        self.stripe = stripe or SimulatedStripe()
        if demo and stripe is None:
            self.stripe.seed_demo()
        super().__init__(host, port, _Handler, _HttpServer, stripe=self.stripe)

    def before_stop(self) -> None:
        self.stripe.release()
        self.stripe.webhooks.stop()


def start(host: str = "127.0.0.1", port: int = 0, demo: bool = True) -> SimulatedStripeServer:
    """Start the simulated Stripe on a background thread (port 0: a free port), with the demo payment intents."""
    return SimulatedStripeServer(host, port, demo=demo).start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the simulated Stripe API (refunds).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4601)
    args = parser.parse_args(argv)
    server = start(args.host, args.port)
    print(f"simulated Stripe on {server.url}; set STRIPE_API_BASE={server.url} STRIPE_API_KEY={TEST_KEY}", flush=True)
    serve_until_interrupted(server)
