"""The HTTP edge of both functions on the deployed template: which bodies and media types reach a route.

Every answer here must be the contract's ``{"error": {"code", "message"}}`` (or the route's own answer),
never Powertools' ``{"statusCode", "detail"}`` and never an exception out of the handler (a 500).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from devstack.stack import Route
from tests.integration.conftest import Api

ACCEPTED = [
    "application/json",
    "application/json; charset=utf-8",
    "Application/JSON",
    "APPLICATION/JSON;CHARSET=UTF-8",
    " application/json ",
    "application/vnd.api+json",
    "application/merge-patch+json; charset=utf-8",
]
REFUSED = [
    "text/plain",
    "text/json",
    "application/xml",
    "application/jsonx",
    "application/x-www-form-urlencoded",
    "multipart/form-data",
    "multipart/form-data; boundary=x",
    "application/json, text/plain",
    "*/*",
    "",
]
# Valid JSON each route's validation refuses (an unknown field), so nothing is written by the sweep.
BODY = json.dumps({"unexpected": 1})


IDS = {
    "/api/conversations/": "conv_01JF3Q0000000000000000000Z",
    "/api/approvals/": "apr_01JF3R0000000000000000000Z",
    "/api/handoffs/": "apr_01JF3R0000000000000000000Z",
    "/api/customers/": "999",
}


def _path(route: Route) -> str:
    """A concrete path for the route: ids of the right shape that name nothing."""
    prefix = route.path.split("{")[0]
    return route.path.replace("{id}", IDS[prefix]) if "{" in route.path else route.path


def _token(api: Api, route: Route) -> str:
    return api.token() if route.function in ("ChatFunction", "EventsFunction", "McpFunction") else api.lead()


def _post_routes(api: Api) -> list[Route]:
    # POST /mcp speaks JSON-RPC: its refusals are the MCP transport's (tests/integration/test_mcp_server.py).
    routes = [r for r in api.stack.routes if r.method == "POST" and r.function != "McpFunction"]
    assert {r.function for r in routes} == {
        "ChatFunction",
        "ApprovalsFunction",
        "EventsFunction",  # POST /api/ws-ticket: no body read, but the same body rules
        "PaymentsWebhookFunction",  # no resolver, but the same body rules before its signature check
    }, "every POST route is swept"
    return routes


def _contract_error(status: int, body: Any) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}, (status, body)
    assert set(body["error"]) == {"code", "message"}, body


def test_content_types_on_every_post_route(api: Api) -> None:
    """JSON media types in any case, with parameters, and +json are taken as JSON; the rest are a 400."""
    for route in _post_routes(api):
        path, token = _path(route), _token(api, route)
        baseline = api.call("POST", path, raw_body=BODY, token=token)
        assert baseline[0] < 500, (route, baseline)
        for ctype in ACCEPTED:
            got = api.call("POST", path, raw_body=BODY, token=token, headers={"content-type": ctype})
            if route.path == "/api/ws-ticket":  # reads no body; each call a new ticket: the same answer's shape
                assert (got[0], set(got[1])) == (baseline[0], set(baseline[1])), (route.path, ctype, got, baseline)
                continue
            assert got[:2] == baseline[:2], (route.path, ctype, got, baseline)
        for ctype in REFUSED:
            status, body, _ = api.call("POST", path, raw_body=BODY, token=token, headers={"content-type": ctype})
            assert status == 400, (route.path, ctype, status, body)
            _contract_error(status, body)
            assert body["error"] == {
                "code": "bad_request",
                "message": "content-type: send the body as application/json",
            }


def test_an_accepted_media_type_runs_the_route(api: Api) -> None:
    """Not only refused alike: a chat turn sent as Application/JSON or +json is a turn."""
    from tests.support.scripted import answer

    for ctype in ("Application/JSON; Charset=UTF-8", "application/vnd.api+json"):
        api.model.script = [answer("Hello")]
        status, body, _ = api.call(
            "POST", "/api/chat", raw_body=json.dumps({"message": "hi"}), headers={"content-type": ctype}
        )
        assert (status, body["reply"]) == (200, "Hello"), body


@pytest.mark.parametrize(
    "body",
    [
        '{"message": "hi", "n": ' + "7" * 4301 + "}",
        '{"reason": {"deep": [1, -' + "9" * 16_000 + "]}}",  # just under MAX_BODY_BYTES
    ],
    ids=["4301-digits", "16000-digits-nested"],
)
def test_a_number_too_long_for_python_is_a_400_on_every_route(api: Api, body: str) -> None:
    """json.loads refuses an integer of more than 4300 digits with a plain ValueError (not a JSONDecodeError)."""
    for route in api.stack.routes:
        path = _path(route)
        accept = {"accept": "application/json, text/event-stream"} if route.function == "McpFunction" else {}
        status, answer, _ = api.call(route.method, path, raw_body=body, token=_token(api, route), headers=accept)
        if route.function == "McpFunction":  # refused too, in the transport's shape (JSON-RPC) or a 405
            public_document = route.path == "/.well-known/oauth-protected-resource"  # never reads a body
            assert status in ((200,) if public_document else (400, 405)), (route.method, route.path, status, answer)
            continue
        assert status == 400, (route.method, route.path, status, answer)
        assert answer["error"] == {"code": "bad_request", "message": "body: a number has too many digits"}
