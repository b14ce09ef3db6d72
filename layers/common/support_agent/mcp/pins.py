"""Pins of outside MCP tools: what an operator approved, as a digest a changed definition cannot keep.

A tool's description and schema are instructions to the model, so an outside server that changes them
(a "rug pull") or ships a poisoned one must not reach the model unreviewed. The pin is the SHA-256 of the
canonical JSON of the four fields that reach the model or describe the tool's effect, in their wire form
(camelCase, as ``tools/list`` sends them): keys sorted, UTF-8, no spaces; a field the server left out is
``null``. Plain dicts only: no ``mcp`` import (devstack/mcp_pins.py prints them for a running server).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

PINNED_FIELDS = ("name", "description", "inputSchema", "annotations")


def canonical(definition: Mapping[str, Any]) -> bytes:
    """The bytes a pin is taken of: the pinned fields of a ``tools/list`` entry (wire form)."""
    fields = {key: definition.get(key) for key in PINNED_FIELDS}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def tool_pin(definition: Mapping[str, Any]) -> str:
    """The lowercase hex SHA-256 an ``MCP_SERVERS`` entry pins the tool to."""
    return hashlib.sha256(canonical(definition)).hexdigest()
