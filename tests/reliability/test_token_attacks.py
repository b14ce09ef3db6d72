"""Property 5: tokens. The issue's list, case by case, lives in tests/unit/test_auth.py (RELIABILITY.md maps
each item to its test); here are the properties that sweep the space between those cases:

* any claim set (each required claim present, missing or wrong in every way we know: expired, not yet valid,
  issued in the future, prefix/suffix/substring/case-changed issuer or audience, list claims, wrong role,
  customer without or with a malformed customer_id), under any signing (the right key, a wrong key,
  ``alg: none``, HS384/HS512, RS256, the RSA public key used as an HMAC secret) — the Authenticator answers
  exactly what an independent reference of the rules predicts, and only ever 401 or 403;
* any single-character mutation of a valid token (header, claims or signature) is refused unless it decodes
  to the very same bytes;
* a JWKS issuer that rotates keys, goes down and comes back, under tokens with known, rotated-in and random
  kids over time: fetches are never closer than the floor, keys served stale keep working while the issuer
  is down after the cache expired, an unknown kid is never accepted, a rotated-in key is accepted by the
  first request after the floor.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.auth import JWKS_MIN_REFETCH_SECONDS, Authenticator, Principal
from support_agent.config import load_settings
from support_agent.errors import NotPermitted, Unauthenticated
from tests.reliability.conftest import CI, SLOW
from tests.reliability.figures import count

SECRET = "reliability-suite-secret-0123456789abcdef"
ISS, AUD = "support-agent-local", "support-agent"
_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
_RSA_PUBLIC_PEM = _RSA.public_key().public_bytes(
    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
)
HS = Authenticator(load_settings({"JWT_SECRET": SECRET, "JWT_ISSUER": ISS, "JWT_AUDIENCE": AUD}))

# Each claim: (value or MISSING, is it acceptable?)
MISSING = object()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _sign(claims: dict[str, Any], how: str) -> str:
    if how == "RS256":  # signed by hand: pyjwt's encoder refuses some of these claim sets
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        head = _b64(json.dumps({"alg": "RS256", "typ": "JWT"}).encode()) + "." + _b64(json.dumps(claims).encode())
        return head + "." + _b64(_RSA.sign(head.encode(), padding.PKCS1v15(), hashes.SHA256()))
    alg = {"right": "HS256", "wrong_key": "HS256", "pubkey_as_hmac": "HS256"}.get(how, how)
    header = _b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    body = _b64(json.dumps(claims).encode())
    signing_input = f"{header}.{body}".encode()
    if alg == "none":
        return f"{header}.{body}."
    key = {"right": SECRET.encode(), "wrong_key": b"x" * 40, "pubkey_as_hmac": _RSA_PUBLIC_PEM}.get(
        how, SECRET.encode()
    )
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
    return f"{header}.{body}.{_b64(hmac.new(key, signing_input, digest).digest())}"


@st.composite
def claim_sets(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A claim set and its expected outcome when rightly signed: 'customer', 'lead', '401' or '403'."""
    now = int(time.time())
    problems: list[str] = []
    claims: dict[str, Any] = {}

    def pick(name: str, options: list[tuple[Any, bool]]) -> Any:
        # The first option is valid; it comes 4 times in 5, so whole valid claim sets are common too.
        value, ok = options[0] if draw(st.integers(0, 4)) else draw(st.sampled_from(options[1:]))
        if value is not MISSING:
            claims[name] = value
        if not ok:
            problems.append(name)
        return value

    pick(
        "exp",
        [(now + 3600, True), (now - 5, True), (now - 3600, False), (MISSING, False), ("soon", False), (None, False)],
    )
    pick("iat", [(now - 10, True), (now + 3600, False), (MISSING, False), ("x", False)])
    pick("nbf", [(MISSING, True), (now - 10, True), (now + 3600, False)])
    pick(
        "iss",
        [
            (ISS, True),
            (MISSING, False),
            (ISS + "-evil", False),
            (ISS[:-1], False),
            ("x" + ISS, False),
            (ISS.upper(), False),
            ([ISS], False),
            ("", False),
        ],
    )
    pick(
        "aud",
        [
            (AUD, True),
            ([AUD, "other"], True),
            (MISSING, False),
            (AUD + "-evil", False),
            (AUD[1:], False),
            (["other"], False),
            (AUD.upper(), False),
        ],
    )
    pick("sub", [("customer-7", True), (MISSING, False), ("", False), ("  ", False), (42, False)])
    role = draw(
        st.sampled_from(
            [
                "customer",
                "support_lead",
                ["customer"],
                ["support_lead", "x"],
                "admin",
                "Customer",
                "support-lead",
                "",
                None,
                1,
                MISSING,
            ]
        )
    )
    if role is not MISSING:
        claims["role"] = role
    cid = draw(st.sampled_from([7, "7", 0, -7, True, 7.5, "07", "seven", 2**53, 2**53 - 1, str(2**53), None, MISSING]))
    if cid is not MISSING:
        claims["customer_id"] = cid
    if problems:
        return claims, "401"
    roles = role if isinstance(role, list) else [role]
    if "support_lead" in roles:
        return claims, "lead"
    if not (role == "customer" or (isinstance(role, list) and "customer" in role)):
        return claims, "403"
    good_cid = (isinstance(cid, int) and not isinstance(cid, bool) and 0 < cid < 2**53) or cid == "7"
    return (claims, "customer") if good_cid else (claims, "401")


def outcome(token: str) -> str:
    try:
        p: Principal = HS.authenticate({"authorization": f"Bearer {token}"})
    except Unauthenticated:
        return "401"
    except NotPermitted:
        return "403"
    return "lead" if p.role == "support_lead" else "customer"


@st.composite
def signed_claims(draw: st.DrawFn) -> tuple[str, str, str]:
    claims, expected = draw(claim_sets())
    how = draw(st.sampled_from(["right"] * 6 + ["wrong_key", "none", "HS384", "HS512", "RS256", "pubkey_as_hmac"]))
    return _sign(claims, how), (expected if how == "right" else "401"), how


def _claims_property() -> Any:
    @given(case=signed_claims())
    def prop(case: tuple[str, str, str]) -> None:
        token, expected, how = case
        got = outcome(token)
        assert got == expected, (how, jwt.decode(token, options={"verify_signature": False}), got, expected)
        count("5-tokens", claim_sets=1, **{f"answered_{got}": 1})

    return prop


def test_any_claim_set_under_any_signing_gets_exactly_the_reference_answer() -> None:
    settings(parent=CI, max_examples=CI.max_examples * 20)(_claims_property())()


@pytest.mark.slow
def test_any_claim_set_under_any_signing_long() -> None:
    settings(parent=SLOW, max_examples=SLOW.max_examples * 5)(_claims_property())()


def _customer_7() -> dict[str, Any]:
    """A valid customer's claims, issued now for an hour."""
    now = int(time.time())
    return {
        "sub": "customer-7",
        "role": "customer",
        "customer_id": 7,
        "iss": ISS,
        "aud": AUD,
        "iat": now,
        "exp": now + 3600,
    }


def _mutation_property() -> Any:
    valid = _sign(_customer_7(), "right")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ é"

    def decoded(token: str) -> list[bytes] | None:
        try:
            return [base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)) for p in token.split(".")]
        except ValueError:
            return None

    @given(
        at=st.integers(0, len(valid) - 1),
        char=st.sampled_from(alphabet),
        op=st.sampled_from(["set", "insert", "delete"]),
    )
    def prop(at: int, char: str, op: str) -> None:
        if op == "set":
            token = valid[:at] + char + valid[at + 1 :]
        elif op == "insert":
            token = valid[:at] + char + valid[at:]
        else:
            token = valid[:at] + valid[at + 1 :]
        got = outcome(token)
        if got != "401":
            assert decoded(token) == decoded(valid), f"a changed token was accepted: {token}"
            count("5-tokens", mutations_same_bytes=1)
        count("5-tokens", mutations=1)

    return prop


def test_a_mutated_token_is_refused() -> None:
    settings(parent=CI, max_examples=CI.max_examples * 20)(_mutation_property())()


# -- JWKS over time ----------------------------------------------------------------------------------------

_KEYS = {f"k{i}": rsa.generate_private_key(public_exponent=65537, key_size=2048) for i in range(3)}


class Issuer:
    def __init__(self) -> None:
        self.published = ["k0"]
        self.down = False
        self.attempts: list[float] = []
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    def fetch(self) -> dict[str, Any]:
        self.attempts.append(self.now)
        if self.down:
            raise jwt.PyJWKClientConnectionError("issuer down")
        keys = []
        for kid in self.published:
            jwk = jwt.algorithms.RSAAlgorithm.to_jwk(_KEYS[kid].public_key(), as_dict=True)
            keys.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": keys}


def _rs_token(kid: str, key: Any) -> str:
    return jwt.encode(_customer_7(), key, algorithm="RS256", headers={"kid": kid})


steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.sampled_from([0.5, 3, 9.9, 10, 30, 299, 301, 900])),
        st.tuples(st.just("down"), st.booleans()),
        st.tuples(st.just("rotate"), st.sampled_from(["k1", "k2"])),
        st.tuples(st.just("token"), st.sampled_from(["k0", "k1", "k2", "random"])),
    ),
    min_size=1,
    max_size=40,
)


def _jwks_property() -> Any:
    @given(plan=steps)
    def prop(plan: list[tuple[str, Any]]) -> None:
        issuer = Issuer()
        auth = Authenticator(
            load_settings({"JWT_JWKS_URL": "https://issuer.example/jwks", "JWKS_CACHE_SECONDS": "300"}),
            jwks_fetch=issuer.fetch,
            clock=issuer.clock,
        )
        cached: set[str] = set()  # what the last successful fetch returned
        published_at: dict[str, float] = {"k0": issuer.now}
        for action, arg in plan:
            if action == "advance":
                issuer.now += arg
            elif action == "down":
                issuer.down = arg
            elif action == "rotate" and arg not in issuer.published:
                issuer.published.append(arg)
                published_at[arg] = issuer.now
            elif action == "token":
                kid = arg if arg != "random" else f"random-{len(issuer.attempts)}"
                key = _KEYS.get(arg, _KEYS["k0"])
                before = len(issuer.attempts)
                try:
                    auth.authenticate({"authorization": f"Bearer {_rs_token(kid, key)}"})
                    accepted = True
                except Unauthenticated:
                    accepted = False
                fetched_ok = len(issuer.attempts) > before and not issuer.down
                if fetched_ok:
                    cached = set(issuer.published)
                if arg == "random":
                    assert not accepted, "a key nobody published was accepted"
                else:
                    # Accepted exactly when the key is in the cache we hold (fresh or stale).
                    assert accepted == (kid in cached), (kid, cached, issuer.down)
                if kid in cached and issuer.down:
                    count("5-tokens", stale_key_served=1)
                count("5-tokens", jwks_tokens=1)
        gaps = [b - a for a, b in zip(issuer.attempts, issuer.attempts[1:], strict=False)]
        assert all(g >= JWKS_MIN_REFETCH_SECONDS for g in gaps), f"JWKS fetched {gaps} seconds apart"
        count("5-tokens", jwks_fetch_attempts=len(issuer.attempts))

    return prop


def test_jwks_rotation_outage_and_random_kids_over_time() -> None:
    settings(parent=CI, max_examples=CI.max_examples * 4)(_jwks_property())()


@pytest.mark.slow
def test_jwks_rotation_outage_and_random_kids_over_time_long() -> None:
    settings(parent=SLOW)(_jwks_property())()
