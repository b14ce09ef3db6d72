"""A route's ``responses=``: its statuses, their descriptions and the model of each body.

A lead route returns its response model (api/responses.py), the body itself; a chat or events route builds
a dict, and its model only describes it in the OpenAPI document. So those routes may name their model
instead of importing it, and do: their cold start skips building ~40 pydantic classes (docs/PERFORMANCE.md).
``documented`` puts the classes in when the document is built (api/openapi.py); until then Powertools
sees no model under a named one and builds nothing for it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING, Any

from support_agent.contract import CONTRACT

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pydantic import BaseModel

NAMED = "x-model"  # where a named model waits for `documented`; Powertools reads only "model"

_CODES: dict[int, list[str]] = {}
for _status, _code in CONTRACT.values():
    _CODES.setdefault(_status, []).append(_code)
_WHY = {
    400: "Malformed JSON, wrong types, unknown or missing fields",
    401: "No, bad or expired bearer token",
    403: "The token's role may not call this route",
    404: "Unknown, or not yours (the same answer)",
    409: "Conflicts with the current state",
    413: "Body or message over the limit",
    422: "The Idempotency-Key was used with another request body",
    429: "Rate limited or out of token budget; see Retry-After",
    502: "The model API refused the request",
    503: "The model API is unavailable; see Retry-After",
}
RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before resending", "required": True, "schema": {"type": "integer"}}
}


def json_body(model: type[BaseModel] | str) -> dict[str, Any]:
    """A JSON body of ``model``: the class, or its name in api/responses.py."""
    return {"application/json": {NAMED: model} if isinstance(model, str) else {"model": model}}


def error_response(status: int) -> dict[str, Any]:
    codes = ", ".join(f"`{code}`" for code in _CODES[status])
    out: dict[str, Any] = {"description": f"{_WHY[status]} ({codes})", "content": json_body("ErrorBody")}
    if status in (429, 503):
        out["headers"] = RETRY_AFTER
    return out


def responses(
    model: type[BaseModel] | str, *errors: int, description: str = "OK", also: dict[int, str] | None = None
) -> dict[int, Any]:
    """A route's ``responses=``: 200 with ``model`` (and ``also``: more statuses with the same body), and its errors."""
    ok = {200: description, **(also or {})}
    out: dict[int, Any] = {status: {"description": why, "content": json_body(model)} for status, why in ok.items()}
    for code in errors:
        out[code] = error_response(code)
    return out


def with_csv(declared: dict[int, Any], filename: str) -> dict[int, Any]:
    """``declared`` whose 200 is also a CSV download (a report's ``format=csv``): ``text/csv`` with its
    Content-Disposition."""
    ok = declared[200]
    ok["content"]["text/csv"] = {"schema": {"type": "string"}}
    ok["headers"] = {
        "Content-Disposition": {
            "description": f"With format=csv: attachment; filename={filename}",
            "schema": {"type": "string"},
        }
    }
    return declared


@cache
def _ws_ticket() -> type[BaseModel]:
    """POST /api/ws-ticket's answer (docs/API.md#websocket), built with the document like the rest."""
    from pydantic import BaseModel, ConfigDict, Field

    class WsTicket(BaseModel):
        model_config = ConfigDict(extra="forbid")

        ticket: str = Field(..., description="43 URL-safe characters; single use, good for expiresIn seconds")
        url: str = Field(..., description="The WebSocket's address with the ticket: open it as it is")
        expiresIn: int = Field(..., description="Seconds the ticket stays good (60)")

    return WsTicket


# Named models of the routes whose shapes live here rather than in api/responses.py.
_HERE: dict[str, Callable[[], type[BaseModel]]] = {"WsTicket": _ws_ticket}


def documented(declared: Mapping[int, Any]) -> dict[int, Any]:
    """``declared`` with each named model replaced by its class from api/responses.py (or from here)."""
    models = import_module("support_agent.api.responses")

    def swap(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = {key: swap(item) for key, item in value.items() if key != NAMED}
        if NAMED in value:
            name = value[NAMED]
            out["model"] = _HERE[name]() if name in _HERE else getattr(models, name)
        return out

    return {status: swap(response) for status, response in declared.items()}
