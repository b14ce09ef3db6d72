"""The template deployed into moto once per module, and the chat handler driven by API Gateway v2 events."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from moto import mock_aws

from devstack.functions import function_timeout
from devstack.lambda_bridge import Target, bridged, in_process, invoked_by_state_machines
from devstack.seed import seed
from devstack.stack import Stack, deploy
from devstack.tokens import mint_token
from support_agent import wiring
from tests.support.scripted import ScriptedModel
from tests.support.transport import scripted_transport

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
SECRET = "integration-test-secret-0123456789abcdef"
BASE_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "ANTHROPIC_API_KEY": "sk-test-not-a-real-key",
    "LLM_MAX_RETRIES": "1",
    "TRANSPARENCY": "verbose",
}


def load_handler(stack: Stack, logical_id: str) -> Any:
    code_dir, handler = stack.function_handler(logical_id)
    module_name, func = handler.rsplit(".", 1)
    spec = importlib.util.spec_from_file_location(f"fn_{logical_id}", code_dir / f"{module_name}.py")
    assert spec and spec.loader
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, func)


@dataclass
class Api:
    stack: Stack
    model: ScriptedModel
    handlers: dict[str, Any] = field(default_factory=dict)
    counter: int = 0
    current: str = ""
    overrides: dict[str, str] = field(default_factory=dict)
    transport: Any = None  # where the model adapter's HTTP goes: the scripted model, or None for the network

    def use_function(self, function: str) -> None:
        """Give the process this function's deployed environment, as Lambda would."""
        if function == self.current:
            return
        for key in set(self.stack.function_env(self.current or "ChatFunction")):
            os.environ.pop(key, None)
        os.environ.update({**BASE_ENV, **self.stack.function_env(function), **self.overrides})
        wiring.reset(llm_transport=self.transport)
        self.current = function
        if function not in self.handlers:
            self.handlers[function] = load_handler(self.stack, function)

    def token(self, sub: str = "customer-7", role: str = "customer", customer_id: int | None = 7, **kw: Any) -> str:
        return mint_token(sub, role, customer_id, secret=SECRET, **kw)

    def lead(self) -> str:
        return self.token("lead-1", "support_lead", None)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = "default",
        raw_body: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        route = next((r for r in self.stack.routes if r.method == method and _matches(r.path, path)), None)
        function = route.function if route else "ChatFunction"  # unknown routes: any handler must 404
        event = json.loads((EVENTS / "chat.json").read_text())
        self.counter += 1
        event["routeKey"] = f"{method} {route.path if route else path}"
        event["rawPath"] = path.split("?")[0]
        query = path.split("?", 1)[1] if "?" in path else ""
        event["rawQueryString"] = query
        event.pop("queryStringParameters", None)
        if query:
            event["queryStringParameters"] = dict(kv.split("=", 1) for kv in query.split("&"))
        event["requestContext"]["http"]["method"] = method
        event["requestContext"]["http"]["path"] = event["rawPath"]
        event["requestContext"]["requestId"] = f"it-{self.counter}"
        event["headers"] = {"content-type": "application/json", **(headers or {})}
        if token == "default":
            token = self.token()
        if token:
            event["headers"]["authorization"] = f"Bearer {token}"
        event.pop("body", None)
        if raw_body is not None:
            event["body"] = raw_body
        elif body is not None:
            event["body"] = json.dumps(body)
        if route and "{" in route.path:
            event["pathParameters"] = _params(route.path, event["rawPath"])
        self.use_function(function)
        handler = self.handlers[function]
        out = handler(copy.deepcopy(event), None)
        return out["statusCode"], json.loads(out["body"]) if out.get("body") else None, out.get("headers", {})


def _matches(template: str, path: str) -> bool:
    a, b = template.split("/"), path.split("?")[0].split("/")
    return len(a) == len(b) and all(x == y or x.startswith("{") for x, y in zip(a, b, strict=True))


def _params(template: str, path: str) -> dict[str, str]:
    return {x[1:-1]: y for x, y in zip(template.split("/"), path.split("/"), strict=True) if x.startswith("{")}


def state_machine_targets(stack: Stack) -> dict[str, Target]:
    """The functions a state machine invokes (PaymentsFunction), each run in-process by its handler.

    The handler reads this process's environment: devstack.lambda_bridge.in_process refuses to run it
    when a setting it is deployed with differs here (the template gives every function the same table
    and payment settings, so the chat or lead function's environment serves).
    """
    return {
        stack.physical_ids[logical_id]: in_process(
            load_handler(stack, logical_id),
            logical_id,
            function_timeout(stack, logical_id),
            stack.function_env(logical_id),
        )
        for logical_id in invoked_by_state_machines(stack.sam_template)
    }


@contextmanager
def deployed_stack(parameters: dict[str, str]) -> Iterator[Stack]:
    """template.yaml deployed into moto (Step Functions executing, its Lambda tasks bridged to the handlers
    in-process) with the demo data, the chat function's environment in os.environ; the environment is
    restored afterwards."""
    saved = dict(os.environ)
    os.environ.update(BASE_ENV)
    try:
        with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
            deployed = deploy({"JwtSecret": SECRET, **parameters})
            env = deployed.function_env("ChatFunction")
            os.environ.update(env)
            import boto3

            seed(boto3.client("dynamodb"), env["CUSTOMER_DATA_TABLE"])
            with bridged(state_machine_targets(deployed)):
                yield deployed
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    # Tests drive many turns per customer per minute; test_rate_limit_api lowers it per test (api.overrides).
    with deployed_stack({"Transparency": "verbose", "TurnsPerMinute": "1000"}) as deployed:
        yield deployed


@pytest.fixture
def api(stack: Stack) -> Iterator[Api]:
    saved = dict(os.environ)
    model = ScriptedModel()
    client = Api(stack, model, transport=scripted_transport(model))
    client.use_function("ChatFunction")
    yield client
    os.environ.clear()
    os.environ.update(saved)
    wiring.reset()
