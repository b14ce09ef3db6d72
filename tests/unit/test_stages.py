"""Deployable stages: samconfig.toml, the Stage parameter and what prod changes, secrets kept out of
the environment, and every function variable the template sets actually read by the settings.
"""

from __future__ import annotations

import shlex
import tomllib
from typing import Any

import pytest

from devstack.stack import REPO_ROOT
from support_agent.config import Settings

TABLES = ("ConversationsTable", "CustomerDataTable", "ApprovalsTable", "AuditTable")
FUNCTIONS = ("ChatFunction", "ApprovalsFunction", "ApprovalNotifierFunction", "ApprovalSweepFunction")


@pytest.fixture(scope="module")
def samconfig() -> dict[str, Any]:
    return tomllib.loads((REPO_ROOT / "samconfig.toml").read_text())


def overrides(samconfig: dict[str, Any], stage: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in shlex.split(samconfig[stage]["deploy"]["parameters"]["parameter_overrides"]))


def test_stage_parameter_and_prod_condition(sam: dict[str, Any]) -> None:
    stage = sam["Parameters"]["Stage"]
    assert (stage["Default"], stage["AllowedValues"]) == ("dev", ["dev", "prod"])
    assert sam["Conditions"]["IsProd"] == {"Fn::Equals": [{"Ref": "Stage"}, "prod"]}


@pytest.mark.parametrize("table", TABLES)
def test_tables_are_protected_in_prod(cfn: dict[str, Any], table: str) -> None:
    props = cfn["Resources"][table]["Properties"]
    assert props["DeletionProtectionEnabled"] == {"Fn::If": ["IsProd", True, False]}
    assert props["SSESpecification"] == {"SSEEnabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_audit_rows_never_expire(cfn: dict[str, Any]) -> None:
    assert "TimeToLiveSpecification" not in cfn["Resources"]["AuditTable"]["Properties"]


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_function_log_group_has_a_retention(sam: dict[str, Any], function: str) -> None:
    group = sam["Resources"][f"{function}LogGroup"]
    assert group["Type"] == "AWS::Logs::LogGroup"
    assert group["Properties"]["LogGroupName"] == {"Fn::Sub": f"/aws/lambda/${{{function}}}"}
    assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}


# ------------------------------------------------------------------ prod's rules, evaluated


def _eval(node: Any, params: dict[str, Any]) -> Any:
    """The rule functions the template uses, over parameter values (lists for CommaDelimitedList)."""
    if not isinstance(node, dict):
        return node
    ((fn, arg),) = node.items()
    if fn == "Ref":
        return params[arg]
    args = [_eval(a, params) for a in arg] if isinstance(arg, list) else _eval(arg, params)
    if fn == "Fn::Equals":
        return args[0] == args[1]
    if fn == "Fn::Not":
        return not args[0]
    if fn == "Fn::Contains":
        return args[1] in args[0]
    if fn == "Fn::Join":
        return args[0].join(args[1])
    raise AssertionError(f"rule function not evaluated by this test: {fn}")


def failing_rules(sam: dict[str, Any], **given: Any) -> set[str]:
    params = {name: p.get("Default") for name, p in sam["Parameters"].items()}
    for name, p in sam["Parameters"].items():
        if p["Type"] == "CommaDelimitedList":
            params[name] = str(params[name]).split(",")
    params.update(given)
    failed = set()
    for name, rule in sam["Rules"].items():
        if "RuleCondition" in rule and not _eval(rule["RuleCondition"], params):
            continue
        if not all(_eval(a["Assert"], params) for a in rule["Assertions"]):
            failed.add(name)
    return failed


def test_prod_is_refused_without_jwks_and_named_origins(sam: dict[str, Any]) -> None:
    jwks = {"JwtJwksUrl": "https://idp.example.com/.well-known/jwks.json"}
    origins = {"AllowedOrigins": ["https://support.example.com"]}
    assert failing_rules(sam) == set()  # dev, the defaults
    assert failing_rules(sam, Stage="prod") == {"ProdVerifiesTokensWithJwks", "ProdNamesItsOrigins"}
    assert failing_rules(sam, Stage="prod", **jwks) == {"ProdNamesItsOrigins"}
    assert failing_rules(sam, Stage="prod", **jwks, **origins) == set()
    with_secret = {"JwtSecret": "x" * 40}
    assert failing_rules(sam, Stage="prod", **jwks, **origins, **with_secret) == {"ProdVerifiesTokensWithJwks"}


# ------------------------------------------------------------------ samconfig.toml


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_samconfig_stage(sam: dict[str, Any], samconfig: dict[str, Any], stage: str) -> None:
    assert samconfig["version"] == 0.1
    deploy = samconfig[stage]["deploy"]["parameters"]
    assert samconfig[stage]["global"]["parameters"]["stack_name"] == f"support-agent-{stage}"
    assert deploy["capabilities"] == "CAPABILITY_IAM"
    assert deploy["resolve_s3"] is True
    values = overrides(samconfig, stage)
    assert values["Stage"] == stage
    for name, value in values.items():
        param = sam["Parameters"][name]  # every override is a template parameter
        assert not param.get("NoEcho"), f"{name} is secret: pass it on the command line, never commit it"
        if "AllowedValues" in param:
            assert value in [str(v) for v in param["AllowedValues"]], name
        if param["Type"] == "Number":
            assert param.get("MinValue", float("-inf")) <= float(value) <= param.get("MaxValue", float("inf")), name
    assert failing_rules(sam, **values) == (
        {"ProdVerifiesTokensWithJwks", "ProdNamesItsOrigins"} if stage == "prod" else set()
    ), "prod must be refused until the account's identity provider and origins are filled in"


def test_prod_differs_from_dev_where_it_matters(samconfig: dict[str, Any]) -> None:
    dev, prod = overrides(samconfig, "dev"), overrides(samconfig, "prod")
    assert prod["Transparency"] == "quiet"
    assert int(prod["LogRetentionDays"]) >= 365 > int(dev["LogRetentionDays"])
    assert samconfig["prod"]["deploy"]["parameters"]["confirm_changeset"] is True


def test_no_secret_in_samconfig() -> None:
    text = (REPO_ROOT / "samconfig.toml").read_text()
    for marker in ("sk-ant-", "sk-", "JwtSecret=", "API_KEY="):
        assert marker not in text


# ------------------------------------------------------------------ the environment


def test_the_api_key_is_never_a_plain_environment_variable(cfn: dict[str, Any]) -> None:
    for function in FUNCTIONS:
        env = cfn["Resources"][function]["Properties"]["Environment"]["Variables"]
        for name in env:
            assert not name.endswith("API_KEY"), f"{function}: {name} (use the *_SECRET_ARN and Secrets Manager)"
    chat = cfn["Resources"]["ChatFunction"]["Properties"]["Environment"]["Variables"]
    assert chat["ANTHROPIC_API_KEY_SECRET_ARN"] == {"Ref": "AnthropicApiKeySecretArn"}


def test_chat_limits_are_template_parameters(cfn: dict[str, Any]) -> None:
    env = cfn["Resources"]["ChatFunction"]["Properties"]["Environment"]["Variables"]
    assert {
        "LLM_PROVIDER": {"Ref": "LlmProvider"},
        "MODEL_ID": {"Ref": "ModelId"},
        "REFUND_THRESHOLD_CENTS": {"Ref": "RefundThresholdCents"},
        "MAX_ITERATIONS": {"Ref": "MaxIterations"},
        "MAX_TOKENS": {"Ref": "MaxTokens"},
        "MAX_TOOL_CALLS_PER_TURN": {"Ref": "MaxToolCallsPerTurn"},
        "CONVERSATION_TOKEN_BUDGET": {"Ref": "ConversationTokenBudget"},
        "PRICE_TABLE": {"Ref": "PriceTable"},
        "JWT_ISSUER": {"Ref": "JwtIssuer"},
        "JWT_AUDIENCE": {"Ref": "JwtAudience"},
        "JWT_JWKS_URL": {"Ref": "JwtJwksUrl"},
    }.items() <= env.items()


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_variable_the_template_sets_is_read(cfn: dict[str, Any], function: str) -> None:
    """A misspelt variable would silently leave the default in place."""
    known = {f.alias for f in Settings.model_fields.values() if f.alias}
    env = cfn["Resources"][function]["Properties"]["Environment"]["Variables"]
    # POWERTOOLS_* and PYDANTIC_* are read by those libraries, not by Settings.
    unread = {name for name in env if name not in known and not name.startswith(("POWERTOOLS_", "PYDANTIC_"))}
    assert unread == set()
