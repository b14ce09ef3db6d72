"""api/http.py without a stack: what reaches Powertools, and that its own error bodies never come back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.tokens import DEFAULT_DEV_SECRET, mint_token
from support_agent import wiring
from support_agent.api import chat_routes, lead_routes
from support_agent.api.http import body_problem, build_resolver, canonical_content_type


def event(method: str, path: str, body: str | None, content_type: str | None, token: str = "") -> dict[str, Any]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    if content_type is not None:
        headers["content-type"] = content_type
    out: dict[str, Any] = {
        "version": "2.0",
        "routeKey": f"{method} {path}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": headers,
        "requestContext": {"http": {"method": method, "path": path}, "requestId": "unit", "stage": "$default"},
        "isBase64Encoded": False,
    }
    if body is not None:
        out["body"] = body
    return out


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("JWT_SECRET", DEFAULT_DEV_SECRET)
    wiring.reset()
    yield DEFAULT_DEV_SECRET
    wiring.reset()


@pytest.mark.parametrize(
    ("ctype", "route", "who"),
    [
        ("text/plain", "/api/chat", ("customer-7", "customer", 7)),
        ("Application/JSON", "/api/chat", ("customer-7", "customer", 7)),
        (
            "application/vnd.api+json",
            "/api/approvals/apr_01JF3R0000000000000000000Z/reject",
            ("lead-1", "support_lead", None),
        ),
    ],
)
def test_powertools_never_answers_its_own_415(secret: str, ctype: str, route: str, who: tuple[Any, ...]) -> None:
    """Even a media type that got past body_problem (or a resolver called without `handle`) is our 400."""
    app = build_resolver(wiring.authenticator)
    app.include_router(chat_routes.router)
    app.include_router(lead_routes.router)
    token = mint_token(*who, secret=secret)
    out = app.resolve(event("POST", route, json.dumps({"unexpected": 1}), ctype, token), None)
    assert out["statusCode"] == 400, out
    assert json.loads(out["body"]) == {
        "error": {"code": "bad_request", "message": "content-type: send the body as application/json"}
    }


@pytest.mark.parametrize(
    ("declared", "sent"),
    [
        ("Application/JSON", "application/json"),
        ("application/problem+json; charset=utf-8", "application/json"),
        ("application/json", "application/json"),
    ],
)
def test_accepted_media_types_reach_powertools_as_application_json(declared: str, sent: str) -> None:
    raw = event("POST", "/api/chat", "{}", None)
    raw["headers"]["Content-Type"] = declared  # any spelling of the header name, too
    assert body_problem(raw) is None
    headers = canonical_content_type(raw)["headers"]
    assert [v for k, v in headers.items() if k.lower() == "content-type"] == [sent]
    assert raw["headers"]["Content-Type"] == declared, "the caller's event is left as it was"


def test_two_content_types_must_both_be_json() -> None:
    raw = event("POST", "/api/chat", "{}", "application/json")
    raw["headers"]["Content-Type"] = "text/plain"
    assert body_problem(raw) == "content-type: send the body as application/json"


def test_no_content_type_is_json_and_a_get_may_declare_anything() -> None:
    assert body_problem(event("POST", "/api/chat", '{"message": "hi"}', None)) is None
    get = event("GET", "/api/conversations", None, "text/html")
    assert body_problem(get) is None and canonical_content_type(get) is get
