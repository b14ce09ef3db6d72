"""JWT verification: the 401/403 contract, algorithm pinning, exact iss/aud, claim shapes, JWKS caching."""

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
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from devstack.tokens import DEFAULT_DEV_SECRET, main, mint_token
from support_agent import auth as auth_module
from support_agent.auth import (
    JWKS_MIN_REFETCH_SECONDS,
    MAX_TOKEN_BYTES,
    Authenticator,
    Principal,
    require_customer,
    require_role,
)
from support_agent.config import load_settings
from support_agent.contract import error_body, status_and_code
from support_agent.errors import NotPermitted, Unauthenticated

SECRET = DEFAULT_DEV_SECRET
ISS = "support-agent-local"
AUD = "support-agent"


def hs_auth(**env: str) -> Authenticator:
    return Authenticator(load_settings({"JWT_SECRET": SECRET, **env}))


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def customer_token(**kw: Any) -> str:
    return mint_token("customer-7", "customer", 7, secret=SECRET, **kw)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def raw_token(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}.{b64(signature)}"


def hs_raw(claims: dict[str, Any], alg: str = "HS256", key: bytes = SECRET.encode()) -> str:
    """Signs without pyjwt's encode-side checks, to build tokens a real signer would refuse to."""
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
    signing_input = f"{b64(json.dumps({'alg': alg, 'typ': 'JWT'}).encode())}.{b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{b64(hmac.new(key, signing_input.encode(), digest).digest())}"


def good_claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {"sub": "customer-7", "role": "customer", "customer_id": 7, "iss": ISS, "aud": AUD}
    claims |= {"iat": now, "exp": now + 600}
    claims.update(over)
    return claims


def assert_401(authenticator: Authenticator, headers: dict[str, str], message: str | None = None) -> None:
    with pytest.raises(Unauthenticated) as err:
        authenticator.authenticate(headers)
    assert status_and_code(err.value) == (401, "unauthorized")
    token = headers.get("authorization", "").removeprefix("Bearer ")
    if len(token) > 10:
        assert token not in err.value.message
    if message is not None:
        assert err.value.message == message


# --- HS256 happy paths and header handling ----------------------------------------------------------------


def test_valid_customer_token() -> None:
    assert hs_auth().authenticate(bearer(customer_token())) == Principal("customer-7", "customer", 7)


def test_valid_lead_token_carries_no_customer_id() -> None:
    token = mint_token("lead-1", "support_lead", 7, secret=SECRET)
    assert hs_auth().authenticate(bearer(token)) == Principal("lead-1", "support_lead", None)


@pytest.mark.parametrize("name", ["authorization", "Authorization", "AUTHORIZATION"])
@pytest.mark.parametrize("scheme", ["Bearer", "bearer"])
def test_header_name_and_scheme_case_insensitive(name: str, scheme: str) -> None:
    principal = hs_auth().authenticate({name: f"{scheme} {customer_token()}", "content-type": "x"})
    assert principal.customer_id == 7


@pytest.mark.parametrize("headers", [{}, {"x-other": "Bearer abc"}, None])
def test_missing_header(headers: dict[str, str] | None) -> None:
    with pytest.raises(Unauthenticated, match="missing bearer token"):
        hs_auth().authenticate(headers)


@pytest.mark.parametrize("value", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "Token abc.def.ghi", "abc.def.ghi"])
def test_non_bearer(value: str) -> None:
    assert_401(hs_auth(), {"authorization": value}, "missing bearer token")


def test_bearer_with_extra_parts_rejected() -> None:
    assert_401(hs_auth(), {"authorization": f"Bearer {customer_token()} extra"})


def test_conflicting_duplicate_authorization_headers() -> None:
    headers = {"Authorization": f"Bearer {customer_token()}", "authorization": "Bearer a.b.c"}
    assert_401(hs_auth(), headers)


@pytest.mark.parametrize("token", ["not-a-jwt", "a.b", "a.b.c.d", "é.b.c", "....", "a..c"])
def test_malformed_token(token: str) -> None:
    assert_401(hs_auth(), bearer(token), "invalid token")


# --- algorithms and keys -------------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
@pytest.mark.parametrize("signature", [b"", b"sig"])
def test_alg_none_rejected(alg: str, signature: bytes) -> None:
    token = raw_token({"alg": alg, "typ": "JWT"}, good_claims(), signature)
    assert_401(hs_auth(), bearer(token))


def test_header_without_alg_rejected() -> None:
    assert_401(hs_auth(), bearer(raw_token({"typ": "JWT"}, good_claims(), b"sig")))


@pytest.mark.parametrize("alg", ["HS384", "HS512"])
def test_other_hs_algorithms_rejected(alg: str) -> None:
    assert hs_auth().authenticate(bearer(hs_raw(good_claims()))).customer_id == 7  # the helper signs correctly
    assert_401(hs_auth(), bearer(hs_raw(good_claims(), alg)))


def test_wrong_secret() -> None:
    token = mint_token("customer-7", "customer", 7, secret="another-secret-that-is-32-bytes-long!!")
    assert_401(hs_auth(), bearer(token), "invalid token")


def test_tampered_payload() -> None:
    header, _, signature = customer_token().split(".")
    forged = f"{header}.{b64(json.dumps(good_claims(customer_id=8)).encode())}.{signature}"
    assert_401(hs_auth(), bearer(forged))


def test_rs256_token_rejected_in_hs_mode(rsa_key: rsa.RSAPrivateKey) -> None:
    token = jwt.encode(good_claims(), rsa_key, algorithm="RS256")
    assert_401(hs_auth(), bearer(token))


def test_hs_rs_confusion_public_key_as_hmac_secret(rsa_key: rsa.RSAPrivateKey) -> None:
    """The classic attack: HS256 signed with the issuer's public RSA key, hoping it is used as the secret."""
    pem = rsa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    payload = b64(json.dumps(good_claims()).encode())
    signature = hmac.new(pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    token = f"{header}.{payload}.{b64(signature)}"
    fetch = Fetcher(jwks_of(rsa_key))
    assert_401(jwks_auth(fetch), bearer(token))
    assert fetch.calls == 0  # rejected on the header, before any key is looked up


def test_jwks_mode_ignores_hs_secret_even_if_configured(rsa_key: rsa.RSAPrivateKey) -> None:
    env = {"JWT_SECRET": SECRET, "JWT_JWKS_URL": "https://issuer.example/jwks.json"}
    authenticator = Authenticator(load_settings(env), jwks_fetch=Fetcher(jwks_of(rsa_key)))
    assert_401(authenticator, bearer(customer_token()))


# --- time claims ----------------------------------------------------------------------------------------


def test_expired() -> None:
    token = customer_token(now=int(time.time()) - 7200, ttl_seconds=3600)
    assert_401(hs_auth(), bearer(token), "token expired")


def test_expired_within_leeway_accepted() -> None:
    token = customer_token(now=int(time.time()) - 3610, ttl_seconds=3600)  # 10 s past exp, leeway 30 s
    assert hs_auth().authenticate(bearer(token)).customer_id == 7


def test_nbf_in_future_rejected() -> None:
    token = customer_token(extra={"nbf": int(time.time()) + 300})
    assert_401(hs_auth(), bearer(token))


def test_nbf_within_leeway_accepted() -> None:
    token = customer_token(extra={"nbf": int(time.time()) + 10})
    assert hs_auth().authenticate(bearer(token)).customer_id == 7


def test_iat_in_future_rejected() -> None:
    token = customer_token(now=int(time.time()) + 300)
    assert_401(hs_auth(), bearer(token))


@pytest.mark.parametrize("claim", ["exp", "iat", "nbf"])
def test_non_numeric_time_claims_rejected(claim: str) -> None:
    assert_401(hs_auth(), bearer(customer_token(extra={claim: "soon"})))


# --- lifetime (exp - iat) ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ttl", [86_401, 30 * 86_400, 100 * 365 * 86_400])
def test_a_token_minted_to_live_too_long_is_refused(ttl: int) -> None:
    """Fresh and well signed, yet a leaked one would be good for years: JWT_MAX_LIFETIME_SECONDS (a day)."""
    assert_401(hs_auth(), bearer(customer_token(ttl_seconds=ttl)), "token lifetime too long")


def test_lifetime_up_to_the_maximum_is_accepted_and_the_maximum_is_configurable() -> None:
    assert hs_auth().authenticate(bearer(customer_token(ttl_seconds=86_400))).customer_id == 7
    hour = hs_auth(JWT_MAX_LIFETIME_SECONDS="3600")
    assert hour.authenticate(bearer(customer_token(ttl_seconds=3600))).customer_id == 7
    assert_401(hour, bearer(customer_token(ttl_seconds=3601)), "token lifetime too long")
    # A backdated iat cannot stretch the window: the lifetime is exp - iat, whatever now is.
    now = int(time.time())
    assert_401(hour, bearer(hs_raw(good_claims(iat=now - 10, exp=now + 3600))), "token lifetime too long")
    assert_401(hour, bearer(hs_raw(good_claims(iat=now, exp=now + 3600.5))), "token lifetime too long")


def test_jwks_tokens_have_the_same_lifetime_limit(rsa_key: rsa.RSAPrivateKey) -> None:
    authenticator = jwks_auth(Fetcher(jwks_of(rsa_key)))
    now = int(time.time())
    assert authenticator.authenticate(bearer(signed(rsa_key, "RS256", "rsa-1", iat=now, exp=now + 3600))).customer_id
    far = signed(rsa_key, "RS256", "rsa-1", iat=now, exp=now + 10 * 365 * 86_400)
    assert_401(authenticator, bearer(far), "token lifetime too long")


def test_demo_tokens_stay_within_the_default_lifetime() -> None:
    from devstack.local import demo_tokens

    tokens = demo_tokens(SECRET, ISS, AUD, simulated=True)
    authenticator = hs_auth()
    for entry in tokens["customers"] + tokens["leads"] + tokens["staff"]:
        authenticator.authenticate(bearer(entry["token"]))  # 12 h: accepted


# --- required claims, exact issuer and audience ---------------------------------------------------------


@pytest.mark.parametrize("claim", ["exp", "iat", "sub", "iss", "aud"])
def test_missing_required_claim(claim: str) -> None:
    assert_401(hs_auth(), bearer(customer_token(extra={claim: None})), "invalid token")


@pytest.mark.parametrize("sub", ["", "   ", 42, ["customer-7"]])
def test_bad_sub(sub: Any) -> None:
    assert_401(hs_auth(), bearer(jwt.encode(good_claims(sub=sub), SECRET, algorithm="HS256")))


@pytest.mark.parametrize(
    "issuer",
    ["support-agent-local-evil", "support-agent-loc", "xsupport-agent-local", "SUPPORT-AGENT-LOCAL", "", "s"],
)
def test_issuer_must_match_exactly(issuer: str) -> None:
    assert_401(hs_auth(), bearer(customer_token(issuer=issuer)))


def test_issuer_list_claim_rejected() -> None:
    assert_401(hs_auth(), bearer(hs_raw(good_claims(iss=[ISS]))))


@pytest.mark.parametrize("audience", ["support-agent-evil", "support-agen", "upport-agent", "SUPPORT-AGENT", "s"])
def test_audience_must_match_exactly(audience: str) -> None:
    assert_401(hs_auth(), bearer(customer_token(audience=audience)))


def test_audience_list_needs_an_exact_member() -> None:
    assert_401(hs_auth(), bearer(customer_token(extra={"aud": ["other", "support-agent-x"]})))
    accepted = customer_token(extra={"aud": ["other", AUD]})
    assert hs_auth().authenticate(bearer(accepted)).customer_id == 7


def test_configured_issuer_and_audience() -> None:
    authenticator = hs_auth(JWT_ISSUER="https://idp.example/", JWT_AUDIENCE="app-123")
    token = customer_token(issuer="https://idp.example/", audience="app-123")
    assert authenticator.authenticate(bearer(token)).customer_id == 7
    assert_401(authenticator, bearer(customer_token()))


# --- roles and customer_id -------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["admin", "Customer", "support-lead", "", 1, ["admins"], None])
def test_unknown_role_is_forbidden(role: Any) -> None:
    token = customer_token(extra={"role": role})  # None removes the claim
    with pytest.raises(NotPermitted) as err:
        hs_auth().authenticate(bearer(token))
    assert status_and_code(err.value)[0] == 403


def test_customer_without_customer_id() -> None:
    token = mint_token("customer-7", "customer", secret=SECRET)
    assert_401(hs_auth(), bearer(token))


def test_customer_id_as_digit_string() -> None:
    token = mint_token("customer-7", "customer", secret=SECRET, extra={"customer_id": "42"})
    assert hs_auth().authenticate(bearer(token)) == Principal("customer-7", "customer", 42)


@pytest.mark.parametrize(
    "value",
    [7.0, 7.5, True, False, -3, 0, "-3", "7.5", "007", " 7", "7 ", "", "٣", "1e3", 10**18, [7], {"id": 7}],
)
def test_bad_customer_id(value: Any) -> None:
    token = mint_token("customer-7", "customer", secret=SECRET, extra={"customer_id": value})
    assert_401(hs_auth(), bearer(token))


def test_oversized_token_rejected_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    token = customer_token(extra={"pad": "x" * MAX_TOKEN_BYTES})

    def boom(*_: Any, **__: Any) -> Any:
        raise AssertionError("oversized token was parsed")

    monkeypatch.setattr(auth_module.jwt, "get_unverified_header", boom)
    monkeypatch.setattr(auth_module.jwt, "decode", boom)
    assert_401(hs_auth(), bearer(token), "token too large")


def test_error_messages_never_echo_the_token() -> None:
    for token in [customer_token(issuer="evil"), customer_token(now=1), "a" * 40 + ".b.c"]:
        with pytest.raises(Unauthenticated) as err:
            hs_auth().authenticate(bearer(token))
        assert token not in err.value.message and token not in json.dumps(error_body(err.value))


# --- helpers ---------------------------------------------------------------------------------------------


def test_require_customer_and_role() -> None:
    customer = Principal("customer-7", "customer", 7)
    lead = Principal("lead-1", "support_lead")
    assert require_customer(customer) == 7
    with pytest.raises(NotPermitted):
        require_customer(lead)
    require_role(lead, "support_lead")
    with pytest.raises(NotPermitted):
        require_role(customer, "support_lead")
    with pytest.raises(NotPermitted):
        require_role(lead, "customer")
    with pytest.raises(Unauthenticated):
        require_customer(Principal("odd", "customer", None))


def test_construction_needs_a_secret_or_jwks() -> None:
    with pytest.raises(ValueError):
        Authenticator(load_settings({}))


def test_settings_reject_short_secret() -> None:
    with pytest.raises(ValueError):
        load_settings({"JWT_SECRET": "short"})


def test_the_process_authenticator_uses_settings_and_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from support_agent import wiring

    monkeypatch.setenv("JWT_SECRET", SECRET)
    wiring.reset()
    assert wiring.authenticator().authenticate(bearer(customer_token())).customer_id == 7
    assert wiring.authenticator() is wiring.authenticator()  # its JWKS cache outlives the request
    wiring.reset()
    monkeypatch.setenv("JWT_SECRET", "another-secret-of-at-least-32-bytes-0123")
    with pytest.raises(Unauthenticated):  # reset: the new settings' secret, not the old one's
        wiring.authenticator().authenticate(bearer(customer_token()))


def test_mint_token_and_cli(capsys: pytest.CaptureFixture[str]) -> None:
    claims = jwt.decode(
        mint_token("s", "customer", 1, secret=SECRET, now=1000, ttl_seconds=5, extra={"x": 1, "role": None}),
        SECRET,
        algorithms=["HS256"],
        options={"verify_signature": True, "verify_exp": False, "verify_iat": False},
        audience=AUD,
    )
    assert claims == {"sub": "s", "iss": ISS, "aud": AUD, "iat": 1000, "exp": 1005, "customer_id": 1, "x": 1}
    assert len(DEFAULT_DEV_SECRET.encode()) >= 32 and "LOCAL" in DEFAULT_DEV_SECRET

    main(["--secret", SECRET])
    lines = dict(line.split("=", 1) for line in capsys.readouterr().out.strip().splitlines())
    authenticator = hs_auth()
    assert authenticator.authenticate(bearer(lines["CUSTOMER_7_TOKEN"])) == Principal("customer-7", "customer", 7)
    assert authenticator.authenticate(bearer(lines["CUSTOMER_8_TOKEN"])) == Principal("customer-8", "customer", 8)
    assert authenticator.authenticate(bearer(lines["LEAD_TOKEN"])) == Principal(
        "lead-1", "support_lead", None, "Morgan"
    )
    assert authenticator.authenticate(bearer(lines["STAFF_TOKEN"])) == Principal(
        "agent-1", "support_staff", None, "Riley"
    )


# --- JWKS ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def jwk_of(key: Any, kid: str) -> dict[str, Any]:
    public = key.public_key()
    if isinstance(key, rsa.RSAPrivateKey):
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(public, as_dict=True)
    else:
        jwk = jwt.algorithms.ECAlgorithm.to_jwk(public, as_dict=True)
    return {**jwk, "kid": kid, "use": "sig"}


def jwks_of(rsa_key: Any = None, ec_key: Any = None) -> dict[str, Any]:
    keys = []
    if rsa_key is not None:
        keys.append(jwk_of(rsa_key, "rsa-1"))
    if ec_key is not None:
        keys.append(jwk_of(ec_key, "ec-1"))
    return {"keys": keys}


class Fetcher:
    """A JWKS endpoint stand-in: counts calls, can be made to fail."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.calls = 0
        self.fail = False

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.fail:
            raise jwt.PyJWKClientConnectionError("issuer down")
        return self.document


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def jwks_auth(fetch: Fetcher, clock: Clock | None = None, env: dict[str, str] | None = None) -> Authenticator:
    settings = load_settings(
        {"JWT_JWKS_URL": "https://issuer.example/jwks.json", "JWKS_CACHE_SECONDS": "300", **(env or {})}
    )
    return Authenticator(settings, jwks_fetch=fetch, clock=clock or Clock())


def signed(key: Any, alg: str, kid: str | None, **over: Any) -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(good_claims(**over), key, algorithm=alg, headers=headers)


def test_jwks_rs256_and_es256(rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey) -> None:
    fetch = Fetcher(jwks_of(rsa_key, ec_key))
    authenticator = jwks_auth(fetch)
    assert authenticator.authenticate(bearer(signed(rsa_key, "RS256", "rsa-1"))).customer_id == 7
    assert authenticator.authenticate(bearer(signed(ec_key, "ES256", "ec-1"))).customer_id == 7
    assert fetch.calls == 1  # cached


def test_no_network_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake_fetch(self: jwt.PyJWKClient) -> Any:
        calls.append(self.uri)
        raise jwt.PyJWKClientConnectionError("no network in tests")

    monkeypatch.setattr(jwt.PyJWKClient, "fetch_data", fake_fetch)
    authenticator = Authenticator(load_settings({"JWT_JWKS_URL": "https://issuer.example/jwks.json"}))
    assert calls == []
    assert_401(authenticator, bearer(raw_token({"alg": "RS256", "kid": "k"}, good_claims(), b"sig")))
    assert calls == ["https://issuer.example/jwks.json"]  # one attempt: the kid refetch is rate-limited


def test_injected_pyjwkclient_is_used_as_fetcher(rsa_key: rsa.RSAPrivateKey, monkeypatch: pytest.MonkeyPatch) -> None:
    client = jwt.PyJWKClient("https://issuer.example/jwks.json")
    monkeypatch.setattr(client, "fetch_data", lambda: jwks_of(rsa_key))
    authenticator = Authenticator(
        load_settings({"JWT_JWKS_URL": "https://issuer.example/jwks.json"}), jwks_client=client
    )
    assert authenticator.authenticate(bearer(signed(rsa_key, "RS256", "rsa-1"))).customer_id == 7


def test_jwks_alg_must_match_key_type(rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey) -> None:
    authenticator = jwks_auth(Fetcher(jwks_of(rsa_key, ec_key)))
    assert_401(authenticator, bearer(signed(ec_key, "ES256", "rsa-1")))  # ES256 header on an RSA kid
    assert_401(authenticator, bearer(signed(rsa_key, "RS256", "ec-1")))
    assert_401(authenticator, bearer(signed(rsa_key, "RS384", "rsa-1")))  # not pinned


def test_jwks_wrong_key_same_kid(rsa_key: rsa.RSAPrivateKey) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert_401(jwks_auth(Fetcher(jwks_of(rsa_key))), bearer(signed(other, "RS256", "rsa-1")))


def test_jwks_hs_key_in_set_is_never_used() -> None:
    secret = b"a-symmetric-key-published-in-a-jwks!!"
    fetch = Fetcher({"keys": [{"kty": "oct", "kid": "hs", "k": b64(secret)}]})
    authenticator = jwks_auth(fetch)
    assert_401(authenticator, bearer(jwt.encode(good_claims(), secret, algorithm="HS256", headers={"kid": "hs"})))


def test_jwks_checks_claims_too(rsa_key: rsa.RSAPrivateKey) -> None:
    authenticator = jwks_auth(Fetcher(jwks_of(rsa_key)))
    assert_401(authenticator, bearer(signed(rsa_key, "RS256", "rsa-1", iss="support-agent-local-evil")))
    assert_401(authenticator, bearer(signed(rsa_key, "RS256", "rsa-1", exp=int(time.time()) - 3600)), "token expired")


def test_jwks_token_without_kid(rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey) -> None:
    assert jwks_auth(Fetcher(jwks_of(rsa_key))).authenticate(bearer(signed(rsa_key, "RS256", None))).customer_id == 7
    second_rsa = {"keys": [jwk_of(rsa_key, "a"), jwk_of(rsa.generate_private_key(65537, 2048), "b")]}
    assert_401(jwks_auth(Fetcher(second_rsa)), bearer(signed(rsa_key, "RS256", None)))  # ambiguous


def test_jwks_stale_keys_served_when_refresh_fails(rsa_key: rsa.RSAPrivateKey) -> None:
    fetch, clock = Fetcher(jwks_of(rsa_key)), Clock()
    authenticator = jwks_auth(fetch, clock)
    token = bearer(signed(rsa_key, "RS256", "rsa-1"))
    authenticator.authenticate(token)
    clock.now += 299
    authenticator.authenticate(token)
    assert fetch.calls == 1

    fetch.fail = True
    clock.now += 2  # cache expired
    assert authenticator.authenticate(token).customer_id == 7  # stale keys
    assert fetch.calls == 2
    clock.now += 1
    authenticator.authenticate(token)
    assert fetch.calls == 2  # failed refreshes are rate-limited too
    clock.now += JWKS_MIN_REFETCH_SECONDS
    authenticator.authenticate(token)
    assert fetch.calls == 3

    fetch.fail = False
    clock.now += JWKS_MIN_REFETCH_SECONDS
    authenticator.authenticate(token)
    assert fetch.calls == 4  # recovered
    clock.now += 100
    authenticator.authenticate(token)
    assert fetch.calls == 4  # fresh again


def test_jwks_bad_document_keeps_stale_keys(rsa_key: rsa.RSAPrivateKey) -> None:
    fetch, clock = Fetcher(jwks_of(rsa_key)), Clock()
    authenticator = jwks_auth(fetch, clock)
    token = bearer(signed(rsa_key, "RS256", "rsa-1"))
    authenticator.authenticate(token)
    documents: list[dict[str, Any]] = [{"keys": []}, {"nope": 1}, {"keys": [{"kty": "oct", "k": "abc"}]}]
    for document in documents:
        fetch.document = document
        clock.now += 400
        assert authenticator.authenticate(token).customer_id == 7


def test_jwks_first_fetch_failure_is_401(rsa_key: rsa.RSAPrivateKey) -> None:
    fetch = Fetcher(jwks_of(rsa_key))
    fetch.fail = True
    assert_401(jwks_auth(fetch), bearer(signed(rsa_key, "RS256", "rsa-1")))
    assert fetch.calls == 1


def test_unknown_kid_refetch_is_bounded(rsa_key: rsa.RSAPrivateKey) -> None:
    fetch, clock = Fetcher(jwks_of(rsa_key)), Clock()
    authenticator = jwks_auth(fetch, clock)
    authenticator.authenticate(bearer(signed(rsa_key, "RS256", "rsa-1")))
    assert fetch.calls == 1

    clock.now += JWKS_MIN_REFETCH_SECONDS
    assert_401(authenticator, bearer(signed(rsa_key, "RS256", "random-0")))
    assert fetch.calls == 2  # one refetch for the unknown kid
    for i in range(1, 50):  # a flood of random kids
        clock.now += 0.1
        assert_401(authenticator, bearer(signed(rsa_key, "RS256", f"random-{i}")))
    assert fetch.calls == 2
    clock.now += JWKS_MIN_REFETCH_SECONDS
    assert_401(authenticator, bearer(signed(rsa_key, "RS256", "random-x")))
    assert fetch.calls == 3
    # Known keys keep working throughout.
    assert authenticator.authenticate(bearer(signed(rsa_key, "RS256", "rsa-1"))).customer_id == 7


def test_rotated_in_key_found_by_refetch(rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey) -> None:
    fetch, clock = Fetcher(jwks_of(rsa_key)), Clock()
    authenticator = jwks_auth(fetch, clock)
    authenticator.authenticate(bearer(signed(rsa_key, "RS256", "rsa-1")))
    fetch.document = jwks_of(rsa_key, ec_key)
    clock.now += JWKS_MIN_REFETCH_SECONDS
    assert authenticator.authenticate(bearer(signed(ec_key, "ES256", "ec-1"))).customer_id == 7
    assert fetch.calls == 2


def test_cognito_style_claims(rsa_key: rsa.RSAPrivateKey) -> None:
    env = {"JWT_ROLE_CLAIM": "cognito:groups", "JWT_CUSTOMER_ID_CLAIM": "custom:customer_id"}
    authenticator = jwks_auth(Fetcher(jwks_of(rsa_key)), env=env)

    def token(**claims: Any) -> dict[str, str]:
        base = {"role": None, "customer_id": None, "sub": "3f1c-uuid", **claims}
        payload = {k: v for k, v in good_claims(**base).items() if v is not None}
        return bearer(jwt.encode(payload, rsa_key, algorithm="RS256", headers={"kid": "rsa-1"}))

    customer = token(**{"cognito:groups": ["customer"], "custom:customer_id": "42"})
    assert authenticator.authenticate(customer) == Principal("3f1c-uuid", "customer", 42)
    lead = token(**{"cognito:groups": ["customer", "support_lead"]})
    assert authenticator.authenticate(lead) == Principal("3f1c-uuid", "support_lead", None)
    # The default claim names are not consulted once configured otherwise.
    with pytest.raises(NotPermitted):
        authenticator.authenticate(token(role="customer", customer_id=42))
    with pytest.raises(NotPermitted):
        authenticator.authenticate(token(**{"cognito:groups": ["admins"], "custom:customer_id": "42"}))
    assert_401(authenticator, token(**{"cognito:groups": ["customer"], "custom:customer_id": "4.2"}))
    assert_401(authenticator, token(**{"cognito:groups": ["customer"]}))
