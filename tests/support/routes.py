"""The chat function's HTTP routes, as template.yaml declares them: what the template's own test, the stack
deployed into moto and the served API each expect to find."""

from __future__ import annotations

CHAT_ROUTES = {
    ("POST", "/api/chat"),
    ("GET", "/api/conversations"),
    ("GET", "/api/conversations/{id}"),
    ("POST", "/api/conversations/{id}/rating"),
    ("GET", "/api/health"),
}
