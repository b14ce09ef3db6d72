"""End-to-end fixtures: the whole local stack (`make dev`'s `devstack.local.start`) on free ports, and a browser.

`local_stack` is shared by every e2e module: the stack starts once, on first use, and stops as soon as the run
leaves tests/e2e, not at the end of the session. That matters because the stack shares this process with the
other tests: its moto server serves moto's global in-process backends, which `mock_aws` resets, and its
background threads (queue pollers, schedules) would otherwise keep calling AWS while those tests run.
`start()` also sets AWS_* and MOTO_PORT in os.environ (moto's Step Functions needs MOTO_PORT while the stack
runs); the environment is restored when the stack stops. Each module gets the stack holding exactly the seed
data (reset_to_seed), so any module may play the seed scenario.

`browser` is Debian's chromium driven by Playwright. Missing chromium (or playwright) skips the browser tests
locally, with the reason; under CI it fails them, since CI has to prove the browser path.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from devstack.local import REGION, LocalStack, start
from devstack.seed import seed

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Error, Page

E2E_DIR = Path(__file__).resolve().parent
ARTIFACTS = E2E_DIR / "artifacts"
CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
WAIT_MS = 20_000  # default wait of actions and expect() assertions
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


class _SharedStack:
    """One local stack at a time for the e2e tests, with the process environment saved around it."""

    def __init__(self) -> None:
        self.local: LocalStack | None = None
        self._saved_env: dict[str, str] | None = None
        self._dirty = False  # a module has used the stack since its data was last the seed data

    def get(self) -> LocalStack:
        """The running stack holding exactly the seed data (started now, or reset if a module used it)."""
        if self.local is not None and self._dirty:
            reset_to_seed(self.local)
        self._dirty = True
        if self.local is None:
            self._saved_env = dict(os.environ)
            try:
                # Always the simulated model: offline and deterministic, even when the shell has a real key.
                environ = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "STRIPE_"))}
                self.local = start(port=0, moto_port=0, environ=environ)
            except BaseException:
                self._restore_env()
                raise
        return self.local

    def stop(self) -> None:
        if self.local is not None:
            local, self.local = self.local, None
            local.stop()
        self._restore_env()

    def _restore_env(self) -> None:
        if self._saved_env is not None:
            os.environ.clear()
            os.environ.update(self._saved_env)
            self._saved_env = None


_shared = _SharedStack()


def reset_to_seed(local: LocalStack, timeout: float = 60.0) -> None:
    """Back to the state of a fresh stack: waits for running refund flows, empties every table, seeds again,
    and resets the simulated Stripe (no refunds, saved idempotency keys, faults or logged requests).

    Each e2e module may then play the seed scenario (order 1042 is refundable once, at the table and at the
    simulated Stripe alike), and per-customer state such as rate-limit counters does not carry over from one
    module to the next.
    """
    import boto3

    session = boto3.Session(region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")
    sfn = session.client("stepfunctions", endpoint_url=local.moto_url)
    deadline = time.monotonic() + timeout
    for machine in sfn.list_state_machines()["stateMachines"]:
        arn = machine["stateMachineArn"]
        while sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"executions of {arn} still running after {timeout} s")
            time.sleep(0.2)

    if local.stripe is not None:
        local.stripe.stripe.reset()
    ddb = session.client("dynamodb", endpoint_url=local.moto_url)
    resources = local.stack.template.get("Resources", {})
    for logical_id, resource in resources.items():
        if resource.get("Type") != "AWS::DynamoDB::Table":
            continue
        table = local.stack.physical_ids[logical_id]
        keys = [k["AttributeName"] for k in ddb.describe_table(TableName=table)["Table"]["KeySchema"]]
        for page in ddb.get_paginator("scan").paginate(TableName=table):
            for item in page["Items"]:
                ddb.delete_item(TableName=table, Key={k: item[k] for k in keys})
    seed(ddb, local.stack.physical_ids["CustomerDataTable"])


def _in_e2e(item: pytest.Item | None) -> bool:
    return item is not None and E2E_DIR in Path(str(item.path)).resolve().parents


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    # After the item's own fixtures are torn down: stop the stack when the next test is not an e2e test.
    try:
        yield
    finally:
        if not _in_e2e(nextitem):
            _shared.stop()


@pytest.fixture(scope="session")
def _stack_owner() -> Iterator[_SharedStack]:
    """Stops the stack at the end of the session whatever happened (e.g. -x stopped the run inside tests/e2e)."""
    yield _shared
    _shared.stop()


@pytest.fixture(scope="module")
def local_stack(_stack_owner: _SharedStack) -> LocalStack:
    """The running local stack: `.url`, `.moto_url`, `.tokens` (customers, leads, simulatedModel), `.stack`.

    Configured as `make dev` is, except that the model and Stripe are always the simulated ones
    (ANTHROPIC_* and STRIPE_* ignored).
    One stack serves all e2e modules of a run, but each module starts from the seed data (see reset_to_seed);
    within a module, tests share the data and run in file order.
    """
    return _stack_owner.get()


@pytest.fixture
def seeded_stack(local_stack: LocalStack) -> LocalStack:
    """The running stack reset to the seed data before this test (for tests that each spend the same order)."""
    reset_to_seed(local_stack)
    return local_stack


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(reason: str) -> NoReturn:
    if _ci():
        pytest.fail(f"{reason} — CI must run the browser test (.ci/run installs Debian's chromium)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Debian chromium (never a Playwright-downloaded browser). Module-scoped: Playwright's sync API
    keeps an event loop running in the main thread while it is open, and a later module's ``anyio.run`` (the
    MCP function's handler, run in-process by the tests) would refuse to start under it."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _unavailable(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[test]')")
    # Assertions wait on work behind the API (worker processes, moto); 5 s is short on a busy CI machine.
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


# The event feed, as the chat page follows it and the console follows a hand-off's conversation: a long poll (up to
# 20 s) is in flight whenever the page follows one, and the page cancels it when it is left. settle() does not wait.
FEED_POLL = re.compile(r"/api/(conversations|handoffs)/[^/?]+/events(\?|$)")


class PageWatch:
    """Console errors and uncaught exceptions of one page (across navigations), and its requests in flight (the
    event feed's long polls left out: FEED_POLL)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.in_flight = 0

    def console(self, msg: ConsoleMessage) -> None:
        if msg.type == "error":
            where = msg.location.get("url", "") if msg.location else ""
            self.errors.append(f"console.error: {msg.text} ({where})")

    def page_error(self, err: Error) -> None:
        self.errors.append(f"pageerror: {err.message}")

    def request_started(self, request: Any) -> None:
        if not FEED_POLL.search(request.url):
            self.in_flight += 1

    def request_ended(self, request: Any) -> None:
        if not FEED_POLL.search(request.url):
            self.in_flight = max(0, self.in_flight - 1)

    def settle(self, pg: Page, quiet_ms: int = 300) -> None:
        """Waits until no request has been in flight for quiet_ms (before navigating away: no aborted calls)."""
        deadline = time.monotonic() + WAIT_MS / 1000
        quiet_since = None
        while time.monotonic() < deadline:
            if self.in_flight:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif (time.monotonic() - quiet_since) * 1000 >= quiet_ms:
                return
            pg.wait_for_timeout(50)  # lets Playwright deliver the request events

    def assert_clean(self, pg: Page) -> None:
        """Settles, then fails on any console error or uncaught exception the page had."""
        self.settle(pg)
        assert self.errors == [], self.errors


@pytest.fixture
def page(browser: Browser) -> Iterator[tuple[Page, PageWatch]]:
    """A fresh browser context and page (no shared sessionStorage), watched: see PageWatch."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(WAIT_MS)
    pg = context.new_page()
    watch = PageWatch()
    pg.on("console", watch.console)
    pg.on("pageerror", watch.page_error)
    pg.on("request", watch.request_started)
    pg.on("requestfinished", watch.request_ended)
    pg.on("requestfailed", watch.request_ended)
    try:
        yield pg, watch
    finally:
        context.close()


@pytest.fixture
def screenshot(request: pytest.FixtureRequest) -> Callable[[Any, str], Path]:
    """screenshot(page, "01-chat") → tests/e2e/artifacts/<test name>-01-chat.png (full page)."""
    ARTIFACTS.mkdir(exist_ok=True)

    def take(pg: Any, step: str) -> Path:
        path = ARTIFACTS / f"{request.node.name}-{step}.png"
        pg.screenshot(path=str(path), full_page=True)
        return path

    return take
