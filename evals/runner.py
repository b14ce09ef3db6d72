"""Tasks x k trials against a local stack: seed, play the customer over HTTP, let the stack settle, read the end
state, judge it, price it.

The stack is `make dev`'s (devstack/local.py), started here with the model asked for, or handed in (the suite's
test starts one for several things). Trials run one after another: a model fault armed for one trial must not meet
another's calls, and the AWS meter attributes everything between two marks to one trial.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

from evals.checks import judge
from evals.costs import AwsMeter, model_usd
from evals.faults import model_faults
from evals.results import RunResult, TrialResult, current_commit
from evals.seed import Trial, seed_trial
from evals.state import EndState, read_state, with_usage
from evals.task import Task

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
PROVIDERS = ("simulated", "anthropic", "openai", "bedrock")
CustomerFactory = Callable[[Task, Trial, Any], Any]


class Unavailable(RuntimeError):
    """The model asked for is not configured here; the message says what is missing."""


def stack_environ(provider: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment devstack.local.start gets so the agent runs on ``provider``."""
    env = dict(os.environ if environ is None else environ)
    model_keys = ("ANTHROPIC_", "OPENAI_", "LLM_PROVIDER", "SIMULATED_MODEL_DELAY_SECONDS", "BEDROCK_")
    clean = {k: v for k, v in env.items() if not k.startswith(model_keys)}
    if provider == "simulated":
        return clean
    if provider == "anthropic":
        if not env.get("ANTHROPIC_API_KEY"):
            raise Unavailable("MODEL=anthropic needs ANTHROPIC_API_KEY")
        return {**clean, **{k: v for k, v in env.items() if k.startswith("ANTHROPIC_")}}
    if provider == "openai":
        if not env.get("OPENAI_BASE_URL"):
            raise Unavailable("MODEL=openai needs OPENAI_BASE_URL (and OPENAI_API_KEY, OPENAI_MODEL)")
        return {**clean, **{k: v for k, v in env.items() if k.startswith("OPENAI_")}, "LLM_PROVIDER": "openai"}
    if provider == "bedrock":
        if not env.get("BEDROCK_MODEL_ID"):
            raise Unavailable("MODEL=bedrock needs BEDROCK_MODEL_ID (and AWS credentials that may invoke it)")
        return {**clean, **{k: v for k, v in env.items() if k.startswith("BEDROCK_")}, "LLM_PROVIDER": "bedrock"}
    raise Unavailable(f"MODEL={provider!r}: one of {', '.join(PROVIDERS)}")


def live_provider(environ: dict[str, str] | None = None) -> str | None:
    """``make eval-live``'s model: the first configured of Anthropic, an OpenAI-compatible endpoint, Bedrock."""
    env = os.environ if environ is None else environ
    if env.get("MODEL") in PROVIDERS[1:]:
        return env["MODEL"]
    if env.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    if env.get("OPENAI_BASE_URL") and env.get("OPENAI_API_KEY"):
        return "openai"
    if env.get("BEDROCK_MODEL_ID"):
        return "bedrock"
    return None


@contextmanager
def local_stack(provider: str, meter: AwsMeter | None = None) -> Iterator[Any]:
    """A local stack for ``provider``, stopped and this process's environment restored on the way out."""
    from devstack import local

    environ = stack_environ(provider)
    saved = dict(os.environ)
    try:
        with tempfile.TemporaryDirectory() as state, mock.patch.object(local, "STATE_DIR", Path(state)):
            stack = local.start(port=0, moto_port=0, environ=environ, schedule_seconds=3600)
            try:
                if meter is not None:
                    meter.attach(stack)
                yield stack
            finally:
                stack.stop()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def model_id(local: Any, provider: str) -> str:
    """The model the agent asks for (what it is priced as; the simulated model is priced as the template's)."""
    from support_agent.config import load_settings

    env = dict(local.stack.function_env("ChatFunction"))
    if provider == "openai":
        env.update(
            LLM_PROVIDER="openai",
            **({"OPENAI_MODEL": os.environ["OPENAI_MODEL"]} if os.environ.get("OPENAI_MODEL") else {}),
        )
    return load_settings(env).llm_model


def scripted(task: Task, trial: Trial, client: Any) -> Any:
    from evals.customer import ScriptedCustomer

    return ScriptedCustomer(task, trial, client)


def run_trial(
    local: Any, task: Task, number: int, http: Any, *, model: str, meter: AwsMeter | None, customer: CustomerFactory
) -> TrialResult:
    """One trial, judged; a trial that crashes fails with the reason as its difference."""
    failed = TrialResult(task_id=task.id, category=task.category, trial=number, model=model, passed=False)
    try:
        trial = seed_trial(local, task, number)
        mark = meter.mark() if meter is not None else None
        began = time.monotonic()
        with model_faults(local, task.model_faults) as faulted:
            conversation = customer(task, trial, http).run()
            latency = time.monotonic() - began
            if meter is not None:
                meter.wait_quiet()
        aws_usd: float | None = None
        requests: dict[str, int] = {}
        if meter is not None and mark is not None:
            aws_usd, requests = meter.since(mark, with_usage(EndState(), conversation.turns))
        state = read_state(local, trial, conversation, http)
    except Exception as exc:  # a broken trial is a failed trial; the run goes on
        return failed.model_copy(update={"differences": [f"the trial did not run to its end: {exc!r}"]})
    verdict = judge(task, trial, state)
    notes = [] if faulted else [f"model_faults {task.model_faults} not applied: the model is not the simulated one"]
    return failed.model_copy(
        update=dict(
            passed=verdict.passed and faulted,
            differences=verdict.differences + notes,
            forbidden=verdict.forbidden,
            iterations=state.iterations,
            tokens=state.tokens,
            input_tokens=state.input_tokens,
            output_tokens=state.output_tokens,
            model_usd=model_usd(model, state),
            aws_usd=aws_usd,
            aws_requests=requests,
            latency_seconds=round(latency, 3),
            turns=state.turns,
            errors=list(getattr(conversation, "errors", [])),
            final_reply=state.replies[-1] if state.replies else "",
        )
    )


def run_tasks(
    local: Any,
    tasks: Sequence[Task],
    k: int,
    *,
    provider: str = "simulated",
    meter: AwsMeter | None = None,
    customer: CustomerFactory = scripted,
    progress: Callable[[TrialResult], None] | None = None,
) -> RunResult:
    """Every task ``k`` times against ``local``; the run's result."""
    import httpx

    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    model = model_id(local, provider)
    commit = current_commit()
    trials: list[TrialResult] = []
    with httpx.Client(base_url=local.url, timeout=180) as http:
        for task in tasks:
            for number in range(1, k + 1):
                result = run_trial(local, task, number, http, model=model, meter=meter, customer=customer)
                result.commit = commit
                trials.append(result)
                if progress is not None:
                    progress(result)
    notes = []
    if meter is None:
        notes.append("AWS cost not measured: the stack was not started with the meter (bench/cost.py's probe)")
    if provider == "simulated":
        notes.append(f"tokens are the simulated model's; model cost is what they would cost at {model}'s list price")
    label = "simulated" if provider == "simulated" else model
    return RunResult(started_at=started, model=label, provider=provider, commit=commit, k=k, trials=trials, notes=notes)
