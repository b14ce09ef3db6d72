"""`make dev PARAMS="TurnsPerMinute=100 RefundThresholdCents=10000"`: the overrides reach the deployed functions.

The same steps `devstack.local.start` takes (the overrides checked against the template, put over the local
defaults, the template deployed into moto), then each function's environment as CloudFormation resolved it.
"""

from __future__ import annotations

from devstack.parameters import dev_parameters, parse_overrides
from devstack.stack import deploy, load_template


def test_overrides_reach_the_deployed_functions_environment(aws: None) -> None:
    overrides = parse_overrides(["TurnsPerMinute=100", "RefundThresholdCents=10000"], load_template()["Parameters"])
    stack = deploy(dev_parameters({}, overrides))
    chat = stack.function_env("ChatFunction")
    assert (chat["TURNS_PER_MINUTE"], chat["REFUND_THRESHOLD_CENTS"]) == ("100", "10000")  # defaults: 10, 5000
    assert chat["TRANSPARENCY"] == "verbose"  # a local default not overridden stays
    # A global (every function's) parameter reaches every function, not only the chat one.
    assert stack.function_env("ApprovalsFunction")["REFUND_THRESHOLD_CENTS"] == "10000"


def test_the_threshold_reaches_the_policys_first_version_and_the_functions_name_it(aws: None) -> None:
    """moto's CloudFormation creates the AWS::SSM::Parameter: version 1, ``RefundThresholdCents`` substituted."""
    import boto3

    from support_agent.policy.model import SupportPolicy, default_policy

    overrides = parse_overrides(["RefundThresholdCents=10000", "PolicyCacheSeconds=5"], load_template()["Parameters"])
    stack = deploy(dev_parameters({}, overrides))
    name = stack.physical_ids["SupportPolicyParameter"]
    assert name == f"/{stack.name}/support-policy"
    parameter = boto3.client("ssm").get_parameter(Name=name)["Parameter"]
    assert parameter["Version"] == 1
    assert SupportPolicy.model_validate_json(parameter["Value"]) == default_policy(10000)
    for function in ("ChatFunction", "TurnWorkerFunction", "McpFunction"):
        env = stack.function_env(function)
        assert (env["SUPPORT_POLICY_PARAMETER"], env["POLICY_CACHE_SECONDS"]) == (name, "5")
    assert "SUPPORT_POLICY_PARAMETER" not in stack.function_env("ApprovalsFunction")
