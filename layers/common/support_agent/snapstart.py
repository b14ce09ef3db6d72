"""Lambda SnapStart: what must be fresh in every environment resumed from the same snapshot.

With ``EnableSnapStart=true`` (template.yaml) many execution environments resume from one memory
snapshot taken after init, so any state drawn from randomness during init is shared by all of them.
What this code draws, and whether a restore must refresh it:

* ids (``ids.ulid``: conversations, approvals, audit event ids) read ``os.urandom`` on every call,
  and fences (``agent/untrusted.py``) use ``secrets``, which reads ``os.urandom`` too. The kernel's
  CSPRNG is not in the snapshot, so these are unique per environment with nothing to do.
* the ``random`` module's Mersenne Twister state *is* in the snapshot: it only times retry backoff
  jitter (``llm/anthropic.py``), but identical jitter in every restored environment would make
  their retries arrive in step, which is what jitter exists to prevent. It is reseeded here.
* without SnapStart, clients and settings are built on the first request (``wiring.py``). With it,
  the handler passes them as ``prime``: built before the snapshot, so a restored environment starts
  with them ready. Building them opens no connection and fetches no model key, signing secret or JWKS
  (each waits for its first use); SnapStart functions get refreshable container credentials, which
  botocore re-reads when they expire. Every API-facing function primes (functions/*/app.py): its
  services, the authenticator and, behind Powertools' resolver, each route's request validation
  (`route_validation`), which Powertools otherwise builds on that route's first request.

``snapshot_restore_py`` exists only in the Lambda Python runtime; elsewhere registering is a no-op.
"""

from __future__ import annotations

import inspect
import os
import random
from collections.abc import Callable
from typing import Any

_registered = False


def reseed() -> None:
    """Give the ``random`` module fresh OS entropy (the after-restore hook)."""
    random.seed(os.urandom(32))


def register(prime: Callable[[], object] | None = None, runtime: Any = None) -> bool:
    """Run `prime` before the snapshot and `reseed` after every restore; False where there are no hooks.

    ``runtime`` is the ``snapshot_restore_py`` module (injectable for tests).
    """
    global _registered
    if _registered:
        return True
    if runtime is None:
        try:
            import snapshot_restore_py
        except ImportError:  # not in Lambda (tests, the local stack): there is no snapshot to restore
            return False
        runtime = snapshot_restore_py
    if prime is not None:
        runtime.register_before_snapshot(prime)
    runtime.register_after_restore(reseed)
    _registered = True
    return True


def primes(*steps: Callable[[], object]) -> Callable[[], None]:
    """One prime of several steps, run in order (the runtime takes one hook per registration)."""

    def prime() -> None:
        for step in steps:
            step()

    return prime


def route_validation(handler: Callable[..., Any]) -> Callable[[], None]:
    """A step building the request validation of every route `handler` serves.

    ``handler`` is ``api_handler``'s (api/http.py), whose resolver is only in its closure; a handler
    without one is refused, so a changed ``api_handler`` fails the tests rather than priming nothing.
    """
    resolver = inspect.getclosurevars(inspect.unwrap(handler)).nonlocals.get("app")
    if resolver is None or not hasattr(resolver, "_static_routes"):
        raise TypeError(f"{handler!r} is not an api_handler: no resolver to prime")

    def prime() -> None:
        for route in [*resolver._static_routes, *resolver._dynamic_routes]:
            _ = route.dependant, route.body_field  # cached on the route: its models' validators

    return prime
