"""Opaque page tokens: DynamoDB's LastEvaluatedKey, base64'd, checked before it is used again."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from support_agent.errors import BadRequest


def encode(key: dict[str, Any] | None) -> str | None:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode() if key else None


def decode(token: str | None, valid: Callable[[dict[str, Any]], bool] = lambda _k: True) -> dict[str, Any] | None:
    if not token:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError):
        raise BadRequest("nextToken: invalid") from None
    if not isinstance(key, dict) or not valid(key):
        raise BadRequest("nextToken: invalid")
    return key
