"""The chat function pays for the MCP SDK's import (0.6-0.85 s) only when TOOL_MODE=mcp or MCP_SERVERS asks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
from support_agent.config import load_settings
from support_agent.wiring import build_registry, build_tool_source
settings = load_settings()
source = build_tool_source(settings, build_registry(settings, None, None), None)
print(sorted({m.split(".")[0] for m in sys.modules} & {"mcp", "httpx2", "jsonschema", "anyio"}))
print(type(source).__name__)
"""


def probe(**env: str) -> tuple[list[str], str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": f"{ROOT / 'layers' / 'common'}:{ROOT}",
            "AWS_DEFAULT_REGION": "us-east-1",
            **env,
        },
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return json.loads(out[-2].replace("'", '"')), out[-1]


def test_default_mode_imports_no_mcp() -> None:
    assert probe() == ([], "ToolRegistry")


def test_tool_mode_mcp_imports_the_sdk() -> None:
    modules, source = probe(TOOL_MODE="mcp")
    assert "mcp" in modules and source == "InProcessMcpTools"


@pytest.mark.parametrize("mode", ["registry", "mcp"])
def test_outside_servers_import_the_sdk_and_wrap_our_tools(mode: str) -> None:
    # A server nobody listens on: listed at start, unavailable, nothing offered (and nothing raised).
    servers = [{"name": "carrier", "url": "http://127.0.0.1:9/mcp", "tools": {"t": {"sha256": "0" * 64}}}]
    modules, source = probe(TOOL_MODE=mode, MCP_SERVERS=json.dumps(servers))
    assert {"mcp", "jsonschema"} <= set(modules) and source == "WithOutsideTools"
