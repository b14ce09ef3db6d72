"""A simulated model for the local stack: a small HTTP server speaking the Anthropic Messages API.

``make dev`` starts it when no ``ANTHROPIC_API_KEY`` is set, and points the real
``AnthropicClient`` at it, so the whole path (HTTP, headers, blocks, stop reasons, usage) runs
locally with no key and no network. It is *not* a language model: a few deterministic rules read
the request and decide what a sensible support agent would do next. Every text it writes starts
with ``[simulated model]`` so nobody mistakes it for the real thing.

The wire format follows the Messages API: ``POST /v1/messages`` with an API key (``x-api-key``,
or ``Authorization: Bearer``, which the official SDK sends) and an ``anthropic-version`` header;
a ``Message`` JSON answer, or with ``"stream": true`` the same message as server-sent events
(``message_start``, ``content_block_start/delta/stop``, ``message_delta``, ``message_stop``);
errors as ``{"type": "error", "error": {"type", "message"}}``.
The official SDK parses all of it (``tests/unit/test_simulated_model.py``).

The rules (stateless: everything comes from the request's messages):

* It reads the newest user text and the tool results that came after it. Tool results are read as
  data (the fenced JSON is parsed); nothing inside them is ever acted on, only the user's words.
* A refusal comes first: someone else's account, or attempts to change its instructions.
* "human", "person", "agent", "representative"… → ``escalate_to_human``, then "a teammate will
  follow up".
* An order number ("order 1042", "#1042", any 4-digit number; in a follow-up without one, the
  order last named in an earlier user message) → ``lookup_order``; with "refund", "money back" or
  "return" → then ``request_refund`` for the stated amount ("$25", "25 dollars") or the order's
  ``refundable_cents``, reason "customer request".
* "invoice", "billing", "charge"… → ``list_invoices`` (for the order, if one was named).
* Only when an outside carrier's ``<server>__track_parcel`` is offered (``CARRIER=1 make dev``, docs/MCP.md):
  a parcel question ("where is my package CR10430001?", "track …") → that tool for each tracking number
  in it, then an answer from the carrier's status fields; without a number or an order, it asks for one.
* When there is nothing left to call: a text answer summarising the tool results. Anything else:
  a polite text saying what it can help with.
* Tools are only called when the request offers them, never with ``tool_choice`` ``none``.

It also speaks OpenAI chat completions (``POST /v1/chat/completions``, ``Authorization: Bearer``; with
``"stream": true`` as ``chat.completion.chunk`` events) through a translation layer in front of the same
rules, so the local stack runs with ``LLM_PROVIDER=openai`` too (``OPENAI_BASE_URL={url}/v1``), and
Bedrock's InvokeModel (``POST /model/{modelId}/invoke``, SigV4-signed by boto3) for ``LLM_PROVIDER=bedrock``
(``AWS_ENDPOINT_URL_BEDROCK_RUNTIME={url}``).

``SIMULATED_MODEL_DELAY_SECONDS=5 make dev`` makes every answer wait 5 s first: a slow model, so a turn
outlasts the synchronous request and is handed over to the worker (the adapters send no header of
ours, so the delay is the server's, not a request's). A streamed answer spreads those 5 s over its text
pieces instead, so the reply is seen being written.

Run it standalone with ``python -m devstack.simulated_model [--host H] [--port P] [--delay-seconds S]``.

The modules, by concern: ``wire`` (the Messages API's request checks and error shape), ``reading``
and ``brain`` (the deterministic rules above), ``message`` (the Message and its SSE stream),
``openai_facade`` (chat completions in front of the same brain) and ``server`` (HTTP).
"""

from devstack.simulated_model.brain import LABEL
from devstack.simulated_model.message import build_message
from devstack.simulated_model.openai_facade import OpenAIError, validate_openai
from devstack.simulated_model.server import (
    DELAY_VARIABLE,
    SimulatedModel,
    SimulatedModelServer,
    delay_from,
    main,
    start,
)
from devstack.simulated_model.wire import ApiError

__all__ = [
    "DELAY_VARIABLE",
    "LABEL",
    "ApiError",
    "OpenAIError",
    "SimulatedModel",
    "SimulatedModelServer",
    "build_message",
    "delay_from",
    "main",
    "start",
    "validate_openai",
]
