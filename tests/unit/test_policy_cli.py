"""`make policy-publish`, `make policy-show` and `make dev POLICY=` (devstack/policy.py, devstack/local.py) against
moto's SSM: a file that does not validate is never put, a rollback is an old document as a new version."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from devstack.local import _policy_option
from devstack.policy import (
    CannotRun,
    PolicyRefused,
    applied,
    local_stack,
    publish,
    read_file,
    run,
    version_lines,
    versions,
)
from support_agent.policy.model import default_policy

NAME = "/support-agent/support-policy"


@pytest.fixture
def ssm(aws: None) -> Any:
    client = boto3.client("ssm")
    client.put_parameter(Name=NAME, Value=default_policy(5000).model_dump_json(), Type="String")
    return client


def policy_file(tmp_path: Path, threshold: int = 9000, **changes: Any) -> Path:
    document = {**default_policy(threshold).model_dump(mode="json"), **changes}
    path = tmp_path / f"policy-{threshold}.json"
    path.write_text(json.dumps(document))
    return path


def published(ssm: Any, args: list[str]) -> list[str]:
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("--file", default=None)
    parser.add_argument("--version", type=int, default=None)
    lines: list[str] = []
    run(parser.parse_args(args), ssm, NAME, 60, out=lines.append)
    return lines


def test_publishing_a_file_is_a_new_version(ssm: Any, tmp_path: Path) -> None:
    (line,) = published(ssm, ["publish", "--file", str(policy_file(tmp_path))])
    assert "as version 2 of /support-agent/support-policy" in line and "within 60 s" in line
    found = versions(ssm, NAME)
    assert [v.version for v in found] == [1, 2]
    assert applied(found) is found[-1]
    assert json.loads(found[-1].value)["actions"]["cancel_order"]["approval_threshold_cents"] == 9000


def test_a_file_that_does_not_validate_is_refused_and_nothing_is_put(ssm: Any, tmp_path: Path) -> None:
    bad = policy_file(tmp_path, countries=["usa"])
    with pytest.raises(PolicyRefused, match=r"policy-9000.json is not a valid support policy: countries"):
        published(ssm, ["publish", "--file", str(bad)])
    with pytest.raises(PolicyRefused, match="No such file"):
        read_file(tmp_path / "missing.json")
    assert [v.version for v in versions(ssm, NAME)] == [1]


def test_rollback_publishes_an_earlier_document_again(ssm: Any, tmp_path: Path) -> None:
    published(ssm, ["publish", "--file", str(policy_file(tmp_path))])
    (line,) = published(ssm, ["publish", "--version", "1"])
    assert "version 1's document as version 3" in line
    found = versions(ssm, NAME)
    assert found[2].value == found[0].value
    with pytest.raises(CannotRun, match="no version 7"):
        published(ssm, ["publish", "--version", "7"])
    with pytest.raises(CannotRun, match=r"FILE=<policy\.json> or VERSION=<n>"):
        published(ssm, ["publish"])


def test_show_marks_the_applied_version_and_the_refused_ones(ssm: Any) -> None:
    ssm.put_parameter(Name=NAME, Value='{"countries": []}', Type="String", Overwrite=True)  # as the console could
    lines = published(ssm, ["show"])
    assert lines[0].startswith(f"{NAME}: 2 version(s)")
    assert lines[1].split()[0] == "1" and lines[1].endswith("applies")
    assert lines[2].split()[0] == "2" and "refused: " in lines[2]
    assert "version 1:" in lines
    assert published(ssm, ["show", "--version", "2"]) == ['{"countries": []}']


def test_show_says_when_nothing_applies() -> None:
    assert "none validates" in version_lines(NAME, [])[-1]


def test_publish_validates_even_without_the_cli(ssm: Any) -> None:
    with pytest.raises(PolicyRefused):
        publish(ssm, NAME, "{}")
    assert publish(ssm, NAME, default_policy(1).model_dump_json()) == 2


def test_make_dev_refuses_a_bad_policy_file_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = policy_file(tmp_path)
    document, rest = _policy_option(["--policy", str(good), "TurnsPerMinute=100"])
    assert document == good.read_text() and rest == ["TurnsPerMinute=100"]
    assert _policy_option(["TurnsPerMinute=100"]) == (None, ["TurnsPerMinute=100"])
    bad = policy_file(tmp_path, threshold=1, proposal_ttl_seconds=5)
    with pytest.raises(SystemExit) as exited:
        _policy_option(["--policy", str(bad)])
    assert exited.value.code == 2
    assert "refused, nothing started" in capsys.readouterr().err


def test_the_running_stacks_parameter_comes_from_the_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / "env.json"
    with pytest.raises(CannotRun, match="make dev"):
        local_stack(env_file)
    env = {"SUPPORT_POLICY_PARAMETER": NAME, "AWS_ENDPOINT_URL": "http://host.docker.internal:4599"}
    env_file.write_text(json.dumps({"ChatFunction": {**env, "POLICY_CACHE_SECONDS": "5"}}))
    assert local_stack(env_file) == (NAME, "http://127.0.0.1:4599", 5)
    env_file.write_text(json.dumps({"ChatFunction": {"AWS_ENDPOINT_URL": "http://x:1"}}))
    with pytest.raises(CannotRun, match="names no support policy parameter"):
        local_stack(env_file)
