"""The support policy of the running `make dev` stack (docs/POLICY.md): publish a version, list the versions.

``make policy-publish FILE=policy.json`` validates the file with the policy's model and puts it as a new version of
the stack's parameter (a file that does not validate is refused, nothing is put); ``make policy-publish VERSION=2``
publishes version 2's document again — a rollback is a new version with an old document. ``make policy-show`` lists
every version (valid or refused, and which one applies); ``make policy-show VERSION=2`` prints that one's document.

The parameter's name and moto's address come from what `make dev` wrote (``.devstack/env.json``), as
devstack/reconcile.py reads them. ``make dev POLICY=policy.json`` publishes a file the same way right after deploying.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from devstack.stack import REPO_ROOT

ENV_FILE = REPO_ROOT / ".devstack" / "env.json"  # devstack.local.write_env_file
READER = "ChatFunction"  # a function that reads the policy: its environment names the parameter
CANNOT_RUN = 2


class PolicyRefused(ValueError):
    """A document the policy's model does not validate; the message says where and why."""


class CannotRun(Exception):
    pass


@dataclass(frozen=True)
class Version:
    version: int
    modified: str
    value: str
    refusal: str | None  # None: it validates


def validated(text: str, origin: str) -> str:
    """``text`` when it is a valid policy document; `PolicyRefused` naming ``origin`` otherwise."""
    from pydantic import ValidationError

    from support_agent.policy.model import SupportPolicy
    from support_agent.policy.source import refusal

    try:
        SupportPolicy.model_validate_json(text)
    except ValidationError as exc:
        raise PolicyRefused(f"{origin} is not a valid support policy: {refusal(exc)}") from None
    return text


def read_file(path: str | Path) -> str:
    """A policy file's document, validated: `PolicyRefused` for a missing, unreadable or invalid file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyRefused(f"{path}: {exc.strerror or exc}") from None
    return validated(text, str(path))


def publish(ssm: Any, name: str, document: str) -> int:
    """Put a validated ``document`` as the parameter's next version; that version's number."""
    response = ssm.put_parameter(Name=name, Value=validated(document, "the document"), Type="String", Overwrite=True)
    return int(response["Version"])


def versions(ssm: Any, name: str) -> list[Version]:
    """Every version SSM keeps, oldest first, each validated as the functions validate it."""
    from pydantic import ValidationError

    from support_agent.policy.model import SupportPolicy
    from support_agent.policy.source import refusal

    out: list[Version] = []
    for page in ssm.get_paginator("get_parameter_history").paginate(Name=name):
        for entry in page["Parameters"]:
            try:
                SupportPolicy.model_validate_json(entry["Value"])
                why = None
            except ValidationError as exc:
                why = refusal(exc)
            modified = entry.get("LastModifiedDate")
            out.append(Version(int(entry["Version"]), modified.isoformat() if modified else "", entry["Value"], why))
    return sorted(out, key=lambda v: v.version)


def applied(found: Sequence[Version]) -> Version | None:
    """The version the functions apply: the newest that validates."""
    return next((v for v in reversed(found) if v.refusal is None), None)


def version_lines(name: str, found: Sequence[Version]) -> list[str]:
    applies = applied(found)
    lines = [f"{name}: {len(found)} version(s), the newest valid one applies"]
    for v in found:
        mark = "applies" if v is applies else ("refused: " + v.refusal if v.refusal else "valid")
        lines.append(f"  {v.version:>4}  {v.modified:<32}  {mark}")
    if applies is None:
        lines.append("  none validates: every action answers that the policy is unavailable")
    else:
        lines += ["", f"version {applies.version}:", json.dumps(json.loads(applies.value), indent=2)]
    return lines


def local_stack(env_file: Path | None = None) -> tuple[str, str, int]:
    """(parameter name, moto's address from this machine, the functions' cache seconds) of the running stack."""
    env_file = ENV_FILE if env_file is None else env_file
    try:
        functions = json.loads(env_file.read_text())
    except FileNotFoundError:
        raise CannotRun(f"{env_file} not found: start the local stack with `make dev` first") from None
    env = functions.get(READER) or {}
    name = env.get("SUPPORT_POLICY_PARAMETER")
    if not name:
        raise CannotRun(f"{env_file} names no support policy parameter: restart `make dev` (it predates the policy)")
    endpoint = urlsplit(str(env.get("AWS_ENDPOINT_URL", "")))
    if not endpoint.port:
        raise CannotRun(f"{env_file} names no local AWS endpoint")
    url = urlunsplit((endpoint.scheme or "http", f"127.0.0.1:{endpoint.port}", "", "", ""))
    return str(name), url, int(env.get("POLICY_CACHE_SECONDS") or 60)


def ssm_client(endpoint_url: str) -> Any:
    import boto3

    return boto3.client(
        "ssm",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def _document_of(found: Sequence[Version], version: int) -> str:
    for v in found:
        if v.version == version:
            return v.value
    raise CannotRun(f"no version {version}; the versions are {', '.join(str(v.version) for v in found)}")


def run(args: argparse.Namespace, ssm: Any, name: str, cache_seconds: int, out: Callable[[str], Any] = print) -> None:
    if args.command == "show":
        found = versions(ssm, name)
        if args.version is not None:
            out(_document_of(found, args.version))
            return
        for line in version_lines(name, found):
            out(line)
        return
    if (args.file is None) == (args.version is None):
        raise CannotRun("publish takes FILE=<policy.json> or VERSION=<n> (an earlier version's document again)")
    if args.file is not None:
        document, origin = read_file(args.file), args.file
    else:
        document, origin = _document_of(versions(ssm, name), args.version), f"version {args.version}'s document"
    version = publish(ssm, name, document)
    out(f"published {origin} as version {version} of {name}; the functions apply it within {cache_seconds} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devstack.policy", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("show", help="list the versions (or print one's document with --version)")
    show.add_argument("--version", type=int, default=None)
    publish_cmd = commands.add_parser("publish", help="publish a file, or an earlier version's document again")
    publish_cmd.add_argument("--file", default=None)
    publish_cmd.add_argument("--version", type=int, default=None)
    args = parser.parse_args(argv)
    prog = f"make policy-{args.command}"
    try:
        name, url, cache_seconds = local_stack()
        from devstack.reconcile import reachable

        if not reachable(url):
            raise CannotRun(f"the local stack is not running at {url}: start it with `make dev`")
        run(args, ssm_client(url), name, cache_seconds)
    except (CannotRun, PolicyRefused) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        raise SystemExit(CANNOT_RUN) from None


if __name__ == "__main__":
    main()
