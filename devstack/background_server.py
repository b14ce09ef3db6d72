"""A local HTTP server on a background thread: what the simulated model and the simulated Stripe share.

Each simulator brings its request handler and its state; this owns the thread, the URL, a clean stop
and the ``python -m`` loop that serves until Ctrl-C.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class LocalHttpServer(ThreadingHTTPServer):
    daemon_threads = True


class BackgroundServer:
    """``url`` is the base URL; ``start()`` serves on a daemon thread, ``stop()`` (or ``with``) ends it."""

    name = "local-server"

    def __init__(
        self,
        host: str,
        port: int,
        handler: type[BaseHTTPRequestHandler],
        server_class: type[LocalHttpServer] = LocalHttpServer,
        **state: Any,
    ) -> None:
        self._httpd = server_class((host, port), handler)
        for attribute, value in state.items():  # what the handler reads as ``self.server.<attribute>``
            setattr(self._httpd, attribute, value)
        self.host, self.port = host, int(self._httpd.server_address[1])
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=self.name, daemon=True
        )
        self._stopped = False

    def start(self) -> Self:
        self._thread.start()
        return self

    def before_stop(self) -> None:
        """Release what a held request waits on, so shutdown does not wait for it."""

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.before_stop()
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_until_interrupted(server: BackgroundServer) -> None:
    """The ``python -m`` loop: serve until Ctrl-C, then stop cleanly."""
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
