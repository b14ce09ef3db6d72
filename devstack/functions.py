"""Local Lambda: a small pool of worker processes per function, each with the function's deployed env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from devstack.stack import REPO_ROOT, Stack

LAYER_DIR = REPO_ROOT / "layers" / "common"


class FunctionError(Exception):
    """The handler raised: on AWS the caller sees a 500 (API), a retried message (SQS), or a task error
    named ``error_type`` (Step Functions: the exception's class name, which Retry/Catch match on)."""

    def __init__(self, message: str, error_type: str = "Exception") -> None:
        super().__init__(message)
        self.error_type = error_type


class _Worker:
    def __init__(self, code_dir: Path, handler: str, name: str, timeout: float, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devstack.worker", str(code_dir), handler, name, str(timeout)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=dict(env),
            cwd=REPO_ROOT,
            text=True,
        )
        self._stdin: IO[str] = self.proc.stdin  # type: ignore[assignment]
        self._stdout: IO[str] = self.proc.stdout  # type: ignore[assignment]
        ready = self._stdout.readline()
        if not ready:
            raise RuntimeError(f"{name}: the worker exited during init (see its stderr above)")

    def invoke(self, event: Any) -> Any:
        self._stdin.write(json.dumps(event) + "\n")
        self._stdin.flush()
        line = self._stdout.readline()
        if not line:
            raise FunctionError("the function process died", "Runtime.ExitError")  # Lambda's name for it
        out = json.loads(line)
        if "error" in out:
            raise FunctionError(out["error"], str(out.get("errorType") or "Exception"))
        return out["result"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self._stdin.close()
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class FunctionPool:
    """Up to ``max_workers`` warm instances; a busy pool starts another, as Lambda scales out."""

    def __init__(
        self, name: str, code_dir: Path, handler: str, timeout: float, env: Mapping[str, str], max_workers: int = 4
    ) -> None:
        self.name, self._code_dir, self._handler, self._timeout = name, code_dir, handler, timeout
        self._env = dict(env)
        self._max = max_workers
        self._idle: list[_Worker] = []
        self._all: list[_Worker] = []
        self._lock = threading.Condition()

    def _acquire(self) -> _Worker:
        with self._lock:
            while not self._idle and len(self._all) >= self._max:
                self._lock.wait()
            if self._idle:
                return self._idle.pop()
            worker_slot = len(self._all)
            self._all.append(None)  # type: ignore[arg-type]  # reserve the slot while starting
        try:
            worker = _Worker(self._code_dir, self._handler, self.name, self._timeout, self._env)
        except Exception:
            with self._lock:
                self._all.pop(worker_slot)
                self._lock.notify()
            raise
        with self._lock:
            self._all[worker_slot] = worker
        return worker

    def invoke(self, event: Any) -> Any:
        worker = self._acquire()
        try:
            result = worker.invoke(event)
        except FunctionError:
            if worker.proc.poll() is not None:  # a dead instance is replaced, never reused
                with self._lock:
                    if worker in self._all:  # (a pool closed under a running call has forgotten it already)
                        self._all.remove(worker)
                    self._lock.notify()
                raise
            with self._lock:
                self._idle.append(worker)
                self._lock.notify()
            raise
        with self._lock:
            self._idle.append(worker)
            self._lock.notify()
        return result

    def warm(self) -> None:
        worker = self._acquire()
        with self._lock:
            self._idle.append(worker)
            self._lock.notify()

    def close(self) -> None:
        with self._lock:
            for worker in self._all:
                if worker is not None:
                    worker.close()
            self._all.clear()
            self._idle.clear()


def function_timeout(stack: Stack, logical_id: str) -> float:
    props = stack.sam_template["Resources"][logical_id].get("Properties", {})
    glob = stack.sam_template.get("Globals", {}).get("Function", {})
    return float(props.get("Timeout", glob.get("Timeout", 3)))


def pools_for(stack: Stack, base_env: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, FunctionPool]:
    """One pool per AWS::Serverless::Function of the template, each with its deployed environment."""
    pythonpath = os.pathsep.join([str(LAYER_DIR), str(REPO_ROOT)])
    pools = {}
    for logical_id, resource in stack.sam_template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        code_dir, handler = stack.function_handler(logical_id)
        env = {**base_env, **stack.function_env(logical_id), **overrides, "PYTHONPATH": pythonpath}
        pools[logical_id] = FunctionPool(logical_id, code_dir, handler, function_timeout(stack, logical_id), env)
    return pools
