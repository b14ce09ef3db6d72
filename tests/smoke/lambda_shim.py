"""Serve one event with a built function, the way the Lambda Python runtime would (stdlib only).

Run as ``python3.13 -I -S -B lambda_shim.py SPEC.json``: isolated (no PYTHONPATH, no user or system
site-packages), so nothing is importable but the standard library and the directories named in the
spec, in the order Lambda puts them on ``sys.path``: the function's code (``/var/task``), the layer
(``/opt/python/lib/python3.X/site-packages``, ``/opt/python``), then what the runtime itself ships
(boto3). A module missing from the layer fails the import here exactly as it would in Lambda.

The spec is ``{"task_root", "layer_root", "runtime_root", "handler", "event", "timeout_seconds",
"function_name", "result_path"}``; the result file gets ``{"result"}`` or ``{"error", "traceback"}``,
plus where every imported top-level package came from and the init and invoke times.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any


class Context:
    """The attributes and method of the runtime's LambdaContext that handlers and Powertools read."""

    def __init__(self, function_name: str, timeout_seconds: float) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = 512
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "smoke"
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def lambda_path(task_root: str, layer_root: str, runtime_root: str) -> list[str]:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    layer = Path(layer_root)
    stdlib = [p for p in sys.path if p and "site-packages" not in p and Path(p).name != "smoke"]
    return [task_root, str(layer / "lib" / version / "site-packages"), str(layer), runtime_root, *stdlib]


def origins(roots: dict[str, str]) -> dict[str, list[str]]:
    """Top-level packages imported so far, grouped by the root they were loaded from."""
    found: dict[str, set[str]] = {name: set() for name in roots}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        for label, root in roots.items():
            if path.startswith(root.rstrip("/") + "/"):
                found[label].add(name.split(".")[0])
    return {label: sorted(names) for label, names in found.items()}


def uncompiled(roots: list[str]) -> list[str]:
    """Modules loaded from these roots without a precompiled, never-rechecked .pyc: Python compiled them
    in memory. Lambda's /opt and /var/task are read-only, so a cold start pays for each, every time."""
    out = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if not path.endswith(".py") or not any(path.startswith(root.rstrip("/") + "/") for root in roots):
            continue
        try:
            with open(importlib.util.cache_from_source(path), "rb") as fh:
                header = fh.read(8)
        except OSError:
            out.append(name)
            continue
        if int.from_bytes(header[4:8], "little") != 0b01:  # PEP 552 flags: hash-based, source not checked
            out.append(name)
    return sorted(out)


def main(spec_path: str) -> int:
    spec: dict[str, Any] = json.loads(Path(spec_path).read_text())
    sys.path[:] = lambda_path(spec["task_root"], spec["layer_root"], spec["runtime_root"])
    out: dict[str, Any] = {"python": sys.version.split()[0]}
    started = time.perf_counter()
    try:
        module_name, function_name = spec["handler"].rsplit(".", 1)
        handler = getattr(importlib.import_module(module_name), function_name)
        out["init_ms"] = round((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        out["result"] = handler(spec["event"], Context(spec["function_name"], float(spec["timeout_seconds"])))
        out["invoke_ms"] = round((time.perf_counter() - started) * 1000)
    except BaseException as exc:  # reported to the test, which shows the traceback
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()
    roots = {"task": spec["task_root"], "layer": spec["layer_root"], "runtime": spec["runtime_root"]}
    out["origins"] = origins(roots)
    out["uncompiled"] = uncompiled([spec["task_root"], spec["layer_root"]])
    Path(spec["result_path"]).write_text(json.dumps(out, default=str))
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
