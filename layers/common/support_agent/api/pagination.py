"""Opaque page tokens: DynamoDB's LastEvaluatedKey, base64'd, checked before it is used again."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, TypeVar

from botocore.exceptions import ClientError, ParamValidationError

from support_agent.errors import InvalidRequest
from support_agent.store.dynamo import error_code

T = TypeVar("T")


def encode(key: dict[str, Any] | None) -> str | None:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode() if key else None


def decode(token: str | None, valid: Callable[[dict[str, Any]], bool] = lambda _k: True) -> dict[str, Any] | None:
    if not token:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError):
        raise InvalidRequest("nextToken: invalid") from None
    if not isinstance(key, dict) or not valid(key):
        raise InvalidRequest("nextToken: invalid")
    return key


def page(
    token: str | None,
    query: Callable[[dict[str, Any] | None], T],
    valid: Callable[[dict[str, Any]], bool] = lambda _k: True,
) -> T:
    """Run ``query`` from the token's start key. A token that decodes but does not fit the query (a
    crafted one: DynamoDB, or botocore, refuses the start key) is the client's 400, not a 500."""
    start = decode(token, valid)
    try:
        return query(start)
    except (ParamValidationError, ClientError) as exc:
        if start is None or (isinstance(exc, ClientError) and error_code(exc) != "ValidationException"):
            raise
        raise InvalidRequest("nextToken: invalid") from None
