"""Which model answers the local stack (devstack/model_choice.py) and what the evaluation runner hands it."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.model_choice import SIMULATED_BEDROCK_MODEL, NoModel, choose
from evals.runner import Unavailable, stack_environ


def test_without_a_providers_setting_the_simulated_model_answers_over_its_wire() -> None:
    for provider in ("anthropic", "openai", "bedrock"):
        choice = choose({"LLM_PROVIDER": provider})
        assert choice.simulated and choice.provider == provider
    env = choose({"LLM_PROVIDER": "bedrock"}).overrides("http://127.0.0.1:9")
    assert env["LLM_PROVIDER"] == "bedrock" and env["BEDROCK_MODEL_ID"] == SIMULATED_BEDROCK_MODEL
    assert env["AWS_ENDPOINT_URL_BEDROCK_RUNTIME"] == "http://127.0.0.1:9"  # Bedrock's client alone
    assert "AWS_ENDPOINT_URL" not in env and "AWS_ACCESS_KEY_ID" not in env  # the rest stays on moto
    assert "AWS_ENDPOINT_URL_BEDROCK_RUNTIME" not in choose({}).overrides("http://127.0.0.1:9")


def test_a_real_bedrock_gets_its_endpoint_region_and_the_shells_credentials() -> None:
    arn = "arn:aws:bedrock:eu-west-3:123456789012:inference-profile/eu.anthropic.claude-sonnet-4-5-20250929-v1:0"
    env = {
        "LLM_PROVIDER": "bedrock",
        "BEDROCK_MODEL_ID": arn,
        "AWS_ACCESS_KEY_ID": "AKIAREAL",
        "AWS_SECRET_ACCESS_KEY": "real-secret",
        "AWS_SESSION_TOKEN": "real-token",
        "ANTHROPIC_API_KEY": "not-passed",
    }
    choice = choose(env)
    assert not choice.simulated
    out = choice.overrides(None)
    assert out["AWS_ENDPOINT_URL_BEDROCK_RUNTIME"] == "https://bedrock-runtime.eu-west-3.amazonaws.com"
    assert out["BEDROCK_REGION"] == "eu-west-3" and out["BEDROCK_MODEL_ID"] == arn
    assert (out["AWS_ACCESS_KEY_ID"], out["AWS_SECRET_ACCESS_KEY"], out["AWS_SESSION_TOKEN"]) == (
        "AKIAREAL",
        "real-secret",
        "real-token",
    )
    assert "ANTHROPIC_API_KEY" not in out
    region = choose({**env, "BEDROCK_MODEL_ID": "us.anthropic.x", "BEDROCK_REGION": "us-west-2"}).overrides(None)
    assert region["AWS_ENDPOINT_URL_BEDROCK_RUNTIME"] == "https://bedrock-runtime.us-west-2.amazonaws.com"


def test_a_real_bedrock_without_credentials_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(NoModel, match="no AWS credentials"):
        choose({"LLM_PROVIDER": "bedrock", "BEDROCK_MODEL_ID": "us.anthropic.x"})
    with pytest.raises(NoModel, match="LLM_PROVIDER='gemini'"):
        choose({"LLM_PROVIDER": "gemini"})


def test_the_runner_hands_the_stack_only_the_chosen_providers_settings() -> None:
    shell = {"PATH": "/bin", "ANTHROPIC_API_KEY": "k", "OPENAI_BASE_URL": "u", "BEDROCK_MODEL_ID": "m"}
    assert stack_environ("simulated", shell) == {"PATH": "/bin"}
    assert stack_environ("bedrock", shell) == {"PATH": "/bin", "BEDROCK_MODEL_ID": "m", "LLM_PROVIDER": "bedrock"}
    assert stack_environ("anthropic", shell) == {"PATH": "/bin", "ANTHROPIC_API_KEY": "k"}
    with pytest.raises(Unavailable, match="BEDROCK_MODEL_ID"):
        stack_environ("bedrock", {"PATH": "/bin"})


def test_eval_live_skips_cleanly_without_a_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from evals.__main__ import main
    from evals.runner import live_provider

    for name in ("ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY", "BEDROCK_MODEL_ID", "MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert main(["run", "--model", "live"]) == 0  # no stack started: it returns before
    assert "skipped, no model configured" in capsys.readouterr().out
    assert live_provider({"BEDROCK_MODEL_ID": "m"}) == "bedrock"
    assert live_provider({"OPENAI_BASE_URL": "u"}) is None  # an endpoint without its key is not a model
    assert live_provider({"MODEL": "openai", "ANTHROPIC_API_KEY": "k"}) == "openai"
