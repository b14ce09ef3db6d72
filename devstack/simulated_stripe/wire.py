"""Stripe API v1 on the wire: the reply, the error body, bracketed form fields and the API key check."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One HTTP answer; ``hold_seconds``/``drop`` are how a timeout and a reset look from the client."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    hold_seconds: float = 0.0
    drop: bool = False


class StripeError(Exception):
    """A refusal, answered as Stripe's ``{"error": {"type", "code", "message", "param"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type, code, param

    def reply(self) -> Reply:
        error: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.code:
            error["code"] = self.code
            error["doc_url"] = f"https://stripe.com/docs/error-codes/{self.code.replace('_', '-')}"
        if self.param:
            error["param"] = self.param
        return Reply(self.status, {"error": error})


def api_error() -> StripeError:
    """Stripe's own failure: a 500 of type ``api_error``."""
    return StripeError(500, "An unknown error occurred", type="api_error")


def decode_form(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """``a=1&metadata[k]=v&expand[0]=x&created[gte]=5`` as ``{"a": "1", "metadata": {"k": "v"}, ...}``.

    One level of brackets is all the refund routes take; ``expand[0]``-style indices stay dict keys.
    A field given twice is a 400, as Stripe refuses ambiguous parameters.
    """
    out: dict[str, Any] = {}
    for name, value in pairs:
        if "[" in name:
            head, _, rest = name.partition("[")
            if not rest.endswith("]") or "[" in rest[:-1] or not head:
                raise StripeError(400, f"Invalid parameter name: {name}", code="parameter_unknown", param=name)
            sub = out.setdefault(head, {})
            if not isinstance(sub, dict) or rest[:-1] in sub:
                raise StripeError(400, f"Invalid value for {name}: given twice", code="parameter_invalid", param=name)
            sub[rest[:-1]] = value
        elif name in out:
            raise StripeError(400, f"Invalid value for {name}: given twice", code="parameter_invalid", param=name)
        else:
            out[name] = value
    return out


def positive_int(params: Mapping[str, Any], name: str, *, maximum: int | None = None) -> int | None:
    """An integer parameter (absent: None), ≥ 1 and ≤ ``maximum``; otherwise Stripe's 400."""
    raw = params.get(name)
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.isdigit():
        raise StripeError(400, f"Invalid integer: {raw}", code="parameter_invalid_integer", param=name)
    value = int(raw)
    if value < 1 or (maximum is not None and value > maximum):
        bound = f"between 1 and {maximum}" if maximum else "greater than or equal to 1"
        raise StripeError(400, f"This value must be {bound}.", code="parameter_invalid_integer", param=name)
    return value


def api_key(headers: Mapping[str, str]) -> str:
    """The secret key of ``Authorization: Bearer sk_test_…`` (or Basic, as ``curl -u sk_test_…:`` sends it)."""
    auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "").strip()
    scheme, _, credential = auth.partition(" ")
    if scheme.lower() == "basic":
        try:
            credential = base64.b64decode(credential).decode("utf-8").split(":", 1)[0]
        except ValueError:
            credential = ""
    elif scheme.lower() != "bearer":
        credential = ""
    credential = credential.strip()
    if not credential:
        raise StripeError(
            401,
            "You did not provide an API key. You need to provide your API key in the Authorization header, "
            "using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
        )
    if not credential.startswith("sk_test_"):
        raise StripeError(401, f"Invalid API Key provided: {credential[:8]}{'*' * 8}{credential[-4:]}")
    return credential
