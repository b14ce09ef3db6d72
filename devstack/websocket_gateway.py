"""The template's WebSocket API served locally: routes → the functions' worker pools, and ``@connections``.

moto's CloudFormation skips ``AWS::ApiGatewayV2::*`` and moto's ``post_to_connection`` accepts any id and never
answers 410, so `make dev` and the tests serve the API themselves, read from the template's ApiGatewayV2 resources
(never from a second list): the ``WEBSOCKET`` Api's ``RouteSelectionExpression``, each Route's ``RouteKey`` and
``Target: integrations/<Integration>``, each ``AWS_PROXY`` Integration's ``IntegrationUri`` naming a function. A
``MOCK`` integration (the keepalive's) is served as API Gateway serves it when its route has a RouteResponse: the
IntegrationResponse's ``$default`` ResponseTemplate is sent back, and no function runs; only a literal template
(no VTL) is served.

What a client and a function see is API Gateway's: ``$connect`` on the upgrade request (a non-2xx answer refuses
it with that status), each text frame routed by the selection expression (``$default`` when nothing matches) as a
MESSAGE event, ``$disconnect`` when either side closes, and a route's answer with a ``body`` sent back on the
socket. ``@connections`` (``POST`` sends a text frame, ``GET`` describes, ``DELETE`` closes; 410 ``GoneException``
for a connection that is gone or never was) is on a port of its own: websockets' handshake parser refuses any
method but GET and any request body, so it cannot answer boto3's ``post_to_connection`` on the socket's port.
A request without a SigV4 ``Authorization`` header is refused, as AWS refuses it; the signature is not checked.

Not reproduced: the 10-minute idle and 2-hour connection limits (`drop_connections` closes every connection as
they would), and concurrency within one connection (its frames are handled one after another, in its own thread).
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.sync.server import Server, ServerConnection, serve

from devstack.background_server import BackgroundServer
from devstack.functions import FunctionError
from devstack.stack import _references

MAX_MESSAGE = 128 * 1024  # API Gateway's WebSocket message limit (and @connections' payload limit)
INTEGRATION_TIMEOUT = 35.0  # API Gateway waits 29 s for an integration; a cold worker pool may take longer
OPENING_WAIT = 5.0  # a post between $connect's 200 and the handshake's end waits this long for the socket
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")
CONNECTION_ROUTES = ("$connect", "$disconnect")


class TemplateError(ValueError):
    """The template's WebSocket API cannot be served as written (API Gateway would refuse it too)."""


class Invoker(Protocol):
    """A function's worker pool (devstack/functions.py FunctionPool), or a test's stand-in."""

    def invoke(self, event: Any) -> Any: ...


@dataclass(frozen=True)
class WebSocketApi:
    logical_id: str
    selection: tuple[str, ...]  # ``$request.body.action`` → ("action",)
    routes: dict[str, str]  # route key → the logical id of the function its integration invokes
    stage: str  # the stage's name ("" when the template declares none)
    mocks: dict[str, str] = field(default_factory=dict)  # route key → what its MOCK integration answers


# ------------------------------------------------------------------ the API, read from the template


def websocket_api(template: Mapping[str, Any], parameters: Mapping[str, str] | None = None) -> WebSocketApi | None:
    """The template's WEBSOCKET Api with its routes, or None when it has none; `parameters` resolve the stage."""
    resources = template.get("Resources", {})
    apis = [
        logical_id
        for logical_id, r in resources.items()
        if r.get("Type") == "AWS::ApiGatewayV2::Api" and r.get("Properties", {}).get("ProtocolType") == "WEBSOCKET"
    ]
    if not apis:
        return None
    if len(apis) > 1:
        raise TemplateError(f"one WebSocket API is served locally, the template has {', '.join(sorted(apis))}")
    api = apis[0]
    routes: dict[str, str] = {}
    mocks: dict[str, str] = {}
    for logical_id, resource in _of_api(resources, "AWS::ApiGatewayV2::Route", api):
        props = resource["Properties"]
        key = props.get("RouteKey")
        if not isinstance(key, str):
            raise TemplateError(f"{logical_id}: RouteKey must be a string")
        if key in routes or key in mocks:
            raise TemplateError(f"{logical_id}: a second route for {key}")
        integration = _route_integration(resources, logical_id, props, api)
        if resources[integration]["Properties"].get("IntegrationType") == "MOCK":
            mocks[key] = _mock_answer(resources, logical_id, integration, api)
        else:
            routes[key] = _route_function(resources, integration)
    expression = resources[api]["Properties"].get("RouteSelectionExpression", "")
    return WebSocketApi(api, _selection(api, expression), routes, _stage(template, api, parameters or {}), mocks)


def _of_api(resources: Mapping[str, Any], kind: str, api: str) -> list[tuple[str, Any]]:
    return [
        (logical_id, r)
        for logical_id, r in resources.items()
        if r.get("Type") == kind and r.get("Properties", {}).get("ApiId") == {"Ref": api}
    ]


def _route_integration(resources: Mapping[str, Any], route: str, props: Mapping[str, Any], api: str) -> str:
    """The integration a route's ``integrations/<id>`` Target names."""
    target = props.get("Target")
    if target is None:
        raise TemplateError(f"{route}: no Target (a route without an integration answers nothing)")
    integrations = _named(resources, target, ("AWS::ApiGatewayV2::Integration",))
    if len(integrations) != 1:
        raise TemplateError(f"{route}: Target must name one AWS::ApiGatewayV2::Integration, found {integrations}")
    integration = integrations[0]
    if resources[integration].get("Properties", {}).get("ApiId") != {"Ref": api}:
        raise TemplateError(f"{route}: {integration} belongs to another API")
    return integration


def _mock_answer(resources: Mapping[str, Any], route: str, integration: str, api: str) -> str:
    """What a MOCK integration's route sends back: its IntegrationResponse's ``$default`` template, when the route
    has a RouteResponse (without one, API Gateway sends nothing back: such a route is refused here)."""
    if not any(
        r["Properties"].get("RouteId") == {"Ref": route}
        for _, r in _of_api(resources, "AWS::ApiGatewayV2::RouteResponse", api)
    ):
        raise TemplateError(f"{route}: a MOCK route without a RouteResponse answers nothing")
    answers = [
        r["Properties"].get("ResponseTemplates", {}).get("$default")
        for _, r in _of_api(resources, "AWS::ApiGatewayV2::IntegrationResponse", api)
        if r["Properties"].get("IntegrationId") == {"Ref": integration}
        and r["Properties"].get("IntegrationResponseKey") == "$default"
    ]
    if len(answers) != 1 or not isinstance(answers[0], str) or "$" in answers[0] or "#" in answers[0]:
        raise TemplateError(f"{integration}: a MOCK integration needs one $default IntegrationResponse, literal")
    return answers[0]


def _route_function(resources: Mapping[str, Any], integration: str) -> str:
    """The function an ``AWS_PROXY`` integration's IntegrationUri names."""
    iprops = resources[integration].get("Properties", {})
    if iprops.get("IntegrationType") != "AWS_PROXY":
        raise TemplateError(f"{integration}: only AWS_PROXY (Lambda proxy) and MOCK integrations are served locally")
    functions = _named(resources, iprops.get("IntegrationUri"), FUNCTION_TYPES)
    if len(functions) != 1:
        raise TemplateError(f"{integration}: IntegrationUri must name one function, found {functions}")
    return functions[0]


def _named(resources: Mapping[str, Any], node: Any, types: tuple[str, ...]) -> list[str]:
    """The resources of those types a template value refers to (Ref, GetAtt, Sub in both forms, Join)."""
    found = {name for name in _references(node) if resources.get(name, {}).get("Type") in types}
    return sorted(found)


def _selection(api: str, expression: Any) -> tuple[str, ...]:
    prefix = "$request.body."
    if not isinstance(expression, str) or not expression.startswith(prefix) or expression == prefix:
        raise TemplateError(f"{api}: RouteSelectionExpression {expression!r} is not $request.body.<field>")
    return tuple(expression[len(prefix) :].split("."))


def _stage(template: Mapping[str, Any], api: str, parameters: Mapping[str, str]) -> str:
    stages = _of_api(template.get("Resources", {}), "AWS::ApiGatewayV2::Stage", api)
    if not stages:
        return ""
    name = stages[0][1]["Properties"].get("StageName", "")
    if isinstance(name, dict) and "Ref" in name:  # a parameter: the deployed value, else its default
        name = parameters.get(name["Ref"], template.get("Parameters", {}).get(name["Ref"], {}).get("Default", ""))
    return str(name)


def route_key(api: WebSocketApi, frame: str) -> str:
    """The route a text frame takes: the selection expression's value when a route has that key, else $default."""
    try:
        value: Any = json.loads(frame)
    except ValueError:
        return "$default"
    for part in api.selection:
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, str) and (value in api.routes or value in api.mocks) and value not in CONNECTION_ROUTES:
        return value
    return "$default"


# ------------------------------------------------------------------ API Gateway's events


def connection_id() -> str:
    """A new id in API Gateway's style (base64 of 11 random bytes: 16 characters ending in ``=``)."""
    return base64.b64encode(secrets.token_bytes(11)).decode()


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch * 1000) % 1000:03d}Z"


@dataclass
class _Connection:
    id: str
    connected_at: float
    source_ip: str
    user_agent: str
    domain: str
    websocket: ServerConnection | None = None
    last_active_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    opened: threading.Event = field(default_factory=threading.Event, repr=False)

    def socket(self) -> ServerConnection:
        """The open socket, waited for: API Gateway accepts posts once $connect answered, and the function may
        post (or a pusher find the connection it stored) before the handshake's answer is out."""
        if not self.opened.wait(OPENING_WAIT) or self.websocket is None:
            raise ConnectionClosed(None, None)
        return self.websocket

    def send(self, data: str | bytes) -> None:
        """A frame to the client (ConnectionClosed when it is gone); one sender at a time."""
        websocket = self.socket()
        with self.lock:
            websocket.send(data)
        self.last_active_at = time.time()

    def describe(self) -> dict[str, Any]:
        """``GET @connections/{id}``'s answer."""
        return {
            "connectedAt": _iso(self.connected_at),
            "identity": {"sourceIp": self.source_ip, "userAgent": self.user_agent},
            "lastActiveAt": _iso(self.last_active_at or self.connected_at),
        }


def _context(conn: _Connection, api: WebSocketApi, route: str, event_type: str) -> dict[str, Any]:
    now = time.time()
    return {
        "routeKey": route,
        "eventType": event_type,
        "messageDirection": "IN",
        "extendedRequestId": uuid.uuid4().hex[:16],
        "requestTime": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
        "requestTimeEpoch": int(now * 1000),
        "stage": api.stage or "$default",
        "connectedAt": int(conn.connected_at * 1000),
        "identity": {"sourceIp": conn.source_ip, "userAgent": conn.user_agent},
        "requestId": uuid.uuid4().hex[:16],
        "domainName": conn.domain,
        "connectionId": conn.id,
        "apiId": "local",
    }


def connect_event(conn: _Connection, api: WebSocketApi, headers: Mapping[str, str], query: str) -> dict[str, Any]:
    """``$connect``'s event: the upgrade request's headers and query string, as API Gateway passes them."""
    event: dict[str, Any] = {
        "headers": dict(headers),
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "requestContext": _context(conn, api, "$connect", "CONNECT"),
        "isBase64Encoded": False,
    }
    if query:
        multi = parse_qs(query, keep_blank_values=True)
        event["queryStringParameters"] = {k: v[-1] for k, v in multi.items()}
        event["multiValueQueryStringParameters"] = multi
    return event


def message_event(conn: _Connection, api: WebSocketApi, route: str, body: str) -> dict[str, Any]:
    context = {**_context(conn, api, route, "MESSAGE"), "messageId": uuid.uuid4().hex[:16]}
    return {"requestContext": context, "body": body, "isBase64Encoded": False}


def disconnect_event(conn: _Connection, api: WebSocketApi, code: int | None, reason: str) -> dict[str, Any]:
    context = _context(conn, api, "$disconnect", "DISCONNECT")
    context.update(disconnectStatusCode=code if code is not None else 1005, disconnectReason=reason)
    return {"headers": {"Host": conn.domain}, "requestContext": context, "isBase64Encoded": False}


def _phrase(status: int) -> str:
    with contextlib.suppress(ValueError):
        return HTTPStatus(status).phrase
    return "Error"


def status_of(answer: Any) -> int:
    """A route's answer's status: a proxy answer's ``statusCode``, 200 for any other answer."""
    if isinstance(answer, dict) and "statusCode" in answer:
        return int(answer["statusCode"])
    return 200


# ------------------------------------------------------------------ the gateway


class WebSocketGateway:
    """Serving from construction: ``url`` for clients, ``callback_url`` for ``@connections``; the functions'
    pools are given to `start` (their environment names these URLs, so they are built after this binds)."""

    def __init__(self, api: WebSocketApi, host: str = "127.0.0.1", port: int = 0, callback_port: int = 0) -> None:
        self.api = api
        self._pools: Mapping[str, Invoker] | None = None
        self._open: dict[str, _Connection] = {}
        self._opening: weakref.WeakKeyDictionary[ServerConnection, _Connection] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._stopping = False
        self._server: Server = serve(
            self._handle,
            host,
            port,
            process_request=self._upgrade,
            compression=None,  # API Gateway negotiates no extension
            max_size=MAX_MESSAGE,
            open_timeout=INTEGRATION_TIMEOUT,
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="websocket-gateway", daemon=True)
        self._thread.start()
        self._callbacks = BackgroundServer(host, callback_port, _ConnectionsHandler, gateway=self).start()
        suffix = f"/{api.stage}" if api.stage else ""
        self.url = f"ws://{host}:{self._server.socket.getsockname()[1]}{suffix}"
        self.callback_url = f"{self._callbacks.url}{suffix}"

    def environment(self) -> dict[str, str]:
        """The functions' overrides: where a client connects, and the ``@connections`` endpoint."""
        return {"WEBSOCKET_URL": self.url, "WEBSOCKET_CALLBACK_URL": self.callback_url}

    def start(self, pools: Mapping[str, Invoker]) -> None:
        self._pools = pools

    def drop_connections(self) -> int:
        """Closes every open connection (1001 Going Away), as API Gateway does at its idle and 2-hour limits (not
        reproduced by themselves): ``$disconnect`` follows for each. How a client's fallback is tested mid-turn;
        answers how many were open."""
        with self._lock:
            conns = list(self._open.values())
        for conn in conns:
            with contextlib.suppress(ConnectionClosed):
                conn.socket().close(1001, "Going away")
        return len(conns)

    def stop(self) -> None:
        """Idempotent; open connections are closed (1001) without ``$disconnect``: the functions stop too."""
        if self._stopping:
            return
        self._stopping = True
        self._callbacks.stop()
        self._server.shutdown()
        self._thread.join(timeout=5)

    def connection(self, connection_id: str) -> _Connection | None:
        with self._lock:
            return self._open.get(connection_id)

    def forget(self, connection_id: str) -> _Connection | None:
        with self._lock:
            return self._open.pop(connection_id, None)

    def _invoke(self, route: str, event: dict[str, Any]) -> Any:
        """The route's function's answer (FunctionError when it raised)."""
        assert self._pools is not None
        return self._pools[self.api.routes[route]].invoke(event)

    def _upgrade(self, websocket: ServerConnection, request: Request) -> Response | None:
        """The upgrade request: ``$connect`` decides (a non-2xx answer refuses it with that status)."""
        path, _, query = request.path.partition("?")
        if path.rstrip("/") not in ("", f"/{self.api.stage}".rstrip("/")):
            return websocket.respond(403, json.dumps({"message": "Forbidden"}))
        if self._pools is None or self._stopping:
            return websocket.respond(503, json.dumps({"message": "Service Unavailable"}))
        headers = dict(request.headers.raw_items())
        conn = _Connection(
            connection_id(),
            time.time(),
            source_ip=str(websocket.remote_address[0]),
            user_agent=headers.get("User-Agent", ""),
            domain=headers.get("Host", ""),
        )
        if "$connect" in self.api.routes:
            try:
                status = status_of(self._invoke("$connect", connect_event(conn, self.api, headers, query)))
            except FunctionError:
                status = 500
            if not 200 <= status < 300:
                return websocket.respond(status, json.dumps({"message": _phrase(status)}))
        self._opening[websocket] = conn
        with self._lock:  # reachable through @connections from now on, as after API Gateway's $connect
            self._open[conn.id] = conn
        return None

    def _handle(self, websocket: ServerConnection) -> None:
        """One connection's thread, after the upgrade: its frames in order, then ``$disconnect``."""
        conn = self._opening.pop(websocket)
        conn.websocket = websocket
        conn.opened.set()
        try:
            for frame in websocket:
                conn.last_active_at = time.time()
                if isinstance(frame, bytes):
                    websocket.close(1003, "binary frames are not supported")
                    break
                self._message(conn, frame)
        except ConnectionClosed:
            pass
        finally:
            self.forget(conn.id)
            if "$disconnect" in self.api.routes and not self._stopping:
                closed = websocket.close_code, websocket.close_reason or ""
                with contextlib.suppress(FunctionError):  # API Gateway ignores $disconnect's outcome
                    self._invoke("$disconnect", disconnect_event(conn, self.api, *closed))

    def _message(self, conn: _Connection, frame: str) -> None:
        route = route_key(self.api, frame)
        event = message_event(conn, self.api, route, frame)
        request_id = event["requestContext"]["requestId"]
        if route in self.api.mocks:  # API Gateway answers it itself: no function runs
            conn.send(self.api.mocks[route])
            return
        if route not in self.api.routes:  # no such route and no $default: API Gateway's answer
            conn.send(json.dumps({"message": "Forbidden", "connectionId": conn.id, "requestId": request_id}))
            return
        try:
            answer = self._invoke(route, event)
        except FunctionError:
            error = {"message": "Internal server error", "connectionId": conn.id, "requestId": request_id}
            conn.send(json.dumps(error))
            return
        if isinstance(answer, dict) and answer.get("body") is not None:  # a two-way route's answer
            conn.send(str(answer["body"]))


# ------------------------------------------------------------------ @connections


class _ConnectionsHandler(BaseHTTPRequestHandler):
    """``/<stage>/@connections/<id>``: what boto3's ``apigatewaymanagementapi`` client calls."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, payload: Any = None, error: str | None = None) -> None:
        body = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if error:
            self.send_header("x-amzn-ErrorType", error)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _target(self) -> str | None:
        """The connection id of ``[/<stage>]/@connections/<id>``, or None (answered already)."""
        gateway: WebSocketGateway = self.server.gateway  # type: ignore[attr-defined]
        parts = urlsplit(self.path).path.split("/")[1:]
        if gateway.api.stage and parts[:1] == [gateway.api.stage]:
            parts = parts[1:]
        if len(parts) != 2 or parts[0] != "@connections" or not parts[1]:
            self._answer(403, {"message": "Forbidden"}, "ForbiddenException")
            return None
        if not self.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256 "):
            self._answer(403, {"message": "Missing Authentication Token"}, "ForbiddenException")
            return None
        return unquote(parts[1])

    def _gone(self) -> None:
        self._answer(410, {"message": "the connection is gone"}, "GoneException")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else b""
        connection_id = self._target()
        if connection_id is None:
            return
        if length > MAX_MESSAGE:
            self._answer(413, {"message": "payload too large"}, "PayloadTooLargeException")
            return
        conn = self.server.gateway.connection(connection_id)  # type: ignore[attr-defined]
        try:
            if conn is None:
                raise ConnectionClosed(None, None)
            try:
                conn.send(data.decode())
            except UnicodeDecodeError:
                conn.send(data)
        except ConnectionClosed:
            self.server.gateway.forget(connection_id)  # type: ignore[attr-defined]  # (one whose handshake failed)
            self._gone()
            return
        self._answer(200)

    def do_GET(self) -> None:
        connection_id = self._target()
        if connection_id is None:
            return
        conn = self.server.gateway.connection(connection_id)  # type: ignore[attr-defined]
        if conn is None:
            self._gone()
            return
        self._answer(200, conn.describe())

    def do_DELETE(self) -> None:
        connection_id = self._target()
        if connection_id is None:
            return
        conn = self.server.gateway.forget(connection_id)  # type: ignore[attr-defined]
        try:
            if conn is None:
                raise ConnectionClosed(None, None)
            conn.socket().close(1000, "")
        except ConnectionClosed:
            self._gone()
            return
        self._answer(204)
