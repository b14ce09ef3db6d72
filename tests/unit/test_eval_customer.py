"""The simulated customers of evals/customer.py against a stand-in of the chat API (httpx.MockTransport): the
scripted one plays the task's turns (a 202 followed to its end, a press on the newest proposal); the model-driven
one, with a scripted LLM standing in, is told its goal and the stop rule, stops on the marker and at the turn limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from evals.customer import CONFIRM, STOP, ModelCustomer, ScriptedCustomer
from evals.task import Task
from tests.support.scripted import ScriptedModel, answer

TOKEN = "tok-123"


@dataclass
class FakeTrial:
    token: str = TOKEN

    def fill(self, text: str) -> str:
        return text.replace("{o1}", "700001").replace("{name}", "Dana Whitfield").replace("{me}", "500001")


class FakeApi:
    """What the customer sends, and the chat API's answers: each message echoed back as the reply, a turn handed
    to the queue for a message containing "slow", one proposal per conversation."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.polls = 0
        self.pressed: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        path = request.url.path
        if request.method == "POST" and path == "/api/chat":
            body = json.loads(request.content)
            self.sent.append(body)
            conv = body.get("conversationId") or f"c{len(self.sent)}"
            if "slow" in body["message"]:
                return httpx.Response(
                    202,
                    json={"conversationId": conv, "turnId": "t1", "status": "running"},
                    headers={"location": "/turn"},
                )
            return httpx.Response(200, json={"conversationId": conv, "reply": f"you said: {body['message']}"})
        if path == "/turn":
            self.polls += 1
            if self.polls < 2:
                return httpx.Response(200, json={"status": "running", "turnId": "t1"})
            return httpx.Response(
                200, json={"status": "completed", "response": {"conversationId": "c1", "reply": "done"}}
            )
        if request.method == "GET" and path.startswith("/api/conversations/"):
            proposals = [{"proposalId": "p-old"}, {"proposalId": "p-new"}]
            return httpx.Response(200, json={"proposals": proposals})
        if request.method == "POST" and "/proposals/" in path:
            self.pressed.append(path)
            return httpx.Response(200, json={"status": "CONFIRMED", "outcome": {"status": "CANCELLED"}})
        return httpx.Response(404, json={"error": {"code": "not_found", "message": path}})


def _task(**overrides: Any) -> Task:
    data: dict[str, Any] = {
        "id": "cancel-it",
        "tests": "a test task for the customer",
        "category": "action",
        "customer": {"name": "Dana Whitfield", "orders": {"o1": {"status": "PROCESSING", "total_cents": 3200}}},
        "goal": "Cancel order {o1} and get the money back.",
        "knows": "Your order number is {o1}.",
        "turns": [{"say": "Cancel order {o1}"}, {"say": "slow one"}, {"press": "confirm"}],
    }
    data.update(overrides)
    return Task.model_validate(data)


def _client(api: FakeApi) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(api), base_url="http://stack")


def test_the_scripted_customer_plays_the_turns_follows_a_202_and_presses_the_newest_proposal() -> None:
    api = FakeApi()
    conv = ScriptedCustomer(_task(), FakeTrial(), _client(api)).run()
    assert [s["message"] for s in api.sent] == ["Cancel order 700001", "slow one"]
    assert api.sent[1]["conversationId"] == "c1"  # the second turn stays in the conversation the first opened
    assert conv.conversation_ids == ["c1"]
    assert conv.replies == ["you said: Cancel order 700001", "done"]  # the 202's turn, once it completed
    assert api.pressed == ["/api/conversations/c1/proposals/p-new/confirm"]
    assert conv.presses == [{"status": "CONFIRMED", "outcome": {"status": "CANCELLED"}}]
    assert conv.errors == [] and conv.error_statuses == []


def test_the_scripted_customer_records_a_failed_turn() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": {"code": "model_unavailable", "message": "try later"}})

    client = httpx.Client(transport=httpx.MockTransport(refuse), base_url="http://stack")
    conv = ScriptedCustomer(_task(turns=[{"say": "hi"}]), FakeTrial(), client).run()
    assert conv.error_statuses == [503]
    assert conv.errors == ["503 model_unavailable: try later"]
    assert conv.replies == []


def test_the_model_customer_is_told_who_it_is_its_goal_and_the_stop_rule() -> None:
    llm = ScriptedModel([answer(STOP)])
    ModelCustomer(_task(), FakeTrial(), _client(FakeApi()), llm).run()
    system = llm.requests[0].system
    assert "Dana Whitfield" in system
    assert "Cancel order 700001 and get the money back." in system  # the goal, its labels filled in
    assert "Your order number is 700001." in system
    assert STOP in system and "goal is met" in system
    assert llm.requests[0].tools == []


def test_the_model_customer_stops_on_the_marker_and_hears_the_agent_as_the_user() -> None:
    api = FakeApi()
    llm = ScriptedModel([answer("Hi, please cancel order 700001"), answer(f"Thanks, all sorted. {STOP}")])
    customer = ModelCustomer(_task(), FakeTrial(), _client(api), llm)
    conv = customer.run()
    assert [s["message"] for s in api.sent] == ["Hi, please cancel order 700001"]  # the marker's message not sent
    assert customer.stopped
    assert conv.replies == ["you said: Hi, please cancel order 700001"]
    second = llm.requests[1].messages
    assert second[-2] == {"role": "assistant", "content": "Hi, please cancel order 700001"}
    assert second[-1] == {"role": "user", "content": "you said: Hi, please cancel order 700001"}


def test_the_model_customer_stops_at_the_turn_limit() -> None:
    api = FakeApi()
    task = _task(limits={"max_turns": 3})
    llm = ScriptedModel([answer(f"message {n}") for n in range(1, 10)])
    customer = ModelCustomer(task, FakeTrial(), _client(api), llm)
    customer.run()
    assert [s["message"] for s in api.sent] == ["message 1", "message 2", "message 3"]
    assert len(llm.requests) == 3 and not customer.stopped


def test_the_model_customer_presses_confirm_with_its_marker() -> None:
    api = FakeApi()
    llm = ScriptedModel([answer("cancel order 700001"), answer(CONFIRM), answer(STOP)])
    ModelCustomer(_task(), FakeTrial(), _client(api), llm).run()
    assert api.pressed == ["/api/conversations/c1/proposals/p-new/confirm"]
    assert "CONFIRMED" in str(llm.requests[2].messages[-1]["content"])


# -- the simulated model's faults, which the model-error and long-turn tasks arm ----------------------------------


def _post(model: Any, body: bytes = b"{}") -> int:
    from devstack.simulated_model import SimulatedModel

    assert isinstance(model, SimulatedModel)
    return model.post("/v1/messages", {"x-api-key": "k", "anthropic-version": "2023-06-01"}, body).status


def test_task_faults_answer_once_or_until_cleared_then_the_model_answers_again() -> None:
    from devstack.simulated_model import SimulatedModel
    from devstack.simulated_model.faults import arm_task_faults

    model = SimulatedModel()
    body = json.dumps({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}).encode()
    assert _post(model, body) == 200  # nothing armed: as before
    arm_task_faults(model.faults, ["overloaded_once", "server_error_once"])
    assert [_post(model, body), _post(model, body), _post(model, body)] == [529, 500, 200]
    arm_task_faults(model.faults, ["refused_once"])
    assert _post(model, body) == 400
    arm_task_faults(model.faults, ["overloaded_always"])
    assert {_post(model, body) for _ in range(6)} == {529}
    model.faults.clear()
    assert _post(model, body) == 200
    model.faults.arm("server_error", match="order 700001")
    assert _post(model, body) == 200  # another conversation's request is left alone
