"""One local "Lambda instance": imports a function's handler under its own environment and serves
events from stdin, one JSON line in, one JSON line out.

Each function gets its own processes, as on Lambda: module state, settings and clients never leak
between functions. Anything the handler prints goes to stderr, so stdout stays the protocol.

An answer is ``{"result": …}`` or, when the handler raised, ``{"error": "<type>: <message>",
"errorType": "<type>"}``: the exception's class name is what Lambda reports as ``errorType``, and what
a state machine's Retry/Catch match on (devstack/lambda_bridge.py).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def lambda_context(name: str, timeout_s: float) -> Any:
    """What Lambda passes a handler, with ``get_remaining_time_in_millis`` counting down from now."""
    deadline = time.monotonic() + timeout_s
    return SimpleNamespace(
        function_name=name,
        memory_limit_in_mb=512,
        invoked_function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{name}",
        aws_request_id=f"local-{time.time_ns()}",
        get_remaining_time_in_millis=lambda: max(0, int((deadline - time.monotonic()) * 1000)),
    )


def main() -> None:
    code_dir, handler_spec, name, timeout_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    protocol = sys.stdout
    sys.stdout = sys.stderr
    module_name, func_name = handler_spec.rsplit(".", 1)
    spec = importlib.util.spec_from_file_location(f"fn_{name}", Path(code_dir) / f"{module_name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    handler = getattr(module, func_name)
    protocol.write(json.dumps({"ready": True}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        event = json.loads(line)
        try:
            out = {"result": handler(event, lambda_context(name, timeout_s))}
        except Exception as exc:  # an unhandled error is what Lambda reports as a function error
            traceback.print_exc()
            out = {"error": f"{type(exc).__name__}: {exc}", "errorType": type(exc).__name__}
        protocol.write(json.dumps(out, default=str) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
