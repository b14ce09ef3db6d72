"""Webhooks from the simulated Stripe: every refund status change sent, signed, to one endpoint.

Stripe sends two events for one change of a refund — ``refund.updated`` and ``charge.refund.updated``
(and ``refund.failed`` when it fails) — each with its own event id, at least once, in no promised
order. So does this sender, for every change: a refund made (``succeeded`` or ``pending``), ``settle``,
a late failure, a refund made outside. Events are shaped as Stripe's (``id`` ``evt_…``, ``object``,
``type``, ``created``, ``api_version``, ``livemode``, ``data.object`` the refund, ``data.previous_attributes``)
and signed as Stripe signs them: ``Stripe-Signature: t=<unix seconds>,v1=<HMAC-SHA256 of "t.body">``, one
``v1`` per secret (a comma-separated ``secret`` is a secret being rolled: Stripe signs with both).

Nothing is sent until ``configure(endpoint, secret)``: ``make dev`` points it at the local gateway's
``/webhooks/stripe`` with the local secret. Deliveries go out on a background thread after the API
call that caused them has its answer (``delay_seconds`` later), so the caller records its own outcome
first as often as not, as with the real Stripe. Options, all changeable at any time:

* ``duplicate``: every event twice; ``reorder``: a change's events newest first;
* ``deliver = False``: events are made and kept (``undelivered``), none sent — the payment sweep's path;
* ``signing``: ``"valid"``, or ``"unsigned"``, ``"stale"`` (``t`` 10 minutes old), ``"forged"`` (another
  secret) to show the endpoint refusing them.

``deliveries`` records each attempt (event id, type, refund status, HTTP status). A failed delivery (an
error or a non-2xx) is retried ``max_attempts`` times with backoff, as Stripe retries.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

log = logging.getLogger(__name__)

Post = Callable[[bytes, dict[str, str]], int]  # (raw body, headers) -> HTTP status
LOCAL_SECRET = "whsec_simulated_local"  # make dev's: the simulated Stripe signs with it, the function verifies
Signing = Literal["valid", "unsigned", "stale", "forged"]
STALE_SECONDS = 600
FORGED_SECRET = "whsec_not_the_endpoints_secret"
USER_AGENT = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"


@dataclass(frozen=True)
class Delivery:
    event_id: str
    event_type: str
    refund_id: str
    refund_status: str
    status: int | None  # the endpoint's HTTP status; None when it could not be reached
    attempt: int

    @property
    def delivered(self) -> bool:
        """The endpoint took it (2xx): Stripe stops retrying."""
        return self.status is not None and 200 <= self.status < 300


def sign(payload: bytes, secrets: str, timestamp: int) -> str:
    """A ``Stripe-Signature`` value: ``t`` and one ``v1`` per comma-separated secret."""
    signed = str(timestamp).encode() + b"." + payload
    parts = [f"t={timestamp}"]
    for secret in (s.strip() for s in secrets.split(",")):
        if secret:
            parts.append("v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest())
    return ",".join(parts)


def http_post(url: str, timeout: float = 10.0) -> Post:
    """POST to ``url`` (httpx, imported on the first delivery)."""

    def post(body: bytes, headers: dict[str, str]) -> int:
        import httpx

        return httpx.post(url, content=body, headers=headers, timeout=timeout).status_code

    return post


class WebhookSender:
    def __init__(self, created: Callable[[], int], api_version: str) -> None:
        self._created = created  # the simulated clock: an event's ``created``
        self.api_version = api_version
        self.endpoint: Post | None = None
        self.secret = ""
        self.duplicate = False
        self.reorder = False
        self.deliver = True
        self.signing: Signing = "valid"
        self.delay_seconds = 0.1
        self.max_attempts = 3
        self.backoff_seconds = 0.5
        self.now: Callable[[], float] = time.time  # the signature's ``t`` (real time, as the receiver's clock)
        self.deliveries: list[Delivery] = []
        self.undelivered: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[float, list[dict[str, Any]]] | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._background = True

    # -- configuration ---------------------------------------------------------------------------------------------

    def configure(self, endpoint: str | Post, secret: str, *, background: bool = True) -> None:
        """Send to ``endpoint`` (a URL, or a function taking the body and headers) signed with ``secret``.

        ``background=False``: nothing is sent on its own; ``send_pending()`` delivers, in the caller's thread
        (tests that drive the receiving handler in-process).
        """
        self.endpoint = http_post(endpoint) if isinstance(endpoint, str) else endpoint
        self.secret = secret
        self._background = background

    @property
    def configured(self) -> bool:
        return self.endpoint is not None and bool(self.secret)

    # -- events ----------------------------------------------------------------------------------------------------

    def events_for(self, refund: dict[str, Any], previous_status: str | None) -> list[dict[str, Any]]:
        """The events Stripe sends for one change of ``refund`` (its status now, ``previous_status`` before)."""
        types = ["refund.updated", "charge.refund.updated"]
        if refund["status"] == "failed":
            types.insert(1, "refund.failed")
        previous = {"status": previous_status} if previous_status else {}
        return [self._event(t, refund, previous) for t in types]

    def _event(self, event_type: str, refund: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
        n = next(self._ids)
        data: dict[str, Any] = {"object": json.loads(json.dumps(refund))}
        if previous:
            data["previous_attributes"] = previous
        return {
            "id": f"evt_sim_{n:010d}",
            "object": "event",
            "api_version": self.api_version,
            "created": self._created(),
            "data": data,
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "type": event_type,
        }

    def changed(self, refund: dict[str, Any], previous_status: str | None) -> list[dict[str, Any]]:
        """A refund changed: its events made, and sent as the options say (unless nothing is configured)."""
        events = self.events_for(refund, previous_status)
        if not self.configured:
            return events
        batch = list(reversed(events)) if self.reorder else list(events)
        if self.duplicate:
            batch = batch + batch
        if not self.deliver:
            with self._lock:
                self.undelivered.extend(batch)
            return events
        self._queue.put((time.monotonic() + self.delay_seconds, batch))
        if self._background:
            self._ensure_worker()
        return events

    # -- delivery --------------------------------------------------------------------------------------------------

    def send_pending(self) -> list[Delivery]:
        """Deliver what is queued now, in this thread (``configure(..., background=False)``)."""
        out: list[Delivery] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return out
            if item is not None:
                out.extend(self._send_batch(item[1]))
            self._queue.task_done()

    def send(self, event: dict[str, Any]) -> Delivery:
        """Deliver one event now (a test replaying one, or sending a kept one), signed as configured."""
        return self._deliver(event, attempt=1)

    def wait(self, timeout: float = 10.0) -> bool:
        """True once every queued delivery was made (a test's or the demo's barrier)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.01)
        return False

    def stop(self) -> None:
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join(timeout=5)
            self._worker = None

    def reset(self) -> None:
        """Forget the delivery log and kept events; the options back to their defaults (configuration kept)."""
        with self._lock:
            self.deliveries.clear()
            self.undelivered.clear()
        self.duplicate = self.reorder = False
        self.deliver = True
        self.signing = "valid"

    def _ensure_worker(self) -> None:
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="simulated-stripe-webhooks", daemon=True)
                self._worker.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                due, batch = item
                time.sleep(max(0.0, due - time.monotonic()))
                self._send_batch(batch)
            except Exception:  # a worker that dies would silently stop every later delivery
                log.exception("simulated stripe: webhook delivery failed")
            finally:
                self._queue.task_done()

    def _send_batch(self, batch: list[dict[str, Any]]) -> list[Delivery]:
        out = []
        for event in batch:
            for attempt in range(1, self.max_attempts + 1):
                delivery = self._deliver(event, attempt)
                out.append(delivery)
                if delivery.delivered:
                    break
                if delivery.status is not None and delivery.status == 400 and self.signing != "valid":
                    break  # a deliberately bad signature: refused, as meant
                time.sleep(self.backoff_seconds * 2 ** (attempt - 1))
        return out

    def _deliver(self, event: dict[str, Any], attempt: int) -> Delivery:
        assert self.endpoint is not None, "configure() the webhook endpoint first"
        body = json.dumps(event, indent=2).encode("utf-8")  # Stripe's bodies are pretty-printed JSON
        headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": USER_AGENT}
        now = int(self.now())
        if self.signing == "valid":
            headers["Stripe-Signature"] = sign(body, self.secret, now)
        elif self.signing == "stale":
            headers["Stripe-Signature"] = sign(body, self.secret, now - STALE_SECONDS)
        elif self.signing == "forged":
            headers["Stripe-Signature"] = sign(body, FORGED_SECRET, now)
        try:
            status: int | None = self.endpoint(body, headers)
        except Exception as exc:  # the endpoint down or slow: Stripe retries later
            log.warning("simulated stripe: webhook %s not delivered: %s", event["id"], type(exc).__name__)
            status = None
        refund = event["data"]["object"]
        delivery = Delivery(event["id"], event["type"], refund.get("id", ""), refund.get("status", ""), status, attempt)
        with self._lock:
            self.deliveries.append(delivery)
        return delivery
