/* The chat page: sign in as a customer, converse, see replies, usage, the tool-call trace and refunds; a person from
 * support when the conversation was handed to one (their replies, who joined, when the assistant is back); the
 * actions the assistant proposed (cancel an order, change its address), each with Confirm and Decline buttons; and
 * the customer's ratings: a thumb up or down under each answer, a closing 1-5 rating with a short comment. */
(function () {
  "use strict";
  var SA = window.SA;
  var h = SA.h;
  var $ = SA.$;

  // The customers' vocabulary (GET /api/conversations/{id} refunds[].status): PENDING_APPROVAL and
  // REFUND_IN_PROGRESS still change, so the conversation's feed is followed while one is shown; the rest are final
  // (a FAILED approval may still be retried by a lead: its news comes with the next time the feed is followed).
  var PENDING_REFUND = { PENDING_APPROVAL: 1, REFUND_IN_PROGRESS: 1 };
  var REFUND_LABEL = { PENDING_APPROVAL: "awaiting approval", REFUND_IN_PROGRESS: "refund in progress" };

  var state = {
    token: null,
    label: null,
    conversationId: null,
    sending: false,
    opening: false,
    simulated: false,
    turn: 0,
    conversationsNext: null,
    loadSeq: 0,
    feed: null, // the open conversation's event feed as followed (see "the event feed")
    socket: null, // the page's WebSocket (SA.LiveSocket): the feed's events and the reply as it is written
    socketUp: false, // it is open: the open conversation is followed over it, not by the long poll
    pending: null, // the message being answered: {text, userEl, turnId, firstTurn}
    live: {}, // turnId -> a turn rendered from the feed as it runs
    answered: {}, // turnId -> true once its answer is on the page (a 200 body or the feed)
    historyTail: null, // the history's last turn when it has no answer (it may still be running)
    refunds: [], // the refunds panel's list
    refundKnown: {}, // refund key (refundKey) -> the status the page shows
    refundsPending: false, // a refund of the conversation awaits a lead or the payment provider
    orderCurrency: {}, // order id -> its currency, from lookup_order results (verbose)
    refundsTimer: null,
    handoff: null, // the conversation is with a person: {id, status: "OPEN" (queued) | "ASSIGNED", name}
    probe: false, // an opened conversation: the feed is read once to learn whether a person has it
    awaitEnd: null, // a turn answered (200) whose end the feed has not shown yet (what it did may follow, a hand-off)
    shown: {}, // "role|createdAt|text" of messages on the page, and the hand-off news shown: never twice
    historyLastAt: "", // the newest message of the history: older hand-off news only sets the state
    sentForPerson: [], // messages this page sent to a person, not yet seen again in the feed
    proposals: {}, // proposal id -> {p: its view (normalised), el: its card, timer: its expiry's}
    thumbs: {}, // turnId -> "up" | "down": the thumb the customer gave its answer (shown again when it re-renders)
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
      startSocket(); // before the first message: a new conversation's first reply streams too
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
    stopFollowing(true);
    state.socket.stop();
    state.pending = null;
    state.orderCurrency = {};
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
    $("closing").hidden = !id; // a conversation is rated once it exists
    markCurrentConversation();
  }

  function resetConversationView() {
    state.turn = 0;
    state.live = {};
    state.answered = {};
    state.historyTail = null;
    state.probe = false;
    state.awaitEnd = null;
    state.shown = {};
    state.historyLastAt = "";
    state.sentForPerson = [];
    state.thumbs = {};
    resetClosing();
    clearProposals();
    setHandoff(null);
    SA.clear($("transcript")).appendChild(h("p", { class: "muted transcript-empty", id: "transcript-empty" }, "Ask about an order, an invoice or a refund, or to cancel an order or change its address (you confirm with a button)."));
    SA.clear($("trace-panel")).appendChild(h("p", { id: "trace-empty", class: "muted" }, "No tool calls yet."));
    renderRefunds([]);
    SA.showError($("chat-error"), null);
  }

  function newConversation() {
    stopFollowing(true);
    state.loadSeq++;
    if (state.opening) openDone();
    setConversationId(null);
    resetConversationView();
    $("message").focus();
  }

  function openConversation(id, quiet) {
    var seq = ++state.loadSeq;
    stopFollowing(true);
    state.opening = true;
    $("send").disabled = true;
    $("chat-status").textContent = "Loading conversation…";
    return SA.api("/api/conversations/" + encodeURIComponent(id), { token: state.token }).then(
      function (r) {
        if (seq !== state.loadSeq) return;
        openDone();
        setConversationId(id);
        resetConversationView();
        showSavedRatings((r.data && r.data.ratings) || null);
        renderHistory((r.data && r.data.messages) || []);
        renderProposals((r.data && r.data.proposals) || [], true);
        renderRefunds((r.data && r.data.refunds) || []);
        state.probe = true; // whether a person has the conversation: the feed's hand-off news says
        follow(); // that, a refund pending, or a last turn without an answer (it may still run)
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

  /** Rebuilds turns from the reader's view: a user message with text starts a turn; a person's message stands
   * alone. */
  function renderHistory(messages) {
    var turn = null;
    var turns = [];
    messages.forEach(function (m) {
      if (m.createdAt && m.createdAt > state.historyLastAt) state.historyLastAt = m.createdAt;
      if (m.role === "person") {
        turns.push({ person: m });
        turn = null;
      } else if (m.role === "user" && m.text) {
        turn = { user: m, texts: [], iterations: [] };
        turns.push(turn);
      } else if (m.role === "assistant") {
        if (!turn) {
          turn = { user: null, texts: [], iterations: [] };
          turns.push(turn);
        }
        if (m.text) turn.texts.push(m.text);
        if (m.turnId) turn.turnId = m.turnId; // the turn a thumb on this answer names
        if (!m.toolCalls) turn.quiet = true; // TRANSPARENCY=quiet: the view carries no tool calls
        turn.iterations.push({ iteration: turn.iterations.length + 1, stopReason: null, toolCalls: m.toolCalls || [] });
      }
    });
    turns.forEach(function (t, i) {
      if (t.person) {
        appendPerson(t.person.author, t.person.text, t.person.createdAt);
        return;
      }
      var userEl = t.user ? appendUser(t.user.text, t.user.createdAt) : null;
      if (!t.iterations.length) {
        // No answer: kept for a person, or (the last one) its turn may still be running: the feed says.
        if (i === turns.length - 1) state.historyTail = { userText: t.user.text, userEl: userEl, replyEl: null, traceEl: null };
        return;
      }
      state.turn++;
      var replyEl = appendReply(
        {
          reply: t.texts.join("\n\n"),
          rateTurnId: t.texts.length ? t.turnId : null,
          iterations: t.iterations.length,
          trace: t.quiet ? null : t.iterations,
        },
        state.turn,
        true
      );
      var traceEl = appendTraceTurn(state.turn, t.user ? t.user.text : "", t.quiet ? null : t.iterations, true);
      // A last turn without an answer may still be running (the page was reloaded during a long turn): the feed
      // says, and a running turn then replaces this partial view with its live one.
      if (i === turns.length - 1 && t.user && !t.texts.length) {
        state.historyTail = { userText: t.user.text, userEl: userEl, replyEl: replyEl, traceEl: traceEl };
      }
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

  function userElement(text, createdAt) {
    return h(
      "article",
      { class: "message user", "aria-label": "You said" },
      h("div", { class: "message-head" }, h("span", { class: "who" }, "You"), createdAt ? h("time", { datetime: createdAt, class: "muted" }, SA.time(createdAt)) : null),
      h("div", { class: "message-text" }, text)
    );
  }

  function appendUser(text, createdAt) {
    removeEmpty();
    if (createdAt) state.shown[["user", createdAt, text].join("|")] = true;
    var el = userElement(text, createdAt);
    $("transcript").appendChild(el);
    scrollTranscript();
    return el;
  }

  /** A support teammate's message: their name, marked as a person (not the assistant). */
  function appendPerson(author, text, createdAt) {
    removeEmpty();
    if (createdAt) state.shown[["person", createdAt, text].join("|")] = true;
    var name = author || "Support";
    var el = h(
      "article",
      { class: "message person", "data-author": author || null, "aria-label": name + " from support said" },
      h(
        "div",
        { class: "message-head" },
        h("span", { class: "who" }, name),
        h("span", { class: "badge person-badge" }, "support"),
        createdAt ? h("time", { datetime: createdAt, class: "muted" }, SA.time(createdAt)) : null
      ),
      h("div", { class: "message-text" }, text)
    );
    $("transcript").appendChild(el);
    scrollTranscript();
    return el;
  }

  function simulatedBadge() {
    return state.simulated ? h("span", { class: "badge sim", title: "Simulated model — answers are generated locally, not by Claude" }, "simulated") : null;
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
    var el = replyElement(r, turn, fromHistory);
    $("transcript").appendChild(el);
    scrollTranscript();
    return el;
  }

  /** The reply of a turn: a 200 body, a turn rebuilt from the history, or one the feed followed to its end. */
  function replyElement(r, turn, fromHistory) {
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
        "data-turn-id": r.turnId || null,
        "data-iterations": r.iterations,
        "data-stop-reason": r.stopReason || null,
        "aria-label": "Agent replied",
      },
      h("div", { class: "message-head" }, h("span", { class: "who" }, "Agent"), simulatedBadge()),
      h("div", { class: "message-text reply-text" }, r.reply || h("em", { class: "muted" }, "(no text)")),
      metaList,
      traceLink,
      fromHistory ? (r.rateTurnId ? thumbControls(r.rateTurnId) : null) : r.turnId ? thumbControls(r.turnId) : null
    );
    return el;
  }

  // ---------------------------------------------------------------- ratings

  function ratingPath() {
    return "/api/conversations/" + encodeURIComponent(state.conversationId) + "/rating";
  }

  /** Thumb up and down under an answer (its turn id): the chosen one is pressed; a change replaces the vote. */
  function thumbControls(turnId) {
    var error = h("span", { class: "rating-error", role: "alert", hidden: true });
    var box = h("div", { class: "thumbs", role: "group", "aria-label": "Rate this answer", "data-rates-turn": turnId });
    box.appendChild(h("span", { class: "muted thumbs-label" }, "Was this helpful?"));
    [
      ["up", "Yes", "Helpful"],
      ["down", "No", "Not helpful"],
    ].forEach(function (t) {
      box.appendChild(
        h(
          "button",
          {
            type: "button",
            class: "thumb thumb-" + t[0],
            "data-thumb": t[0],
            "aria-label": t[2],
            title: t[2],
            "aria-pressed": state.thumbs[turnId] === t[0] ? "true" : "false",
            onclick: function () {
              rateTurn(turnId, t[0], box, error);
            },
          },
          t[1]
        )
      );
    });
    box.appendChild(error);
    return box;
  }

  function showThumb(box, thumb) {
    box.setAttribute("data-rated", thumb || "");
    Array.prototype.forEach.call(box.querySelectorAll("button.thumb"), function (b) {
      b.setAttribute("aria-pressed", b.getAttribute("data-thumb") === thumb ? "true" : "false");
    });
  }

  function rateTurn(turnId, thumb, box, error) {
    if (!state.conversationId || box.getAttribute("aria-busy") === "true") return;
    box.setAttribute("aria-busy", "true");
    error.hidden = true;
    SA.api(ratingPath(), { method: "POST", token: state.token, body: { turnId: turnId, thumb: thumb } }).then(
      function (r) {
        box.setAttribute("aria-busy", "false");
        state.thumbs[turnId] = (r.data && r.data.thumb) || thumb;
        showThumb(box, state.thumbs[turnId]);
      },
      function (err) {
        box.setAttribute("aria-busy", "false");
        if (err.status === 401) return handleError(err, $("chat-error"));
        error.textContent = "Not saved (" + err.code + "): " + err.message;
        error.hidden = false;
      }
    );
  }

  /** The ratings the customer gave this conversation before (its view's `ratings`): thumbs pressed, the score said. */
  function showSavedRatings(ratings) {
    if (!ratings) return;
    Object.keys(ratings.thumbs || {}).forEach(function (turnId) {
      state.thumbs[turnId] = ratings.thumbs[turnId];
    });
    if (ratings.closing) {
      $("closing").setAttribute("data-score", String(ratings.closing.score));
      $("closing-status").textContent = "You rated this conversation " + ratings.closing.score + " of 5.";
    }
  }

  function resetClosing() {
    $("closing-form").reset();
    $("closing-form").hidden = true;
    $("closing-open").setAttribute("aria-expanded", "false");
    $("closing-status").textContent = "";
    $("closing").removeAttribute("data-score");
    SA.showError($("closing-error"), null);
  }

  function toggleClosing() {
    var form = $("closing-form");
    form.hidden = !form.hidden;
    $("closing-open").setAttribute("aria-expanded", form.hidden ? "false" : "true");
    if (!form.hidden) form.querySelector("input[name=score]").focus();
  }

  /** The closing rating (1-5 and an optional comment); sent again, it replaces the first. */
  function sendClosing() {
    var form = $("closing-form");
    var picked = form.querySelector("input[name=score]:checked");
    if (!picked || !state.conversationId) return;
    var body = { score: Number(picked.value), comment: $("closing-comment").value.trim() };
    $("closing-send").disabled = true;
    SA.showError($("closing-error"), null);
    $("closing-status").textContent = "Sending…";
    SA.api(ratingPath(), { method: "POST", token: state.token, body: body }).then(
      function (r) {
        $("closing-send").disabled = false;
        var score = (r.data && r.data.score) || body.score;
        $("closing").setAttribute("data-score", String(score));
        $("closing-status").textContent = "Thank you: you rated this conversation " + score + " of 5.";
      },
      function (err) {
        $("closing-send").disabled = false;
        $("closing-status").textContent = "";
        handleError(err, $("closing-error"), "Your rating was not saved");
      }
    );
  }

  // ------------------------------------------------------------------ trace

  function appendTraceTurn(turn, userText, trace, fromHistory) {
    return placeTrace(null, traceSection(turn, userText, trace, fromHistory));
  }

  /** Puts a turn's trace section in the panel, in place of `old` when it is there. */
  function placeTrace(old, section) {
    if (old && old.parentNode) {
      old.parentNode.replaceChild(section, old);
      return section;
    }
    var empty = $("trace-empty");
    if (empty) empty.remove();
    $("trace-panel").appendChild(section);
    return section;
  }

  function traceSection(turn, userText, trace, fromHistory) {
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
    return section;
  }

  /** One tool call of the trace. From the feed a call may still run (`running`), and with TRANSPARENCY=quiet it
   * has no name, input or result (`quiet`): that it ran, and whether it failed. */
  function traceCall(c) {
    var err = !!c.isError;
    var badge = c.running ? h("span", { class: "badge running" }, "running") : err ? h("span", { class: "badge error" }, "error") : h("span", { class: "badge ok" }, "ok");
    return h(
      "li",
      {
        class: "trace-call" + (err ? " is-error" : ""),
        "data-tool": c.name,
        "data-tool-use-id": c.id || null,
        "data-error": err ? "true" : "false",
        "data-state": c.running ? "running" : err ? "error" : "ok",
      },
      h("div", { class: "trace-call-head" }, c.name ? h("code", { class: "tool-name" }, c.name) : h("span", { class: "tool-name quiet" }, "a tool"), badge),
      c.quiet ? null : h("div", { class: "trace-io" }, h("span", { class: "io-label" }, "input"), h("pre", { class: "trace-input" }, SA.json(c.input))),
      c.quiet || c.running
        ? null
        : h(
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
    state.refunds = refunds;
    state.refundKnown = {};
    refunds.forEach(function (r) {
      state.refundKnown[refundKey(r)] = r.status;
    });
    state.refundsPending = refunds.some(function (r) {
      return !!PENDING_REFUND[r.status];
    });
    if (state.refundsPending) follow();
    else if (!feedWanted()) pauseFollowing();
  }

  /** Names a refund the same way in the refunds list and in the feed's news: its approval, or (a direct refund)
   * its order and amount. */
  function refundKey(r) {
    return r.approvalId ? "approval:" + r.approvalId : "direct:" + r.orderId + ":" + r.amountCents;
  }

  function refreshRefunds() {
    if (!state.conversationId || !state.token) return Promise.resolve();
    var id = state.conversationId;
    var seq = state.loadSeq;
    return SA.api("/api/conversations/" + encodeURIComponent(id), { token: state.token }).then(
      function (r) {
        if (id !== state.conversationId || seq !== state.loadSeq) return;
        renderRefunds((r.data && r.data.refunds) || []);
        renderProposals((r.data && r.data.proposals) || [], false);
      },
      function (err) {
        if (err.status === 401) handleError(err, $("chat-error"));
      }
    );
  }

  /** One read of the conversation for a burst of refund news (its refund ids, its other refunds). */
  function refreshRefundsSoon() {
    if (state.refundsTimer) clearTimeout(state.refundsTimer);
    state.refundsTimer = setTimeout(function () {
      state.refundsTimer = null;
      refreshRefunds();
    }, 300);
  }

  var CURRENCY_SIGN = { USD: "$", EUR: "€", GBP: "£" };

  /** 12000 → "$120.00" (USD), "120.00 CHF"; the currency is the refund's, as the refunds list has it. */
  function refundAmount(cents, orderId, approvalId) {
    var known = state.refunds.filter(function (r) {
      return approvalId ? r.approvalId === approvalId : r.orderId === orderId;
    })[0];
    var currency = known && known.currency ? known.currency : state.orderCurrency[orderId];
    currency = currency ? String(currency).toUpperCase() : null;
    if (currency && CURRENCY_SIGN[currency]) return CURRENCY_SIGN[currency] + SA.money(cents);
    return SA.money(cents, currency);
  }

  // What a lead's decision (approval.decided) or a direct refund settling late (refund.settled) means for the
  // customer, by the status in the customers' vocabulary.
  var DECIDED_WORDS = {
    REFUNDED: "was approved and refunded.",
    REJECTED: "was not approved; nothing was refunded.",
    EXPIRED: "expired before a support lead decided; nothing was refunded.",
    FAILED: "was approved, but the payment provider could not refund it; a support lead will retry or release it.",
    RELEASED: "was released; nothing was refunded and the amount is available again.",
  };
  var SETTLED_WORDS = {
    REFUNDED: "is complete: the payment provider refunded it.",
    FAILED: "failed at the payment provider; nothing was refunded.",
  };

  function refundSentence(e) {
    var words = (e.type === "approval.decided" ? DECIDED_WORDS : SETTLED_WORDS)[e.status] || "is now " + String(e.status || "updated").toLowerCase().replace(/_/g, " ") + ".";
    return "Your refund of " + refundAmount(e.amountCents, e.orderId, e.approvalId) + " for order " + e.orderId + " " + words;
  }

  /** A refund's news from the feed: a line in the conversation, and the refunds panel updated. */
  function refundNews(e) {
    removeEmpty();
    $("transcript").appendChild(
      h(
        "div",
        {
          class: "message system refund-update",
          "data-event": e.type,
          "data-approval-id": e.approvalId || null,
          "data-order-id": e.orderId,
          "data-status": e.status,
          "aria-label": "Refund update",
        },
        h(
          "div",
          { class: "message-head" },
          h("span", { class: "who" }, "Refund update"),
          h("span", { class: "status status-" + String(e.status || "").toLowerCase() }, e.status || "?"),
          e.at ? h("time", { datetime: e.at, class: "muted" }, SA.time(e.at)) : null
        ),
        h("p", { class: "message-text refund-update-text" }, refundSentence(e))
      )
    );
    var key = refundKey(e);
    var refunds = state.refunds.map(function (r) {
      return refundKey(r) === key ? Object.assign({}, r, { status: e.status }) : r;
    });
    renderRefunds(refunds);
    state.refundKnown[key] = e.status;
    refreshRefundsSoon();
    scrollTranscript();
  }

  // -------------------------------------------------------------- proposals
  //
  // Cancelling an order or changing its address is proposed by the assistant (the tool answers PROPOSED) and decided
  // only by the customer's own request: POST /api/conversations/{id}/proposals/{pid}/confirm or /decline, with this
  // page's token. A card shows each: the summary, until when, the buttons while it waits; it is updated from the
  // answer, from the feed's proposal.* events and from the conversation view. Typing "yes" in the chat decides
  // nothing. A proposal past its expiry shows as expired (the server answers 409 to a late click).

  var PROPOSAL_RANK = { PROPOSED: 0, CONFIRMING: 1, CONFIRMED: 2, DECLINED: 2, EXPIRED: 2 };
  var PROPOSAL_LABEL = { PROPOSED: "waiting for you", CONFIRMING: "in progress", CONFIRMED: "confirmed", DECLINED: "declined", EXPIRED: "expired" };
  var PROPOSAL_EVENT_STATUS = { "proposal.created": "PROPOSED", "proposal.confirmed": "CONFIRMED", "proposal.declined": "DECLINED", "proposal.expired": "EXPIRED" };

  function clearProposals() {
    Object.keys(state.proposals).forEach(function (id) {
      if (state.proposals[id].timer) clearTimeout(state.proposals[id].timer);
    });
    state.proposals = {};
  }

  /** One shape for a proposal from a tool result (snake_case), the feed or a view (camelCase). */
  function normProposal(src) {
    var pick = function (camel, snake) {
      return src[camel] !== undefined ? src[camel] : src[snake];
    };
    return {
      id: pick("proposalId", "proposal_id"),
      action: pick("action", "action"),
      orderId: pick("orderId", "order_id"),
      summary: pick("summary", "summary"),
      status: src.status,
      createdAt: pick("createdAt", "created_at"),
      expiresAt: pick("expiresAt", "expires_at"),
      outcome: src.outcome,
    };
  }

  function proposalExpired(p) {
    var at = p.expiresAt ? Date.parse(p.expiresAt) : NaN;
    return p.status === "EXPIRED" || (p.status === "PROPOSED" && isFinite(at) && at <= Date.now());
  }

  /** What came of it, in words: the outcome's own message, why it was refused, or the refund it made. */
  function outcomeText(p) {
    var o = p.outcome && typeof p.outcome === "object" ? p.outcome : {};
    if (p.status === "DECLINED") return "You declined: nothing was changed.";
    if (proposalExpired(p)) return "This expired before you confirmed it: nothing was changed. Ask again if you still want it.";
    if (p.status === "CONFIRMING") return "Confirmed — being carried out…";
    if (p.status !== "CONFIRMED") return null;
    if (o.status === "REFUSED") return "Not done: " + (o.error || "it is no longer allowed") + ".";
    var text = o.message || "Done: " + (p.summary || "the change was made") + ".";
    var refund = o.refund && typeof o.refund === "object" ? o.refund : null;
    if (refund) {
      var amount = refund.amount_cents !== undefined ? refund.amount_cents : refund.amountCents;
      var status = refund.status ? " (" + String(refund.status).toLowerCase().replace(/_/g, " ") + ")" : "";
      if (amount !== undefined) text += " Refund of " + refundAmount(amount, p.orderId, null) + status + ".";
      state.refundsPending = state.refundsPending || !!PENDING_REFUND[refund.status];
    }
    return text;
  }

  function proposalCard(p) {
    var expired = proposalExpired(p);
    var status = expired ? "EXPIRED" : p.status;
    var waiting = status === "PROPOSED";
    var outcome = outcomeText(p);
    var buttons = null;
    if (waiting) {
      buttons = h(
        "div",
        { class: "button-row proposal-buttons" },
        h("button", { type: "button", class: "proposal-confirm", onclick: function () { decideProposal(p.id, "confirm"); } }, "Confirm"),
        h("button", { type: "button", class: "secondary proposal-decline", onclick: function () { decideProposal(p.id, "decline"); } }, "Decline")
      );
    }
    return h(
      "article",
      { class: "message system proposal-card", "data-proposal-id": p.id, "data-action": p.action || null, "data-status": status, "aria-label": "Action to confirm" },
      h(
        "div",
        { class: "message-head" },
        h("span", { class: "who" }, waiting ? "Please confirm" : "Your decision"),
        h("span", { class: "status proposal-status status-" + String(status || "").toLowerCase() }, PROPOSAL_LABEL[status] || status || "?")
      ),
      h("p", { class: "message-text proposal-summary" }, p.summary || "An action on your order"),
      waiting && p.expiresAt ? h("p", { class: "muted proposal-expiry" }, "Confirm by ", h("time", { datetime: p.expiresAt }, SA.time(p.expiresAt)), ". Nothing changes unless you press Confirm.") : null,
      outcome ? h("p", { class: "proposal-outcome" }, outcome) : null,
      buttons,
      h("p", { class: "proposal-error error", hidden: true, role: "alert" })
    );
  }

  /** Shows `src` (any of its shapes) in its card: made once, placed at the end (or, `byTime`, where its time
   * falls in the history), then only moved forward (a late "created" never undoes a decision). */
  function upsertProposal(src, byTime) {
    var p = normProposal(src || {});
    if (!p.id) return;
    var known = state.proposals[p.id];
    if (known) {
      if ((PROPOSAL_RANK[p.status] || 0) < (PROPOSAL_RANK[known.p.status] || 0)) return;
      var merged = {};
      Object.keys(known.p).forEach(function (k) {
        merged[k] = p[k] !== undefined && p[k] !== null ? p[k] : known.p[k];
      });
      p = merged;
    }
    var el = proposalCard(p);
    if (known && known.el.parentNode) known.el.parentNode.replaceChild(el, known.el);
    else placeProposal(el, byTime ? p.createdAt : null);
    if (known && known.timer) clearTimeout(known.timer);
    var entry = { p: p, el: el, timer: null };
    var left = p.status === "PROPOSED" && p.expiresAt ? Date.parse(p.expiresAt) - Date.now() : NaN;
    if (isFinite(left) && left > 0) {
      entry.timer = setTimeout(function () {
        if (state.proposals[p.id] === entry) upsertProposal({ proposalId: p.id, status: "PROPOSED" }, false);
      }, Math.min(left + 500, 2147483647));
    }
    state.proposals[p.id] = entry;
  }

  function placeProposal(el, at) {
    removeEmpty();
    var box = $("transcript");
    if (at) {
      var later = Array.prototype.filter.call(box.children, function (child) {
        var t = child.querySelector(".message-head time");
        return t && t.getAttribute("datetime") > at;
      })[0];
      if (later) return box.insertBefore(el, later);
    }
    box.appendChild(el);
    scrollTranscript();
  }

  function renderProposals(list, byTime) {
    list.forEach(function (p) {
      upsertProposal(p, byTime);
    });
  }

  function proposalNews(e) {
    var status = PROPOSAL_EVENT_STATUS[e.type];
    if (!status) return;
    upsertProposal(Object.assign({}, e, { status: status, outcome: e.type === "proposal.created" ? undefined : e.outcome }), false);
  }

  /** The customer's Confirm or Decline: the card shows the answer (a 409: it expired). */
  function decideProposal(id, verb) {
    var entry = state.proposals[id];
    if (!entry || !state.conversationId || !state.token) return;
    entry.el.querySelectorAll(".proposal-buttons button").forEach(function (b) {
      b.disabled = true;
    });
    var path = "/api/conversations/" + encodeURIComponent(state.conversationId) + "/proposals/" + encodeURIComponent(id) + "/" + verb;
    SA.api(path, { method: "POST", token: state.token }).then(
      function (r) {
        upsertProposal(r.data || {}, false);
        refreshRefundsSoon(); // a cancellation may have refunded
        if (state.refundsPending) follow();
      },
      function (err) {
        if (err.status === 401) return handleError(err, $("chat-error"));
        if (err.status === 409) return upsertProposal({ proposalId: id, status: "EXPIRED" }, false);
        var now = state.proposals[id];
        if (!now) return;
        now.el.querySelectorAll(".proposal-buttons button").forEach(function (b) {
          b.disabled = false;
        });
        var box = now.el.querySelector(".proposal-error");
        box.textContent = "Could not " + verb + " (" + (err.code || "error") + (err.message ? ": " + err.message : "") + ").";
        box.hidden = false;
      }
    );
  }

  // ------------------------------------------------------ a person from support
  //
  // escalate_to_human hands the conversation to a person (handoff.opened); while the hand-off is open the assistant
  // does not answer: a message is kept for the person (POST /api/chat answers 202 owner "person", no turn to
  // follow). A teammate claims it (handoff.assigned, with their name) and replies (message events of role
  // "person"); they release it (handoff.released: queued again), hand it back (handoff.returned_to_bot) or close it
  // (handoff.closed): the assistant answers again. The page follows the feed as long as a hand-off is open.

  var HANDOFF_WORDS = {
    "handoff.opened": function () {
      return "You asked for a person: someone from support will join this conversation. Until then your messages wait for them (the assistant does not answer).";
    },
    "handoff.assigned": function (e) {
      return (e.by || "Someone") + " from support joined.";
    },
    "handoff.released": function (e, was) {
      return (was && was.name ? was.name : "The person from support") + " stepped away; the next person from support will pick this up.";
    },
    "handoff.returned_to_bot": function () {
      return "The assistant is back: it answers your next message.";
    },
    "handoff.closed": function () {
      return "Support closed this hand-off. The assistant answers your next message.";
    },
  };

  function handoffActive() {
    return !!state.handoff;
  }

  function setHandoff(handoff) {
    state.handoff = handoff;
    var el = $("handoff-status");
    if (!handoff) {
      el.hidden = true;
      el.textContent = "";
      el.removeAttribute("data-status");
      return;
    }
    el.setAttribute("data-status", handoff.status);
    el.textContent =
      handoff.status === "ASSIGNED"
        ? (handoff.name || "A person") + " from support is answering this conversation."
        : "Waiting for a person from support: your messages are kept for them.";
    el.hidden = false;
  }

  /** A hand-off's news: the state always; a line in the conversation unless `quiet` (older than the history). */
  function handoffNews(e, quiet) {
    var was = state.handoff;
    var id = e.handoffId || (was && was.id) || null;
    if (e.type === "handoff.opened" || e.type === "handoff.released") setHandoff({ id: id, status: "OPEN", name: null });
    else if (e.type === "handoff.assigned") setHandoff({ id: id, status: "ASSIGNED", name: e.by || null });
    else if (e.type === "handoff.returned_to_bot" || e.type === "handoff.closed") setHandoff(null);
    var key = [e.type, e.at, id].join("|");
    if (quiet || !HANDOFF_WORDS[e.type] || state.shown[key]) return;
    state.shown[key] = true;
    removeEmpty();
    $("transcript").appendChild(
      h(
        "div",
        { class: "message system handoff-update", "data-event": e.type, "aria-label": "Support update" },
        h("div", { class: "message-head" }, h("span", { class: "who" }, "Support"), e.at ? h("time", { datetime: e.at, class: "muted" }, SA.time(e.at)) : null),
        h("p", { class: "message-text handoff-update-text" }, HANDOFF_WORDS[e.type](e, was))
      )
    );
    scrollTranscript();
  }

  function personMessage(e) {
    if (state.shown[["person", e.at, e.text || ""].join("|")]) return;
    appendPerson(e.author, e.text || "", e.at);
  }

  /** While a person has the conversation, a customer's message is stored under a turn that never runs (no end):
   * shown as the customer's message (once), never as the assistant working. True when `e` was that. */
  function keptMessage(e) {
    if (e.type === "turn.started") return true;
    if (e.type !== "message" || e.role !== "user") return false;
    var text = e.text || "";
    if (state.shown[["user", e.at, text].join("|")]) return true;
    var p = state.pending;
    if (p && text === p.text) {
      p.echoed = true; // this page's message, on the page already
      return true;
    }
    var sent = state.sentForPerson.indexOf(text);
    if (sent >= 0) {
      state.sentForPerson.splice(sent, 1);
      return true;
    }
    appendUser(text, e.at); // sent from elsewhere (another tab or device)
    return true;
  }

  /** 202 owner "person": the message is stored for a person; no turn runs, so nothing to wait for but their reply. */
  function keptForPerson(p, data) {
    var t = p.turnId ? state.live[p.turnId] : null;
    if (t && !t.ended) {
      // The feed showed its turn starting before the page knew a person has the conversation: it never runs.
      t.ended = true;
      state.answered[t.id] = true;
      if (t.el.parentNode) t.el.remove();
      if (t.traceEl) t.traceEl.remove();
    }
    if (!handoffActive()) setHandoff({ id: null, status: data.status === "assigned" ? "ASSIGNED" : "OPEN", name: null });
    if (!p.echoed) state.sentForPerson.push(p.text);
    var name = state.handoff.status === "ASSIGNED" ? state.handoff.name : null;
    p.userEl.appendChild(h("p", { class: "sent-note muted" }, name ? "Sent — " + name + " will reply here." : "Sent — a person from support will reply here."));
    state.pending = null;
    setSending(false);
    if (state.token) $("message").focus();
    follow();
  }

  // ---------------------------------------------------------- the event feed
  //
  // GET /api/conversations/{id}/events?after=<cursor>&waitSeconds=20 answers as soon as the conversation has an
  // event after the cursor (a long poll). The page follows it while something is under way — a message being
  // answered (a turn handed to the worker included: 202), a turn running, a refund awaiting a lead or the payment
  // provider — and stops otherwise (the poll in flight answers, no other follows): each poll counts against
  // READS_PER_MINUTE. One poll at a time; errors and 429s back off (Retry-After honoured); a hidden page cancels its
  // poll and resumes from its cursor when shown again.
  //
  // Each (re)start first catches up (waitSeconds=0 until a page comes back empty), then renders what it read: a
  // turn that ended within the catch-up is on the page already (the history, or a 200 body) unless it is the one
  // awaited; of the refund news only the last of each refund, and only when the page shows another status.
  // Event text goes into the page as text (h() makes text nodes), never as HTML.
  //
  // While the page's WebSocket is open (see "the WebSocket" below), the catch-up is followed by a subscription
  // after its cursor instead of the long poll, whether or not anything is under way (an idle subscription costs
  // nothing): its events go through the same rendering, and no long poll runs. An event is never rendered twice
  // (its cursor is remembered), whichever way it came.

  var FEED_WAIT_SECONDS = 20;
  var FEED_RETRY_MS = [1000, 2000, 5000, 10000, 30000];

  function feedWanted() {
    if (state.pending || state.refundsPending || state.historyTail || state.probe || state.awaitEnd || handoffActive()) return true;
    return Object.keys(state.live).some(function (id) {
      return !state.live[id].ended;
    });
  }

  /** Follows the open conversation's feed, if anything is under way there (no-op when it already does). */
  function follow() {
    if (!state.token || !state.conversationId || document.hidden || !(feedWanted() || state.socketUp)) return;
    var f = state.feed;
    if (!f || f.conversationId !== state.conversationId) {
      stopFollowing(true);
      f = state.feed = newFeed(state.conversationId);
    }
    if (f.active || f.via) return;
    f.active = true;
    if (f.request) return; // the poll still in flight from before goes on
    f.catchingUp = true;
    f.catchCursor = f.cursor;
    f.caught = [];
    pollSoon(f, 0);
  }

  function newFeed(conversationId) {
    // via: null (the long poll), "subscribing" or "socket"; seen: the cursors of the events rendered; noSocket: the
    // socket refused to follow this conversation (the long poll does).
    return { conversationId: conversationId, cursor: null, active: false, gen: 0, timer: null, request: null, failures: 0, via: null, seen: {}, noSocket: false };
  }

  /** The events not rendered before (by their cursors, each event's own), marked as rendered now. */
  function unseen(f, events) {
    return events.filter(function (e) {
      if (!e.cursor) return true;
      var key = [e.cursor, e.type, e.toolUseId || "", e.role || ""].join("|");
      if (f.seen[key]) return false;
      f.seen[key] = true;
      return true;
    });
  }

  /** Nothing is under way: no poll after the one in flight (its events are still shown). */
  function pauseFollowing() {
    var f = state.feed;
    if (!f || f.via) return; // a subscription costs nothing while nothing happens
    f.active = false;
    if (f.timer) clearTimeout(f.timer);
    f.timer = null;
    feedStatus(null);
  }

  /** Stops following now, a poll in flight cancelled (a hidden page, sign-out); `forget` drops the cursor too
   * (another conversation). */
  function stopFollowing(forget) {
    var f = state.feed;
    if (f && f.via && !forget) return; // a hidden page: the socket goes on (pushes cost nothing when idle)
    if (f && f.via) state.socket.send({ action: "unsubscribe", conversationId: f.conversationId });
    if (f) {
      f.via = null;
      haltPoll(f);
    }
    if (forget) state.feed = null;
    feedStatus(null);
  }

  function pollSoon(f, ms) {
    if (f.timer) clearTimeout(f.timer);
    f.timer = setTimeout(function () {
      f.timer = null;
      pollFeed(f);
    }, ms);
  }

  function pollFeed(f) {
    if (!f.active || f !== state.feed || f.request || !state.token) return;
    var gen = f.gen;
    var after = f.catchingUp ? f.catchCursor : f.cursor;
    var path =
      "/api/conversations/" +
      encodeURIComponent(f.conversationId) +
      "/events?waitSeconds=" +
      (f.catchingUp ? 0 : FEED_WAIT_SECONDS) +
      (after ? "&after=" + encodeURIComponent(after) : "");
    var ctrl = typeof AbortController === "function" ? new AbortController() : null;
    f.request = ctrl || { abort: function () {} };
    SA.api(path, { token: state.token, signal: ctrl ? ctrl.signal : undefined }).then(
      function (r) {
        if (gen !== f.gen) return;
        f.request = null;
        f.failures = 0;
        feedStatus(null);
        feedPage(f, r.data || {});
      },
      function (err) {
        if (gen !== f.gen) return;
        f.request = null;
        feedFailed(f, err);
      }
    );
  }

  function feedPage(f, page) {
    var gen = f.gen;
    var read = page.events || [];
    var events = unseen(f, read);
    events.forEach(noteEnd);
    if (!f.catchingUp && !read.length) state.awaitEnd = null; // a whole wait with nothing: it was missed, or is no event
    if (f.catchingUp) {
      f.caught = f.caught.concat(events);
      if (page.nextCursor) f.catchCursor = page.nextCursor;
      if (read.length) return pollSoon(f, 0); // there may be more
      f.catchingUp = false;
      f.cursor = f.catchCursor;
      var caught = f.caught;
      f.caught = [];
      applyCaughtUp(caught);
      state.probe = false;
    } else {
      if (page.nextCursor) f.cursor = page.nextCursor;
      events.forEach(applyEvent);
    }
    if (f !== state.feed || f.gen !== gen) return; // what it showed ended the following (sign-out, a 401)
    if (subscribe(f)) return; // the socket follows it from here
    f.active = feedWanted() && !document.hidden && !!state.token;
    if (f.active) pollSoon(f, 0);
  }

  /** The end of the turn a 200 answered: what it did is on the page now. */
  function noteEnd(e) {
    if (e.turnId && e.turnId === state.awaitEnd && (e.type === "turn.completed" || e.type === "turn.failed")) state.awaitEnd = null;
  }

  function feedFailed(f, err) {
    if (err.status === 401) {
      handleError(err, $("chat-error"));
      return;
    }
    if (err.status === 404) {
      // Not (or no longer) this customer's conversation: there is nothing to follow.
      f.active = false;
      if (state.pending && state.pending.turnId) failPending(err);
      return;
    }
    if (err.status === 400) {
      // A cursor the feed does not take: from the start again (what is on the page is not shown twice).
      f.cursor = f.catchCursor = null;
      f.catchingUp = true;
      f.caught = [];
    }
    f.failures++;
    var wait = FEED_RETRY_MS[Math.min(f.failures, FEED_RETRY_MS.length) - 1];
    var retryAfter = Number(err.retryAfter);
    if (err.status === 429 && retryAfter > 0) wait = Math.max(wait, retryAfter * 1000);
    feedStatus("Live updates paused (" + (err.code || "error") + "); retrying in " + Math.ceil(wait / 1000) + " s.");
    pollSoon(f, wait);
  }

  function feedStatus(text) {
    var el = $("feed-status");
    el.textContent = text || "";
    el.hidden = !text;
  }

  function isAwaited(turnId) {
    return !!(state.pending && state.pending.turnId && state.pending.turnId === turnId);
  }

  function applyCaughtUp(events) {
    var ended = {};
    var news = {};
    var tailTurn = null;
    events.forEach(function (e) {
      if (e.turnId && (e.type === "turn.completed" || e.type === "turn.failed")) ended[e.turnId] = true;
      if (state.historyTail && e.type === "message" && e.role === "user" && e.text === state.historyTail.userText) tailTurn = e.turnId;
    });
    events.forEach(function (e) {
      if (e.type === "approval.decided" || e.type === "refund.settled") news[refundKey(e)] = e;
      else if (/^proposal\./.test(e.type)) proposalNews(e);
      else if (/^handoff\./.test(e.type)) handoffNews(e, !!state.historyLastAt && e.at <= state.historyLastAt);
      else if (!e.turnId || !ended[e.turnId] || state.live[e.turnId] || isAwaited(e.turnId) || e.turnId === tailTurn) applyEvent(e);
    });
    state.historyTail = null; // a turn still running has taken its place by now
    Object.keys(news).forEach(function (key) {
      if (state.refundKnown[key] !== news[key].status) applyEvent(news[key]);
    });
  }

  function applyEvent(e) {
    if (/^proposal\./.test(e.type)) return proposalNews(e);
    if (e.type === "approval.decided" || e.type === "refund.settled") return refundNews(e);
    if (/^handoff\./.test(e.type)) return handoffNews(e, false);
    if (e.type === "message" && e.role === "person") return personMessage(e);
    if (e.turnId && !state.live[e.turnId] && handoffActive() && keptMessage(e)) return;
    if (!e.turnId || state.answered[e.turnId]) return;
    var t = liveTurn(e.turnId);
    var seen = [e.type, e.at, e.toolUseId || "", e.role || "", e.text || ""].join("|");
    if (t.seen[seen]) return; // read again (the feed started over)
    t.seen[seen] = true;
    if (e.type === "message" && e.role === "user") liveUser(t, e.text || "");
    else if (e.type === "message") liveText(t, e.text || "", e.at);
    else if (e.type === "tool.requested") liveTool(t, e);
    else if (e.type === "tool.finished") liveToolDone(t, e);
    else if (e.type === "turn.completed") liveCompleted(t, e);
    else if (e.type === "turn.failed") liveFailed(t, e.error || {});
    scrollTranscript();
  }

  // ---------------------------------------------------------- the WebSocket
  //
  // One socket for the page (SA.LiveSocket: a ticket from POST /api/ws-ticket, then the socket), opened once signed
  // in, before any message: a new conversation's first message is then sent with `Prefer: respond-async` (202 names
  // the conversation at once) and its turn followed over the socket, reply text included. The open conversation is
  // subscribed after the feed's cursor; its `event` messages are the feed's events, rendered as the long poll's
  // are; its `delta` messages are the reply as the model writes it (see streamDelta), replaced by the stored
  // `message` (or the 200 body) when it comes. A socket that cannot be had, or closes, or refuses the subscription
  // leaves the following to the long poll from the last cursor (no gap: the cursors; nothing twice: f.seen); the
  // socket is tried again with a backoff, and takes over again when it is back.

  /** `window.SUPPORT_AGENT_WEBSOCKET = false` (before the page's scripts, e.g. in config.js) keeps the page on the
   * long poll: for a deployment without the WebSocket API, and for the tests of the long poll itself. */
  function startSocket() {
    if (window.SUPPORT_AGENT_WEBSOCKET === false) document.body.setAttribute("data-live", "poll");
    else state.socket.start();
  }

  function socketOpened() {
    state.socketUp = true;
    document.body.setAttribute("data-live", "socket"); // how the page follows (the long poll: "poll")
    var f = state.feed;
    if (f && f.conversationId === state.conversationId) {
      if (!f.catchingUp) subscribe(f); // the catch-up in flight subscribes when it is done
    } else {
      follow();
    }
  }

  function socketClosed() {
    state.socketUp = false;
    document.body.setAttribute("data-live", "poll");
    var f = state.feed;
    if (f && f.via) pollInstead(f);
  }

  /** The long poll follows the feed again, from the last cursor the socket gave (the page is current up to it: no
   * catch-up, each event rendered as it comes). */
  function pollInstead(f) {
    f.via = null;
    f.catchingUp = false;
    f.active = feedWanted() && !document.hidden && !!state.token;
    if (f.active) pollSoon(f, 0);
  }

  /** Stops the long poll of feed ``f``: no timer, no request in flight, and an answer still on its way is stale. */
  function haltPoll(f) {
    f.active = false;
    f.gen++;
    if (f.timer) clearTimeout(f.timer);
    f.timer = null;
    if (f.request) f.request.abort();
    f.request = null;
  }

  /** Follows the feed over the socket instead of the long poll (a poll in flight is cancelled: the subscription
   * pushes what it would have answered); false when the socket cannot. */
  function subscribe(f) {
    if (!state.socketUp || f.via || f.noSocket || f !== state.feed || !state.token || document.hidden) return false;
    if (!state.socket.send({ action: "subscribe", conversationId: f.conversationId, after: f.cursor })) return false;
    f.via = "subscribing";
    haltPoll(f);
    f.catchingUp = false;
    feedStatus(null);
    return true;
  }

  /** A conversation the page has shown nothing of yet (the first turn's 202): subscribed from its start. */
  function followNew(conversationId) {
    stopFollowing(true);
    var f = (state.feed = newFeed(conversationId));
    if (subscribe(f)) return true;
    follow();
    return false;
  }

  function socketMessage(m) {
    var f = state.feed;
    if (!m || typeof m !== "object") return;
    if (!m.type) {
      // The gateway's own answer to a frame its function failed ("Internal server error"): no good for now.
      if (f && f.via === "subscribing") state.socket.drop();
      return;
    }
    if (m.type === "delta") return streamDelta(m);
    if (!f || m.conversationId !== f.conversationId) return; // a conversation the page has left
    if (m.type === "subscribed") {
      if (f.via) f.via = "socket";
      return;
    }
    if (m.type === "error") {
      if (!f.via) return;
      if (m.code === "not_connected") return state.socket.drop(); // closed: the long poll, and a new socket later
      f.noSocket = true; // not this conversation (not_found, too many): the long poll follows it
      pollInstead(f);
      return;
    }
    if (m.type !== "event" || !f.via || !m.event) return;
    var e = m.event;
    if (!unseen(f, [e]).length) return;
    if (e.cursor) f.cursor = e.cursor;
    noteEnd(e);
    applyEvent(e);
  }

  // A reply as it is written: each delta puts its text at its offset in the turn's text (code points, as the server
  // counts them), across the turn's model calls; what the stored `message` events of the turn hold already is
  // shown by them, so only the text beyond them is shown here. A duplicate or a stale overlap changes nothing; a
  // gap is filled from the stored text when it covers it (a resumed turn), else the post is dropped (the stored
  // message mends it); `restart` voids the turn's streamed text (a retried model call writes it again).
  function streamDelta(m) {
    if (m.conversationId !== state.conversationId || !m.turnId || state.answered[m.turnId]) return;
    if (!state.live[m.turnId] && handoffActive()) return;
    var t = liveTurn(m.turnId);
    if (t.ended) return;
    var s = t.stream;
    var piece = Array.from(String(m.text || ""));
    var at = Number(m.offset) || 0;
    if (m.restart) {
      s.chars = [];
      s.stored = [];
    }
    if (at > s.chars.length) {
      if (at > s.stored.length) return;
      s.chars = s.stored.slice(0, at);
    }
    if (at + piece.length <= s.chars.length && !m.restart) return;
    s.chars = s.chars.slice(0, at).concat(piece);
    showStream(t);
  }

  function showStream(t) {
    var s = t.stream;
    var rest = s.chars.length > s.stored.length ? s.chars.slice(s.stored.length).join("") : "";
    t.streamEl.textContent = rest;
    t.streamEl.hidden = !rest;
    if (rest) scrollTranscript();
  }

  // ------------------------------------------------------- a turn as it runs

  /** What a tool call does, in words ("Looking up order 1042"); without its input (quiet) from its name. */
  function toolLabel(name, input, done) {
    var i = input && typeof input === "object" ? input : {};
    var order = i.order_id !== undefined && i.order_id !== null ? " order " + i.order_id : null;
    if (name === "lookup_order") return (done ? "Looked up" : "Looking up") + (order || " an order");
    if (name === "list_invoices") return (done ? "Listed" : "Listing") + " invoices" + (order ? " of" + order : "");
    if (name === "request_refund") {
      var amount = i.amount_cents !== undefined && i.amount_cents !== null ? " of " + refundAmount(i.amount_cents, i.order_id, null) : "";
      return (done ? "Requested" : "Requesting") + " a refund" + amount + (order ? " for" + order : "");
    }
    if (name === "escalate_to_human") return done ? "Asked for a support teammate" : "Asking for a support teammate";
    return (done ? "Ran " : "Running ") + (name || "a tool");
  }

  /** The turn's live view (made on its first event): its steps, its narration, then its answer. */
  function liveTurn(turnId) {
    var t = state.live[turnId];
    if (t) return t;
    removeEmpty();
    state.turn++;
    t = state.live[turnId] = { id: turnId, n: state.turn, seen: {}, steps: {}, iterations: [], lastAt: null, text: null, userText: "", ended: false, traceEl: null };
    t.stream = { chars: [], stored: [] }; // the turn's text as streamed, and as its stored messages hold it
    t.progress = h("ol", { class: "progress", "aria-label": "What the agent did" });
    t.textEl = h("div", { class: "message-text reply-text", hidden: true });
    // The text being written: not announced (the stored message that replaces it is).
    t.streamEl = h("div", { class: "message-text stream-text", "data-testid": "stream-text", "aria-hidden": "true", hidden: true });
    t.stateEl = h("span", { class: "turn-state muted" }, "working…");
    t.el = h(
      "article",
      { class: "message assistant live-turn", "data-turn": t.n, "data-turn-id": turnId, "data-state": "running", "aria-busy": "true", "aria-label": "Agent is working" },
      h("div", { class: "message-head" }, h("span", { class: "who" }, "Agent"), simulatedBadge(), t.stateEl),
      t.progress,
      t.textEl,
      t.streamEl
    );
    $("transcript").appendChild(t.el);
    return t;
  }

  function liveUser(t, text) {
    t.userText = text;
    var p = state.pending;
    if (p && (p.turnId === t.id || (!p.turnId && text === p.text))) {
      p.turnId = t.id; // the message this page sent: shown already
      return;
    }
    var tail = state.historyTail;
    if (tail && text === tail.userText) {
      // The history's unanswered last turn, still running: its live view takes the place of the partial one.
      state.historyTail = null;
      if (tail.replyEl) tail.replyEl.remove();
      if (tail.traceEl) tail.traceEl.remove();
      return;
    }
    t.el.parentNode.insertBefore(userElement(text, null), t.el); // sent from elsewhere (another tab or device)
  }

  /** The iteration a stored assistant message (identified by its time) belongs to. */
  function iterationAt(t, at) {
    var last = t.iterations[t.iterations.length - 1];
    if (!last || t.lastAt !== at) {
      last = { iteration: t.iterations.length + 1, stopReason: null, toolCalls: [] };
      t.iterations.push(last);
      t.lastAt = at;
    }
    return last;
  }

  function narrate(t) {
    if (!t.text) return;
    t.progress.appendChild(h("li", { class: "progress-note" }, t.text));
    t.text = null;
    t.textEl.textContent = "";
    t.textEl.hidden = true;
  }

  function liveText(t, text, at) {
    narrate(t); // an earlier text of the turn was narration
    iterationAt(t, at);
    t.text = text;
    t.textEl.textContent = text;
    t.textEl.hidden = !text;
    t.stream.stored = t.stream.stored.concat(Array.from(text)); // the stored message replaces what was streamed
    showStream(t);
  }

  function liveTool(t, e) {
    if (t.steps[e.toolUseId]) return;
    narrate(t); // the text before a tool call says what the agent is about to do
    var quiet = e.input === undefined || e.input === null;
    var call = { id: e.toolUseId, name: e.name, input: quiet ? undefined : e.input, result: undefined, isError: false, quiet: quiet, running: true };
    iterationAt(t, e.at).toolCalls.push(call);
    var label = h("span", { class: "progress-label" }, toolLabel(e.name, call.input, false) + "…");
    var badge = h("span", { class: "badge running progress-badge" }, "running");
    var li = h(
      "li",
      { class: "progress-step", "data-tool": e.name || null, "data-tool-use-id": e.toolUseId || null, "data-state": "running" },
      label,
      " ",
      e.name ? h("code", { class: "tool-name" }, e.name) : null,
      e.name ? " " : null,
      badge
    );
    t.steps[e.toolUseId] = { li: li, label: label, badge: badge, call: call };
    t.progress.appendChild(li);
    liveTrace(t);
  }

  function liveToolDone(t, e) {
    if (!t.steps[e.toolUseId]) liveTool(t, { toolUseId: e.toolUseId, name: e.name, at: e.at });
    var step = t.steps[e.toolUseId];
    var err = !!e.isError;
    step.call.running = false;
    step.call.isError = err;
    step.call.result = e.result;
    step.li.setAttribute("data-state", err ? "error" : "ok");
    step.label.textContent = toolLabel(step.call.name, step.call.input, true);
    step.badge.className = "badge progress-badge " + (err ? "error" : "ok");
    step.badge.textContent = err ? "error" : "ok";
    noteResult(e.result, err);
    liveTrace(t);
  }

  /** What a tool result (verbose) tells the page: a refund now pending (follow the feed until it is decided), an
   * order's currency. */
  function noteResult(result, isError) {
    if (isError || !result || typeof result !== "object") return;
    if (result.status === "PROPOSED" && result.proposal_id) upsertProposal(result, false);
    if (PENDING_REFUND[result.status]) state.refundsPending = true;
    if (result.order_id !== undefined && result.currency) state.orderCurrency[result.order_id] = result.currency;
  }

  function liveTrace(t) {
    t.traceEl = placeTrace(t.traceEl, traceSection(t.n, t.userText, t.iterations, false));
  }

  /** The turn's live view becomes its reply (`el`), keeping the steps it showed. */
  function settleLive(t, el) {
    t.ended = true;
    state.answered[t.id] = true;
    if (t.progress.children.length) el.insertBefore(t.progress, el.querySelector(".reply-text"));
    if (t.el.parentNode) t.el.parentNode.replaceChild(el, t.el);
    else $("transcript").appendChild(el);
    t.el = el;
  }

  function liveCompleted(t, e) {
    var last = t.iterations.length - 1;
    t.iterations.forEach(function (it, i) {
      it.stopReason = i === last ? e.stopReason || null : it.toolCalls.length ? "tool_use" : null;
    });
    var reply = {
      turnId: t.id,
      reply: t.text || "",
      stopReason: e.stopReason,
      iterations: e.iterations,
      inputTokens: e.inputTokens,
      outputTokens: e.outputTokens,
      cacheReadInputTokens: e.cacheReadInputTokens,
      cacheCreationInputTokens: e.cacheCreationInputTokens,
      trace: t.iterations,
    };
    settleLive(t, replyElement(reply, t.n, false));
    liveTrace(t);
    if (isAwaited(t.id)) finishSend(state.pending);
    else refreshRefundsSoon(); // a turn from elsewhere may have raised a refund
  }

  function liveFailed(t, error) {
    t.ended = true;
    state.answered[t.id] = true;
    t.el.classList.add("failed");
    t.el.setAttribute("data-state", "failed");
    t.el.setAttribute("aria-busy", "false");
    t.el.setAttribute("aria-label", "Agent could not answer");
    t.stateEl.textContent = "";
    t.streamEl.hidden = true; // what was written is void: the turn stored no answer
    t.el.appendChild(h("p", { class: "failed-note" }, "The agent could not finish this turn (" + (error.code || "error") + (error.message ? ": " + error.message : "") + ")."));
    if (isAwaited(t.id)) failPending(new SA.ApiError(500, error.code || "turn_failed", error.message || "The turn failed", null));
  }

  // ------------------------------------------------------------------- send

  function setSending(on) {
    state.sending = on;
    $("message").disabled = on;
    $("send").disabled = on;
    $("new-conversation").disabled = on;
    $("composer").setAttribute("aria-busy", on ? "true" : "false");
    $("chat-status").textContent = on ? (handoffActive() ? "Sending…" : "The agent is working…") : "";
  }

  /** A 200 body: the turn's reply, in place of its live view when the feed showed it running (never twice). */
  function showAnswer(data, userText) {
    var t = data.turnId ? state.live[data.turnId] : null;
    if (data.turnId) state.answered[data.turnId] = true;
    if (t && t.ended) return; // the feed showed its end already
    var n = t ? t.n : ++state.turn;
    var el = replyElement(data, n, false);
    if (t) settleLive(t, el);
    else appendReply(data, n, false);
    (data.trace || []).forEach(function (it) {
      (it.toolCalls || []).forEach(function (c) {
        noteResult(c.result, c.isError); // a proposal's card goes after the reply that asks to confirm it
      });
    });
    if (data.trace) placeTrace(t ? t.traceEl : null, traceSection(n, userText, data.trace, false));
    scrollTranscript();
  }

  function finishSend(p) {
    if (!p || p !== state.pending) return;
    state.pending = null;
    setSending(false);
    if (state.token) $("message").focus();
    refreshRefunds();
    if (p.firstTurn) loadConversations(false).then(markCurrentConversation, function () {});
    if (!feedWanted()) pauseFollowing();
    else follow();
  }

  function failPending(err) {
    var p = state.pending;
    if (!p) return;
    state.pending = null;
    p.userEl.classList.add("failed");
    p.userEl.appendChild(h("p", { class: "failed-note" }, "Not answered (" + err.code + ")."));
    var box = $("message");
    setSending(false);
    if (!box.value) box.value = p.text;
    if (p.firstTurn && state.conversationId) loadConversations(false).then(markCurrentConversation, function () {});
    if (!feedWanted()) pauseFollowing();
    handleError(err, $("chat-error"), "The message was not answered");
    if (state.token) box.focus();
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
    var p = { text: text, userEl: appendUser(text), turnId: null, firstTurn: !state.conversationId };
    state.pending = p;
    box.value = "";
    setSending(true);
    follow(); // a conversation with an id: its turn's steps show as they are stored
    // A new conversation has no id to follow until the answer names it: with the socket open, ask for the 202 at
    // once (the worker runs the turn) and follow its turn over the socket as it is written.
    var prefer = p.firstTurn && state.socketUp ? "respond-async" : null;
    // One key per message: a resend of it (a lost answer) gets the same turn, never a second one.
    var key = window.crypto && window.crypto.randomUUID ? window.crypto.randomUUID() : String(Date.now()) + Math.random();
    SA.api("/api/chat", { method: "POST", token: state.token, idempotencyKey: key, prefer: prefer, body: { conversationId: state.conversationId, message: text } }).then(
      function (r) {
        if (p !== state.pending) return; // answered by the feed already, or signed out
        var data = r.data || {};
        if (data.conversationId) setConversationId(data.conversationId);
        if (data.turnId) p.turnId = data.turnId;
        if (r.status === 202 && data.owner === "person") return keptForPerson(p, data);
        if (r.status === 202) {
          // The turn goes on in the worker: the feed shows its steps and its answer, and ends the send.
          var first = p.firstTurn;
          if (first) loadConversations(false).then(markCurrentConversation, function () {});
          p.firstTurn = false;
          if (prefer && first && data.conversationId && followNew(data.conversationId)) return; // asked for: not long
          $("chat-status").textContent = "The agent is still working (a long turn)…";
          follow();
          return;
        }
        var seen = data.turnId ? state.live[data.turnId] : null;
        // What the turn did may have news the feed has not shown yet (a hand-off it opened): read until its end.
        if (data.turnId && !(seen && seen.ended)) state.awaitEnd = data.turnId;
        showAnswer(data, text);
        finishSend(p);
      },
      function (err) {
        if (p === state.pending) failPending(err);
      }
    );
  }

  // ------------------------------------------------------------------- init

  function init() {
    state.socket = new SA.LiveSocket({
      token: function () {
        return state.token;
      },
      opened: socketOpened,
      message: socketMessage,
      closed: socketClosed,
    });
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
    $("closing-open").addEventListener("click", toggleClosing);
    $("closing-form").addEventListener("submit", function (e) {
      e.preventDefault();
      sendClosing();
    });
    // A hidden or left page stops following its conversation; shown again, it goes on from where it was.
    document.addEventListener("visibilitychange", function () {
      if (document.hidden) stopFollowing(false);
      else follow();
    });
    window.addEventListener("pagehide", function () {
      state.socket.stop(); // a page kept for going back holds no socket
      stopFollowing(false);
    });
    window.addEventListener("pageshow", function (e) {
      if (!e.persisted || !state.token) return;
      startSocket();
      follow();
    });

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
