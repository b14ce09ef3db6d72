"""The benchmarks' world: moto and the instant model, each in its own process, and the stack.

Both servers run out of process so that neither their imports nor their CPU land on the side being
measured. The stack is template.yaml deployed into the moto server (devstack.stack), so every
handler runs with the environment CloudFormation resolved for it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import httpx

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
PEERS_PYTHON = ROOT / "bench" / ".venv-peers" / "bin" / "python"
# What a Lambda function of ours has: the layer's requirements and boto3, nothing of the dev tools
# (.venv's rich and click, for one, would make `import httpx` import its CLI). `make bench` builds it.
LAMBDA_PYTHON = ROOT / "bench" / ".venv-lambda" / "bin" / "python"
JWT_SECRET = "bench-secret-0123456789abcdef-0123456789"
AWS_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
}


def run_module(module: str, args: list[str], env: dict[str, str], timeout: float) -> str:
    """``python -m <module> <args>`` (.venv's) in the repository's root: its stdout; a failure raises with the end
    of its stderr."""
    proc = subprocess.run(
        [str(PYTHON), "-m", module, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{module} child failed:\n{proc.stderr[-4000:]}")
    return proc.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(PYTHON), "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url + "/moto-api/")
        yield url
    finally:
        _stop(proc)


@contextlib.contextmanager
def instant_model() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-m", "bench.instant_model"], stdout=subprocess.PIPE, cwd=ROOT, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[Any]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:  # a busy server can miss SIGTERM's window: end it for sure
        proc.kill()
        proc.wait(10)


@dataclass
class World:
    moto_url: str
    model_url: str
    stack: Any  # devstack.stack.Stack

    def env(self, function: str | None = None) -> dict[str, str]:
        """A child process's environment: the function's deployed variables, local AWS, the model."""
        base = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            **AWS_ENV,
            "AWS_ENDPOINT_URL": self.moto_url,
            "ANTHROPIC_API_KEY": "sk-bench",
            "ANTHROPIC_BASE_URL": self.model_url,
            "OPENAI_API_KEY": "sk-bench",
            "TURNS_PER_MINUTE": "10000",
            "POWERTOOLS_TRACE_DISABLED": "1",
            "POWERTOOLS_METRICS_NAMESPACE": "Bench",
            "PYDANTIC_DISABLE_PLUGINS": "__all__",  # ours sets it in the template; the peers get it too
            "PYTHONPATH": f"{ROOT / 'layers' / 'common'}:{ROOT}",
        }
        chat = self.stack.function_env("ChatFunction")
        base["CUSTOMER_DATA_TABLE"] = chat["CUSTOMER_DATA_TABLE"]
        if function:
            base.update(self.stack.function_env(function))
            base["ANTHROPIC_BASE_URL"] = self.model_url  # the template's default points at the real API
        base["JWT_SECRET"] = JWT_SECRET
        return base


@contextlib.contextmanager
def world() -> Iterator[World]:
    import boto3

    from devstack.seed import seed
    from devstack.stack import deploy

    for key, value in AWS_ENV.items():
        os.environ.setdefault(key, value)
    with moto_server() as moto_url, instant_model() as model_url:
        session = boto3.Session(region_name="us-east-1")
        stack = deploy({"JwtSecret": JWT_SECRET, "Transparency": "verbose"}, session=session, endpoint_url=moto_url)
        ddb = session.client("dynamodb", endpoint_url=moto_url)
        seed(ddb, stack.function_env("ChatFunction")["CUSTOMER_DATA_TABLE"])
        # The clients our code builds in this process itself (wiring's: the support policy's SSM read) reach the
        # local stack too, as a deployed function's reach its region's endpoints.
        with mock.patch.dict(os.environ, {"AWS_ENDPOINT_URL": moto_url}):
            yield World(moto_url, model_url, stack)


def quiet_logs() -> None:
    """Send every log handler writing to the console to /dev/null: records are still formatted and
    written (their cost stays in the measurement), they just do not flood the tables."""
    import logging

    sink = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    loggers = [logging.getLogger()] + [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if isinstance(logging.root.manager.loggerDict[name], logging.Logger)
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stdout, sys.stderr):
                handler.setStream(sink)
