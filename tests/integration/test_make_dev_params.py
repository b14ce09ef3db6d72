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
