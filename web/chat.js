/* The chat page: sign in as a customer, converse, see replies, usage, the tool-call trace and refunds. */
(function () {
  "use strict";
  var SA = window.SA;
  var h = SA.h;
  var $ = SA.$;

  // The customers' vocabulary (GET /api/conversations/{id} refunds[].status): PENDING_APPROVAL and
  // REFUND_IN_PROGRESS still change, so the list is polled while one is shown; the rest are final.
  var FINAL_REFUND = { REFUNDED: 1, REJECTED: 1, EXPIRED: 1, RELEASED: 1, FAILED: 1 };
  var REFUND_LABEL = { PENDING_APPROVAL: "awaiting approval", REFUND_IN_PROGRESS: "refund in progress" };
  var REFUND_POLL_MS = 5000;

  var state = {
    token: null,
    label: null,
    conversationId: null,
    sending: false,
    opening: false,
    simulated: false,
    turn: 0,
    conversationsNext: null,
    refundTimer: null,
    loadSeq: 0,
  };

  // ---------------------------------------------------------------- sign in

  function customerLabel(token, fallback) {
    if (fallback) return fallback;
    var c = SA.claims(token) || {};
    var id = c.customer_id !== undefined ? c.customer_id : c["custom:customer_id"];
    if (c.name) return c.name + (id !== undefined ? " (customer " + id + ")" : "");
    if (id !== undefined) return "customer " + id;
    return c.sub ? String(c.sub) : "customer";
  }

  function renderDevCustomers(tokens) {
    var box = $("dev-customers");
    SA.clear(box);
    var customers = (tokens && tokens.customers) || [];
    customers.forEach(function (c) {
      var label = (c.name || "Customer") + " (customer " + c.customerId + ")";
      box.appendChild(
        h(
          "button",
          {
            type: "button",
            id: "signin-customer-" + c.customerId,
            "data-testid": "signin-customer-" + c.customerId,
            class: "signin-button",
            onclick: function () {
              signIn(c.token, label);
            },
          },
          "Sign in as " + label
        )
      );
    });
    $("dev-signin").hidden = customers.length === 0;
  }

  var PAGE = {
    key: "customer",
    refuse: function (c) {
      return c.role && c.role !== "customer"
        ? "This token's role is \"" + c.role + "\"; the chat needs a customer token (leads use the lead console)."
        : null;
    },
    check: function (token, label) {
      state.token = token;
      state.label = label;
      return loadConversations(false); // the first call checks the token
    },
    opened: function () {
      var remembered = SA.store.get("conversationId");
      if (remembered) openConversation(remembered, true);
      else newConversation();
      $("message").focus();
    },
    failed: function () {
      state.token = null;
    },
  };

  function signIn(token, label) {
    SA.signIn(PAGE, token, customerLabel(String(token || "").trim(), label));
  }

  function signOut(err) {
    stopRefundPolling();
    state.token = null;
    state.conversationId = null;
    state.loadSeq++;
    SA.store.set("conversationId", null);
    SA.clear($("conversations"));
    resetConversationView();
    SA.signedOut(PAGE, err);
  }

  /** Handles an API error: 401 signs out, anything else shows in the box. */
  function handleError(err, box, context) {
    if (err && err.status === 401 && state.token) {
      signOut(err);
      return;
    }
    SA.showError(box, err, context);
  }

  // ---------------------------------------------------------- conversations

  function loadConversations(append) {
    var q = append && state.conversationsNext ? "?nextToken=" + encodeURIComponent(state.conversationsNext) : "";
    return SA.api("/api/conversations" + q, { token: state.token }).then(function (r) {
      var data = r.data || {};
      state.conversationsNext = data.nextToken || null;
      renderConversations(data.conversations || [], append);
    });
  }

  function renderConversations(list, append) {
    var ul = $("conversations");
    if (!append) SA.clear(ul);
    list.forEach(function (c) {
      var current = c.conversationId === state.conversationId;
      ul.appendChild(
        h(
          "li",
          null,
          h(
            "button",
            {
              type: "button",
              class: "conversation-item",
              "data-conversation-id": c.conversationId,
              "aria-current": current ? "true" : null,
              onclick: function () {
                if (!state.sending) openConversation(c.conversationId, false);
              },
            },
            h("span", { class: "conversation-title" }, c.title || c.conversationId),
            h("span", { class: "conversation-time muted", title: SA.time(c.updatedAt || c.createdAt) }, SA.age(c.updatedAt || c.createdAt))
          )
        )
      );
    });
    $("conversations-empty").hidden = ul.children.length > 0;
    $("conversations-more").hidden = !state.conversationsNext;
  }

  function markCurrentConversation() {
    var items = document.querySelectorAll(".conversation-item");
    for (var i = 0; i < items.length; i++) {
      if (items[i].getAttribute("data-conversation-id") === state.conversationId) items[i].setAttribute("aria-current", "true");
      else items[i].removeAttribute("aria-current");
    }
  }

  function setConversationId(id) {
    state.conversationId = id;
    SA.store.set("conversationId", id);
    $("conversation-id").textContent = id || "new";
    markCurrentConversation();
  }

  function resetConversationView() {
    state.turn = 0;
    SA.clear($("transcript")).appendChild(h("p", { class: "muted transcript-empty", id: "transcript-empty" }, "Ask about an order, an invoice or a refund."));
    SA.clear($("trace-panel")).appendChild(h("p", { id: "trace-empty", class: "muted" }, "No tool calls yet."));
    renderRefunds([]);
    SA.showError($("chat-error"), null);
  }

  function newConversation() {
    stopRefundPolling();
    state.loadSeq++;
    if (state.opening) openDone();
    setConversationId(null);
    resetConversationView();
    $("message").focus();
  }

  function openConversation(id, quiet) {
    var seq = ++state.loadSeq;
    stopRefundPolling();
    state.opening = true;
    $("send").disabled = true;
    $("chat-status").textContent = "Loading conversation…";
    return SA.api("/api/conversations/" + encodeURIComponent(id), { token: state.token }).then(
      function (r) {
        if (seq !== state.loadSeq) return;
        openDone();
        setConversationId(id);
        resetConversationView();
        renderHistory((r.data && r.data.messages) || []);
        renderRefunds((r.data && r.data.refunds) || []);
      },
      function (err) {
        if (seq !== state.loadSeq) return;
        openDone();
        if (quiet && err.status === 404) {
          newConversation();
          return;
        }
        handleError(err, $("chat-error"), "Could not open the conversation");
      }
    );
  }

  function openDone() {
    state.opening = false;
    $("send").disabled = state.sending;
    $("chat-status").textContent = "";
  }

  /** Rebuilds turns from the reader's view: a user message with text starts a turn. */
  function renderHistory(messages) {
    var turn = null;
    var turns = [];
    messages.forEach(function (m) {
      if (m.role === "user" && m.text) {
        turn = { user: m, texts: [], iterations: [] };
        turns.push(turn);
      } else if (m.role === "assistant") {
        if (!turn) {
          turn = { user: null, texts: [], iterations: [] };
          turns.push(turn);
        }
        if (m.text) turn.texts.push(m.text);
        if (!m.toolCalls) turn.quiet = true; // TRANSPARENCY=quiet: the view carries no tool calls
        turn.iterations.push({ iteration: turn.iterations.length + 1, stopReason: null, toolCalls: m.toolCalls || [] });
      }
    });
    turns.forEach(function (t) {
      state.turn++;
      if (t.user) appendUser(t.user.text, t.user.createdAt);
      appendReply(
        {
          reply: t.texts.join("\n\n"),
          iterations: t.iterations.length,
          trace: t.quiet ? null : t.iterations,
        },
        state.turn,
        true
      );
      appendTraceTurn(state.turn, t.user ? t.user.text : "", t.quiet ? null : t.iterations, true);
    });
    scrollTranscript();
  }

  // ------------------------------------------------------------- transcript

  function removeEmpty() {
    var e = $("transcript-empty");
    if (e) e.remove();
  }

  function scrollTranscript() {
    var t = $("transcript");
    t.scrollTop = t.scrollHeight;
  }

  function appendUser(text, createdAt) {
    removeEmpty();
    var el = h(
      "article",
      { class: "message user", "aria-label": "You said" },
      h("div", { class: "message-head" }, h("span", { class: "who" }, "You"), createdAt ? h("time", { datetime: createdAt, class: "muted" }, SA.time(createdAt)) : null),
      h("div", { class: "message-text" }, text)
    );
    $("transcript").appendChild(el);
    scrollTranscript();
    return el;
  }

  function countCalls(trace) {
    var n = 0;
    (trace || []).forEach(function (it) {
      n += (it.toolCalls || []).length;
    });
    return n;
  }

  function meta(label, value, cls) {
    return [h("dt", null, label), h("dd", { class: cls }, String(value))];
  }

  function appendReply(r, turn, fromHistory) {
    removeEmpty();
    var calls = countCalls(r.trace);
    var metaList = h("dl", { class: "reply-meta" });
    if (fromHistory) {
      metaList.appendChild(h("div", null, meta("iterations", r.iterations, "reply-iterations")));
      metaList.appendChild(h("div", null, h("dt", null, "usage"), h("dd", { class: "muted" }, "not stored in history")));
    } else {
      [
        meta("iterations", r.iterations, "reply-iterations"),
        meta("stop", r.stopReason, "reply-stop-reason"),
        meta("input tokens", r.inputTokens, "usage-input"),
        meta("output tokens", r.outputTokens, "usage-output"),
        meta("cache read", r.cacheReadInputTokens, "usage-cache-read"),
        meta("cache write", r.cacheCreationInputTokens, "usage-cache-write"),
      ].forEach(function (pair) {
        metaList.appendChild(h("div", null, pair));
      });
    }
    var traceLink = r.trace
      ? h("a", { href: "#trace-turn-" + turn, class: "trace-link" }, calls === 1 ? "1 tool call — see trace" : calls + " tool calls — see trace")
      : h("span", { class: "muted trace-link" }, "No trace (the server runs quiet)");
    var el = h(
      "article",
      {
        class: "message assistant reply" + (fromHistory ? " from-history" : ""),
        "data-turn": turn,
        "data-iterations": r.iterations,
        "data-stop-reason": r.stopReason || null,
        "aria-label": "Agent replied",
      },
      h("div", { class: "message-head" }, h("span", { class: "who" }, "Agent"), state.simulated ? h("span", { class: "badge sim", title: "Simulated model — answers are generated locally, not by Claude" }, "simulated") : null),
      h("div", { class: "message-text reply-text" }, r.reply || h("em", { class: "muted" }, "(no text)")),
      metaList,
      traceLink
    );
    $("transcript").appendChild(el);
    scrollTranscript();
    return el;
  }

  // ------------------------------------------------------------------ trace

  function appendTraceTurn(turn, userText, trace, fromHistory) {
    var panel = $("trace-panel");
    var empty = $("trace-empty");
    if (empty) empty.remove();
    var title = userText ? (userText.length > 60 ? userText.slice(0, 59) + "…" : userText) : "";
    var section = h(
      "section",
      { class: "trace-turn", id: "trace-turn-" + turn, "data-turn": turn, tabindex: "-1", "aria-label": "Trace of turn " + turn },
      h("h3", null, "Turn " + turn + (title ? " — “" + title + "”" : ""))
    );
    if (!trace) {
      section.appendChild(h("p", { class: "muted" }, "No trace: the server runs with TRANSPARENCY=quiet."));
    } else {
      trace.forEach(function (it) {
        var calls = it.toolCalls || [];
        var itEl = h(
          "div",
          { class: "trace-iteration", "data-iteration": it.iteration, "data-stop-reason": it.stopReason || null },
          h("h4", null, "Iteration " + it.iteration + (it.stopReason ? " · " + it.stopReason : "") + (calls.length ? "" : fromHistory ? " · text" : " · no tool calls"))
        );
        if (calls.length) {
          var ol = h("ol", { class: "trace-calls" });
          calls.forEach(function (c) {
            ol.appendChild(traceCall(c));
          });
          itEl.appendChild(ol);
        }
        section.appendChild(itEl);
      });
    }
    panel.appendChild(section);
  }

  function traceCall(c) {
    var err = !!c.isError;
    return h(
      "li",
      {
        class: "trace-call" + (err ? " is-error" : ""),
        "data-tool": c.name,
        "data-tool-use-id": c.id || null,
        "data-error": err ? "true" : "false",
      },
      h(
        "div",
        { class: "trace-call-head" },
        h("code", { class: "tool-name" }, c.name || "?"),
        err ? h("span", { class: "badge error" }, "error") : h("span", { class: "badge ok" }, "ok")
      ),
      h("div", { class: "trace-io" }, h("span", { class: "io-label" }, "input"), h("pre", { class: "trace-input" }, SA.json(c.input))),
      h(
        "div",
        { class: "trace-io" },
        h("span", { class: "io-label" }, err ? "error result" : "result"),
        h("pre", { class: "trace-result" }, c.result === null || c.result === undefined ? "(no result)" : SA.json(c.result))
      )
    );
  }

  // ---------------------------------------------------------------- refunds

  function renderRefunds(refunds) {
    var ul = $("refunds");
    SA.clear(ul);
    refunds.forEach(function (r) {
      ul.appendChild(
        h(
          "li",
          { class: "refund", "data-approval-id": r.approvalId || null, "data-order-id": r.orderId, "data-status": r.status },
          h("span", null, "Order " + r.orderId + " · " + SA.money(r.amountCents, r.currency)),
          " ",
          h("span", { class: "refund-status status status-" + String(r.status || "").toLowerCase(), title: r.status || null }, REFUND_LABEL[r.status] || r.status || "?"),
          r.refundId ? h("code", { class: "muted refund-id", title: "Payment provider refund id" }, r.refundId) : null,
          r.approvalId ? h("code", { class: "muted refund-approval" }, r.approvalId) : h("span", { class: "muted refund-approval" }, "direct refund")
        )
      );
    });
    $("refunds-empty").hidden = refunds.length > 0;
    var pending = refunds.some(function (r) {
      return !FINAL_REFUND[r.status];
    });
    if (pending) startRefundPolling();
    else stopRefundPolling();
  }

  function refreshRefunds() {
    if (!state.conversationId || !state.token) return Promise.resolve();
    var id = state.conversationId;
    var seq = state.loadSeq;
    return SA.api("/api/conversations/" + encodeURIComponent(id), { token: state.token }).then(
      function (r) {
        if (id === state.conversationId && seq === state.loadSeq) renderRefunds((r.data && r.data.refunds) || []);
      },
      function (err) {
        if (err.status === 401) handleError(err, $("chat-error"));
      }
    );
  }

  function startRefundPolling() {
    if (state.refundTimer) return;
    state.refundTimer = setInterval(function () {
      if (!document.hidden && !state.sending) refreshRefunds();
    }, REFUND_POLL_MS);
  }

  function stopRefundPolling() {
    if (state.refundTimer) clearInterval(state.refundTimer);
    state.refundTimer = null;
  }

  // ------------------------------------------------------------------- send

  function setSending(on) {
    state.sending = on;
    $("message").disabled = on;
    $("send").disabled = on;
    $("new-conversation").disabled = on;
    $("composer").setAttribute("aria-busy", on ? "true" : "false");
    $("chat-status").textContent = on ? "The agent is working…" : "";
  }

  // A long turn goes on in the worker (202): its record is read every few seconds until it ends (reads count
  // against READS_PER_MINUTE; a 429 waits its Retry-After). Resolves like the 200 would have.
  function awaitTurn(running, seq) {
    var path = "/api/conversations/" + encodeURIComponent(running.conversationId) + "/turns/" + encodeURIComponent(running.turnId);
    $("chat-status").textContent = "The agent is still working (a long turn)…";
    return new Promise(function (resolve, reject) {
      function poll(delay) {
        window.setTimeout(function () {
          if (seq !== state.loadSeq) return resolve({ status: 200, data: null });
          SA.api(path, { token: state.token }).then(
            function (r) {
              var turn = r.data || {};
              if (turn.status === "completed") return resolve({ status: 200, data: turn.response });
              if (turn.status === "failed") {
                var e = turn.error || {};
                return reject(new SA.ApiError(500, e.code || "turn_failed", e.message || "The turn failed", null));
              }
              poll(3000);
            },
            function (err) {
              if (err.status === 429) return poll(1000 * (err.retryAfter || 5));
              reject(err);
            }
          );
        }, delay);
      }
      poll(2000);
    });
  }

  function send() {
    if (state.sending || state.opening || !state.token) return;
    var box = $("message");
    var text = box.value.trim();
    if (!text) {
      box.focus();
      return;
    }
    SA.showError($("chat-error"), null);
    var userEl = appendUser(text);
    box.value = "";
    setSending(true);
    var seq = state.loadSeq;
    // One key per message: a resend of it (a lost answer) gets the same turn, never a second one.
    var key = window.crypto && window.crypto.randomUUID ? window.crypto.randomUUID() : String(Date.now()) + Math.random();
    SA.api("/api/chat", { method: "POST", token: state.token, idempotencyKey: key, body: { conversationId: state.conversationId, message: text } })
      .then(function (r) {
        return r.status === 202 ? awaitTurn(r.data || {}, seq) : r;
      })
      .then(
        function (r) {
          if (seq !== state.loadSeq) return;
          var data = r.data || {};
          var firstTurn = !state.conversationId;
          if (data.conversationId) setConversationId(data.conversationId);
          state.turn++;
          appendReply(data, state.turn, false);
          if (data.trace) appendTraceTurn(state.turn, text, data.trace, false);
          refreshRefunds();
          if (firstTurn) loadConversations(false).then(markCurrentConversation, function () {});
        },
        function (err) {
          if (seq !== state.loadSeq) return;
          userEl.classList.add("failed");
          userEl.appendChild(h("p", { class: "failed-note" }, "Not answered (" + err.code + ")."));
          if (!box.value) box.value = text;
          handleError(err, $("chat-error"), "The message was not answered");
        }
      )
      .then(function () {
        setSending(false);
        if (state.token) $("message").focus();
      });
  }

  // ------------------------------------------------------------------- init

  function init() {
    $("token-form").addEventListener("submit", function (e) {
      e.preventDefault();
      signIn($("token-input").value, null);
    });
    $("signout").addEventListener("click", function () {
      signOut(null);
    });
    $("composer").addEventListener("submit", function (e) {
      e.preventDefault();
      send();
    });
    $("message").addEventListener("keydown", function (e) {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        send();
      }
    });
    $("new-conversation").addEventListener("click", newConversation);
    $("refresh-conversations").addEventListener("click", function () {
      loadConversations(false).then(markCurrentConversation, function (err) {
        handleError(err, $("chat-error"), "Could not list conversations");
      });
    });
    $("conversations-more").addEventListener("click", function () {
      loadConversations(true).then(markCurrentConversation, function (err) {
        handleError(err, $("chat-error"), "Could not list conversations");
      });
    });
    $("refresh-refunds").addEventListener("click", refreshRefunds);

    SA.devTokens().then(function (tokens) {
      renderDevCustomers(tokens);
      SA.detectSimulated(tokens).then(function (sim) {
        state.simulated = sim;
        SA.setBanner(sim);
      });
      var saved = SA.store.get("customerToken");
      if (saved && !state.token) signIn(saved, SA.store.get("customerLabel"));
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
