"""A provider's own error text never reaches a client body: it is logged, and the 502 names its error type.

A Bedrock AccessDenied message carries the account id, the role and the model ARN; an OpenAI or Anthropic
message can quote the request or a key. Each adapter is driven over its real wire format (httpx
MockTransport, a botocore Stubber behind a real bedrock-runtime client).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import NoCredentialsError
from botocore.stub import Stubber

from support_agent.contract import error_body, status_and_code
from support_agent.errors import ModelRefused, ModelUnavailable
from support_agent.llm.anthropic import AnthropicClient
from support_agent.llm.bedrock import BedrockClient
from support_agent.llm.openai import OpenAIClient
from support_agent.llm.retry import RetryPolicy

ACCOUNT = "123456789012"
ROLE = "support-agent-dev-ChatFunctionRole-AbCdEf123"
ARN = f"arn:aws:bedrock:us-east-1:{ACCOUNT}:inference-profile/us.anthropic.claude-test-v1:0"
SECRET_TEXT = (
    f"User: arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE}/fn is not authorized to perform: "
    f"bedrock:InvokeModel on resource: {ARN}"
)
KEY = "sk-test-0123456789abcdef"
HISTORY: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def _once() -> RetryPolicy:
    return RetryPolicy(max_retries=0, sleep=lambda _s: None)


def _http(status: int, body: Any) -> httpx.MockTransport:
    return httpx.MockTransport(lambda _r: httpx.Response(status, json=body))


def _refusal(make: Any, caplog: pytest.LogCaptureFixture) -> ModelRefused:
    with caplog.at_level(logging.WARNING), pytest.raises(ModelRefused) as info:
        make().create("system", HISTORY, [])
    return info.value


def _assert_redacted(err: ModelRefused, expected: str, caplog: pytest.LogCaptureFixture) -> None:
    body = str(error_body(err))
    assert status_and_code(err) == (502, "model_error")
    assert err.message == expected
    for secret in (ACCOUNT, ROLE, ARN, "not authorized", KEY):
        assert secret not in body
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET_TEXT in logged, "the operator still gets the provider's words, in the log"
    assert KEY not in logged


def test_anthropic_refusal(caplog: pytest.LogCaptureFixture) -> None:
    wire = _http(403, {"type": "error", "error": {"type": "permission_error", "message": f"{SECRET_TEXT} ({KEY})"}})
    err = _refusal(lambda: AnthropicClient(api_key=KEY, model="m", transport=wire, policy=_once()), caplog)
    _assert_redacted(err, "the model API refused the request (HTTP 403 permission_error)", caplog)


def test_openai_refusal(caplog: pytest.LogCaptureFixture) -> None:
    body = {"error": {"type": "invalid_request_error", "code": "model_not_found", "message": f"{SECRET_TEXT} {KEY}"}}
    err = _refusal(lambda: OpenAIClient(api_key=KEY, model="m", transport=_http(404, body), policy=_once()), caplog)
    _assert_redacted(err, "the model API refused the request (HTTP 404 model_not_found)", caplog)


def test_free_text_in_the_error_type_is_not_passed_on(caplog: pytest.LogCaptureFixture) -> None:
    """A compatible server (or a proxy) may put anything in `type`/`code`: only an identifier goes out."""
    body = {"error": {"type": f"denied for {ACCOUNT}", "code": ARN, "message": SECRET_TEXT}}
    err = _refusal(lambda: OpenAIClient(api_key=KEY, model="m", transport=_http(400, body), policy=_once()), caplog)
    _assert_redacted(err, "the model API refused the request (HTTP 400)", caplog)


def test_bedrock_access_denied(caplog: pytest.LogCaptureFixture) -> None:
    runtime = boto3.client("bedrock-runtime", region_name="us-east-1")
    with Stubber(runtime) as stubber:
        stubber.add_client_error("invoke_model", "AccessDeniedException", SECRET_TEXT, 403)
        err = _refusal(lambda: BedrockClient(model_id=ARN, client=runtime, policy=_once()), caplog)
        stubber.assert_no_pending_responses()
    _assert_redacted(err, "the model API refused the request (Bedrock AccessDeniedException (HTTP 403))", caplog)


def test_bedrock_configuration_fault(caplog: pytest.LogCaptureFixture) -> None:
    class NoCredentials:
        def invoke_model(self, **_kw: Any) -> Any:
            raise NoCredentialsError()

    with caplog.at_level(logging.WARNING), pytest.raises(ModelRefused) as info:
        BedrockClient(model_id=ARN, client=NoCredentials()).create("system", HISTORY, [])
    assert info.value.message == "could not call Bedrock (NoCredentialsError)"
    assert "Unable to locate credentials" in caplog.text


def test_a_malformed_answer_names_no_content() -> None:
    """Not a refusal, but the same rule: what the provider sent is not echoed (503 after the retries)."""
    wire = httpx.MockTransport(lambda _r: httpx.Response(200, content=SECRET_TEXT.encode()))
    client = AnthropicClient(api_key=KEY, model="m", transport=wire, policy=_once())
    with pytest.raises(ModelUnavailable) as info:
        client.create("s", HISTORY, [])
    assert status_and_code(info.value)[0] == 503 and ACCOUNT not in json.dumps(error_body(info.value))
