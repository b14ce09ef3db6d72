"""Swagger UI at /api/docs on the local stack: served offline, loads /api/openapi.json, and can call the API."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from devstack.local import LocalStack
from devstack.stack import REPO_ROOT

if TYPE_CHECKING:
    from playwright.sync_api import Page


def test_docs_page_assets_and_spec_load(local_stack: LocalStack) -> None:
    client = httpx.Client(base_url=local_stack.url, timeout=30)
    page = client.get("/api/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assets = re.findall(r"(?:src|href)=\"(/[^\"]+)\"", page.text)
    assert len(assets) == 2 and all(a.startswith("/api/docs/") for a in assets), assets
    for asset in assets:
        served = client.get(asset)
        assert served.status_code == 200 and len(served.content) > 100_000, asset
    spec = client.get("/api/openapi.json")
    assert spec.status_code == 200 and spec.headers["content-type"] == "application/json"
    assert spec.json() == json.loads((REPO_ROOT / "docs" / "openapi.json").read_text())
    # The docs paths are the gateway's own; the API's routes and 404s are unchanged around them.
    assert client.get("/api/docs/nope.js").status_code == 404
    assert client.get("/api/health").json() == {"status": "ok"}


def test_swagger_ui_renders_offline_and_tries_an_operation(local_stack: LocalStack, page: tuple[Page, Any]) -> None:
    pg, _ = page
    foreign: list[str] = []
    errors: list[str] = []
    local = urlsplit(local_stack.url).netloc
    pg.on("request", lambda r: foreign.append(r.url) if urlsplit(r.url).netloc not in ("", local) else None)
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    pg.goto(f"{local_stack.url}/api/docs")
    pg.get_by_text("Support agent API").first.wait_for()
    for path in ("/api/chat", "/api/customers/{customer_id}/erase", "/api/health"):
        assert pg.locator(f".opblock-summary-path[data-path='{path}']").count() == 1, path
    # "Try it out" on the public health check, through the same gateway.
    health = pg.locator("#operations-public-health_api_health_get")
    health.locator(".opblock-summary").click()
    health.get_by_role("button", name="Try it out").click()
    health.get_by_role("button", name="Execute").click()
    body = health.locator(".live-responses-table .response-col_description pre").first
    body.wait_for()
    assert json.loads(body.inner_text()) == {"status": "ok"}
    assert foreign == [], f"requests left the machine: {foreign}"
    assert errors == []
