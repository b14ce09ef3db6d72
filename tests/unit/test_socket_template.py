"""The WebSocket API in template.yaml (docs/API.md#websocket), checked statically: moto deploys none of it."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.test_template import CONNECTIONS, granted_pairs, resources_of_type

ROUTES = {
    "ConnectRoute": "$connect",
    "DisconnectRoute": "$disconnect",
    "SubscribeRoute": "subscribe",
    "UnsubscribeRoute": "unsubscribe",
    "DefaultRoute": "$default",
    "PingRoute": "ping",  # API Gateway's own answer (MOCK): the keepalive runs no function
}
API_ARN = "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${WebSocketApi}"


def test_the_api_is_a_websocket_api_routed_by_the_bodys_action(cfn: dict[str, Any]) -> None:
    api = cfn["Resources"]["WebSocketApi"]
    assert api["Type"] == "AWS::ApiGatewayV2::Api"
    assert api["Properties"]["ProtocolType"] == "WEBSOCKET"
    assert api["Properties"]["RouteSelectionExpression"] == "$request.body.action"
    stage = cfn["Resources"]["WebSocketStage"]["Properties"]
    assert stage["ApiId"] == {"Ref": "WebSocketApi"} and stage["StageName"] == {"Ref": "Stage"}
    assert stage["AutoDeploy"] is True
    assert set(stage["DefaultRouteSettings"]) == {"ThrottlingBurstLimit", "ThrottlingRateLimit"}
    # Its access log never holds the query string (the ticket) nor a body.
    assert "querystring" not in stage["AccessLogSettings"]["Format"].lower()
    assert "body" not in stage["AccessLogSettings"]["Format"].lower()


def test_every_route_targets_the_integration_and_the_integration_the_function(cfn: dict[str, Any]) -> None:
    routes = resources_of_type(cfn, "AWS::ApiGatewayV2::Route")
    socket_routes = {k: r for k, r in routes.items() if r["Properties"]["ApiId"] == {"Ref": "WebSocketApi"}}
    assert {k: r["Properties"]["RouteKey"] for k, r in socket_routes.items()} == ROUTES
    for name, route in socket_routes.items():
        integration_id = "PingIntegration" if name == "PingRoute" else "SocketIntegration"
        assert route["Properties"]["Target"] == {"Fn::Sub": f"integrations/${{{integration_id}}}"}, name
        assert route["Properties"]["AuthorizationType"] == "NONE", name  # the function checks the ticket
    integration = cfn["Resources"]["SocketIntegration"]["Properties"]
    assert integration["ApiId"] == {"Ref": "WebSocketApi"}
    assert integration["IntegrationType"] == "AWS_PROXY"
    assert integration["IntegrationUri"]["Fn::Sub"].endswith("/functions/${SocketFunctionAliaslive}/invocations")


def test_only_this_api_may_invoke_the_function(cfn: dict[str, Any]) -> None:
    permission = cfn["Resources"]["SocketInvokePermission"]["Properties"]
    assert permission["FunctionName"] == {"Ref": "SocketFunctionAliaslive"}  # SnapStart's published version
    assert permission["Principal"] == "apigateway.amazonaws.com"
    assert permission["Action"] == "lambda:InvokeFunction"
    assert permission["SourceArn"] == {"Fn::Sub": f"{API_ARN}/*"}


def test_posting_is_scoped_to_this_apis_stage_connections(cfn: dict[str, Any]) -> None:
    holders = {
        f: {a for a, t in granted_pairs(cfn, f) if t == CONNECTIONS}
        for f in resources_of_type(cfn, "AWS::Lambda::Function")
    }
    posters = ("SocketFunction", "SocketPushFunction", "ChatFunction", "TurnWorkerFunction")
    assert {f: a for f, a in holders.items() if a} == {f: {"execute-api:ManageConnections"} for f in posters}
    for function in posters:
        statements = [
            s
            for p in cfn["Resources"][f"{function}Role"]["Properties"]["Policies"]
            for s in p["PolicyDocument"]["Statement"]
            if "execute-api:ManageConnections" in str(s.get("Action"))
        ]
        assert [s["Resource"] for s in statements] == [{"Fn::Sub": f"{API_ARN}/${{Stage}}/POST/@connections/*"}]
        assert all(s["Action"] == "execute-api:ManageConnections" for s in statements)


def test_the_function_and_the_ticket_route_know_where_the_socket_is(cfn: dict[str, Any]) -> None:
    socket = cfn["Resources"]["SocketFunction"]["Properties"]["Environment"]["Variables"]
    events = cfn["Resources"]["EventsFunction"]["Properties"]["Environment"]["Variables"]
    url = {"Fn::Sub": "wss://${WebSocketApi}.execute-api.${AWS::Region}.amazonaws.com/${Stage}"}
    callback = {"Fn::Sub": "https://${WebSocketApi}.execute-api.${AWS::Region}.amazonaws.com/${Stage}"}
    assert socket["CONNECTIONS_TABLE"] == events["CONNECTIONS_TABLE"] == {"Ref": "ConnectionsTable"}
    assert socket["WEBSOCKET_URL"] == events["WEBSOCKET_URL"] == url
    assert socket["WEBSOCKET_CALLBACK_URL"] == callback
    assert "WEBSOCKET_CALLBACK_URL" not in events  # the ticket route posts nothing
    assert socket["SOCKET_CONNECTIONS_PER_OWNER"] == {"Ref": "SocketConnectionsPerOwner"}
    assert socket["SOCKET_SUBSCRIPTIONS_PER_CONNECTION"] == {"Ref": "SocketSubscriptionsPerConnection"}


def test_the_limits_are_parameters(sam: dict[str, Any]) -> None:
    params = sam["Parameters"]
    assert params["SocketConnectionsPerOwner"]["Default"] == 5
    assert params["SocketSubscriptionsPerConnection"]["Default"] == 10


def test_the_connections_table_keys_index_and_ttl(cfn: dict[str, Any]) -> None:
    props = cfn["Resources"]["ConnectionsTable"]["Properties"]
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    (index,) = props["GlobalSecondaryIndexes"]
    assert index["IndexName"] == "subscribers"
    assert index["KeySchema"] == [
        {"AttributeName": "conversation_id", "KeyType": "HASH"},
        {"AttributeName": "pk", "KeyType": "RANGE"},
    ]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}


def test_the_keepalive_is_answered_by_api_gateway_with_a_pong(cfn: dict[str, Any]) -> None:
    """A page's ping every 5 minutes keeps its connection past API Gateway's 10 idle minutes; a MOCK integration
    with a route response answers it, so an idle page's keepalive invokes nothing (bench/sockets.py prices it)."""
    r = cfn["Resources"]
    assert r["PingIntegration"]["Properties"] == {
        "ApiId": {"Ref": "WebSocketApi"},
        "IntegrationType": "MOCK",
        "TemplateSelectionExpression": "\\$default",
        "RequestTemplates": {"$default": '{"statusCode": 200}'},
    }
    response = r["PingIntegrationResponse"]["Properties"]
    assert response["IntegrationId"] == {"Ref": "PingIntegration"} and response["IntegrationResponseKey"] == "$default"
    assert json.loads(response["ResponseTemplates"]["$default"]) == {"type": "pong"}
    assert r["PingRoute"]["Properties"]["RouteResponseSelectionExpression"] == "$default"  # two-way
    assert r["PingRouteResponse"]["Properties"] == {
        "ApiId": {"Ref": "WebSocketApi"},
        "RouteId": {"Ref": "PingRoute"},
        "RouteResponseKey": "$default",
    }
