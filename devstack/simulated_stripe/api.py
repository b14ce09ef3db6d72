"""``SimulatedStripe``: the request → reply function, and the state tests inspect and inject faults into."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from devstack.seed import DEMO_DATA, payment_intent_of
from devstack.simulated_stripe.faults import Fault, FaultPlan, Injected
from devstack.simulated_stripe.idempotency import Fingerprint, IdempotencyStore, Saved
from devstack.simulated_stripe.ledger import Clock, Ledger, PaymentIntent, RefundRequest
from devstack.simulated_stripe.params import list_filter, matches, refund_request
from devstack.simulated_stripe.webhooks import WebhookSender
from devstack.simulated_stripe.wire import Reply, StripeError, api_error, api_key, decode_form

DEFAULT_API_VERSION = "2026-10-28.endive"  # an account's default when a request pins none (stripe 16.1's pin)
NOT_SAVED = (Fault.RATE_LIMIT, Fault.ERROR_UNSAVED)


@dataclass(frozen=True)
class Recorded:
    """One request as it arrived, with what it was answered."""

    method: str
    path: str
    params: dict[str, Any]  # the decoded form (POST) or query (GET)
    fields: tuple[tuple[str, str], ...]  # the raw fields, in the order sent
    headers: dict[str, str]  # lower-cased names
    status: int
    replayed: bool
    fault: Fault | None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name), None)


def _route(method: str, path: str) -> tuple[str, str | None]:
    parts = path.rstrip("/").split("/")
    if parts[:3] == ["", "v1", "refunds"]:
        if len(parts) == 3 and method in ("GET", "POST"):
            return f"{method} /v1/refunds", None
        if len(parts) == 4 and method == "GET" and parts[3]:
            return "GET /v1/refunds/{id}", parts[3]
    raise StripeError(
        404,
        f"Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs or we can help at "
        "https://support.stripe.com/.",
    )


def _faulty(injected: Injected) -> Reply:
    if injected.fault is Fault.RATE_LIMIT:
        error = StripeError(
            429,
            "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests.",
            code="rate_limit",
        )
    else:
        error = api_error()
    reply = error.reply()
    if injected.should_retry is not None:
        reply.headers["Stripe-Should-Retry"] = str(injected.should_retry).lower()
    return reply


class SimulatedStripe:
    """Stripe API v1's refund routes over an in-memory ledger; see the package docstring for what it models."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self.ledger = Ledger(self.clock)
        self.idempotency = IdempotencyStore(self.clock)
        self.faults = FaultPlan()
        self._requests: list[Recorded] = []
        self._request_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._released = threading.Event()  # set on stop: held requests go on at once
        # Signed events for every refund change, once configured (webhooks.py; make dev points it at the stack).
        self.webhooks = WebhookSender(self.clock.now, DEFAULT_API_VERSION)

    # -- what tests (and make dev) call ----------------------------------------------------------------------------

    def seed_demo(self, path: Path | None = None) -> list[PaymentIntent]:
        """A payment intent per demo order (the one ``devstack.seed`` stores with it), for its ``total_cents``."""
        data = json.loads((path or DEMO_DATA).read_text())
        currency = data.get("currency", "USD")
        return [
            self.add_payment_intent(payment_intent_of(order), order["total_cents"], currency)
            for customer in data["customers"]
            for order in customer["orders"]
        ]

    def add_payment_intent(self, intent_id: str, amount: int, currency: str = "usd") -> PaymentIntent:
        return self.ledger.add_payment_intent(intent_id, amount, currency)

    def inject(
        self,
        route: str,
        fault: Fault | str,
        times: int = 1,
        *,
        hold_seconds: float = 5.0,
        should_retry: bool | None = None,
    ) -> None:
        """The next ``times`` requests on ``route`` (e.g. ``"POST /v1/refunds"``) meet ``fault``."""
        self.faults.inject(route, Injected(Fault(fault), hold_seconds, should_retry), times)

    @property
    def new_refund_status(self) -> str:
        return self.ledger.new_refund_status

    @new_refund_status.setter
    def new_refund_status(self, status: str) -> None:
        """``"pending"``: new refunds wait for ``settle``; ``"succeeded"`` (the default): they are done at once."""
        if status not in ("succeeded", "pending"):
            raise ValueError("new refunds are either succeeded or pending")
        self.ledger.new_refund_status = status

    def refund_outside(self, payment_intent: str, amount: int, *, status: str = "succeeded") -> dict[str, Any]:
        """A refund made outside our code (a person in Stripe's dashboard): it counts against the payment
        intent like any other and carries no refund key. ``status="pending"`` lets a test fail it later
        with ``settle``, which gives the amount back."""
        if status not in ("succeeded", "pending"):
            raise ValueError("a refund made outside is succeeded or pending")
        refund = self.ledger.create(RefundRequest(payment_intent, None, amount, None, None), status)
        self.webhooks.changed(refund, None)
        return refund

    def settle(self, refund_id: str, status: str) -> dict[str, Any]:
        try:
            previous: str | None = self.ledger.retrieve(refund_id)["status"]
        except StripeError:
            previous = None  # settle raises KeyError for it below
        refund = self.ledger.settle(refund_id, status)
        self.webhooks.changed(refund, previous)
        return refund

    def fail_late(self, refund_id: str, reason: str = "expired_or_canceled_card") -> dict[str, Any]:
        """A refund Stripe had made fails after all (the card was closed): ``succeeded`` -> ``failed``, its
        amount back on the payment intent, with ``failure_reason`` (what Stripe does days later)."""
        refund = self.ledger.fail_late(refund_id, reason)
        self.webhooks.changed(refund, "succeeded")
        return refund

    def refunds(self, payment_intent: str | None = None) -> list[dict[str, Any]]:
        """The refunds made, oldest first (of one payment intent, or all)."""
        made = reversed(self.ledger.newest_first())
        return [r for r in made if payment_intent in (None, r["payment_intent"])]

    @property
    def requests(self) -> list[Recorded]:
        with self._lock:
            return list(self._requests)

    def reset(self) -> None:
        """Back to a fresh start, as ``make dev``'s reset to the seed data needs: no refunds, no saved
        idempotency keys, no faults queued, an empty request log, new refunds ``succeeded``, the clock
        unshifted. The payment intents stay (they are the seed), and refund ids keep counting, so an id
        from before a reset never names a refund made after it."""
        self.ledger.reset()
        self.idempotency.reset()
        self.faults.clear()
        self.clock.reset()
        self.webhooks.reset()
        with self._lock:
            self._requests.clear()

    def hold(self, seconds: float) -> None:
        """Wait ``seconds`` (a held request or answer), or less if ``release`` is called."""
        self._released.wait(seconds)

    def release(self) -> None:
        """Let every held request go on now (the server's stop calls it)."""
        self._released.set()

    # -- the HTTP side ---------------------------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: Mapping[str, str], raw: bytes = b"") -> Reply:
        """The answer to one request; ``target`` is the path with its query."""
        path, _, query = target.partition("?")
        request_id = f"req_sim_{next(self._request_ids):012d}"
        fields: tuple[tuple[str, str], ...] = ()
        params: dict[str, Any] = {}
        state: dict[str, Any] = {"replayed": False, "fault": None, "made": []}
        try:
            route, refund_id = _route(method, path)
            key = api_key(headers)
            fields = self._fields(method, headers, raw, query)
            params = decode_form(fields)
            injected = self.faults.take(route)
            state["fault"] = injected.fault if injected else None
            if injected and injected.fault in NOT_SAVED:
                reply = _faulty(injected)
            elif route == "POST /v1/refunds":
                reply = self._create(key, headers, path, params, fields, injected, request_id, state)
            else:
                reply = self._read(refund_id, params, injected)
        except StripeError as exc:
            reply = exc.reply()
        reply.headers.update(
            {
                "Request-Id": request_id,
                "Stripe-Version": _header(headers, "stripe-version") or DEFAULT_API_VERSION,
            }
        )
        self._record(method, path, params, fields, headers, reply.status, state)
        for refund in state["made"]:  # once the answer exists: Stripe's events follow its API answer
            self.webhooks.changed(refund, None)
        return reply

    def _fields(self, method: str, headers: Mapping[str, str], raw: bytes, query: str) -> tuple[tuple[str, str], ...]:
        if method == "GET":
            return tuple(parse_qsl(query, keep_blank_values=True))
        content_type = (_header(headers, "content-type") or "").split(";", 1)[0].strip().lower()
        if raw and content_type != "application/x-www-form-urlencoded":
            raise StripeError(
                400, "Invalid request: the body must be form-encoded (application/x-www-form-urlencoded)."
            )
        return tuple(parse_qsl(raw.decode("utf-8"), keep_blank_values=True))

    def _create(
        self,
        key: str,
        headers: Mapping[str, str],
        path: str,
        params: dict[str, Any],
        fields: tuple[tuple[str, str], ...],
        injected: Injected | None,
        request_id: str,
        state: dict[str, Any],
    ) -> Reply:
        request = refund_request(params)  # a 400 here is not saved: the endpoint never began
        idempotency_key = _header(headers, "idempotency-key")
        fingerprint: Fingerprint = ("POST", path.rstrip("/"), tuple(sorted(fields)))
        if idempotency_key:
            saved = self.idempotency.begin(key, idempotency_key, fingerprint)
            if saved is not None:
                state["replayed"] = True
                return Reply(
                    saved.status,
                    saved.body,
                    {
                        "Idempotent-Replayed": "true",
                        "Original-Request": saved.request_id,
                        "Idempotency-Key": idempotency_key,
                    },
                )
        reply: Reply | None = None
        try:
            fault = injected.fault if injected else None
            if injected and fault is Fault.SLOW:
                self.hold(injected.hold_seconds)
            if fault is Fault.ERROR_BEFORE:
                reply = api_error().reply()
            else:
                try:
                    reply = Reply(200, self.ledger.create(request))
                    state["made"].append(reply.body)
                except StripeError as exc:  # a refusal once the endpoint ran: saved like any answer
                    reply = exc.reply()
                if fault is Fault.ERROR_AFTER:
                    reply = api_error().reply()
        finally:
            if idempotency_key:
                saved = Saved(fingerprint, reply.status, reply.body, request_id, self.clock.now()) if reply else None
                self.idempotency.finish(key, idempotency_key, saved)
        assert reply is not None
        if idempotency_key:
            reply.headers.update({"Idempotency-Key": idempotency_key, "Original-Request": request_id})
        return self._delivered(reply, injected)

    def _read(self, refund_id: str | None, params: dict[str, Any], injected: Injected | None) -> Reply:
        if injected and injected.fault is Fault.SLOW:
            self.hold(injected.hold_seconds)
        reply = Reply(200, self.ledger.retrieve(refund_id) if refund_id else self._list(params))
        if injected and injected.fault in (Fault.ERROR_BEFORE, Fault.ERROR_AFTER):
            reply = _faulty(injected)
        return self._delivered(reply, injected)

    def _delivered(self, reply: Reply, injected: Injected | None) -> Reply:
        """How the answer reaches the client: at once, late (a timeout), or not at all (a reset)."""
        if injected is None:
            return reply
        if injected.should_retry is not None and reply.status >= 500:
            reply.headers["Stripe-Should-Retry"] = str(injected.should_retry).lower()
        if injected.fault is Fault.TIMEOUT_AFTER:
            return Reply(reply.status, reply.body, reply.headers, hold_seconds=injected.hold_seconds)
        if injected.fault is Fault.DROP_AFTER:
            return Reply(reply.status, reply.body, reply.headers, drop=True)
        return reply

    def _list(self, params: dict[str, Any]) -> dict[str, Any]:
        """A list object, newest first, paginated by ``starting_after``/``ending_before`` as Stripe does."""
        filters, limit = list_filter(params)
        everything = self.ledger.newest_first()
        ids = [r["id"] for r in everything]
        for cursor in ("starting_after", "ending_before"):
            if params.get(cursor) and params[cursor] not in ids:
                raise StripeError(400, f"No such refund: '{params[cursor]}'", code="resource_missing", param=cursor)
        if params.get("starting_after"):
            candidates = [r for r in everything[ids.index(params["starting_after"]) + 1 :] if matches(r, filters)]
            page, has_more = candidates[:limit], len(candidates) > limit
        elif params.get("ending_before"):
            candidates = [r for r in everything[: ids.index(params["ending_before"])] if matches(r, filters)]
            page, has_more = candidates[-limit:], len(candidates) > limit
        else:
            candidates = [r for r in everything if matches(r, filters)]
            page, has_more = candidates[:limit], len(candidates) > limit
        return {"object": "list", "data": page, "has_more": has_more, "url": "/v1/refunds"}

    def _record(
        self,
        method: str,
        path: str,
        params: dict[str, Any],
        fields: tuple[tuple[str, str], ...],
        headers: Mapping[str, str],
        status: int,
        state: dict[str, Any],
    ) -> None:
        lowered = {k.lower(): v for k, v in headers.items()}
        recorded = Recorded(method, path, params, fields, lowered, status, state["replayed"], state["fault"])
        with self._lock:
            self._requests.append(recorded)
