"""Bedrock's face: ``POST /model/{modelId}/invoke`` (bedrock-runtime InvokeModel) in front of the same brain.

So ``LLM_PROVIDER=bedrock make dev`` runs the Bedrock adapter's whole path — boto3, SigV4, its body and its error
mapping — with no AWS account: the functions' ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME`` points here while every other
client still reaches moto. The body is the Messages API's with ``anthropic_version`` in it and no ``model`` (the
model is the path's); the answer is the Messages API's message; an error is Bedrock's: a status, the
``x-amzn-ErrorType``-equivalent ``__type`` and a ``message``, which botocore turns into a ClientError.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from urllib.parse import unquote

from devstack.simulated_model.wire import ApiError, Json, validate

ANTHROPIC_VERSION = "bedrock-2023-05-31"
PREFIX, SUFFIX = "/model/", "/invoke"

# The Messages API's error types (faults.py) as Bedrock names and answers them.
_CODES: dict[str, tuple[int, str]] = {
    "invalid_request_error": (400, "ValidationException"),
    "authentication_error": (403, "AccessDeniedException"),
    "rate_limit_error": (429, "ThrottlingException"),
    "overloaded_error": (503, "ServiceUnavailableException"),
    "api_error": (500, "InternalServerException"),
    "not_found_error": (404, "ResourceNotFoundException"),
}


class BedrockError(ApiError):
    """An error in Bedrock's shape (the REST-JSON protocol's ``__type`` names the exception)."""

    def body(self) -> Json:
        return {"__type": self.error_type, "message": self.message}


def as_bedrock(error: ApiError) -> BedrockError:
    status, code = _CODES.get(error.error_type, (error.status, "InternalServerException"))
    return BedrockError(status, code, error.message)


def model_id(path: str) -> str | None:
    """The model of ``/model/{modelId}/invoke`` (a URL-encoded id, profile or ARN); None for another path."""
    if not (path.startswith(PREFIX) and path.endswith(SUFFIX)):
        return None
    return unquote(path[len(PREFIX) : -len(SUFFIX)]) or None


def check_bedrock_headers(headers: Mapping[str, str]) -> None:
    """A SigV4-signed request (any credentials: the signature is not checked, its presence is)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if not lowered.get("authorization", "").startswith("AWS4-HMAC-SHA256 "):
        raise BedrockError(403, "AccessDeniedException", "Missing Authentication Token (a SigV4 signature)")


def parse_bedrock_body(raw: bytes, model: str) -> Json:
    """The Messages body Bedrock takes, checked as the Messages API checks it, with the path's model put in."""
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BedrockError(400, "ValidationException", f"Malformed input request: {exc}") from None
    if not isinstance(body, dict):
        raise BedrockError(400, "ValidationException", "Malformed input request: the body must be a JSON object")
    if body.get("anthropic_version") != ANTHROPIC_VERSION:
        raise BedrockError(400, "ValidationException", f"anthropic_version must be {ANTHROPIC_VERSION!r}")
    for extraneous in ("model", "stream"):
        if extraneous in body:
            raise BedrockError(400, "ValidationException", f"extraneous key [{extraneous}] is not permitted")
    request = {k: v for k, v in body.items() if k != "anthropic_version"} | {"model": model}
    try:
        validate(request)
    except ApiError as exc:
        raise as_bedrock(exc) from None
    return request
