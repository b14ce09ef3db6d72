"""Check a real answer against docs/openapi.json: the document describes what the code returns."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from devstack.stack import REPO_ROOT

DOC_URI = "urn:support-agent:openapi"


@cache
def _doc() -> dict[str, Any]:
    return json.loads((REPO_ROOT / "docs" / "openapi.json").read_text(encoding="utf-8"))


def _pointer(*parts: str) -> str:
    return "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def _template(path: str) -> str:
    """The documented path a concrete one matches (/api/approvals/apr_… → /api/approvals/{approval_id})."""
    concrete = path.split("?")[0].split("/")
    for documented in _doc()["paths"]:
        parts = documented.split("/")
        if len(parts) == len(concrete) and all(
            d == c or (d.startswith("{") and d.endswith("}")) for d, c in zip(parts, concrete, strict=True)
        ):
            return documented
    raise AssertionError(f"{path} is not in docs/openapi.json")


def assert_documented(method: str, path: str, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    """The status is documented for the operation and the body validates against its schema."""
    documented = _template(path)
    responses = _doc()["paths"][documented][method.lower()]["responses"]
    assert str(status) in responses, f"{method} {documented} answered {status}, documented {sorted(responses)}"
    response = responses[str(status)]
    schema_ref = _pointer("paths", documented, method.lower(), "responses", str(status), "content", "application/json")
    registry: Registry[Any] = Registry().with_resource(
        DOC_URI, Resource.from_contents(_doc(), default_specification=DRAFT202012)
    )
    validator = Draft202012Validator({"$ref": f"{DOC_URI}#/{schema_ref}/schema"}, registry=registry)
    errors = sorted(validator.iter_errors(body), key=lambda e: list(e.path))
    assert not errors, f"{method} {documented} {status}: " + "; ".join(
        f"{'/'.join(map(str, e.path)) or '(body)'}: {e.message}" for e in errors[:5]
    )
    for name, spec in response.get("headers", {}).items():
        got = {k.lower(): v for k, v in (headers or {}).items()}
        if spec.get("required"):  # OpenAPI's default: a documented header may be absent
            assert name.lower() in got, f"{method} {documented} {status}: missing header {name}"
        if name.lower() in got and spec.get("schema", {}).get("type") == "integer":
            assert re.fullmatch(r"\d+", got[name.lower()]), (name, got[name.lower()])
        elif name.lower() in got and "enum" in spec.get("schema", {}):
            assert got[name.lower()] in spec["schema"]["enum"], (name, got[name.lower()])
