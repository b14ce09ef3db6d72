"""`python -m devstack.mcp_pins <url> [--token T]`: an ``MCP_SERVERS`` entry, pins filled in, for a running server.

It lists the server's tools with the official SDK's client (Streamable HTTP) and prints a configuration
skeleton (docs/MCP.md, "Pinning your server"): every read-only tool (``annotations.readOnlyHint`` true)
with the pin of the definition it serves right now (`support_agent.mcp.pins.tool_pin`). Tools that are
not read-only are listed as ``declined`` (reviewed, never offered, not counted by the alarm) and named on
stderr: the client refuses them whatever the list says. Review
each description before committing its pin; a tool taking the customer's id gets ``customerIdArgument``
when its schema has a property of that name (check that it is the customer, not some other id).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from support_agent.mcp.pins import tool_pin

CUSTOMER_ID_NAMES = ("customer_id", "customerId")
DEFAULT_STACK_NAME = "support-agent"  # devstack/stack.py's; a deployed stack's name goes in --stack-name


async def list_definitions(url: str, token: str | None = None, timeout_seconds: float = 10.0) -> list[dict[str, Any]]:
    """``tools/list`` of the server at ``url`` (every page), each tool in wire form, as a pin is taken of it."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout_seconds) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        definitions: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            definitions += [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                return definitions


def read_only(definition: Mapping[str, Any]) -> bool:
    annotations = definition.get("annotations")
    return isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True


def _customer_argument(definition: Mapping[str, Any]) -> str | None:
    schema = definition.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping):
        return None
    return next((name for name in CUSTOMER_ID_NAMES if name in properties), None)


def skeleton(
    name: str, url: str, definitions: Sequence[Mapping[str, Any]], credential_secret: str | None
) -> list[dict[str, Any]]:
    """The ``MCP_SERVERS`` list of one server: its read-only tools pinned to ``definitions``."""
    tools: dict[str, dict[str, Any]] = {}
    declined: list[str] = []
    for definition in definitions:
        if not read_only(definition):
            declined.append(str(definition["name"]))
            continue
        entry: dict[str, Any] = {"sha256": tool_pin(definition)}
        argument = _customer_argument(definition)
        if argument is not None:
            entry["customerIdArgument"] = argument
        tools[str(definition["name"])] = entry
    server: dict[str, Any] = {"name": name, "url": url}
    if credential_secret:
        server["credentialSecret"] = credential_secret
    server["timeoutSeconds"] = 5
    server["tools"] = tools
    if declined:
        server["declined"] = declined
    return [server]


def default_name(url: str) -> str:
    """A namespace from the host: ``https://tracking.carrier.example/mcp`` → ``tracking``."""
    host = urlsplit(url).hostname or "server"
    label = host.split(".")[0] if not host.replace(".", "").isdigit() else "server"
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in label.lower()).strip("_")
    return cleaned or "server"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devstack.mcp_pins", description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the server's Streamable HTTP endpoint, e.g. https://mcp.carrier.example/mcp")
    parser.add_argument("--token", help="bearer token the server wants (stored later in Secrets Manager)")
    parser.add_argument("--name", help="the namespace its tools reach the model under (default: from the host)")
    parser.add_argument("--stack-name", default=DEFAULT_STACK_NAME, help="for the credential secret's name")
    args = parser.parse_args(argv)
    import anyio

    name = args.name or default_name(args.url)
    try:
        definitions = anyio.run(list_definitions, args.url, args.token)
    except Exception as exc:  # unreachable, refused, not MCP: say so, exit 2
        print(f"{args.url}: could not list its tools: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    secret = f"{args.stack_name}/mcp/{name}" if args.token else None
    print(json.dumps(skeleton(name, args.url, definitions, secret), indent=2))
    for definition in definitions:
        if not read_only(definition):
            print(f"declined {definition.get('name')}: not annotated readOnlyHint true", file=sys.stderr)
    if secret:
        print(f"store the token as the secret {secret} (its SecretString: the token itself)", file=sys.stderr)


if __name__ == "__main__":
    main()
