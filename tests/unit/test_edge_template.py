"""template.yaml at the HTTP and auth edge: CORS for cross-origin pages, the leases against the function
timeouts in every stage, and the parameters behind the read limit and the token lifetime."""

from __future__ import annotations

import shlex
import tomllib
from typing import Any

import pytest

from devstack.gateway import cors_configuration, cors_headers
from devstack.stack import REPO_ROOT
from support_agent.config import Settings

# ------------------------------------------------------------------ CORS


def _lower(values: list[str]) -> set[str]:
    return {v.lower() for v in values}


def test_cors_exposes_the_headers_a_cross_origin_page_reads(sam: dict[str, Any]) -> None:
    """Without ExposeHeaders a browser hides Retry-After (429, 503) from the page's script."""
    cors = sam["Resources"]["HttpApi"]["Properties"]["CorsConfiguration"]
    assert _lower(cors["ExposeHeaders"]) == {"retry-after", "location", "idempotent-replayed"}
    assert _lower(cors["AllowHeaders"]) == {"authorization", "content-type", "idempotency-key", "prefer"}
    assert cors["AllowOrigins"] == {"Ref": "AllowedOrigins"}
    assert set(cors["AllowMethods"]) == {"GET", "POST", "OPTIONS"}


def test_the_local_gateway_answers_cors_as_the_template_says(sam: dict[str, Any]) -> None:
    cors = sam["Resources"]["HttpApi"]["Properties"]["CorsConfiguration"]
    assert cors_configuration()["AllowOrigins"] == [sam["Parameters"]["AllowedOrigins"]["Default"]]
    preflight = cors_headers("http://localhost:5173", preflight=True)
    assert preflight["Access-Control-Allow-Origin"] == "*"
    assert preflight["Access-Control-Allow-Headers"].split(",") == cors["AllowHeaders"]
    assert preflight["Access-Control-Allow-Methods"].split(",") == cors["AllowMethods"]
    assert preflight["Access-Control-Max-Age"] == str(cors["MaxAge"])
    answer = cors_headers("http://localhost:5173", preflight=False)
    assert answer["Access-Control-Expose-Headers"].split(",") == cors["ExposeHeaders"]
    assert cors_headers(None, preflight=False) == {}  # same origin: nothing to add


# ------------------------------------------------------------------ leases and timeouts


def _stage_parameters(sam: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Parameter values of each deployable configuration: the template's defaults, and each samconfig stage."""
    defaults = {name: p.get("Default") for name, p in sam["Parameters"].items()}
    config = tomllib.loads((REPO_ROOT / "samconfig.toml").read_text())
    out = {"defaults": defaults}
    for stage in ("default", "dev", "prod"):
        given = config[stage]["deploy"]["parameters"]["parameter_overrides"]
        out[stage] = {**defaults, **dict(p.split("=", 1) for p in shlex.split(given))}
    return out


def _resolve(node: Any, params: dict[str, Any], conditions: dict[str, Any]) -> Any:
    """Ref, Fn::If and the condition functions the template uses, over one stage's parameters."""
    if not isinstance(node, dict):
        return node
    ((fn, arg),) = node.items()
    if fn == "Ref":
        return params[arg]
    if fn == "Condition":
        return _resolve(conditions[arg], params, conditions)
    if fn == "Fn::If":
        name, yes, no = arg
        return _resolve(yes if _resolve(conditions[name], params, conditions) else no, params, conditions)
    args = [_resolve(a, params, conditions) for a in arg]
    if fn == "Fn::Equals":
        return str(args[0]) == str(args[1])
    if fn == "Fn::Not":
        return not args[0]
    if fn == "Fn::And":
        return all(args)
    if fn == "Fn::Or":
        return any(args)
    raise AssertionError(f"not evaluated by this test: {fn}")


def _function_setting(sam: dict[str, Any], function: str, prop: str, variable: str | None = None) -> Any:
    props = sam["Resources"][function]["Properties"]
    if variable is None:
        return props.get(prop, sam["Globals"]["Function"].get(prop))
    env = {
        **sam["Globals"]["Function"]["Environment"]["Variables"],
        **props.get("Environment", {}).get("Variables", {}),
    }
    return env.get(variable)


# A conversation lease is taken by a chat turn and by an erasure (the lead function).
LEASE_HOLDERS = ("ChatFunction", "ApprovalsFunction")
MARGIN_SECONDS = 2  # the lease is whole seconds from int(now), and clocks of two instances differ a little


@pytest.mark.parametrize("function", LEASE_HOLDERS)
def test_a_lease_outlives_the_function_that_holds_it_in_every_stage(sam: dict[str, Any], function: str) -> None:
    """A lease that expired while its holder still ran would let a second turn write into the same history.
    It cannot, as long as LEASE_SECONDS exceeds the holder's timeout: Lambda stops the holder first."""
    conditions = sam["Conditions"]
    for stage, params in _stage_parameters(sam).items():
        timeout = float(_resolve(_function_setting(sam, function, "Timeout"), params, conditions))
        lease = _function_setting(sam, function, "Environment", "LEASE_SECONDS")
        settings = Settings.model_validate(
            {} if lease is None else {"LEASE_SECONDS": _resolve(lease, params, conditions)}
        )
        assert settings.lease_seconds >= timeout + MARGIN_SECONDS, (stage, function, settings.lease_seconds, timeout)
        if function == "ChatFunction":  # and the turn's own deadline ends before Lambda's does
            assert settings.turn_deadline_seconds < timeout, (stage, settings.turn_deadline_seconds, timeout)


# ------------------------------------------------------------------ parameters behind the edge's limits


@pytest.mark.parametrize(
    ("parameter", "variable", "default", "functions"),
    [
        ("ReadsPerMinute", "READS_PER_MINUTE", 60, ("ChatFunction", "EventsFunction")),
        ("RatingsPerMinute", "RATINGS_PER_MINUTE", 20, ("ChatFunction",)),
        ("JwtMaxLifetimeSeconds", "JWT_MAX_LIFETIME_SECONDS", 86400, ("ChatFunction", "ApprovalsFunction")),
    ],
)
def test_edge_limits_are_template_parameters(
    sam: dict[str, Any], cfn: dict[str, Any], parameter: str, variable: str, default: int, functions: tuple[str, ...]
) -> None:
    param = sam["Parameters"][parameter]
    assert (param["Type"], param["Default"]) == ("Number", default)
    field = next(f for f in Settings.model_fields.values() if f.alias == variable)
    assert field.default == default, "the code's default and the template's agree"
    for function in functions:
        env = cfn["Resources"][function]["Properties"]["Environment"]["Variables"]
        assert env[variable] == {"Ref": parameter}, function
