"""`make dev`: the whole service on this machine — no AWS account, no Docker, no API key.

One process: a moto server (Step Functions executing for real), the stack deployed from
template.yaml into it, the demo data, a simulated model unless ANTHROPIC_API_KEY is set, a simulated
Stripe unless STRIPE_API_BASE and STRIPE_API_KEY are both set, worker processes per function with each
function's deployed environment, the template's queue and schedule events, RefundFlow's Lambda task
bridged into PaymentsFunction's workers (devstack/lambda_bridge.py: moto would need Docker), and an HTTP
server mapping the template's routes to the handlers, with the web pages, and the template's WebSocket API with its
``@connections`` endpoint (devstack/websocket_gateway.py: moto deploys neither). ``CARRIER=1``: also a local
outside MCP server the agent may use (devstack/carrier_mcp.py, docs/MCP.md). ``POLICY=policy.json``: that file
published as the support policy's newest version right after the deploy (docs/POLICY.md; refused before anything
starts when it does not validate).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3

from devstack.events import EventSources
from devstack.functions import FunctionPool, pools_for
from devstack.gateway import Gateway
from devstack.lambda_bridge import bridged, invoked_by_state_machines
from devstack.model_choice import REAL_SETTING, choose
from devstack.parameters import dev_parameters, from_command_line
from devstack.seed import DEMO_DATA, seed
from devstack.simulated_model.server import SimulatedModelServer
from devstack.simulated_stripe import LOCAL_SECRET, TEST_KEY, SimulatedStripeServer
from devstack.simulated_stripe import start as start_stripe
from devstack.stack import REPO_ROOT, Stack, deploy
from devstack.tokens import mint_token, team_tokens
from devstack.websocket_gateway import WebSocketGateway, websocket_api

if TYPE_CHECKING:
    from devstack.carrier_mcp import CarrierStub

STATE_DIR = REPO_ROOT / ".devstack"
REGION = "us-east-1"
STRIPE_REAL = "Stripe API at STRIPE_API_BASE (from the environment)"
STRIPE_SIMULATED = "simulated Stripe on {url} (PAYMENT_PROVIDER={provider})"
MODEL_SIMULATED = "SIMULATED (no {setting}): answers are generated locally, not by Claude ({provider}'s wire)"
MODEL_REAL = {
    "anthropic": "Anthropic Messages API",
    "openai": "OpenAI-compatible endpoint",
    "bedrock": "Amazon Bedrock",
}


@dataclass
class LocalStack:
    url: str
    moto_url: str
    stack: Stack
    tokens: dict[str, Any]
    simulated: bool
    env_file: Path
    stripe: SimulatedStripeServer | None = None  # the simulated Stripe, unless a real one was configured
    model: SimulatedModelServer | None = None  # the simulated model, unless a real one was configured
    provider: str = "anthropic"  # LLM_PROVIDER: whose API the functions call (the simulated model speaks each)
    carrier: CarrierStub | None = None  # CARRIER=1: the local outside MCP server (devstack/carrier_mcp.py)
    policy_version: int = 1  # the support policy's newest version: the template's (1) or POLICY='s
    websocket: WebSocketGateway | None = None  # the template's WebSocket API, when it has one
    pools: dict[str, FunctionPool] = field(default_factory=dict, repr=False)  # each function's workers
    _stoppers: list[Any] = field(default_factory=list, repr=False)

    def stop(self) -> None:
        for stop in reversed(self._stoppers):
            with contextlib.suppress(Exception):  # keep stopping the rest
                stop()
        self._stoppers.clear()


def _moto(port: int) -> tuple[Any, str]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per AWS call otherwise

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{server._server.server_port}"  # the real port when 0 was asked for
    import httpx

    # moto's Step Functions runs the ASL's DynamoDB tasks against this same server.
    httpx.post(f"{url}/moto-api/config", json={"stepfunctions": {"execute_state_machine": True}}, timeout=10)
    return server, url


def _one_request_at_a_time() -> Any:
    """Serialise moto's DynamoDB request handling, as each DynamoDB request is atomic; returns the undo.

    moto checks a condition, then writes, in plain Python, and copies a table a transaction touches while
    other threads may be writing it: under concurrent requests two conditional writes could both pass,
    and a copy fails with "dictionary changed size" (a 500 botocore retries). The load run found the
    latter. The DynamoDB Streams reads take the same lock: a stream poller never reads a transaction's
    records before it has committed or been undone (`_streams_kept_through_rollbacks`). DynamoDB only: other
    services long-poll (SQS) and must not hold the lock.
    """
    from moto.core.responses import BaseResponse
    from moto.dynamodb.responses import DynamoHandler
    from moto.dynamodbstreams.responses import DynamoDBStreamsHandler

    lock = threading.RLock()

    def dispatch(cls: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return BaseResponse.__dict__["dispatch"].__func__(cls, *args, **kwargs)

    for handler in (DynamoHandler, DynamoDBStreamsHandler):
        handler.dispatch = classmethod(dispatch)  # type: ignore[assignment,method-assign]
    undo_rollbacks = _streams_kept_through_rollbacks()

    def undo() -> None:
        undo_rollbacks()
        for handler in (DynamoHandler, DynamoDBStreamsHandler):
            delattr(handler, "dispatch")

    return undo


def _streams_kept_through_rollbacks() -> Any:
    """moto undoes a cancelled TransactWriteItems by putting back a deep copy of every table it touched, and the
    copy has a copy of the table's stream shard: each shard iterator handed out before reads the discarded one,
    so a stream poller (devstack/events.py) saw nothing new, ever, after the first cancelled transaction (the
    WebSocket's pushes stopped mid-session). The table keeps its own shard, holding the records it held before
    the transaction (no reader saw the others: the Streams reads wait for the same lock). Returns the undo."""
    from moto.dynamodb.models import DynamoDBBackend

    original = DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        shards = {
            name: (table.stream_shard, len(table.stream_shard.items))
            for name, table in self.tables.items()
            if table.stream_shard is not None
        }
        try:
            original(self, transact_items)
        except Exception:
            for name, (shard, count) in shards.items():
                table = self.tables.get(name)
                if table is not None and table.stream_shard is not shard:
                    del shard.items[count:]
                    shard.table = table
                    table.stream_shard = shard
            raise

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    return lambda: setattr(DynamoDBBackend, "transact_write_items", original)


def demo_tokens(secret: str, issuer: str, audience: str, simulated: bool) -> dict[str, Any]:
    data = json.loads(DEMO_DATA.read_text())
    kw = {"secret": secret, "issuer": issuer, "audience": audience, "ttl_seconds": 12 * 3600}
    return {
        "customers": [
            {
                "customerId": c["customer_id"],
                "name": c["name"],
                "token": mint_token(f"customer-{c['customer_id']}", "customer", c["customer_id"], **kw),
            }
            for c in data["customers"]
        ],
        "leads": team_tokens(data["leads"], "support_lead", **kw),
        "staff": team_tokens(data.get("staff", []), "support_staff", **kw),
        "simulatedModel": simulated,
    }


def start(
    port: int = 3000,
    moto_port: int = 4599,
    host: str = "127.0.0.1",
    environ: dict[str, str] | None = None,
    schedule_seconds: float = 30.0,
    parameters: Mapping[str, str] | None = None,
    policy: str | None = None,
    websocket_port: int = 0,
) -> LocalStack:
    """The stack up; `parameters`: template parameter overrides (``make dev PARAMS=...``), checked by the caller;
    `policy`: a support policy document (``make dev POLICY=...``) published over the template's version 1;
    `websocket_port`: the template's WebSocket API's (devstack/websocket_gateway.py), when it has one."""
    env = dict(os.environ if environ is None else environ)
    params = dev_parameters(env, parameters)
    from devstack.simulated_model import delay_from

    model_delay = delay_from(env)  # SIMULATED_MODEL_DELAY_SECONDS: a bad value stops before anything starts
    choice = choose(env)  # before moto's credentials replace the shell's (a real Bedrock needs them)
    secret, issuer, audience = params["JwtSecret"], params["JwtIssuer"], params["JwtAudience"]
    local = LocalStack("", "", None, {}, False, STATE_DIR / "env.json")  # type: ignore[arg-type]
    try:
        moto, moto_url = _moto(moto_port)
        local._stoppers.append(moto.stop)
        local._stoppers.append(_one_request_at_a_time())
        aws_env = {
            "AWS_ENDPOINT_URL": moto_url,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "MOTO_PORT": moto_url.rsplit(":", 1)[1],
        }
        os.environ.update(aws_env)  # this process's boto3 and moto's Step Functions use them too
        payments_env: dict[str, str] = {}
        local.stripe = _payments(env, payments_env)  # before deploy: its URL is a template parameter
        if local.stripe is not None:
            local._stoppers.append(local.stripe.stop)
        params = _with_stripe_base(params, payments_env["STRIPE_API_BASE"])
        session = boto3.Session(region_name=REGION)
        params = _with_carrier(env, params, local, session.client("secretsmanager", endpoint_url=moto_url))
        stack = deploy(params, session=session, endpoint_url=moto_url)
        seed(session.client("dynamodb", endpoint_url=moto_url), stack.physical_ids["CustomerDataTable"])
        if policy is not None:  # before any function starts: none ever applies the template's version instead
            from devstack.policy import publish

            ssm = session.client("ssm", endpoint_url=moto_url)
            local.policy_version = publish(ssm, stack.physical_ids["SupportPolicyParameter"], policy)

        overrides = {"JWT_SECRET": secret, "TRANSPARENCY": params["Transparency"], "POWERTOOLS_LOG_LEVEL": "WARNING"}
        # LLM_PROVIDER=openai|bedrock make dev: the same simulated brain over that provider's wire, or the real
        # model when its setting is given (devstack/model_choice.py).
        simulated = choice.simulated
        local.model = _simulated_model(local, model_delay) if simulated else None
        overrides.update(choice.overrides(local.model.url if local.model is not None else None))
        overrides.update(payments_env)
        local.websocket = _websocket_gateway(stack, host, websocket_port, local)
        pools = _functions(local, stack, {**_plain_env(env), **aws_env}, overrides)

        events = EventSources(stack, pools, moto_url, schedule_seconds)
        events.start()
        local._stoppers.append(events.stop)

        tokens = demo_tokens(secret, issuer, audience, simulated)
        gateway = Gateway((host, port), stack.routes, pools, {"/api/dev/tokens": lambda: tokens})
        thread = threading.Thread(target=gateway.serve_forever, daemon=True, name="gateway")
        thread.start()
        local._stoppers.append(lambda: (gateway.shutdown(), gateway.server_close()))

        local.url = f"http://{host}:{gateway.server_address[1]}"
        local.moto_url, local.stack, local.tokens, local.simulated = moto_url, stack, tokens, simulated
        local.provider = choice.provider
        if local.stripe is not None:  # its refund events, signed with the secret the webhook function holds
            local.stripe.stripe.webhooks.configure(f"{local.url}/webhooks/stripe", LOCAL_SECRET)
        write_env_file(local.env_file, stack, pools, int(aws_env["MOTO_PORT"]))
        return local
    except BaseException:
        local.stop()
        raise


def _simulated_model(local: LocalStack, delay_seconds: float) -> SimulatedModelServer:
    from devstack.simulated_model import start as start_model

    model = start_model(port=0, delay_seconds=delay_seconds)
    local._stoppers.append(model.stop)
    return model


def _websocket_gateway(stack: Stack, host: str, port: int, local: LocalStack) -> WebSocketGateway | None:
    """The template's WebSocket API served locally (devstack/websocket_gateway.py), when it has one: bound now,
    before the functions start, since its URLs are in their environment (WEBSOCKET_URL, WEBSOCKET_CALLBACK_URL)."""
    api = websocket_api(stack.sam_template, stack.parameters)
    if api is None:
        return None
    gateway = WebSocketGateway(api, host, port)
    local._stoppers.append(gateway.stop)  # should the start fail before the functions are up
    return gateway


def _functions(
    local: LocalStack, stack: Stack, base_env: dict[str, str], overrides: dict[str, str]
) -> dict[str, FunctionPool]:
    """Each function's warm workers (the WebSocket gateway's URLs in their environment), RefundFlow's Lambda task
    bridged into its function's workers, and the WebSocket gateway's routes handed to them."""
    sockets = local.websocket
    pools = pools_for(stack, base_env, {**overrides, **(sockets.environment() if sockets else {})})
    local.pools = pools
    local._stoppers.append(lambda: [p.close() for p in pools.values()])
    for pool in pools.values():  # cold starts now, not on the first request
        pool.warm()
    # RefundFlow's Lambda task (PaymentsFunction): moto would run it in Docker; run it in its pool instead.
    bridge = bridged({stack.physical_ids[fn]: pools[fn].invoke for fn in invoked_by_state_machines(stack.sam_template)})
    bridge.__enter__()
    local._stoppers.append(lambda: bridge.__exit__(None, None, None))
    if sockets is not None:
        sockets.start(pools)
        local._stoppers.append(sockets.stop)  # stopped before the pools close: no $disconnect into a closed pool
    return pools


def _payments(env: Mapping[str, str], overrides: dict[str, str]) -> SimulatedStripeServer | None:
    """Stripe for the functions: the one configured when both settings are set, else a simulated one started now.

    Only the address and key are set here; PAYMENT_PROVIDER is the template's, which make dev deploys as
    ``stripe`` (devstack/parameters.py; ``PARAMS="PaymentProvider=none"`` turns it off).
    """
    if env.get("STRIPE_API_BASE") and env.get("STRIPE_API_KEY"):
        overrides.update(STRIPE_API_BASE=env["STRIPE_API_BASE"], STRIPE_API_KEY=env["STRIPE_API_KEY"])
        if env.get("STRIPE_WEBHOOK_SECRET"):  # e.g. `stripe listen --forward-to localhost:3000/webhooks/stripe`'s
            overrides["STRIPE_WEBHOOK_SECRET"] = env["STRIPE_WEBHOOK_SECRET"]
        return None
    stripe = start_stripe(port=0)
    overrides.update(STRIPE_API_BASE=stripe.url, STRIPE_API_KEY=TEST_KEY, STRIPE_WEBHOOK_SECRET=LOCAL_SECRET)
    return stripe


def _with_stripe_base(params: dict[str, str], url: str) -> dict[str, str]:
    """The template's ``StripeApiBase`` set to the Stripe in use (unless PARAMS set it), so the deployed
    functions' environment names it: the worker overrides and the sam local env file agree."""
    return {"StripeApiBase": url, **params}


def _with_carrier(env: Mapping[str, str], params: dict[str, str], local: LocalStack, secrets: Any) -> dict[str, str]:
    """``CARRIER=1``: the carrier stub started, its token in the local Secrets Manager, and ``McpServers`` the
    committed configuration at the stub's URL, listed again every 15 s (PARAMS still win)."""
    if env.get("CARRIER", "").strip().lower() not in ("1", "true", "yes", "on"):
        return params
    from devstack import carrier_mcp  # the MCP SDK and uvicorn: only imported when asked for

    local.carrier = carrier_mcp.start_for_dev(env, secrets)
    local._stoppers.append(local.carrier.stop)
    servers = json.dumps(carrier_mcp.local_servers(local.carrier.url), separators=(",", ":"))
    return {"McpServers": servers, "McpRefreshSeconds": "15", **params}


def _model_line(local: LocalStack) -> str:
    if local.simulated:
        return MODEL_SIMULATED.format(setting=REAL_SETTING[local.provider], provider=local.provider)
    return MODEL_REAL[local.provider]


def _plain_env(env: dict[str, str]) -> dict[str, str]:
    """What a worker inherits: the basics, not this shell's AWS profile or secrets."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "SYSTEMROOT", "TMPDIR")
    return {k: v for k, v in env.items() if k in keep}


def write_env_file(path: Path, stack: Stack, pools: dict[str, FunctionPool], moto_port: int) -> None:
    """The env-vars file `sam local invoke/start-api --env-vars` needs: physical names exist only after deploy."""
    path.parent.mkdir(exist_ok=True)
    docker_endpoint = f"http://host.docker.internal:{moto_port}"
    out = {}
    for name in pools:
        env = dict(stack.function_env(name))
        env.update(AWS_ENDPOINT_URL=docker_endpoint, AWS_ACCESS_KEY_ID="local", AWS_SECRET_ACCESS_KEY="local")
        out[name] = env
    path.write_text(json.dumps(out, indent=2) + "\n")


def banner(local: LocalStack) -> str:
    lines = [
        "",
        "Support agent — local stack is up",
        f"  chat page      {local.url}/",
        f"  lead console   {local.url}/lead",
        f"  API            {local.url}/api/health",
        f"  API docs       {local.url}/api/docs   (Swagger UI of docs/openapi.json)",
        *(
            [f"  WebSocket      {local.websocket.url}   (@connections: {local.websocket.callback_url})"]
            if local.websocket
            else []
        ),
        f"  local AWS      {local.moto_url}   (moto; AWS_ENDPOINT_URL for the AWS CLI and sam local)",
        f"  sam local env  {local.env_file}",
        f"  model          {_model_line(local)}",
        f"  payments       {_payments_line(local)}",
        f"  policy         {local.stack.physical_ids['SupportPolicyParameter']} version {local.policy_version}"
        "   (make policy-show, make policy-publish FILE=…)",
        *(
            [f"  carrier MCP    {local.carrier.url}   (CARRIER=1; the rug pull: make carrier-rug-pull)"]
            if local.carrier
            else []
        ),
        "",
        "Demo tokens (Authorization: Bearer …):",
    ]
    for c in local.tokens["customers"]:
        lines.append(f"  customer {c['customerId']} ({c['name']}): {c['token']}")
    for lead in local.tokens["leads"]:
        lines.append(f"  lead {lead['sub']} ({lead['name']}): {lead['token']}")
    for person in local.tokens["staff"]:
        lines.append(f"  support staff {person['sub']} ({person['name']}): {person['token']}")
    lines += ["", "Ctrl-C stops everything."]
    return "\n".join(lines)


def _payments_line(local: LocalStack) -> str:
    provider = local.stack.parameters.get("PaymentProvider", "none")
    if provider == "none":
        return "ledger only (PaymentProvider=none): no provider is asked"
    return STRIPE_SIMULATED.format(url=local.stripe.url, provider=provider) if local.stripe else STRIPE_REAL


def _policy_option(argv: list[str] | None) -> tuple[str | None, list[str]]:
    """``--policy FILE`` (``make dev POLICY=...``) read and validated, and the rest of the command line; a file
    that is missing or does not validate exits 2 with the reason, before anything starts."""
    from devstack.policy import PolicyRefused, read_file

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--policy", default=None)
    known, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if known.policy is None:
        return None, rest
    try:
        return read_file(known.policy), rest
    except PolicyRefused as exc:
        print(f"make dev POLICY={known.policy}: refused, nothing started: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> None:
    policy, argv = _policy_option(argv)
    parameters = from_command_line(argv, "python -m devstack")  # a bad name stops here, before anything starts
    port = int(os.environ.get("PORT", "3000"))
    moto_port = int(os.environ.get("MOTO_PORT", "4599"))
    websocket_port = int(os.environ.get("WEBSOCKET_PORT", "3001"))
    print(f"starting the local stack (moto on {moto_port}, API on {port})…", flush=True)
    if parameters:
        print(f"template parameters overridden: {', '.join(parameters)}", flush=True)
    local = start(port=port, moto_port=moto_port, parameters=parameters, policy=policy, websocket_port=websocket_port)
    print(banner(local), flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    stopped.wait()
    print("\nstopping…", flush=True)
    local.stop()


if __name__ == "__main__":
    main()
