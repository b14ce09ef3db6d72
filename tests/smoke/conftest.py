"""The built-artifact smoke test's tools: `sam build` per architecture, the runtime's Python, a Lambda-like runner.

What it needs from the machine: the SAM CLI (``make sam`` puts it in ``.venv-sam/``, its own venv:
its pins clash with the project's) and a Python matching the template's runtime (``python3.13``,
pyenv's on this kind of machine). Missing either skips the smoke test locally, with the reason, and
fails it under CI (``CI=true``), where it is part of ``make test``.

Builds go to ``.aws-sam-smoke/<arch>/`` with ``--cached``: SAM downloads the layer's dependencies
again only when ``layers/common/requirements.txt`` changes, and otherwise only copies. Each
architecture builds in its own working directory (SAM keeps dependencies under the working
directory's ``.aws-sam/deps`` and deletes those its build graph does not know). Both build at once,
started as soon as collection shows the run includes this test, so they overlap the tests before
it (under pytest-xdist, only once the worker running it needs them). A file lock keeps each tree
to one test run; a second run on the same checkout builds into a private tree instead of waiting.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import IO, Any, NoReturn

import pytest

from devstack.stack import TEMPLATE_PATH, load_template

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / ".aws-sam-smoke"
SAM_VENV = REPO / ".venv-sam"
ARCHITECTURES = ("x86_64", "arm64")
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}
HOST_ARCH = _MACHINES.get(platform.machine().lower())  # Lambda's name for this machine's architecture
# What the Lambda runtime ships beside the layer (boto3; the exact version varies by region and over
# time, this one is of the python3.13 runtime's age). The layer's own botocore (aws-xray-sdk needs it)
# shadows the runtime's, as in Lambda, where /opt/python comes before the runtime's packages.
RUNTIME_PACKAGES = ("boto3==1.40.4",)
BUILD_TIMEOUT_SECONDS = 900


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """Skip locally; fail under CI, where the smoke test must run."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: the built-artifact smoke test is part of make test)", pytrace=False)
    pytest.skip(reason)


# ------------------------------------------------------------------ tools


def template_runtime() -> str:
    """The functions' runtime from template.yaml's Globals, e.g. ``python3.13``."""
    return str(load_template(TEMPLATE_PATH)["Globals"]["Function"]["Runtime"])


def _probe(executable: str, version: str) -> Path | None:
    """The real interpreter behind ``executable`` (a pyenv shim resolves to it) if it is ``version``."""
    try:
        out = subprocess.run(
            [executable, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); print(sys.executable)"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out[1]) if len(out) == 2 and out[0] == version else None


def find_python(runtime: str) -> Path | None:
    """``$SMOKE_PYTHON``, ``pythonX.Y`` on PATH, or pyenv's ``versions/X.Y*``: the first that really is X.Y."""
    version = runtime.removeprefix("python")
    candidates = [os.environ.get("SMOKE_PYTHON", ""), shutil.which(f"python{version}") or ""]
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += [str(p) for p in sorted(pyenv_root.glob(f"versions/{version}*/bin/python{version}"), reverse=True)]
    for candidate in filter(None, candidates):
        found = _probe(candidate, version)
        if found:
            return found
    return None


def find_tool(name: str) -> Path | None:
    """A tool from ``.venv-sam/bin`` (``make sam``), else from PATH."""
    local = SAM_VENV / "bin" / name
    if local.exists():
        return local
    found = shutil.which(name)
    return Path(found) if found else None


@dataclass(frozen=True)
class Tools:
    sam: Path
    python: Path  # the runtime's Python (python3.13), a real interpreter, not a shim
    runtime: str  # "python3.13"
    uv: Path | None


@pytest.fixture(scope="session")
def tools() -> Tools:
    runtime = template_runtime()
    sam = find_tool("sam")
    if sam is None:
        unavailable("the SAM CLI is missing: `make sam` installs it into .venv-sam/")
    python = find_python(runtime)
    if python is None:
        unavailable(f"no {runtime} (the template's runtime) found: install it with pyenv, or set SMOKE_PYTHON")
    if HOST_ARCH is None:
        unavailable(f"unknown host architecture {platform.machine()!r}")
    return Tools(sam, python, runtime, find_tool("uv"))


# ------------------------------------------------------------------ builds


def _lock(path: Path, wait: bool = True) -> IO[str] | None:
    """An exclusive lock held until the returned file is closed (or the process ends); None if busy."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        handle.close()
        return None
    return handle


def build_env(tools: Tools) -> dict[str, str]:
    """The environment `sam build` runs in: the runtime's Python first on PATH, no project source path."""
    env = dict(os.environ)
    env["PATH"] = f"{tools.python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["SAM_CLI_TELEMETRY"] = "0"
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):  # the Makefile exports the repo's source tree
        env.pop(name, None)
    # The layer resolves from the package index alone, as a deploy pipeline's would. Some machines'
    # pip.conf adds file:// mirrors, whose hits lambda-builders re-wheels one pip process at a time
    # (it doubled the build here). Set PIP_CONFIG_FILE to keep a config file of your own.
    env.setdefault("PIP_CONFIG_FILE", os.devnull)
    return env


@dataclass
class Build:
    """One `sam build` of template.yaml for one architecture."""

    arch: str
    root: Path  # .aws-sam-smoke/<arch>: the working directory (SAM's deps cache lives here too)
    returncode: int
    seconds: float

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    @property
    def log(self) -> str:
        return (self.root / "build.log").read_text(errors="replace")

    @cached_property
    def template(self) -> dict[str, Any]:
        """The built template: CodeUri/ContentUri point at the built directories."""
        return load_template(self.build_dir / "template.yaml")

    def function_dir(self, logical_id: str) -> Path:
        return self.build_dir / self.template["Resources"][logical_id]["Properties"]["CodeUri"]

    def handler(self, logical_id: str) -> str:
        return str(self.template["Resources"][logical_id]["Properties"]["Handler"])

    def layer_dir(self, logical_id: str = "CommonLayer") -> Path:
        return self.build_dir / self.template["Resources"][logical_id]["Properties"]["ContentUri"]


def precompile_args() -> list[str]:
    """The Makefile's PRECOMPILE: what `make build` runs over the build, so the smoke test ships the same."""
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith("PRECOMPILE"):
            return line.split(":=", 1)[1].split()
    raise AssertionError("the Makefile defines no PRECOMPILE")


def sam_build_command(tools: Tools, arch: str) -> list[str]:
    return [
        str(tools.sam),
        "build",
        "--template-file",
        str(TEMPLATE_PATH),
        "--build-dir",
        "build",
        "--cache-dir",
        "cache",
        "--cached",
        "--parameter-overrides",
        f"Architecture={arch}",
    ]


@dataclass
class _Running:
    root: Path
    proc: subprocess.Popen[bytes]
    started: float
    log: IO[bytes]
    lock: IO[str] | None  # None: a private tree, deleted at the end of the session


_RUNNING: dict[str, _Running] = {}


def start_builds(tools: Tools, early: bool = True) -> None:
    """Start `sam build` for every architecture not started yet; each tree stays locked until the session ends.

    ``early``: started before the test needs them (at collection), so niced; otherwise the test waits for them."""
    env = build_env(tools)
    for arch in ARCHITECTURES:
        if arch in _RUNNING:
            continue
        # The shared tree (warm SAM cache) unless another test run on this checkout holds it: then a
        # private, cold one, rather than waiting for that whole run to end.
        lock = _lock(WORK / f"{arch}.lock", wait=False)
        root = WORK / arch if lock else WORK / f"{arch}-{os.getpid()}"
        root.mkdir(parents=True, exist_ok=True)
        log = (root / "build.log").open("wb")
        # Started early, the builds run beside other tests: niced, they yield the CPU to them.
        nice = [nice_bin, "-n", "10"] if early and (nice_bin := shutil.which("nice")) else []
        proc = subprocess.Popen(
            [*nice, *sam_build_command(tools, arch)],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopping it stops its pip processes too
        )
        _RUNNING[arch] = _Running(root, proc, time.time(), log, lock)


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: only a run that keeps this test builds
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the builds as soon as the run is known to include this smoke test, so they overlap the
    tests collected before it; without the tools, leave it to the `tools` fixture to skip or fail."""
    here = Path(__file__).parent
    if config.option.collectonly or not any(here in Path(str(item.path)).parents for item in items):
        return
    if hasattr(config, "workerinput"):
        # A pytest-xdist worker: every worker collects every test, but only the one given this module runs
        # it, and which one is not known yet. That one builds when the `builds` fixture asks (no overlap),
        # rather than each worker building, all but one of them into a private, cold tree for nothing.
        return
    runtime = template_runtime()
    sam, python = find_tool("sam"), find_python(runtime)
    if sam is not None and python is not None and HOST_ARCH is not None:
        start_builds(Tools(sam, python, runtime, find_tool("uv")))


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def pytest_sessionfinish() -> None:
    """Never leave a build running (an interrupted or deselected run), nor its lock held."""
    for running in _RUNNING.values():
        _stop(running.proc)
        running.log.close()
        if running.lock is None:
            shutil.rmtree(running.root, ignore_errors=True)
        else:
            running.lock.close()
    _RUNNING.clear()


@pytest.fixture(scope="session")
def builds(tools: Tools) -> dict[str, Build]:
    """`sam build` for every architecture (started at collection, or now), waited for."""
    start_builds(tools, early=False)  # those not started at collection (under pytest-xdist: all of them)
    results: dict[str, Build] = {}
    for arch in ARCHITECTURES:
        running = _RUNNING[arch]
        try:
            returncode = running.proc.wait(timeout=BUILD_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            returncode = _stop(running.proc)
        if returncode == 0:  # then `make build`'s second step: the runtime's Python precompiles everything
            command = [str(tools.python), *precompile_args(), str(running.root / "build")]
            returncode = subprocess.run(command, stdout=running.log, stderr=subprocess.STDOUT, timeout=600).returncode
        running.log.flush()
        finished = (running.root / "build.log").stat().st_mtime  # not now: it may have ended long ago
        results[arch] = Build(arch, running.root, returncode, round(finished - running.started, 1))
    (WORK / "timings.json").write_text(json.dumps({arch: b.seconds for arch, b in results.items()}, indent=2) + "\n")
    return results


@pytest.fixture(scope="session")
def host_build(builds: dict[str, Build]) -> Build:
    """The build for this machine's architecture: the one whose functions can run here."""
    build = builds[HOST_ARCH or "x86_64"]
    assert build.returncode == 0, f"sam build ({build.arch}) failed:\n{build.log[-4000:]}"
    return build


# ------------------------------------------------------------------ the runtime's own packages


@pytest.fixture(scope="session")
def runtime_root(tools: Tools) -> Path:
    """boto3 for the runtime's Python, standing in for what Lambda ships (/var/lang/.../site-packages)."""
    version = tools.runtime.removeprefix("python")
    root = WORK / f"runtime-{version}-{'-'.join(RUNTIME_PACKAGES)}"
    done = root / ".installed"
    lock = _lock(WORK / "runtime.lock")
    assert lock is not None  # a waiting lock is always had
    with lock:
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            if tools.uv is not None:
                command = [str(tools.uv), "pip", "install", "-q", "--python", str(tools.python), "--target"]
            else:
                command = [str(tools.python), "-m", "pip", "install", "-q", "--target"]
            subprocess.run([*command, str(root), *RUNTIME_PACKAGES], check=True, timeout=600)
            done.write_text("\n".join(RUNTIME_PACKAGES) + "\n")
    return root
