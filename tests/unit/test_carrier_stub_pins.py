"""The committed local configuration (devstack/mcp_servers.json) pins what the carrier stub really serves.

The pins are literals, so a change to the stub's tools (or to how a pin is taken) fails here, listed over
HTTP with the SDK's client as the agent's MCP client lists them, rather than in `CARRIER=1 make dev`,
where the tool would just go missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.carrier_mcp import SERVERS_FILE, CarrierStub, local_servers
from devstack.mcp_pins import list_definitions, read_only
from support_agent.mcp.pins import tool_pin

TOKEN = "pins-test-token"


@pytest.fixture(scope="module")
def served() -> Iterator[list[dict[str, Any]]]:
    import anyio

    with CarrierStub(TOKEN) as stub:
        yield anyio.run(list_definitions, stub.url, TOKEN)


def committed() -> dict[str, Any]:
    servers = json.loads(SERVERS_FILE.read_text())
    assert [s["name"] for s in servers] == ["carrier"]
    return dict(servers[0])


def test_the_committed_pins_are_those_of_the_served_definitions(served: list[dict[str, Any]]) -> None:
    pins = {name: tool["sha256"] for name, tool in committed()["tools"].items()}
    by_name = {d["name"]: d for d in served}
    assert pins == {name: tool_pin(by_name[name]) for name in pins}


def test_only_read_only_tools_are_allowed(served: list[dict[str, Any]]) -> None:
    allowed = set(committed()["tools"])
    by_name = {d["name"]: d for d in served}
    assert allowed == {"track_parcel"}
    assert all(read_only(by_name[name]) for name in allowed)
    assert "cancel_shipment" in by_name and not read_only(by_name["cancel_shipment"])  # served, not allowed


def test_the_configuration_follows_the_contract() -> None:
    server = committed()
    assert server["credentialSecret"] == "support-agent/mcp/carrier"  # the grant: <stack name>/mcp/*
    assert server["url"].endswith("/mcp")
    assert server["tools"]["track_parcel"]["customerIdArgument"] == "customer_id"
    assert all(len(t["sha256"]) == 64 and t["sha256"] == t["sha256"].lower() for t in server["tools"].values())


def test_make_dev_points_the_configuration_at_the_running_stub() -> None:
    servers = local_servers("http://127.0.0.1:40123/mcp")
    assert servers[0]["url"] == "http://127.0.0.1:40123/mcp"
    assert servers[0]["tools"] == committed()["tools"]
