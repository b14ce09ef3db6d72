"""One cold start, in a fresh process: import the handler module, then serve its first event.

Run by bench/coldstart.py as ``python bench/cold_child.py HANDLER_FILE EVENT_FILE`` under either
venv; prints one JSON line. Only the standard library is imported before the clock starts, so the
times are the handler's own (interpreter start-up, the same for everyone, is reported apart).
"""

import importlib.util
import json
import os
import resource
import sys
import time
import types

# Run as a script, this file's folder (bench/) heads sys.path, and a module there (bench/mcp.py) would shadow
# the handler's package of the same name (the MCP SDK): the handler gets the path a function has.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]


class Context:
    function_name = "bench"
    aws_request_id = "bench-request"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench"
    memory_limit_in_mb = 512

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 29_000


def peak_rss_mb() -> float:
    """This process's peak resident set: VmHWM, which starts afresh at exec. (getrusage's ru_maxrss
    keeps the high-water mark of the forking parent across exec on Linux, so it would report the
    benchmark's own size.)"""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    path, event_path = sys.argv[1], sys.argv[2]
    with open(event_path) as fh:
        event = json.load(fh)
    snapstart = os.environ.get("BENCH_SNAPSTART") == "1"
    before: list = []
    after: list = []
    if snapstart:  # the runtime's hook module, as Lambda provides it to SnapStart functions
        fake = types.ModuleType("snapshot_restore_py")
        fake.register_before_snapshot = before.append
        fake.register_after_restore = after.append
        sys.modules["snapshot_restore_py"] = fake
    modules_before = len(sys.modules)
    c0, t0 = time.process_time(), time.perf_counter()
    spec = importlib.util.spec_from_file_location("handler_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for hook in before:  # done once when the version is published, then frozen in the snapshot
        hook()
    c1, t1 = time.process_time(), time.perf_counter()
    for hook in after:  # every restore
        hook()
    out = module.handler(event, Context())
    c2, t2 = time.process_time(), time.perf_counter()
    status = out.get("statusCode", 200) if isinstance(out, dict) else 200
    failures = out.get("batchItemFailures") if isinstance(out, dict) else None
    print(
        json.dumps(
            {
                "import_ms": (t1 - t0) * 1000,
                "first_event_ms": (t2 - t1) * 1000,
                "total_ms": (t2 - (t1 if snapstart else t0)) * 1000,
                # this process's own CPU: what remains when waiting on moto and the model is taken out
                "cpu_ms": (c2 - (c1 if snapstart else c0)) * 1000,
                "peak_rss_mb": peak_rss_mb(),
                "modules": len(sys.modules) - modules_before,
                "status": status,
                "failures": len(failures) if failures else 0,
                "body": str(out.get("body", ""))[:300] if isinstance(out, dict) else str(out)[:300],
            }
        )
    )


if __name__ == "__main__":
    main()
