"""SnapStart on every API-facing function: the alias each API invokes, the conditional SnapStart, and a prime per
handler that builds its first request's work before the snapshot without touching the network."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from devstack.stack import Stack, deploy
from support_agent import snapstart, wiring
from tests.unit.test_template import resources_of_type

ROOT = Path(__file__).resolve().parents[2]
SOCKET_FUNCTION = "SocketFunction"  # the WebSocket API's: raw ApiGatewayV2 resources, no SAM event
CONDITIONAL = {"ApplyOn": {"Fn::If": ["SnapStartEnabled", "PublishedVersions", "None"]}}


def api_facing(sam: dict[str, Any]) -> list[str]:
    """Every function an API invokes: an HttpApi event, or the WebSocket API's integration."""
    functions = resources_of_type(sam, "AWS::Serverless::Function")
    http = [
        name
        for name, f in functions.items()
        if any(e["Type"] == "HttpApi" for e in f["Properties"].get("Events", {}).values())
    ]
    return sorted([*http, SOCKET_FUNCTION])


def test_the_api_facing_functions_are_the_six_we_prime(sam: dict[str, Any]) -> None:
    assert api_facing(sam) == sorted(
        [
            "ApprovalsFunction",
            "ChatFunction",
            "EventsFunction",
            "McpFunction",
            "PaymentsWebhookFunction",
            "SocketFunction",
        ]
    )


def test_every_api_facing_function_publishes_an_alias_with_conditional_snapstart(
    sam: dict[str, Any], cfn: dict[str, Any]
) -> None:
    aliases = resources_of_type(cfn, "AWS::Lambda::Alias")
    for name in api_facing(sam):
        props = sam["Resources"][name]["Properties"]
        assert props["AutoPublishAlias"] == "live", name
        assert cfn["Resources"][name]["Properties"]["SnapStart"] == CONDITIONAL, name
        assert aliases[f"{name}Aliaslive"]["Properties"]["Name"] == "live", name
    description = sam["Parameters"]["EnableSnapStart"]["Description"]
    assert all(name in description for name in api_facing(sam))


def test_no_other_function_has_an_alias_or_snapstart(sam: dict[str, Any]) -> None:
    others = set(resources_of_type(sam, "AWS::Serverless::Function")) - set(api_facing(sam))
    for name in others:
        assert not {"AutoPublishAlias", "SnapStart"} & set(sam["Resources"][name]["Properties"]), name


def test_every_http_route_invokes_the_alias(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    permissions = resources_of_type(cfn, "AWS::Lambda::Permission")
    for name in set(api_facing(sam)) - {SOCKET_FUNCTION}:
        mine = [p for k, p in permissions.items() if k.startswith(name)]
        assert mine and all(p["Properties"]["FunctionName"] == {"Ref": f"{name}Aliaslive"} for p in mine), name
    body = str(cfn["Resources"]["HttpApi"]["Properties"]["Body"])
    for name in set(api_facing(sam)) - {SOCKET_FUNCTION}:
        assert f"${{{name}Aliaslive}}" in body and f"${{{name}.Arn}}" not in body, name


def test_the_websocket_api_invokes_the_alias(cfn: dict[str, Any]) -> None:
    uri = cfn["Resources"]["SocketIntegration"]["Properties"]["IntegrationUri"]["Fn::Sub"]
    assert uri.endswith("/functions/${SocketFunctionAliaslive}/invocations")
    permission = cfn["Resources"]["SocketInvokePermission"]["Properties"]
    assert permission["FunctionName"] == {"Ref": "SocketFunctionAliaslive"}


def test_the_local_stack_names_the_function_where_the_template_names_its_alias(sam: dict[str, Any]) -> None:
    """moto gets no alias: the WebSocket integration and permission name the function, and the local gateway
    still finds the function behind every route."""
    import copy

    from devstack.stack import _remove_unsupported_function_properties, translate
    from devstack.websocket_gateway import websocket_api

    for_moto = copy.deepcopy(sam)
    removed = _remove_unsupported_function_properties(for_moto)
    assert {f"{name}.AutoPublishAlias" for name in api_facing(sam)} <= set(removed)
    stripped = translate(for_moto)
    uri = stripped["Resources"]["SocketIntegration"]["Properties"]["IntegrationUri"]["Fn::Sub"]
    assert uri.endswith("/functions/${SocketFunction.Arn}/invocations")
    permission = stripped["Resources"]["SocketInvokePermission"]["Properties"]
    assert permission["FunctionName"] == {"Ref": "SocketFunction"}
    assert "Alias" not in str(stripped)
    api = websocket_api(sam)
    assert api is not None and set(api.routes.values()) == {SOCKET_FUNCTION}


# ------------------------------------------------------------------ the handlers' primes


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    saved = dict(os.environ)
    os.environ.update(AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    try:
        with mock_aws():
            yield deploy({"JwtSecret": "unit-test-secret-at-least-32-bytes-long!"})
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _registered_prime(stack: Stack, function: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[], object]:
    """Import the function's handler module as Lambda would, in its deployed environment; return its prime."""
    before: list[Callable[[], object]] = []
    after: list[Callable[[], None]] = []
    fake = types.ModuleType("snapshot_restore_py")
    fake.register_before_snapshot = before.append  # type: ignore[attr-defined]
    fake.register_after_restore = after.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", fake)
    monkeypatch.setattr(snapstart, "_registered", False)
    for key, value in stack.function_env(function).items():
        monkeypatch.setenv(key, value)
    wiring.reset()
    code_dir, handler = stack.function_handler(function)
    spec = importlib.util.spec_from_file_location(f"snapstart_{function}", code_dir / f"{handler.split('.')[0]}.py")
    assert spec and spec.loader
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert len(before) == 1 and after == [snapstart.reseed], function
    return before[0]


class NoNetwork:
    """Counts every AWS request botocore would send and every socket connect, refusing both."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.attempts: list[str] = []
        boto3.setup_default_session()
        assert boto3.DEFAULT_SESSION is not None
        boto3.DEFAULT_SESSION.events.register("before-send", self._refuse)

        def connect(sock: socket.socket, address: Any) -> None:
            self.attempts.append(f"connect {address}")
            raise OSError("no network before the snapshot")

        monkeypatch.setattr(socket.socket, "connect", connect)

    def _refuse(self, request: Any, **_: Any) -> None:
        self.attempts.append(f"AWS {request.url}")
        raise OSError("no AWS request before the snapshot")


def _wiring_built() -> set[str]:
    root = wiring._root
    return {k for k in vars(root) if k not in ("llm_transport", "payments_transport", "clients")} | set(root.clients)


@pytest.mark.parametrize(
    ("function", "built"),
    [
        ("ChatFunction", {"chat_services", "authenticator", "dynamodb"}),
        ("EventsFunction", {"events_services", "tickets", "authenticator", "dynamodb"}),
        ("McpFunction", {"mcp_server", "mcp_services", "authenticator", "dynamodb"}),
        ("ApprovalsFunction", {"lead_services", "rollup_store", "authenticator", "dynamodb"}),
        ("PaymentsWebhookFunction", {"stripe_webhooks", "dynamodb"}),
        ("SocketFunction", {"socket_services", "dynamodb"}),
    ],
)
def test_each_handler_primes_its_first_requests_work_without_the_network(
    stack: Stack, function: str, built: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    prime = _registered_prime(stack, function, monkeypatch)
    assert not _wiring_built() & built  # importing built none of it: without SnapStart the first request does
    guard = NoNetwork(monkeypatch)
    prime()
    assert guard.attempts == []
    assert built <= _wiring_built()
    wiring.reset()


def test_every_api_facing_handler_registers_a_prime(sam: dict[str, Any]) -> None:
    """The parametrized test above covers each of them (a new API-facing function must join it)."""
    assert set(api_facing(sam)) == {
        "ChatFunction",
        "EventsFunction",
        "McpFunction",
        "ApprovalsFunction",
        "PaymentsWebhookFunction",
        "SocketFunction",
    }


def test_route_validation_primes_every_routes_request_model() -> None:
    from support_agent.api.events_routes import router
    from support_agent.api.http import api_handler

    handler = api_handler(router, wiring.authenticator)
    snapstart.route_validation(handler)()
    resolver = snapstart.inspect.getclosurevars(snapstart.inspect.unwrap(handler)).nonlocals["app"]
    routes = [*resolver._static_routes, *resolver._dynamic_routes]
    assert routes and all(r._dependant is not None for r in routes)


def test_route_validation_refuses_a_handler_without_a_resolver() -> None:
    def plain(event: Any, context: Any) -> Any:
        return event

    with pytest.raises(TypeError, match="not an api_handler"):
        snapstart.route_validation(plain)


def test_primes_runs_each_step_in_order() -> None:
    ran: list[int] = []
    snapstart.primes(lambda: ran.append(1), lambda: ran.append(2))()
    assert ran == [1, 2]
