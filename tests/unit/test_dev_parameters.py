"""`make dev PARAMS="..."`: template parameter overrides read as `sam deploy --parameter-overrides` reads them.

Parsing, the checks against template.yaml's Parameters, the defaults they override, and that a bad name
stops `python -m devstack` before anything starts. The deployed environment: tests/integration/test_make_dev_params.py.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

from devstack import demo, local
from devstack.parameters import ParameterError, dev_parameters, parse_overrides
from devstack.stack import REPO_ROOT, load_template

KNOWN = load_template()["Parameters"]


def test_name_value_items_as_sam_takes_them() -> None:
    assert parse_overrides(["TurnsPerMinute=100", "RefundThresholdCents=10000"], KNOWN) == {
        "TurnsPerMinute": "100",
        "RefundThresholdCents": "10000",
    }


def test_values_keep_equals_commas_spaces_and_may_be_empty() -> None:
    items = [
        "AllowedOrigins=https://a.example,https://b.example",
        'PriceTable={"claude-x": {"input": 3, "output": 15}}',  # a shell-quoted value: one argv item
        "OpsAlertEmail=",
        "ParameterKey=MaxIterations,ParameterValue=4",  # the AWS CLI's form
    ]
    assert parse_overrides(items, KNOWN) == {
        "AllowedOrigins": "https://a.example,https://b.example",
        "PriceTable": '{"claude-x": {"input": 3, "output": 15}}',
        "OpsAlertEmail": "",
        "MaxIterations": "4",
    }


def test_unknown_names_are_refused_with_a_suggestion_and_the_known_names() -> None:
    with pytest.raises(ParameterError) as err:
        parse_overrides(["TurnsPerMinut=100", "Banana=1", "MaxIterations=4"], KNOWN)
    message = str(err.value)
    assert "TurnsPerMinut (did you mean TurnsPerMinute?)" in message
    assert "Banana" in message and "RefundThresholdCents" in message  # the list to choose from


@pytest.mark.parametrize("item", ["TurnsPerMinute", "=100", "ParameterKey=,ParameterValue=1"])
def test_an_item_that_is_not_name_value_is_refused(item: str) -> None:
    with pytest.raises(ParameterError, match="is not Name=Value"):
        parse_overrides([item], KNOWN)


def test_overrides_win_over_the_local_defaults() -> None:
    env = {"JWT_ISSUER": "from-env"}
    assert dev_parameters(env, {}) == {
        "JwtSecret": dev_parameters({})["JwtSecret"],
        "JwtIssuer": "from-env",
        "JwtAudience": "support-agent",
        "Transparency": "verbose",
        "PaymentProvider": "stripe",
        "PaymentSweepGraceSeconds": "30",
        "ConversationQuietMinutes": "1",
    }
    params = dev_parameters(env, {"Transparency": "quiet", "JwtIssuer": "from-params", "TurnsPerMinute": "100"})
    assert (params["Transparency"], params["JwtIssuer"], params["TurnsPerMinute"]) == ("quiet", "from-params", "100")


def test_tool_mode_from_the_environment_and_params_still_win() -> None:
    assert dev_parameters({"TOOL_MODE": "mcp"})["ToolMode"] == "mcp"
    assert "ToolMode" not in dev_parameters({})  # the template's default (registry)
    assert dev_parameters({"TOOL_MODE": "mcp"}, {"ToolMode": "registry"})["ToolMode"] == "registry"
    assert set(KNOWN["ToolMode"]["AllowedValues"]) == {"registry", "mcp"}
    with pytest.raises(ParameterError, match="TOOL_MODE='mpc'"):
        dev_parameters({"TOOL_MODE": "mpc"})


class _Started(Exception):
    pass


@pytest.mark.parametrize("entry", [local.main, demo.main])
def test_a_bad_name_stops_before_anything_starts(
    entry: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def started(**_: Any) -> None:
        raise _Started

    monkeypatch.setattr(local, "start", started)
    monkeypatch.setattr(demo, "start", started)
    with pytest.raises(SystemExit) as exited:
        entry(["TurnsPerMinut=100"])
    assert exited.value.code == 2
    assert "did you mean TurnsPerMinute?" in capsys.readouterr().err


@pytest.mark.parametrize("entry", [local.main, demo.main])
def test_good_overrides_reach_start(entry: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def started(**kwargs: Any) -> None:
        seen.update(kwargs)
        raise _Started

    monkeypatch.setattr(local, "start", started)
    monkeypatch.setattr(demo, "start", started)
    with pytest.raises(_Started):
        entry(["TurnsPerMinute=100", "RefundThresholdCents=10000"])
    assert seen["parameters"] == {"TurnsPerMinute": "100", "RefundThresholdCents": "10000"}


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize(("target", "module"), [("dev", "devstack"), ("demo", "devstack.demo")])
def test_make_passes_params_to_the_command_line(target: str, module: str) -> None:
    params = 'TurnsPerMinute=100 PriceTable="{\\"x\\": 1}"'
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(REPO_ROOT), target, f"PARAMS={params}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert any(line.endswith(f"/python -m {module} {params}") for line in done.stdout.splitlines()), done.stdout
