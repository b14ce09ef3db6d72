"""Step Functions -> Lambda without Docker: moto's Lambda invocations dispatched to Python callables.

moto's Step Functions runs a ``arn:aws:states:::lambda:invoke`` task by calling Lambda's Invoke on moto,
which runs the function's code in a Docker container (``LambdaFunction._invoke_lambda``). The local
stack and the tests have no Docker and no real code package (devstack/stack.py deploys a placeholder),
so `bridged` replaces that one method, by function name:

* ``make dev`` (devstack/local.py): the function's worker pool (devstack/functions.py), each worker
  with the function's deployed environment, as every other function runs locally;
* the tests: the handler itself, in-process (`in_process`), since ``mock_aws`` lives in the test's
  process and a worker could not reach it.

What Step Functions sees is what Lambda gives it: the handler's answer as the payload, or, when it
raised, ``{"errorType": <exception class name>, "errorMessage": …}`` flagged as a function error, so
the state machine's Retry and Catch match on the error type exactly as on AWS
(moto/stepfunctions/parser/.../state_task_service_lambda.py reads ``errorType``). A function with no
target keeps moto's own behaviour.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from devstack.worker import lambda_context

Target = Callable[[Any], Any]  # the event in, the answer out; raises as the function would

_lock = threading.Lock()


class EnvironmentMismatch(RuntimeError):
    """An in-process handler would run with settings its deployed function does not have."""


def error_type(exc: BaseException) -> str:
    """Lambda's ``errorType``: the exception's class name (a worker's failure carries the one it reported)."""
    return str(getattr(exc, "error_type", None) or type(exc).__name__)


def _answer(target: Target, event: Any) -> tuple[str, bool, str]:
    """moto's ``_invoke_lambda`` result: (payload JSON, function error?, log text)."""
    if isinstance(event, (str, bytes)):  # moto passes "{}" for an empty body, else the parsed JSON
        event = json.loads(event or "{}")
    try:
        result = target(event)
    except Exception as exc:
        return json.dumps({"errorType": error_type(exc), "errorMessage": str(exc)}), True, ""
    return json.dumps(result, default=str), False, ""


@contextmanager
def bridged(targets: Mapping[str, Target]) -> Iterator[None]:
    """While open, a moto Lambda invocation of a function named in ``targets`` (its physical name) runs there."""
    from moto.awslambda.models import LambdaFunction

    with _lock:
        original = LambdaFunction.__dict__["_invoke_lambda"]

        def invoke(self: Any, event: Any = None) -> tuple[str, bool, str]:
            target = targets.get(self.function_name)
            if target is None:
                return original(self, event)  # type: ignore[no-any-return]
            return _answer(target, event)

        LambdaFunction._invoke_lambda = invoke  # type: ignore[method-assign]
    try:
        yield
    finally:
        with _lock:
            LambdaFunction._invoke_lambda = original  # type: ignore[method-assign]


def settings_names() -> frozenset[str]:
    """The environment variables `support_agent.config.Settings` reads."""
    from support_agent.config import Settings

    return frozenset(f.alias for f in Settings.model_fields.values() if f.alias)


def in_process(handler: Callable[[Any, Any], Any], name: str, timeout: float, env: Mapping[str, str]) -> Target:
    """A handler called in this process, as its deployed function ``name`` (``env``: its deployed environment).

    The handler reads its settings from this process's environment, shared with whatever the test is
    running as, so every setting the function is deployed with must have the same value here (the
    template gives the refunding functions the same payment and table settings; a test that overrides
    one must override it for all). A difference fails the invocation with `EnvironmentMismatch`
    instead of running the function under another's configuration.
    """
    checked = {k: v for k, v in env.items() if k in settings_names()}

    def call(event: Any) -> Any:
        differs = sorted(k for k, v in checked.items() if os.environ.get(k) != v)
        if differs:
            raise EnvironmentMismatch(f"{name} is deployed with other values of {', '.join(differs)}")
        return handler(event, lambda_context(name, timeout))

    return call


def invoked_by_state_machines(sam_template: Mapping[str, Any]) -> list[str]:
    """Logical ids of the functions a state machine invokes (a ``Fn::GetAtt <function>.Arn`` substitution)."""
    resources = sam_template["Resources"]
    found: list[str] = []
    for resource in resources.values():
        if resource.get("Type") != "AWS::Serverless::StateMachine":
            continue
        for value in resource.get("Properties", {}).get("DefinitionSubstitutions", {}).values():
            ref = value.get("Fn::GetAtt") if isinstance(value, dict) else None
            if ref and ref[1] == "Arn" and resources.get(ref[0], {}).get("Type") == "AWS::Serverless::Function":
                found.append(ref[0])
    return sorted(set(found))
