"""Template parameters for the local stack: ``make dev PARAMS="TurnsPerMinute=100 RefundThresholdCents=10000"``.

The overrides are read the way ``sam deploy --parameter-overrides`` reads them: ``Name=Value`` items
(or the AWS CLI's ``ParameterKey=Name,ParameterValue=Value``); a value may hold ``=``, commas (a
``CommaDelimitedList``) or, quoted in the shell, spaces. Names are checked against template.yaml's
``Parameters`` before anything starts: a misspelt name would otherwise deploy the default in silence.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Iterable, Mapping, Sequence

from devstack.stack import load_template
from devstack.tokens import DEFAULT_DEV_SECRET

TOOL_MODES = ("registry", "mcp")  # template.yaml's ToolMode AllowedValues
_AWS_CLI_FORM = re.compile(r"^ParameterKey=(?P<name>[^,]*),ParameterValue=(?P<value>.*)$", re.DOTALL)


class ParameterError(ValueError):
    """An override the template cannot take; the message says which and why."""


def parse_overrides(items: Sequence[str], known: Iterable[str]) -> dict[str, str]:
    """``{name: value}`` from ``Name=Value`` items; `ParameterError` on a malformed item or an unknown name."""
    names = sorted(known)
    overrides: dict[str, str] = {}
    unknown: list[str] = []
    for item in items:
        match = _AWS_CLI_FORM.match(item)
        name, sep, value = (match["name"], "=", match["value"]) if match else item.partition("=")
        if not sep or not name:
            raise ParameterError(f"{item!r} is not Name=Value (as sam deploy --parameter-overrides takes them)")
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            unknown.append(f"{name} (did you mean {close[0]}?)" if close else name)
        overrides[name] = value
    if unknown:
        raise ParameterError(
            f"template.yaml has no parameter {', '.join(unknown)}; its parameters are: {', '.join(names)}"
        )
    return overrides


def dev_parameters(environ: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """What ``make dev`` deploys: its local defaults (the JWT settings from the environment, the tool-call
    trace on, refunds through Stripe: the simulated one unless STRIPE_API_BASE and STRIPE_API_KEY are set,
    a short payment-sweep grace, a one-minute quiet, ``ToolMode`` from TOOL_MODE when set), then the overrides,
    which win (``PaymentProvider=none`` keeps refunds ledger-only)."""
    tool_mode = environ.get("TOOL_MODE", "").strip()
    if tool_mode and tool_mode not in TOOL_MODES:
        raise ParameterError(f"TOOL_MODE={tool_mode!r}: it is one of {', '.join(TOOL_MODES)}")
    return {
        "JwtSecret": environ.get("JWT_SECRET") or DEFAULT_DEV_SECRET,
        "JwtIssuer": environ.get("JWT_ISSUER", "support-agent-local"),
        "JwtAudience": environ.get("JWT_AUDIENCE", "support-agent"),
        "Transparency": "verbose",
        "PaymentProvider": "stripe",
        # The payment sweep asks about a refund left unsettled after 30 s, not 5 min: the demo's
        # "no webhook came" refund settles within a minute (the local schedule fires every 30 s).
        "PaymentSweepGraceSeconds": "30",
        # A conversation is quiet after a minute, not 30: a demo's conversations get their outcomes (and the
        # Reports page its figures) within minutes (the outcome sweep's schedule fires every 30 s locally).
        "ConversationQuietMinutes": "1",
        **({"ToolMode": tool_mode} if tool_mode else {}),  # TOOL_MODE=mcp make dev: our tools over MCP
        **(overrides or {}),
    }


def from_command_line(argv: Sequence[str] | None, prog: str) -> dict[str, str]:
    """The overrides on the command line (what ``PARAMS`` expands to); a bad one exits 2 with the reason."""
    parser = argparse.ArgumentParser(prog=prog, description="The local stack, deployed from template.yaml.")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="Name=Value",
        help="template parameter overrides, as sam deploy --parameter-overrides takes them",
    )
    args = parser.parse_args(argv)
    try:
        return parse_overrides(args.overrides, load_template()["Parameters"])
    except ParameterError as exc:
        parser.error(str(exc))
