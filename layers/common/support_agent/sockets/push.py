"""Posting to a WebSocket connection through API Gateway's ``@connections`` endpoint (``WEBSOCKET_CALLBACK_URL``).

A post is bounded (short timeouts, at most POST_ATTEMPTS tries) and never raises into its caller: one slow or gone
client must not fail a route, a push to the others or a turn. A 410 means the client has gone; the connection is
marked so (``on_gone``), and posting to it stops there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from enum import Enum
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

logger = logging.getLogger(__name__)

POST_ATTEMPTS = 2  # botocore's total attempts, the first included
CONNECT_TIMEOUT = 1.0
READ_TIMEOUT = 2.0


class Posted(Enum):
    SENT = "sent"
    GONE = "gone"  # 410: the connection is marked gone
    FAILED = "failed"  # anything else: logged, the connection kept


def management_client(endpoint_url: str) -> Any:
    """boto3's ``apigatewaymanagementapi`` client on the stage's callback URL, with short timeouts and few retries."""
    import boto3

    config = Config(
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=READ_TIMEOUT,
        retries={"max_attempts": POST_ATTEMPTS, "mode": "standard"},
    )
    return boto3.client("apigatewaymanagementapi", endpoint_url=endpoint_url, config=config)


def _gone(exc: ClientError) -> bool:
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return error.get("Code") == "GoneException" or status == 410


class Poster:
    """``client``: called once, on the first post, for the management client (the cold path builds none)."""

    def __init__(self, client: Callable[[], Any], on_gone: Callable[[str], None]) -> None:
        self._make_client = client
        self._client: Any = None
        self._on_gone = on_gone

    def post(self, connection_id: str, message: dict[str, Any]) -> Posted:
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            if self._client is None:
                self._client = self._make_client()
            self._client.post_to_connection(ConnectionId=connection_id, Data=data)
        except ClientError as exc:
            if _gone(exc):
                self._mark_gone(connection_id)
                return Posted.GONE
            logger.warning("post to a connection failed", extra={"connection_id": connection_id, "error": str(exc)})
            return Posted.FAILED
        except (BotoCoreError, OSError) as exc:  # timeouts and connection errors included
            logger.warning("post to a connection failed", extra={"connection_id": connection_id, "error": str(exc)})
            return Posted.FAILED
        return Posted.SENT

    def _mark_gone(self, connection_id: str) -> None:
        try:
            self._on_gone(connection_id)
        except Exception:  # the store's failure is logged; the caller goes on with the next connection
            logger.exception("could not mark a gone connection", extra={"connection_id": connection_id})
