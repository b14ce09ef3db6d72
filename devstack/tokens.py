"""Demo HS256 tokens for tests and the local stack, which has no identity provider.

Run ``python -m devstack.tokens`` to print tokens for customer 7, customer 8, lead-1 and the support
teammate agent-1 (names from devstack/demo_data.json) as shell assignments. Honours ``JWT_SECRET``,
``JWT_ISSUER`` and ``JWT_AUDIENCE`` so the tokens match the stack's settings.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import jwt

from devstack.seed import DEMO_DATA

DEFAULT_DEV_SECRET = "LOCAL-DEV-ONLY-not-a-secret-support-agent-hs256-signing-key"
"""Public, local-only HS256 key: never configure it on a deployed stack."""


def mint_token(
    sub: str,
    role: str,
    customer_id: int | None = None,
    *,
    secret: str,
    issuer: str = "support-agent-local",
    audience: str = "support-agent",
    ttl_seconds: int = 3600,
    now: int | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """An HS256 token carrying the claims ``support_agent.auth`` requires.

    ``extra`` adds or overrides claims; a ``None`` value removes the claim (handy for negative tests).
    ``customer_id=None`` leaves the ``customer_id`` claim out.
    """
    issued = int(time.time()) if now is None else now
    claims: dict[str, Any] = {
        "sub": sub,
        "role": role,
        "iss": issuer,
        "aud": audience,
        "iat": issued,
        "exp": issued + ttl_seconds,
    }
    if customer_id is not None:
        claims["customer_id"] = customer_id
    for name, value in (extra or {}).items():
        if value is None:
            claims.pop(name, None)
        else:
            claims[name] = value
    return jwt.encode(claims, secret, algorithm="HS256")


def team_tokens(people: list[dict[str, str]], role: str, **kw: Any) -> list[dict[str, str]]:
    """The demo support team's tokens (``support_lead`` or ``support_staff``): each person's ``sub``, display
    ``name`` (the JWT ``name`` claim: what a customer reads, "Riley from support joined") and ``token``."""
    return [
        {"sub": p["sub"], "name": p["name"], "token": mint_token(p["sub"], role, extra={"name": p["name"]}, **kw)}
        for p in people
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print demo bearer tokens for the local stack.")
    parser.add_argument("--secret", default=os.environ.get("JWT_SECRET") or DEFAULT_DEV_SECRET)
    parser.add_argument("--issuer", default=os.environ.get("JWT_ISSUER") or "support-agent-local")
    parser.add_argument("--audience", default=os.environ.get("JWT_AUDIENCE") or "support-agent")
    parser.add_argument("--ttl", type=int, default=24 * 3600, help="lifetime in seconds")
    args = parser.parse_args(argv)
    common: dict[str, Any] = {
        "secret": args.secret,
        "issuer": args.issuer,
        "audience": args.audience,
        "ttl_seconds": args.ttl,
    }
    print(f"CUSTOMER_7_TOKEN={mint_token('customer-7', 'customer', 7, **common)}")
    print(f"CUSTOMER_8_TOKEN={mint_token('customer-8', 'customer', 8, **common)}")
    team = json.loads(DEMO_DATA.read_text())
    print(f"LEAD_TOKEN={team_tokens(team['leads'][:1], 'support_lead', **common)[0]['token']}")
    print(f"STAFF_TOKEN={team_tokens(team['staff'][:1], 'support_staff', **common)[0]['token']}")


if __name__ == "__main__":
    main()
