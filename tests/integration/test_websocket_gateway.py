"""The local WebSocket gateway over real sockets (devstack/websocket_gateway.py), functions stood in by fake pools.

A client is websockets' sync client; ``@connections`` is called with boto3's ``apigatewaymanagementapi`` client, as
the functions call it (SigV4-signed, ``endpoint_url`` = WEBSOCKET_CALLBACK_URL). The last test checks the real
template.yaml's WebSocket routes statically: moto deploys none of them.
"""

from __future__ import annotations

import json
import os
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from devstack.functions import LAYER_DIR, FunctionError, FunctionPool
from devstack.stack import REPO_ROOT, _references, load_template
from devstack.websocket_gateway import WebSocketGateway, websocket_api
from tests.unit.test_websocket_routes import template

WAIT = 10.0  # seconds: a bound on waiting for the server's thread, never a measure


class FakePool:
    """A function's workers: records each event, answers what the test set for its route (a callable is called)."""

    def __init__(self) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.answers: dict[str, Any] = {}

    def invoke(self, event: dict[str, Any]) -> Any:
        self.events.put(event)
        answer = self.answers.get(event["requestContext"]["routeKey"], {"statusCode": 200})
        return answer(event) if callable(answer) else answer

    def next(self, route: str) -> dict[str, Any]:
        """The next event this pool received, which must be for ``route``."""
        event = self.events.get(timeout=WAIT)
        assert event["requestContext"]["routeKey"] == route, event
        return event


@pytest.fixture
def pools() -> dict[str, FakePool]:
    return {name: FakePool() for name in ("ConnectFunction", "MessageFunction", "OtherFunction")}


@pytest.fixture
def gateway(pools: dict[str, FakePool]) -> Iterator[WebSocketGateway]:
    api = websocket_api(template())
    assert api is not None
    served = WebSocketGateway(api)
    served.start(pools)
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture
def management(gateway: WebSocketGateway) -> Any:
    """boto3's client for ``@connections``, as a function builds it from WEBSOCKET_CALLBACK_URL."""
    return boto3.client(
        "apigatewaymanagementapi",
        endpoint_url=gateway.callback_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(retries={"max_attempts": 1}),
    )


def _connected(gateway: WebSocketGateway, pools: dict[str, FakePool], query: str = "") -> tuple[ClientConnection, str]:
    """An open client and its connection id (from the $connect event its function received)."""
    client = connect(gateway.url + query, open_timeout=WAIT)
    event = pools["ConnectFunction"].next("$connect")
    return client, event["requestContext"]["connectionId"]


def test_connect_refused_with_the_functions_status(gateway: WebSocketGateway, pools: dict[str, FakePool]) -> None:
    pools["ConnectFunction"].answers["$connect"] = {"statusCode": 401}
    with pytest.raises(InvalidStatus) as refused:
        connect(gateway.url + "?ticket=used", open_timeout=WAIT)
    assert refused.value.response.status_code == 401
    event = pools["ConnectFunction"].next("$connect")
    assert event["requestContext"]["eventType"] == "CONNECT"
    assert event["queryStringParameters"] == {"ticket": "used"}
    assert pools["ConnectFunction"].events.empty()  # refused: no $disconnect either, as on API Gateway


def test_connect_refused_when_the_function_raises(gateway: WebSocketGateway, pools: dict[str, FakePool]) -> None:
    def fails(event: Any) -> Any:
        raise FunctionError("boom")

    pools["ConnectFunction"].answers["$connect"] = fails
    with pytest.raises(InvalidStatus) as refused:
        connect(gateway.url, open_timeout=WAIT)
    assert refused.value.response.status_code == 500


def test_connect_accepted_with_200(gateway: WebSocketGateway, pools: dict[str, FakePool]) -> None:
    client, connection_id = _connected(gateway, pools, "?ticket=t1")
    with client:
        assert len(connection_id) == 16
        assert gateway.connection(connection_id) is not None


def test_a_path_other_than_the_stage_is_forbidden(gateway: WebSocketGateway, pools: dict[str, FakePool]) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(gateway.url.rsplit("/", 1)[0] + "/prod", open_timeout=WAIT)
    assert refused.value.response.status_code == 403
    assert pools["ConnectFunction"].events.empty()


def test_a_frame_is_routed_by_its_action_and_a_body_answer_comes_back(
    gateway: WebSocketGateway, pools: dict[str, FakePool]
) -> None:
    pools["MessageFunction"].answers["subscribe"] = {"statusCode": 200, "body": '{"type": "subscribed"}'}
    client, connection_id = _connected(gateway, pools)
    with client:
        frame = json.dumps({"action": "subscribe", "conversationId": "conv_1"})
        client.send(frame)
        assert client.recv(timeout=WAIT) == '{"type": "subscribed"}'
        event = pools["MessageFunction"].next("subscribe")
        assert event["body"] == frame
        assert event["requestContext"]["eventType"] == "MESSAGE"
        assert event["requestContext"]["connectionId"] == connection_id
        client.send(json.dumps({"action": "other"}))
        pools["OtherFunction"].next("other")


def test_a_ping_is_answered_by_the_gateway_itself_and_runs_no_function(
    gateway: WebSocketGateway, pools: dict[str, FakePool]
) -> None:
    client, _ = _connected(gateway, pools)
    with client:
        for _ in range(2):
            client.send('{"action": "ping"}')
            assert json.loads(client.recv(timeout=WAIT)) == {"type": "pong"}
        client.send('{"action": "nope"}')  # a function's route after it: the pings reached none
        assert pools["MessageFunction"].next("$default")["body"] == '{"action": "nope"}'
    assert all(pool.events.empty() for name, pool in pools.items() if name != "ConnectFunction")


def test_a_frame_without_a_matching_route_goes_to_default(
    gateway: WebSocketGateway, pools: dict[str, FakePool]
) -> None:
    client, _ = _connected(gateway, pools)
    with client:
        client.send("not json at all")
        assert pools["MessageFunction"].next("$default")["body"] == "not json at all"
        client.send('{"action": "nope"}')
        assert pools["MessageFunction"].next("$default")["body"] == '{"action": "nope"}'


def test_a_failing_route_tells_the_client_as_api_gateway_does(
    gateway: WebSocketGateway, pools: dict[str, FakePool]
) -> None:
    def fails(event: Any) -> Any:
        raise FunctionError("boom")

    pools["MessageFunction"].answers["$default"] = fails
    client, connection_id = _connected(gateway, pools)
    with client:
        client.send("x")
        answer = json.loads(client.recv(timeout=WAIT))
        assert (answer["message"], answer["connectionId"]) == ("Internal server error", connection_id)


def test_closing_the_client_invokes_disconnect(gateway: WebSocketGateway, pools: dict[str, FakePool]) -> None:
    client, connection_id = _connected(gateway, pools)
    client.close()
    event = pools["ConnectFunction"].next("$disconnect")
    assert event["requestContext"]["eventType"] == "DISCONNECT"
    assert event["requestContext"]["connectionId"] == connection_id
    assert event["requestContext"]["disconnectStatusCode"] == 1000


def test_a_post_to_connections_arrives_as_a_text_frame(
    gateway: WebSocketGateway, pools: dict[str, FakePool], management: Any
) -> None:
    client, connection_id = _connected(gateway, pools)
    with client:
        management.post_to_connection(ConnectionId=connection_id, Data=b'{"type": "delta", "text": "h\xc3\xa9"}')
        assert client.recv(timeout=WAIT) == '{"type": "delta", "text": "hé"}'
        described = management.get_connection(ConnectionId=connection_id)
        assert described["Identity"]["SourceIp"] == "127.0.0.1"
        assert described["ConnectedAt"] <= described["LastActiveAt"]


def test_a_function_may_post_to_its_own_connection_while_it_runs(
    gateway: WebSocketGateway, pools: dict[str, FakePool], management: Any
) -> None:
    """SocketFunction's way: it answers 200 and posts its answer through @connections."""

    def posts(event: Any) -> Any:
        own = event["requestContext"]["connectionId"]
        management.post_to_connection(ConnectionId=own, Data=b'{"type": "subscribed"}')
        return {"statusCode": 200}

    pools["MessageFunction"].answers["subscribe"] = posts
    client, _ = _connected(gateway, pools)
    with client:
        client.send('{"action": "subscribe"}')
        assert client.recv(timeout=WAIT) == '{"type": "subscribed"}'


def test_a_gone_or_unknown_connection_answers_410(
    gateway: WebSocketGateway, pools: dict[str, FakePool], management: Any
) -> None:
    client, connection_id = _connected(gateway, pools)
    client.close()
    pools["ConnectFunction"].next("$disconnect")
    for gone in (connection_id, "AAAAAAAAAAAAAAA="):
        with pytest.raises(management.exceptions.GoneException):
            management.post_to_connection(ConnectionId=gone, Data=b"{}")
        with pytest.raises(management.exceptions.GoneException):
            management.get_connection(ConnectionId=gone)
        with pytest.raises(management.exceptions.GoneException):
            management.delete_connection(ConnectionId=gone)


def test_delete_closes_the_connection(gateway: WebSocketGateway, pools: dict[str, FakePool], management: Any) -> None:
    client, connection_id = _connected(gateway, pools)
    management.delete_connection(ConnectionId=connection_id)
    with pytest.raises(ConnectionClosed):
        client.recv(timeout=WAIT)
    assert pools["ConnectFunction"].next("$disconnect")["requestContext"]["connectionId"] == connection_id
    with pytest.raises(management.exceptions.GoneException):
        management.post_to_connection(ConnectionId=connection_id, Data=b"{}")


def test_an_unsigned_request_to_connections_is_refused(gateway: WebSocketGateway, pools: dict[str, FakePool]) -> None:
    client, connection_id = _connected(gateway, pools)
    with client:
        answer = httpx.post(f"{gateway.callback_url}/@connections/{connection_id}", content=b"{}", timeout=WAIT)
        assert answer.status_code == 403
        assert answer.headers["x-amzn-ErrorType"] == "ForbiddenException"


def test_dropping_the_connections_closes_each_going_away_with_disconnect(
    gateway: WebSocketGateway, pools: dict[str, FakePool]
) -> None:
    clients = [_connected(gateway, pools) for _ in range(2)]
    assert gateway.drop_connections() == 2
    for client, _ in clients:
        with pytest.raises(ConnectionClosed):
            client.recv(timeout=WAIT)
        assert client.close_code == 1001
    gone = {pools["ConnectFunction"].next("$disconnect")["requestContext"]["connectionId"] for _ in clients}
    assert gone == {cid for _, cid in clients}
    assert gateway.drop_connections() == 0


def test_stopping_closes_open_connections_without_disconnect(pools: dict[str, FakePool]) -> None:
    api = websocket_api(template())
    assert api is not None
    served = WebSocketGateway(api)
    served.start(pools)
    client, _ = _connected(served, pools)
    served.stop()
    with pytest.raises(ConnectionClosed):
        client.recv(timeout=WAIT)
    assert pools["ConnectFunction"].events.empty()
    served.stop()  # idempotent


ECHO_HANDLER = """
import os

import boto3


def handler(event, context):
    request = event["requestContext"]
    if request["eventType"] == "MESSAGE":
        client = boto3.client("apigatewaymanagementapi", endpoint_url=os.environ["WEBSOCKET_CALLBACK_URL"])
        client.post_to_connection(ConnectionId=request["connectionId"], Data=("echo " + event["body"]).encode())
    return {"statusCode": 200}
"""


def test_a_worker_process_posts_through_connections_at_the_url_its_environment_names(tmp_path: Path) -> None:
    """make dev's path: FunctionPool workers (their own processes), WEBSOCKET_CALLBACK_URL an override."""
    (tmp_path / "app.py").write_text(ECHO_HANDLER)
    api = websocket_api(template())
    assert api is not None
    served = WebSocketGateway(api)
    env = {
        **served.environment(),
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join([str(LAYER_DIR), str(REPO_ROOT)]),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
    }
    pool = FunctionPool("MessageFunction", tmp_path, "app.handler", 10.0, env, max_workers=1)
    try:
        served.start({"ConnectFunction": FakePool(), "MessageFunction": pool, "OtherFunction": FakePool()})
        with connect(served.url, open_timeout=WAIT) as client:
            client.send("hello")
            assert client.recv(timeout=WAIT) == "echo hello"
    finally:
        served.stop()
        pool.close()


def _permitted(resources: dict[str, Any], function: str, api: str) -> list[str]:
    """The Lambda permissions letting API Gateway, from this API, invoke the function."""
    return [
        name
        for name, r in resources.items()
        if r.get("Type") == "AWS::Lambda::Permission"
        and function in {ref.split(".")[0] for ref in _references(r["Properties"].get("FunctionName"))}  # or its alias
        and r["Properties"].get("Principal") == "apigateway.amazonaws.com"
        and r["Properties"].get("Action") == "lambda:InvokeFunction"
        and api in set(_references(r["Properties"].get("SourceArn")))
    ]


def test_each_websocket_route_of_the_template_has_an_integration_and_a_permitted_function() -> None:
    """Statically, as moto deploys no ApiGatewayV2 resource: websocket_api refuses a route without an integration,
    an integration naming no function; each function must let this API invoke it."""
    sam = load_template()
    api = websocket_api(sam)
    if api is None:
        pytest.skip("template.yaml has no WebSocket API yet (issue 36, part B)")
    resources = sam["Resources"]
    assert {"$connect", "$disconnect", "subscribe", "unsubscribe", "$default"} <= set(api.routes)
    assert api.mocks == {"ping": '{"type": "pong"}'}  # the keepalive: API Gateway answers it, no function runs
    for route, function in api.routes.items():
        assert resources[function]["Type"] == "AWS::Serverless::Function", route
        assert _permitted(resources, function, api.logical_id), f"{route}: {function} has no permission for {api}"
    assert api.stage, "the WebSocket API has no stage: clients could not reach it"
