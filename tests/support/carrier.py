"""The local carrier MCP server (devstack/carrier_mcp.py) as an outside server of a harness's loop."""

from __future__ import annotations

import json
from typing import Any

import boto3

from devstack.carrier_mcp import CarrierStub, local_servers
from support_agent.config import Settings
from support_agent.wiring import build_registry, build_tool_source
from tests.support.harness import Harness

SECRET = "support-agent/mcp/carrier"
TRACK = "carrier__track_parcel"


def servers_json(stub: CarrierStub, **changes: Any) -> str:
    servers = local_servers(stub.url)
    servers[0].update(changes)
    return json.dumps(servers)


def with_carrier(
    h: Harness, stub: CarrierStub, refresh_seconds: float = 300, token: str | None = None, **changes: Any
) -> Settings:
    """The harness's loop on its tools (its TOOL_MODE) plus the stub's reviewed ones; the token in Secrets Manager
    (``token``: another one than the server's)."""
    secrets = boto3.client("secretsmanager")
    value = json.dumps({"token": token or stub.token})
    try:
        secrets.create_secret(Name=SECRET, SecretString=value)
    except secrets.exceptions.ResourceExistsException:
        secrets.put_secret_value(SecretId=SECRET, SecretString=value)
    settings = h.settings.model_copy(
        update={"mcp_servers": servers_json(stub, **changes), "mcp_refresh_seconds": refresh_seconds}
    )
    h.agent.tools = build_tool_source(settings, build_registry(settings, h.ddb, h.sqs), h.ddb, secrets)
    return settings
