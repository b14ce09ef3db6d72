"""The local WebSocket gateway's routes, read from a template's ApiGatewayV2 resources (devstack/websocket_gateway.py).

A template of the test's own, in the shapes CloudFormation takes (the real template's routes: the integration
test's static check), so these do not depend on what template.yaml holds today.
"""

from __future__ import annotations

import base64
import copy
from types import SimpleNamespace
from typing import Any

import pytest

from devstack.websocket_gateway import (
    TemplateError,
    WebSocketApi,
    _Connection,
    connect_event,
    connection_id,
    disconnect_event,
    message_event,
    route_key,
    status_of,
    websocket_api,
)

INVOCATION_URI = "arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2015-03-31/functions/"


def _function() -> dict[str, Any]:
    return {"Type": "AWS::Serverless::Function", "Properties": {"CodeUri": "functions/x/", "Handler": "app.handler"}}


def _of_sockets(kind: str, **props: Any) -> dict[str, Any]:
    """An ``AWS::ApiGatewayV2::<kind>`` of the Sockets API."""
    return {"Type": f"AWS::ApiGatewayV2::{kind}", "Properties": {"ApiId": {"Ref": "Sockets"}, **props}}


def _route(key: str, target: Any) -> dict[str, Any]:
    return _of_sockets("Route", RouteKey=key, **target)


def _integration(uri: Any) -> dict[str, Any]:
    return _of_sockets("Integration", IntegrationType="AWS_PROXY", IntegrationUri=uri)


def template() -> dict[str, Any]:
    """Two functions, the integration URI in each of its forms, the Target in each of its forms."""
    return {
        "Parameters": {"Stage": {"Type": "String", "Default": "dev"}},
        "Resources": {
            "Sockets": {
                "Type": "AWS::ApiGatewayV2::Api",
                "Properties": {"ProtocolType": "WEBSOCKET", "RouteSelectionExpression": "$request.body.action"},
            },
            "SocketsStage": {
                "Type": "AWS::ApiGatewayV2::Stage",
                "Properties": {"ApiId": {"Ref": "Sockets"}, "StageName": {"Ref": "Stage"}},
            },
            "HttpApi": {"Type": "AWS::ApiGatewayV2::Api", "Properties": {"ProtocolType": "HTTP"}},
            "ConnectFunction": _function(),
            "MessageFunction": _function(),
            "OtherFunction": _function(),
            # !Sub with the function's Arn inside: what a WebSocket API's AWS_PROXY integration takes
            "ConnectIntegration": _integration({"Fn::Sub": INVOCATION_URI + "${ConnectFunction.Arn}/invocations"}),
            # !GetAtt
            "MessageIntegration": _integration({"Fn::GetAtt": ["MessageFunction", "Arn"]}),
            # !Sub's list form, the Arn given as a variable
            "OtherIntegration": _integration(
                {"Fn::Sub": [INVOCATION_URI + "${Fn}/invocations", {"Fn": {"Fn::GetAtt": ["OtherFunction", "Arn"]}}]}
            ),
            "ConnectRoute": _route("$connect", {"Target": {"Fn::Sub": "integrations/${ConnectIntegration}"}}),
            "DisconnectRoute": _route("$disconnect", {"Target": {"Fn::Sub": "integrations/${ConnectIntegration}"}}),
            "SubscribeRoute": _route(
                "subscribe", {"Target": {"Fn::Join": ["/", ["integrations", {"Ref": "MessageIntegration"}]]}}
            ),
            "OtherRoute": _route("other", {"Target": {"Fn::Sub": "integrations/${OtherIntegration}"}}),
            "DefaultRoute": _route("$default", {"Target": {"Fn::Sub": "integrations/${MessageIntegration}"}}),
            # A keepalive API Gateway answers itself: a MOCK integration, its response, the route's response.
            "PingIntegration": _of_sockets("Integration", IntegrationType="MOCK"),
            "PingIntegrationResponse": _of_sockets(
                "IntegrationResponse",
                IntegrationId={"Ref": "PingIntegration"},
                IntegrationResponseKey="$default",
                ResponseTemplates={"$default": '{"type": "pong"}'},
            ),
            "PingRoute": _route("ping", {"Target": {"Fn::Sub": "integrations/${PingIntegration}"}}),
            "PingRouteResponse": _of_sockets(
                "RouteResponse", RouteId={"Ref": "PingRoute"}, RouteResponseKey="$default"
            ),
        },
    }


def api() -> WebSocketApi:
    found = websocket_api(template())
    assert found is not None
    return found


def test_each_route_key_is_served_by_the_function_its_integration_names() -> None:
    found = api()
    assert found.logical_id == "Sockets"
    assert found.routes == {
        "$connect": "ConnectFunction",
        "$disconnect": "ConnectFunction",
        "subscribe": "MessageFunction",
        "other": "OtherFunction",
        "$default": "MessageFunction",
    }
    assert found.selection == ("action",)
    assert found.mocks == {"ping": '{"type": "pong"}'}  # no function behind it


def test_a_mock_route_without_a_route_response_answers_nothing_and_is_refused() -> None:
    broken = template()
    del broken["Resources"]["PingRouteResponse"]
    with pytest.raises(TemplateError, match="PingRoute: a MOCK route without a RouteResponse"):
        websocket_api(broken)


@pytest.mark.parametrize("answer", [None, '{"at": "$context.requestTime"}', "#set($x = 1)"])
def test_a_mock_answer_is_one_literal_template(answer: Any) -> None:
    broken = template()
    templates = broken["Resources"]["PingIntegrationResponse"]["Properties"]["ResponseTemplates"]
    if answer is None:
        del broken["Resources"]["PingIntegrationResponse"]
    else:
        templates["$default"] = answer
    with pytest.raises(TemplateError, match="PingIntegration: a MOCK integration needs one"):
        websocket_api(broken)


def test_the_stage_is_the_parameter_deployed_or_its_default() -> None:
    assert api().stage == "dev"
    deployed = websocket_api(template(), {"Stage": "prod"})
    assert deployed is not None and deployed.stage == "prod"
    without = template()
    del without["Resources"]["SocketsStage"]
    found = websocket_api(without)
    assert found is not None and found.stage == ""


def test_a_template_without_a_websocket_api_has_nothing_to_serve() -> None:
    only_http = {"Resources": {"HttpApi": template()["Resources"]["HttpApi"], "F": _function()}}
    assert websocket_api(only_http) is None


def test_a_route_without_an_integration_is_refused() -> None:
    broken = template()
    del broken["Resources"]["SubscribeRoute"]["Properties"]["Target"]
    with pytest.raises(TemplateError, match="SubscribeRoute: no Target"):
        websocket_api(broken)


def test_a_target_naming_no_integration_is_refused() -> None:
    broken = template()
    broken["Resources"]["SubscribeRoute"]["Properties"]["Target"] = {"Fn::Sub": "integrations/${MessageFunction}"}
    with pytest.raises(TemplateError, match="SubscribeRoute: Target must name one"):
        websocket_api(broken)


def test_an_integration_whose_uri_names_no_function_is_refused() -> None:
    broken = template()
    uri = "arn:aws:apigateway:us-east-1:lambda:path/2015-03-31/functions/arn:aws:lambda:x/invocations"
    broken["Resources"]["MessageIntegration"]["Properties"]["IntegrationUri"] = uri
    with pytest.raises(TemplateError, match="MessageIntegration: IntegrationUri must name one function"):
        websocket_api(broken)


def test_only_lambda_proxy_integrations_are_served() -> None:
    broken = template()
    broken["Resources"]["MessageIntegration"]["Properties"]["IntegrationType"] = "HTTP_PROXY"
    with pytest.raises(TemplateError, match="AWS_PROXY"):
        websocket_api(broken)


def test_two_routes_for_one_key_are_refused() -> None:
    broken = template()
    broken["Resources"]["AgainRoute"] = copy.deepcopy(broken["Resources"]["SubscribeRoute"])
    with pytest.raises(TemplateError, match="a second route for subscribe"):
        websocket_api(broken)


@pytest.mark.parametrize("expression", ["$request.body.", "${request.body.action}", "$request.header.x", 3])
def test_a_selection_expression_other_than_a_body_field_is_refused(expression: Any) -> None:
    broken = template()
    broken["Resources"]["Sockets"]["Properties"]["RouteSelectionExpression"] = expression
    with pytest.raises(TemplateError, match="RouteSelectionExpression"):
        websocket_api(broken)


@pytest.mark.parametrize(
    ("frame", "route"),
    [
        ('{"action": "subscribe", "conversationId": "c"}', "subscribe"),
        ('{"action": "other"}', "other"),
        ('{"action": "ping"}', "ping"),
        ('{"action": "unknown"}', "$default"),
        ('{"action": "$connect"}', "$default"),  # never a connection route from a frame
        ('{"action": 3}', "$default"),
        ('{"no": "action"}', "$default"),
        ('["subscribe"]', "$default"),
        ("subscribe", "$default"),  # not JSON
        ("", "$default"),
    ],
)
def test_a_frame_takes_the_route_its_action_names_else_default(frame: str, route: str) -> None:
    assert route_key(api(), frame) == route


def test_a_nested_selection_expression_follows_the_path() -> None:
    nested = WebSocketApi("Sockets", ("message", "kind"), {"ping": "F", "$default": "F"}, "")
    assert route_key(nested, '{"message": {"kind": "ping"}}') == "ping"
    assert route_key(nested, '{"message": "ping"}') == "$default"


def test_connection_ids_look_like_api_gateways_and_differ() -> None:
    ids = {connection_id() for _ in range(50)}
    assert len(ids) == 50
    for one in ids:
        assert len(one) == 16 and one.endswith("=")
        assert len(base64.b64decode(one)) == 11


def _conn() -> _Connection:
    return _Connection("abcdefghijklmno=", 1_700_000_000.25, "127.0.0.1", "pytest", "127.0.0.1:1234")


def test_the_connect_event_carries_the_upgrade_requests_headers_and_query() -> None:
    event = connect_event(_conn(), api(), {"Host": "127.0.0.1:1234"}, "ticket=abc&x=1&x=2")
    context = event["requestContext"]
    assert (context["routeKey"], context["eventType"], context["connectionId"]) == ("$connect", "CONNECT", _conn().id)
    assert (context["stage"], context["connectedAt"], context["domainName"]) == (
        "dev",
        1_700_000_000_250,
        "127.0.0.1:1234",
    )
    assert event["queryStringParameters"] == {"ticket": "abc", "x": "2"}
    assert event["multiValueQueryStringParameters"] == {"ticket": ["abc"], "x": ["1", "2"]}
    assert event["headers"] == {"Host": "127.0.0.1:1234"}
    assert "queryStringParameters" not in connect_event(_conn(), api(), {}, "")


def test_message_and_disconnect_events() -> None:
    message = message_event(_conn(), api(), "subscribe", '{"action": "subscribe"}')
    assert message["body"] == '{"action": "subscribe"}' and message["isBase64Encoded"] is False
    assert (message["requestContext"]["eventType"], message["requestContext"]["routeKey"]) == ("MESSAGE", "subscribe")
    assert message["requestContext"]["messageId"]
    gone = disconnect_event(_conn(), api(), None, "")["requestContext"]
    assert (gone["eventType"], gone["routeKey"], gone["disconnectStatusCode"]) == ("DISCONNECT", "$disconnect", 1005)


@pytest.mark.parametrize(("answer", "status"), [({"statusCode": 401}, 401), ({"statusCode": "204"}, 204), (None, 200)])
def test_a_routes_status_is_its_status_code_else_200(answer: Any, status: int) -> None:
    assert status_of(answer) == status


def test_make_dev_serves_the_websocket_api_only_when_the_template_has_one() -> None:
    from devstack.local import LocalStack, _websocket_gateway

    local = LocalStack("", "", None, {}, False, None)  # type: ignore[arg-type]
    only_http = SimpleNamespace(sam_template={"Resources": {"F": _function()}}, parameters={})
    assert _websocket_gateway(only_http, "127.0.0.1", 0, local) is None  # type: ignore[arg-type]
    assert local._stoppers == []
    stack = SimpleNamespace(sam_template=template(), parameters={"Stage": "dev"})
    gateway = _websocket_gateway(stack, "127.0.0.1", 0, local)  # type: ignore[arg-type]
    assert gateway is not None
    try:
        env = gateway.environment()
        assert env["WEBSOCKET_URL"].startswith("ws://127.0.0.1:") and env["WEBSOCKET_URL"].endswith("/dev")
        assert env["WEBSOCKET_CALLBACK_URL"].startswith("http://127.0.0.1:")
        assert env["WEBSOCKET_CALLBACK_URL"].endswith("/dev")
        assert local._stoppers == [gateway.stop]
    finally:
        local.stop()
