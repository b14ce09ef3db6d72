"""`LlmClient` for Claude on Amazon Bedrock: boto3 `bedrock-runtime` `InvokeModel`, Messages body.

Why InvokeModel and not Converse: the body is the Anthropic Messages request itself (see
`translate.bedrock_body`), so the canonical history goes out unchanged — `cache_control`
breakpoints, `tool_choice: none` for the last iteration (Converse's `toolChoice` has no "none",
and it refuses `toolUse` blocks in the history without a tool config), `is_error` results — and the
answer parses with the Anthropic client's own `parse_response`.

IAM, not keys: the function's role is allowed `bedrock:InvokeModel` on the configured inference
profile and the model ARNs it routes to (template.yaml). The model id may be an inference profile
id or ARN; the region comes from `region`, else from an ARN model id, else the function's own.

Retries follow `llm/retry.py`, the same policy as the HTTP adapters: ThrottlingException,
ServiceUnavailableException, ModelNotReadyException, InternalServerException,
ModelTimeoutException, 429/5xx and connection faults are retried; botocore's own retries are off
so they cannot stack. A ServiceQuotaExceededException → `ModelUnavailable` at once; any other
client error (validation, access denied, unknown model) → `ModelRefused`, whose body names the error
code only (`retry.refused`: the message, with its account id, role and ARNs, goes to the log).

The deadline: botocore's read timeout is fixed per client, so with a deadline each attempt runs
on a helper thread and is abandoned (as a timeout) once the turn has no time left; the stray
request finishes or times out on its own. The boto3 client is created on first use, so only this
provider pays for it, and never at import.

No streaming: a text sink is accepted and ignored (the reply arrives whole, as without one). Bedrock's
stream (`InvokeModelWithResponseStream`, AWS's event-stream framing) is out of scope of issue 36, which
streams the Anthropic and OpenAI-compatible adapters only.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from support_agent.config import Settings
from support_agent.errors import ModelRefused, ModelUnavailable
from support_agent.llm.base import LlmRequest, LlmResponse, Seams, TextSink
from support_agent.llm.messages_api import encode_body, parse_response
from support_agent.llm.retry import (
    MAX_RETRY_AFTER,
    Attempt,
    Retryable,
    RetryingClient,
    RetryPolicy,
    error_type,
    refused,
)
from support_agent.llm.translate import bedrock_body
from support_agent.messages import Deadline

RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "ModelNotReadyException",
        "InternalServerException",
        "ModelTimeoutException",
    }
)
QUOTA_CODES = frozenset({"ServiceQuotaExceededException"})
log = logging.getLogger(__name__)
_ARN_REGION = re.compile(r"^arn:aws[a-z-]*:bedrock:([a-z0-9-]+):")


def region_of(model_id: str) -> str | None:
    """The region of an inference profile or model ARN; None for a bare id."""
    match = _ARN_REGION.match(model_id)
    return match.group(1) if match else None


class BedrockClient(RetryingClient):
    """One `create` = one `InvokeModel`, under the shared `RetryPolicy` (`llm/retry.py`).

    `client` is an injected `bedrock-runtime` client (tests pass one with a botocore Stubber);
    without it one is built on first use with botocore retries disabled.
    """

    def __init__(
        self,
        *,
        model_id: str,
        max_tokens: int = 1024,
        region: str | None = None,
        client: Any = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        super().__init__(policy)
        self.model_id = model_id
        self.max_tokens = max_tokens
        self.region = region or region_of(model_id)
        self._client = client
        self._client_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, policy: RetryPolicy, seams: Seams) -> BedrockClient:
        return cls(
            model_id=settings.bedrock_model_id,
            max_tokens=settings.max_tokens,
            region=settings.bedrock_region or None,
            client=seams.sdk_client,
            policy=policy,
        )

    def runtime(self) -> Any:
        """The bedrock-runtime client, built once on first use."""
        with self._client_lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                self._client = boto3.client(
                    "bedrock-runtime",
                    region_name=self.region,
                    config=Config(
                        connect_timeout=self.policy.connect_timeout,
                        read_timeout=self.policy.read_timeout,
                        retries={"total_max_attempts": 1, "mode": "standard"},
                    ),
                )
            return self._client

    def _request(self, request: LlmRequest, text: TextSink | None = None) -> Attempt:
        """``text`` is ignored: this adapter does not stream (see the module's docstring)."""
        if not self.model_id:
            raise ModelRefused("Bedrock model id (BEDROCK_MODEL_ID) not configured")
        body = encode_body(bedrock_body(self.max_tokens, request))
        return lambda deadline: self._attempt(body, deadline)

    def _invoke(self, body: bytes) -> bytes:
        out = self.runtime().invoke_model(
            modelId=self.model_id, body=body, contentType="application/json", accept="application/json"
        )
        data: bytes = out["body"].read()
        return data

    def _attempt(self, body: bytes, deadline: Deadline | None) -> LlmResponse:
        try:
            raw = _bounded(lambda: self._invoke(body), deadline)
        except ClientError as exc:
            raise _mapped(exc) from None
        except (HTTPClientError, BotoConnectionError) as exc:
            raise Retryable(type(exc).__name__) from None
        except BotoCoreError as exc:  # no credentials, bad region, ...: configuration, not the provider
            log.warning("could not call Bedrock (%s): %s", type(exc).__name__, exc)  # may name the endpoint
            raise ModelRefused(f"could not call Bedrock ({type(exc).__name__})") from None
        try:
            return parse_response(json.loads(raw))
        except ValueError as exc:
            raise Retryable(f"malformed response: {exc}") from None


def _mapped(exc: ClientError) -> Exception:
    error = exc.response.get("Error", {})
    code = error_type(str(error.get("Code") or ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    reason = f"{code or 'error'} (HTTP {status})"
    if code in RETRYABLE_CODES or status == 429 or status >= 500:
        return Retryable(reason)
    if code in QUOTA_CODES:
        return ModelUnavailable(f"Bedrock service quota exceeded ({reason})", retry_after=MAX_RETRY_AFTER)
    # An AccessDenied message names the account, the role and the model ARN: the log's, not the client's.
    return refused(f"Bedrock {reason}", str(error.get("Message") or ""))


def _bounded(call: Callable[[], bytes], deadline: Deadline | None) -> bytes:
    """`call()`, given up as a timeout once the deadline passes (the call itself runs on)."""
    if deadline is None:
        return call()
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="bedrock-invoke", daemon=True).start()
    if not done.wait(max(0.01, deadline.remaining())):
        raise Retryable("timed out at the turn's deadline")
    if "error" in box:
        raise box["error"]
    value: bytes = box["value"]
    return value
