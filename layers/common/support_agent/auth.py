"""JWT verification and the Principal.

Every function verifies the bearer token itself (ARCHITECTURE.md, "Components") so the 401/403 contract holds on AWS,
under ``sam local`` and in the local stack alike. The customer id used by every tool comes from here and
nowhere else.

Two modes, chosen by Settings:

* ``JWT_JWKS_URL`` set: RS256/ES256 only, keys from the issuer's JWKS, cached and served stale when a
  refresh fails. HS* is never accepted in this mode, even if ``JWT_SECRET`` is also set.
* otherwise: HS256 with ``JWT_SECRET`` (>= 32 bytes), for local and dev.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import jwt

from support_agent.config import Settings
from support_agent.errors import NotPermitted, Unauthenticated

log = logging.getLogger(__name__)

Role = Literal["customer", "support_staff", "support_lead"]
ROLES: tuple[Role, ...] = ("customer", "support_staff", "support_lead")
STAFF_ROLES: tuple[Role, ...] = ("support_staff", "support_lead")
"""Who may work the hand-off inbox: support staff, and leads (who have every right staff have)."""
MAX_NAME_CHARS = 64
"""A display name (the ``name`` claim) longer than this is cut: it is shown to customers ("Dana from support")."""

MAX_TOKEN_BYTES = 8 * 1024
"""Tokens above this are rejected before any parsing: no legitimate token is that large."""

REQUIRED_CLAIMS = ["exp", "iat", "sub", "iss", "aud"]
JWKS_MIN_REFETCH_SECONDS = 10.0
"""Floor between two JWKS fetch attempts, so random ``kid``s or an issuer outage cannot make us hammer it."""

_HS_ALGORITHMS = frozenset({"HS256"})
_JWKS_ALGORITHMS = frozenset({"RS256", "ES256"})
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_CUSTOMER_ID_DIGITS = re.compile(r"[1-9][0-9]{0,17}")
MAX_CUSTOMER_ID = 2**53 - 1
"""The largest customer id a token may carry (and a route may take): exact in JSON everywhere (a browser's
number, the OpenAPI document's bounds), far inside DynamoDB's 38 digits."""
_MAX_CUSTOMER_ID = MAX_CUSTOMER_ID

JwksFetch = Callable[[], Mapping[str, Any]]


@dataclass(frozen=True)
class Principal:
    sub: str
    role: Role
    customer_id: int | None = None
    name: str = ""  # the ``name`` claim, for a person shown to a customer; empty: none given

    @property
    def display_name(self) -> str:
        return self.name or self.sub


# --- JWKS cache -------------------------------------------------------------------------------------------


def _pinned_algorithm(jwk: Mapping[str, Any]) -> str | None:
    """The one algorithm a JWKS key may verify, from its key type; None for keys we never use.

    Pinning per key (not per token header) is what makes RS/HS and RS/ES confusion impossible.
    """
    kty = jwk.get("kty")
    if kty == "RSA":
        alg = "RS256"
    elif kty == "EC" and jwk.get("crv") == "P-256":
        alg = "ES256"
    else:
        return None
    if jwk.get("alg") not in (None, alg):
        return None
    if jwk.get("use") not in (None, "sig"):
        return None
    return alg


@dataclass(frozen=True)
class _Key:
    kid: str | None
    alg: str
    key: Any


def _parse_jwks(data: Mapping[str, Any]) -> list[_Key]:
    """Usable signing keys of a JWKS document; ValueError when there are none (counts as a failed fetch)."""
    raw = data.get("keys") if isinstance(data, Mapping) else None
    if not isinstance(raw, list):
        raise ValueError("JWKS has no 'keys' list")
    keys: list[_Key] = []
    for jwk in raw:
        if not isinstance(jwk, dict):
            continue
        alg = _pinned_algorithm(jwk)
        if alg is None:
            continue
        kid = jwk.get("kid")
        if kid is not None and not isinstance(kid, str):
            continue
        try:
            keys.append(_Key(kid=kid, alg=alg, key=jwt.PyJWK(jwk, algorithm=alg).key))
        except jwt.PyJWTError:
            continue
    if not keys:
        raise ValueError("JWKS has no usable RS256/ES256 signing keys")
    return keys


class JwksCache:
    """The issuer's keys, cached for ``ttl`` seconds and served stale when a refresh fails.

    Fetch attempts (successful or not) are at least ``min_refetch`` seconds apart, so an outage or a flood of
    tokens with random ``kid``s costs the issuer at most one request per interval per process. Nothing is
    fetched until the first token needs a key.
    """

    def __init__(
        self,
        fetch: JwksFetch,
        *,
        ttl: float,
        min_refetch: float = JWKS_MIN_REFETCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._ttl = ttl
        self._min_refetch = min_refetch
        self._clock = clock
        self._keys: list[_Key] | None = None
        self._fetched_at = 0.0
        self._attempted_at: float | None = None
        self._lock = threading.Lock()

    def _refresh(self, now: float) -> bool:
        """One rate-limited fetch; True when it ran and replaced the keys. Caller holds the lock."""
        if self._attempted_at is not None and now - self._attempted_at < self._min_refetch:
            return False
        self._attempted_at = now
        try:
            keys = _parse_jwks(self._fetch())
        except Exception as exc:  # any failure: keep the stale keys
            log.warning(
                "JWKS refresh failed (%s); %s",
                type(exc).__name__,
                "serving stale keys" if self._keys else "no keys",
            )
            return False
        self._keys, self._fetched_at = keys, now
        return True

    def get(self, kid: str | None, alg: str) -> Any:
        """The key for ``kid`` verifying ``alg``; None if there is none, even after one allowed refetch."""
        with self._lock:
            now = self._clock()
            refreshed = False
            if self._keys is None or now - self._fetched_at >= self._ttl:
                refreshed = self._refresh(now)
            key = self._find(kid, alg)
            # An unknown kid may be a rotated-in key: one refetch per call, rate-limited by _refresh.
            if key is None and kid is not None and not refreshed and self._refresh(now):
                key = self._find(kid, alg)
            return key

    def _find(self, kid: str | None, alg: str) -> Any:
        if not self._keys:
            return None
        if kid is None:
            # Without a kid only an unambiguous key set is acceptable.
            candidates = [k for k in self._keys if k.alg == alg]
            return candidates[0].key if len(candidates) == 1 else None
        for k in self._keys:
            if k.kid == kid and k.alg == alg:
                return k.key
        return None


# --- Authenticator ----------------------------------------------------------------------------------------


def _bearer_token(headers: Mapping[str, str] | None) -> str:
    values = [v for k, v in (headers or {}).items() if isinstance(k, str) and k.lower() == "authorization"]
    if not values:
        raise Unauthenticated("missing bearer token")
    value = values[0]
    if any(v != value for v in values):
        raise Unauthenticated("invalid authorization header")
    parts = value.split() if isinstance(value, str) else []
    if len(parts) != 2 or parts[0].lower() != "bearer":
        raise Unauthenticated("missing bearer token")
    token = parts[1]
    if len(token) > MAX_TOKEN_BYTES:
        raise Unauthenticated("token too large")
    if not token.isascii() or not _TOKEN_SHAPE.fullmatch(token):
        raise Unauthenticated("invalid token")
    return token


def _role(value: Any) -> Role:
    """The role from a string claim, or from a group list (Cognito's ``cognito:groups``): lead first, then staff."""
    if isinstance(value, str):
        for role in ROLES:
            if value == role:
                return role
    elif isinstance(value, list):
        for role in reversed(ROLES):
            if role in value:
                return role
    raise NotPermitted("forbidden")


def _name(value: Any) -> str:
    """The display name claim, printable and bounded; anything else is no name (the sub is shown instead)."""
    if not isinstance(value, str):
        return ""
    return "".join(c for c in value if c.isprintable()).strip()[:MAX_NAME_CHARS]


def _customer_id(value: Any) -> int:
    """A positive integer, or its decimal string (Cognito custom claims are strings); nothing else."""
    if isinstance(value, bool):
        raise Unauthenticated("invalid token")
    if isinstance(value, int) and 0 < value <= _MAX_CUSTOMER_ID:
        return value
    if isinstance(value, str) and _CUSTOMER_ID_DIGITS.fullmatch(value) and int(value) <= _MAX_CUSTOMER_ID:
        return int(value)
    raise Unauthenticated("invalid token")


class Authenticator:
    """Verifies bearer tokens against Settings and returns the Principal.

    ``wiring.authenticator()`` keeps one per process, so the JWKS cache survives warm invocations.

    Construction does no network I/O; it fails fast when neither a JWKS URL nor an HS256 secret is set.
    ``jwks_fetch`` (returns the JWKS document) or ``jwks_client`` (a ``jwt.PyJWKClient``) and ``clock``
    (monotonic seconds, for the key cache) are injectable for tests.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        jwks_client: jwt.PyJWKClient | None = None,
        jwks_fetch: JwksFetch | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not settings.jwt_issuer or not settings.jwt_audience:
            raise ValueError("JWT_ISSUER and JWT_AUDIENCE must be set")
        self._settings = settings
        self._jwks: JwksCache | None = None
        self._secret: bytes | None = None
        if settings.jwt_jwks_url or jwks_client is not None or jwks_fetch is not None:
            if jwks_fetch is None:
                if jwks_client is None:
                    # The client is used only as a fetcher (its own caches off): ours serves stale keys.
                    jwks_client = jwt.PyJWKClient(settings.jwt_jwks_url, cache_jwk_set=False, timeout=3)
                jwks_fetch = jwks_client.fetch_data
            self._jwks = JwksCache(jwks_fetch, ttl=settings.jwks_cache_seconds, clock=clock)
            self._algorithms = _JWKS_ALGORITHMS
        elif settings.jwt_secret:
            self._secret = settings.jwt_secret.encode()
            self._algorithms = _HS_ALGORITHMS
        else:
            raise ValueError("set JWT_JWKS_URL (production) or JWT_SECRET (local/dev) to verify tokens")

    def authenticate(self, headers: Mapping[str, str] | None) -> Principal:
        """The verified Principal for a request's headers; Unauthenticated (401) or NotPermitted (403) otherwise."""
        claims = self._verify(_bearer_token(headers))
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub.strip():
            raise Unauthenticated("invalid token")
        role = _role(claims.get(self._settings.jwt_role_claim))
        if role in STAFF_ROLES:
            # Staff and leads act on no customer's behalf, whatever the token says.
            return Principal(sub=sub, role=role, customer_id=None, name=_name(claims.get("name")))
        return Principal(sub=sub, role=role, customer_id=_customer_id(claims.get(self._settings.jwt_customer_id_claim)))

    def _verify(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("invalid token") from None
        alg = header.get("alg")
        # Checked before choosing a key, so "none" and HS/RS confusion never reach a verifier.
        if not isinstance(alg, str) or alg not in self._algorithms:
            raise Unauthenticated("invalid token")
        key: Any
        if self._jwks is not None:
            kid = header.get("kid")
            if kid is not None and not isinstance(kid, str):
                raise Unauthenticated("invalid token")
            key = self._jwks.get(kid, alg)
            if key is None:
                raise Unauthenticated("invalid token")
        else:
            key = self._secret
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[alg],
                issuer=self._settings.jwt_issuer,  # a str: pyjwt compares it exactly
                audience=self._settings.jwt_audience,
                leeway=self._settings.jwt_leeway_seconds,
                options={
                    "require": REQUIRED_CLAIMS,
                    "verify_signature": True,
                    "verify_exp": True,
                    "verify_nbf": True,
                    "verify_iat": True,
                    "verify_iss": True,
                    "verify_aud": True,
                    "verify_sub": True,
                },
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("token expired") from None
        except (jwt.PyJWTError, ValueError, TypeError):
            raise Unauthenticated("invalid token") from None
        self._check_lifetime(claims)
        return claims

    def _check_lifetime(self, claims: Mapping[str, Any]) -> None:
        """Refuse a token minted to live longer than JWT_MAX_LIFETIME_SECONDS, however fresh: a leaked one
        would otherwise stay good until its far-off exp (pyjwt has checked both claims are numbers)."""
        try:
            lifetime = float(claims["exp"]) - float(claims["iat"])
        except (KeyError, TypeError, ValueError, OverflowError):
            raise Unauthenticated("invalid token") from None
        if not lifetime <= self._settings.jwt_max_lifetime_seconds:  # also refuses NaN
            raise Unauthenticated("token lifetime too long")


# --- Authorization helpers --------------------------------------------------------------------------------


def require_role(principal: Principal, role: Role) -> None:
    """NotPermitted (403) unless the principal has ``role``."""
    if principal.role != role:
        raise NotPermitted("forbidden")


def require_staff(principal: Principal) -> str:
    """The staff member's (or lead's) sub; NotPermitted (403) for anyone else."""
    if principal.role not in STAFF_ROLES:
        raise NotPermitted("forbidden")
    return principal.sub


def require_customer(principal: Principal) -> int:
    """The customer id every tool is keyed by; NotPermitted for a non-customer."""
    require_role(principal, "customer")
    if principal.customer_id is None:  # Authenticator never builds this; guards hand-made Principals
        raise Unauthenticated("invalid token")
    return principal.customer_id
