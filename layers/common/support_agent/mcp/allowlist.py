"""``MCP_SERVERS``: which outside servers' tools the model may see, each pinned to what an operator reviewed.

Validated by the MCP code itself when the loop's tools are built (wiring.py ``build_tool_source``: the function's
cold start, before the snapshot with SnapStart), so a typo fails the function instead of silently dropping a tool;
config.py, at the bottom of the package, keeps the raw string. No ``mcp`` import here.
"""

from __future__ import annotations

import json
import re
from ipaddress import ip_address
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

# The namespace joins a server's name to its tools' (carrier__track_parcel): ours never contain "__", so an
# outside tool cannot shadow one of ours, and the provider's tool-name rule (^[a-zA-Z0-9_-]{1,64}$) holds.
NAMESPACE_SEPARATOR = "__"
_SERVER_NAME = re.compile(r"^[a-z][a-z0-9]{0,19}$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_PIN = re.compile(r"^[0-9a-f]{64}$")
MAX_EXPOSED_NAME = 64
_LOOPBACK_HOSTS = {"localhost"}


class PinnedTool(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    sha256: str = Field(description="tool_pin() of the reviewed definition (mcp/pins.py)")
    # The argument the verified customer id goes into: hidden from the model, filled in by code.
    customer_id_argument: str | None = Field(None, alias="customerIdArgument", min_length=1, max_length=64)

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not _PIN.match(value):
            raise ValueError("sha256 must be 64 lowercase hex digits")
        return value


class McpServerEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    name: str
    url: str
    # Secrets Manager name or ARN of the service credential (SecretString: the token, or {"token": ...}).
    # Never the customer's token: the MCP specification forbids passing it through.
    credential_secret: str | None = Field(None, alias="credentialSecret", min_length=1)
    timeout_seconds: float = Field(5.0, alias="timeoutSeconds", gt=0, le=30)
    tools: dict[str, PinnedTool] = Field(min_length=1)
    # Tools reviewed and deliberately not offered (a server's write tools): not counted as rejections, so the
    # alarm means something new or changed, not a server that also has tools the agent must never use.
    declined: frozenset[str] = frozenset()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _SERVER_NAME.match(value):
            raise ValueError("name must be 1-20 lowercase letters and digits, starting with a letter")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError("url must be an http(s) URL")
        if parts.scheme == "http" and not _loopback(parts.hostname):
            raise ValueError("url must use https (plain http only to this machine)")
        if parts.username or parts.password:
            raise ValueError("url must not carry credentials: use credentialSecret")
        return value

    @model_validator(mode="after")
    def _tool_names(self) -> McpServerEntry:
        for tool in self.tools:
            if not _TOOL_NAME.match(tool) or len(self.exposed(tool)) > MAX_EXPOSED_NAME:
                raise ValueError(f"tool {tool!r}: names are letters, digits, _ and -, {MAX_EXPOSED_NAME} in all")
        if both := sorted(self.declined & set(self.tools)):
            raise ValueError(f"tools both allowed and declined: {', '.join(both)}")
        return self

    def exposed(self, tool: str) -> str:
        """The name the model sees."""
        return f"{self.name}{NAMESPACE_SEPARATOR}{tool}"


def _loopback(host: str) -> bool:
    if host in _LOOPBACK_HOSTS:
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


_ENTRIES = TypeAdapter(list[McpServerEntry])


def parse_servers(raw: str) -> list[McpServerEntry]:
    """The entries of ``MCP_SERVERS`` (empty: none); ValueError names what is wrong."""
    if not raw.strip():
        return []
    try:
        entries = _ENTRIES.validate_python(json.loads(raw))
    except ValueError as exc:  # JSON and pydantic errors alike
        raise ValueError(f"MCP_SERVERS is not a list of MCP servers: {exc}") from None
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ValueError("MCP_SERVERS: two servers share a name")
    return entries
