"""The chat handler's libraries and no code of ours: the baseline's GetItem behind Powertools' HTTP API
resolver (validation on), Logger and Metrics, a pydantic body model and a pyjwt-verified token.

Its import is what the libraries the chat handler keeps (boto3, Powertools, pydantic, pyjwt with cryptography)
cost before any of our modules: the floor under the chat handler's import. As in the chat handler, the DynamoDB
client is built on the first event and Powertools' packages are lazy (support_agent/api/lazy_packages.py).
"""

import os

import boto3
import jwt
from pydantic import BaseModel

import support_agent.api  # noqa: F401 - first: Powertools' packages made lazy, as in our handlers

# isort: split
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

_ddb: list = []  # the client, built on the first event
TABLE = os.environ["CUSTOMER_DATA_TABLE"]
SECRET = os.environ["JWT_SECRET"]
logger = Logger(service="libraries")
metrics = Metrics()
app = APIGatewayHttpResolver(enable_validation=True)


class ChatRequest(BaseModel):
    conversationId: str | None = None
    message: str


@app.post("/api/chat")
def chat(body: ChatRequest) -> dict:
    token = (app.current_event.headers or {}).get("authorization", "").removeprefix("Bearer ")
    claims = jwt.decode(token, SECRET, algorithms=["HS256"], audience="support-agent")
    key = {"customer_id": {"N": str(claims["customer_id"])}, "sk": {"S": "ORDER#1042"}}
    if not _ddb:
        _ddb.append(boto3.client("dynamodb"))
    item = _ddb[0].get_item(TableName=TABLE, Key=key).get("Item", {})
    return {"status": item.get("status", {}).get("S"), "chars": len(body.message)}


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event: dict, context: object) -> dict:
    return app.resolve(event, context)
