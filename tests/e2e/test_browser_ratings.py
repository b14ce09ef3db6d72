"""The customer's ratings in a real browser (issue 35): a thumb under each answer, and a closing 1-5 rating.

Dana (customer 7) asks twice; each answer has a thumb up and a thumb down. She presses up on the first (it shows
pressed), then down on the second, then changes her mind on the first (down): one rating per answer is stored, the
last vote. She ends the conversation with "End / rate this conversation": a 2 and a comment. The page thanks her,
and the items in the Conversations table say exactly that. Screenshots go to tests/e2e/artifacts/.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from devstack.local import LocalStack
from support_agent.store.ratings import partition
from tests.e2e.conftest import REGION, PageWatch

REPLY_TIMEOUT_MS = 45_000  # a model turn through the worker processes


def is_rating(response: Any) -> bool:
    return response.request.method == "POST" and response.url.endswith("/rating")


def rating_items(local: LocalStack, conversation_id: str) -> list[dict[str, Any]]:
    import boto3

    session = boto3.Session(region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")
    out = session.client("dynamodb", endpoint_url=local.moto_url).query(
        TableName=local.stack.physical_ids["ConversationsTable"],
        KeyConditionExpression="conversation_id = :p",
        ExpressionAttributeValues={":p": {"S": partition(conversation_id)}},
        ConsistentRead=True,
    )
    return list(out["Items"])


def test_dana_rates_each_answer_and_the_conversation(
    local_stack: LocalStack, page: tuple[Any, PageWatch], screenshot: Callable[[Any, str], Path]
) -> None:
    from playwright.sync_api import expect

    chat, watch = page
    chat.goto(f"{local_stack.url}/")
    chat.click("#signin-customer-7")
    expect(chat.locator("#app")).to_be_visible()
    expect(chat.locator("#closing")).to_be_hidden()  # nothing to rate before the conversation exists
    for n, question in enumerate(("Where is my order 1042?", "And my invoices?"), start=1):
        chat.fill("#message", question)
        chat.click("#send")
        expect(chat.locator(".reply")).to_have_count(n, timeout=REPLY_TIMEOUT_MS)
        expect(chat.locator(".reply").nth(n - 1).locator(".thumbs button.thumb")).to_have_count(2)
    conversation_id = chat.locator("#conversation-id").inner_text()
    first, second = chat.locator(".reply").nth(0), chat.locator(".reply").nth(1)
    turns = [r.get_attribute("data-turn-id") for r in (first, second)]
    assert all(t and t.startswith("turn_") for t in turns), turns

    # ---- a thumb per answer: pressed once saved; a changed vote replaces the first
    for reply, thumb in ((first, "up"), (second, "down"), (first, "down")):
        with chat.expect_response(is_rating) as rated:
            reply.locator(f"button.thumb-{thumb}").click()
        assert rated.value.status == 200, rated.value.text()
        expect(reply.locator(f"button.thumb-{thumb}")).to_have_attribute("aria-pressed", "true")
        other = "down" if thumb == "up" else "up"
        expect(reply.locator(f"button.thumb-{other}")).to_have_attribute("aria-pressed", "false")
    screenshot(chat, "01-thumbs")

    # ---- the closing rating: a score and a short comment
    expect(chat.locator("#closing")).to_be_visible()
    chat.click("#closing-open")
    chat.check("#closing-form input[name=score][value='2']")
    chat.fill("#closing-comment", "  The second answer missed my question.  ")
    with chat.expect_response(is_rating) as rated:
        chat.click("#closing-send")
    assert rated.value.status == 200, rated.value.text()
    expect(chat.locator("#closing-status")).to_contain_text("2 of 5")
    expect(chat.locator("#closing")).to_have_attribute("data-score", "2")
    expect(chat.locator("#closing-error")).to_be_hidden()
    screenshot(chat, "02-closing-rating")

    # ---- what is stored: one item per rated answer (the last vote), the closing rating at seq 0
    items = rating_items(local_stack, conversation_id)
    thumbs = {i["turn_id"]["S"]: i["thumb"]["S"] for i in items if "thumb" in i}
    assert thumbs == {turns[0]: "down", turns[1]: "down"}, items
    (closing,) = [i for i in items if i["seq"]["N"] == "0"]
    assert (closing["score"]["N"], closing["comment"]["S"]) == ("2", "The second answer missed my question.")
    assert len(items) == 3

    # ---- opened again (a reload reopens the remembered conversation): the ratings given are shown as given
    chat.reload()
    if chat.locator("#signin-customer-7").is_visible():
        chat.click("#signin-customer-7")
    expect(chat.locator(".reply")).to_have_count(2, timeout=REPLY_TIMEOUT_MS)
    for n, pressed in ((0, "down"), (1, "down")):
        reply = chat.locator(".reply").nth(n)
        expect(reply.locator(f"button.thumb-{pressed}")).to_have_attribute("aria-pressed", "true")
        expect(reply.locator("button.thumb-up")).to_have_attribute("aria-pressed", "false")
    expect(chat.locator("#closing")).to_have_attribute("data-score", "2")
    expect(chat.locator("#closing-status")).to_contain_text("2 of 5")
    with chat.expect_response(is_rating) as rated:  # a thumb on a reopened answer names its turn
        chat.locator(".reply").nth(1).locator("button.thumb-up").click()
    assert rated.value.status == 200, rated.value.text()
    assert {i["turn_id"]["S"]: i["thumb"]["S"] for i in rating_items(local_stack, conversation_id) if "thumb" in i} == {
        turns[0]: "down",
        turns[1]: "up",
    }
    screenshot(chat, "03-reopened")
    watch.settle(chat)
    assert watch.errors == [], watch.errors
