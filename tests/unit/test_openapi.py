"""docs/openapi.json: generated from the routes, never stale, true to the contract and the template."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from devstack import apidocs
from devstack.stack import REPO_ROOT, http_routes, load_template
from support_agent.api import openapi
from support_agent.contract import CONTRACT
from support_agent.store.approvals import STATUSES

COMMITTED = REPO_ROOT / "docs" / "openapi.json"
METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return openapi.document()


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m.upper(), p, op) for p, item in doc["paths"].items() for m, op in item.items() if m in METHODS]


def shape(path: str) -> str:
    """/api/approvals/{approval_id} and /api/approvals/{id} are the same route."""
    return re.sub(r"\{[^}]+\}", "{}", path)


def test_the_committed_document_is_the_generated_one() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == openapi.render(), (
        "docs/openapi.json is stale: run `make openapi` and commit it"
    )


def test_check_mode_notices_a_stale_file(tmp_path: Path) -> None:
    fresh, stale = tmp_path / "fresh.json", tmp_path / "stale.json"
    rendered = COMMITTED.read_text(encoding="utf-8")  # equal to render(): the test above
    fresh.write_text(rendered, encoding="utf-8")
    stale.write_text(rendered.replace('"/api/chat"', '"/api/talk"'), encoding="utf-8")
    assert openapi.main(["--check", str(fresh)]) == 0
    assert openapi.main(["--check", str(stale)]) == 1


# Stripe's callback, not a client's route: signed by Stripe, no JWT (docs/PAYMENTS.md "Webhooks").
NOT_CLIENT_ROUTES = {("POST", "/webhooks/stripe")}


def test_every_template_route_is_documented_and_nothing_else(doc: dict[str, Any]) -> None:
    template = {(r.method, shape(r.path)) for r in http_routes(load_template())} - NOT_CLIENT_ROUTES
    documented = {(m, shape(p)) for m, p, _ in operations(doc)}
    assert documented == template


# McpFunction's answers the MCP SDK gives, outside our contract's table: GET /mcp is only ever a 405 (no
# server-initiated stream), the SDK's own 406 for an Accept it cannot serve, and its JSON-RPC error bodies
# for a 400 (a parse error, an invalid request, a batch). Its other errors (401, 403, 413, 429) are ours.
MCP_STATUSES = {("GET", "/mcp"): {405}, ("POST", "/mcp"): {405, 406}}
JSONRPC = {"$ref": "#/components/schemas/JsonRpcMessage"}


# The routes taking an Idempotency-Key: a customer's message, and a person's reply.
KEYED = {("POST", "/api/chat"), ("POST", "/api/handoffs/{handoff_id}/messages")}


def test_errors_follow_the_contract(doc: dict[str, Any]) -> None:
    codes = {status for status, _code in CONTRACT.values()}
    for method, path, op in operations(doc):
        statuses = {int(s) for s in op["responses"]}
        if (method, path) == ("GET", "/mcp"):
            assert statuses == {405} and op["responses"]["405"]["headers"]["Allow"]
            continue
        if (method, path) in KEYED:  # their one 422: a key reused with another body
            assert "idempotency_key_reused" in op["responses"]["422"]["description"]
        else:
            assert 422 not in statuses, f"{method} {path}: the contract answers 400, never 422"
        assert statuses & {200, 201, 202}, f"{method} {path}: no success response"
        for status, response in op["responses"].items():
            if int(status) < 400:
                assert "$ref" in json.dumps(response["content"]), f"{method} {path} {status}: undocumented body"
                continue
            if int(status) in MCP_STATUSES.get((method, path), set()) and "content" not in response:
                continue
            assert int(status) in codes | MCP_STATUSES.get((method, path), set()), (method, path, status)
            schema = response["content"]["application/json"]["schema"]
            if (method, path, status) == ("POST", "/mcp", "400"):
                assert schema == JSONRPC  # the SDK's JSON-RPC error
                continue
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}
            if int(status) in (429, 503):
                assert "Retry-After" in response["headers"], (method, path, status)
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    assert schemas["ErrorBody"]["required"] == ["error"]
    chat = doc["paths"]["/api/chat"]["post"]["responses"]
    assert {"400", "401", "404", "409", "413", "429", "502", "503"} <= set(chat)
    assert "rate_limited" in chat["429"]["description"] and "token_budget_exhausted" in chat["429"]["description"]


# Public: the health check, /mcp's RFC 9728 metadata (a client reads it to learn how to get a token), and
# GET /mcp, a 405 for anyone (nothing is served there, so nothing to authenticate for).
PUBLIC = {("GET", "/api/health"), ("GET", "/.well-known/oauth-protected-resource"), ("GET", "/mcp")}


def test_bearer_jwt_everywhere_but_health(doc: dict[str, Any]) -> None:
    assert doc["components"]["securitySchemes"]["bearerJwt"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": doc["components"]["securitySchemes"]["bearerJwt"]["description"],
    }
    assert doc["security"] == [{"bearerJwt": []}]
    for method, path, op in operations(doc):
        if (method, path) in PUBLIC:
            assert op["security"] == [], f"{method} {path} is public"
            assert "401" not in op["responses"]
        else:
            assert "security" not in op, f"{method} {path} must inherit the bearer requirement"
            assert "401" in op["responses"], f"{method} {path}"


def test_request_models_refuse_unknown_fields(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    chat = schemas["ChatRequest"]
    assert chat["additionalProperties"] is False  # a customerId in the body is a 400
    assert chat["required"] == ["message"]
    assert chat["properties"]["conversationId"]["anyOf"][0]["pattern"].startswith("^conv_")
    for name in ("RejectRequest", "CloseRequest", "EraseRequest"):
        assert schemas[name]["additionalProperties"] is False, name
    erase = doc["paths"]["/api/customers/{customer_id}/erase"]["post"]
    (param,) = erase["parameters"]
    assert (param["in"], param["schema"]["type"], param["schema"]["minimum"]) == ("path", "integer", 1)


def test_response_models_describe_the_views(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    ok = {
        f"{m} {p}": op["responses"]["200"]["content"]["application/json"]["schema"]
        for m, p, op in operations(doc)
        if (m, p) != ("GET", "/mcp")  # only ever 405 (test_errors_follow_the_contract)
        and (m, p) != ("POST", "/api/handoffs/{handoff_id}/messages")  # 201 (test_a_reply_is_created)
    }
    assert ok["POST /api/chat"] == {"$ref": "#/components/schemas/ChatResponse"}
    assert ok["GET /api/conversations/{conversation_id}"] == {"$ref": "#/components/schemas/ConversationView"}
    assert ok["POST /api/customers/{customer_id}/erase"] == {"$ref": "#/components/schemas/ErasureResult"}
    approve = doc["paths"]["/api/approvals/{approval_id}/approve"]["post"]["responses"]
    assert approve["202"]["content"] == approve["200"]["content"]
    assert set(schemas["ChatResponse"]["required"]) >= {"conversationId", "reply", "stopReason", "iterations"}
    assert "trace" not in schemas["ChatResponse"]["required"]  # absent when TRANSPARENCY=quiet
    (status,) = [s for s in schemas["Approval"]["properties"]["status"]["anyOf"] if "enum" in s]
    assert set(status["enum"]) == set(STATUSES)
    for name, schema in schemas.items():
        if schema.get("type") == "object":
            assert schema.get("additionalProperties") is False, f"{name}: strict, so tests catch drift"


def test_the_docs_page_is_served_offline() -> None:
    page = apidocs.serve("/api/docs")
    assert page is not None and page[1].startswith("text/html")
    html = page[0].decode()
    assert 'url: "/api/openapi.json"' in html
    refs = re.findall(r"(?:src|href)=\"([^\"]+)\"", html)
    assert all(r.startswith(("/api/docs/", "data:")) for r in refs), f"nothing from a CDN: {refs}"
    for asset in (r for r in refs if r.startswith("/")):
        served = apidocs.serve(asset)
        assert served is not None and len(served[0]) > 100_000, asset
    spec = apidocs.serve("/api/openapi.json")
    assert spec is not None and spec == (COMMITTED.read_bytes(), "application/json")
    assert apidocs.serve("/api/docs/../../etc/passwd") is None
    assert apidocs.serve("/api/chat") is None


def test_a_reply_is_created_and_the_chat_may_answer_for_a_person(doc: dict[str, Any]) -> None:
    """A person's reply answers 201 (a resend too, flagged), taking the chat's Idempotency-Key; the chat's 202 is a
    running turn (with Location) or a message kept for a person (no turn: no Location, no turnId)."""
    reply = doc["paths"]["/api/handoffs/{handoff_id}/messages"]["post"]
    assert "200" not in reply["responses"]
    assert reply["responses"]["201"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PersonReply"
    }
    assert set(reply["responses"]["201"]["headers"]) == {"Idempotent-Replayed"}
    path_param, key = reply["parameters"]
    assert (path_param["name"], path_param["in"]) == ("handoff_id", "path")
    chat_key = next(p for p in doc["paths"]["/api/chat"]["post"]["parameters"] if p["name"] == "Idempotency-Key")
    assert key["schema"] == chat_key["schema"] and key["in"] == "header"
    accepted = doc["paths"]["/api/chat"]["post"]["responses"]["202"]
    assert {r["$ref"] for r in accepted["content"]["application/json"]["schema"]["anyOf"]} == {
        "#/components/schemas/TurnRunning",
        "#/components/schemas/KeptForPerson",
    }
    assert not accepted["headers"]["Location"].get("required")
    kept = doc["components"]["schemas"]["KeptForPerson"]
    assert "turnId" not in kept["properties"] and kept["properties"]["owner"]["const"] == "person"
