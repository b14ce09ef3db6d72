"""The simulated model's Bedrock face (devstack/simulated_model/bedrock_facade.py) as boto3 sees it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from devstack.simulated_model import SimulatedModelServer, start

PROFILE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
BODY = {
    "anthropic_version": "bedrock-2023-05-31",
    "max_tokens": 300,
    "messages": [{"role": "user", "content": "hello"}],
}


@pytest.fixture(scope="module")
def server() -> Iterator[SimulatedModelServer]:
    s = start(port=0)
    yield s
    s.stop()


def runtime(server: SimulatedModelServer) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id="any",
        aws_secret_access_key="any",
        config=Config(retries={"total_max_attempts": 1}),
    )


def test_invoke_model_answers_a_messages_api_message_naming_the_paths_model(server: SimulatedModelServer) -> None:
    out = runtime(server).invoke_model(modelId=PROFILE, body=json.dumps(BODY))
    message = json.loads(out["body"].read())
    assert message["type"] == "message" and message["model"] == PROFILE
    assert message["content"][0]["text"].startswith("[simulated model]")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({**BODY, "model": PROFILE}, "extraneous key [model]"),
        ({k: v for k, v in BODY.items() if k != "anthropic_version"}, "anthropic_version"),
        ({**BODY, "messages": []}, "messages"),
    ],
)
def test_a_body_bedrock_would_refuse_is_a_validation_exception(
    server: SimulatedModelServer, body: dict[str, Any], words: str
) -> None:
    with pytest.raises(ClientError) as raised:
        runtime(server).invoke_model(modelId=PROFILE, body=json.dumps(body))
    error = raised.value.response
    assert error["Error"]["Code"] == "ValidationException" and words in error["Error"]["Message"]
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_an_armed_fault_is_answered_as_bedrock_names_it(server: SimulatedModelServer) -> None:
    server.model.faults.arm("overloaded")
    try:
        with pytest.raises(ClientError) as raised:
            runtime(server).invoke_model(modelId=PROFILE, body=json.dumps(BODY))
    finally:
        server.model.faults.clear()
    assert raised.value.response["Error"]["Code"] == "ServiceUnavailableException"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503


def test_an_unsigned_request_is_refused(server: SimulatedModelServer) -> None:
    resp = httpx.post(f"{server.url}/model/{PROFILE}/invoke", json=BODY)
    assert resp.status_code == 403 and resp.json()["__type"] == "AccessDeniedException"
