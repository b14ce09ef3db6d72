/*
 * The console's inbox: conversations handed to a person. The queue (OPEN), mine (ASSIGNED to me), everyone's and
 * the closed ones (leads), each with its brief; claim one, then its workspace: the transcript, followed live
 * (GET /api/handoffs/{id}/events, a long poll), a reply box (a person's message), hand back, release, close.
 * Support staff and leads use it alike: the API decides who may do what, the page only hides what cannot work.
 * Every text from the API goes into the page as text (SA.h makes text nodes), never as HTML.
 * lead.js makes one with SAInbox(ui) — ui: {token(), sub(), isLead(), handleError(err, context), helpers}.
 */
(function () {
  "use strict";
  var SA = window.SA;
  var h = SA.h;
  var $ = SA.$;

  var FEED_WAIT_SECONDS = 20;
  var FEED_RETRY_MS = [1000, 2000, 5000, 10000, 30000];
  var REPLY_RETRIES = 10; // a 409 while the assistant finishes a turn (the lease): sent again after REPLY_RETRY_MS
  var REPLY_RETRY_MS = 1000;
  var WHO = { user: "Customer", assistant: "Assistant" };
  var NEWS = {
    "handoff.opened": function () {
      return "The customer asked for a person.";
    },
    "handoff.assigned": function (e) {
      return (e.by || "A teammate") + " took the conversation.";
    },
    "handoff.released": function () {
      return "Released to the queue.";
    },
    "handoff.returned_to_bot": function () {
      return "Handed back to the assistant: it answers the customer's next message.";
    },
    "handoff.closed": function () {
      return "The hand-off was closed.";
    },
  };

  function newKey() {
    return window.crypto && window.crypto.randomUUID ? window.crypto.randomUUID() : "k" + Date.now() + Math.random().toString(16).slice(2);
  }

  function enc(s) {
    return encodeURIComponent(s);
  }

  function SAInbox(ui) {
    var st = { list: [], next: null, pages: 0, loading: false, busy: {}, notes: {}, ws: null };

    // ------------------------------------------------------------ the list

    function filter() {
      return $("handoff-filter").value;
    }

    function load(append) {
      if (st.loading) return Promise.resolve();
      st.loading = true;
      var f = filter();
      var q = f === "mine" ? "?status=ASSIGNED&assignee=me" : "?status=" + enc(f);
      if (append && st.next) q += "&nextToken=" + enc(st.next);
      return SA.api("/api/handoffs" + q, { token: ui.token() }).then(
        function (r) {
          st.loading = false;
          if (f !== filter()) return;
          var data = r.data || {};
          var list = data.handoffs || [];
          st.list = append ? st.list.concat(list) : list;
          st.pages = append ? st.pages + 1 : 1;
          st.next = data.nextToken || null;
          render();
        },
        function (err) {
          st.loading = false;
          throw err;
        }
      );
    }

    function reset() {
      st.list = [];
      st.next = null;
      st.loading = false;
      SA.clear($("handoffs"));
    }

    function render() {
      var tbody = $("handoffs");
      var existing = {};
      Array.prototype.forEach.call(tbody.querySelectorAll("tr.handoff-row"), function (tr) {
        existing[tr.getAttribute("data-handoff-id")] = tr;
      });
      var keep = {};
      st.list.forEach(function (ho, i) {
        keep[ho.handoffId] = true;
        var sig = JSON.stringify([ho, !!st.busy[ho.handoffId], st.notes[ho.handoffId] || null, ui.sub()]);
        var row = existing[ho.handoffId];
        if (!row || row.getAttribute("data-sig") !== sig) {
          row = row || h("tr", { class: "handoff-row", "data-handoff-id": ho.handoffId });
          fillRow(row, ho);
          row.setAttribute("data-sig", sig);
        }
        if (tbody.children[i] !== row) tbody.insertBefore(row, tbody.children[i] || null);
      });
      Object.keys(existing).forEach(function (id) {
        if (!keep[id]) existing[id].remove();
      });
      ui.updateAges();
      $("handoffs-empty").hidden = st.list.length > 0;
      $("handoffs-more").hidden = !st.next;
    }

    function mine(ho) {
      return ho.status === "ASSIGNED" && ho.assignee === ui.sub();
    }

    function holder(ho) {
      if (ho.status !== "ASSIGNED") return null;
      return mine(ho) ? "you" : ho.assigneeName || ho.assignee || "someone";
    }

    function fillRow(row, ho) {
      var id = ho.handoffId;
      var busy = !!st.busy[id];
      var note = st.notes[id];
      var oldBrief = row.querySelector("details.brief");
      var oldInput = row.querySelector("input.close-note");
      row.setAttribute("data-status", ho.status || "");
      row.setAttribute("data-assignee", ho.assignee || "");
      var actions = h("td", { "data-label": "Actions", class: "actions" });
      var who = "customer " + ho.customerId;
      if (ho.status === "OPEN") {
        if (ho.conversationId) {
          actions.appendChild(
            h("button", { type: "button", class: "claim-handoff", "data-handoff-id": id, "aria-label": "Claim the conversation of " + who, disabled: busy, onclick: function () { claim(ho); } }, "Claim")
          );
        } else {
          actions.appendChild(h("span", { class: "muted" }, "A ticket (no conversation): close it once handled."));
        }
        if (ui.isLead()) {
          var input = oldInput || h("input", { type: "text", id: "close-note-" + id, class: "close-note", maxlength: "500", placeholder: "Note (optional)" });
          input.setAttribute("aria-label", "Note for closing the hand-off of " + who + " (optional)");
          input.disabled = busy;
          actions.appendChild(input);
          actions.appendChild(
            h("button", { type: "button", class: "close-handoff secondary", "data-handoff-id": id, "aria-label": "Close the hand-off of " + who, disabled: busy, onclick: function () { closeFromRow(ho, input.value.trim()); } }, "Close")
          );
        }
      } else if (ho.status === "ASSIGNED" && (mine(ho) || ui.isLead())) {
        actions.appendChild(
          h("button", { type: "button", class: "open-handoff", "data-handoff-id": id, "aria-label": "Open the conversation of " + who, disabled: busy, onclick: function () { openWorkspace(ho); } }, mine(ho) ? "Open" : "Read")
        );
      } else if (ho.status === "CLOSED") {
        var how = ho.closedAs === "returned_to_bot" ? "handed back" : "closed";
        actions.appendChild(h("span", { class: "muted" }, ho.closedBy ? how + " by " + ho.closedBy + (ho.closedAt ? ", " + SA.age(ho.closedAt) : "") : "—"));
      } else {
        actions.appendChild(h("span", { class: "muted" }, "—"));
      }
      var held = holder(ho);
      SA.clear(row);
      row.appendChild(ui.td("Age", "age-cell", ui.ageCell(ho.createdAt)));
      row.appendChild(ui.td("Customer", "handoff-customer", String(ho.customerId)));
      row.appendChild(ui.td("Reason", "handoff-reason-cell", h("span", { class: "handoff-reason" }, ho.reason || "—"), briefElement(ho.brief, !!(oldBrief && oldBrief.open))));
      row.appendChild(
        ui.td(
          "Status",
          "status-cell",
          ui.statusBadge(ho.status, "handoff-status"),
          held ? h("span", { class: "muted handoff-holder" }, " held by " + held) : null,
          ho.closedAs === "returned_to_bot" ? h("span", { class: "muted handoff-closed-as" }, " back to the assistant") : null,
          note ? h("p", { class: "row-note" + (note.error ? " error-text" : ""), role: note.error ? "alert" : null }, note.text) : null
        )
      );
      row.appendChild(ui.td("Conversation", "handoff-conversation", ui.auditButton(ho.conversationId)));
      row.appendChild(actions);
    }

    // ------------------------------------------------------------ the brief (built by the API's code, not the model)

    function fact(label, value) {
      return h("div", { class: "brief-fact" }, h("dt", null, label), h("dd", null, value));
    }

    function ids(list) {
      return list && list.length ? list.join(", ") : h("span", { class: "muted" }, "none");
    }

    function refundLine(r) {
      return h(
        "li",
        { class: "brief-refund", "data-order-id": r.orderId, "data-status": r.status || null },
        "Order " + r.orderId + " · " + SA.money(r.amountCents, r.currency) + " · ",
        h("span", { class: "status status-" + String(r.status || "").toLowerCase() }, r.status || "?"),
        r.approvalId ? h("span", { class: "muted" }, " · approval ", h("code", null, r.approvalId), " " + (r.approvalStatus || "")) : null
      );
    }

    function briefElement(b, open) {
      if (!b) return null;
      var refunds = b.refunds || [];
      var messages = b.lastMessages || [];
      return h(
        "details",
        { class: "brief", open: open || null },
        h("summary", null, "Brief"),
        h(
          "dl",
          { class: "brief-facts" },
          fact("Customer", String(b.customerId)),
          b.reason ? fact("Reason", b.reason) : null,
          fact("Orders", ids(b.orders)),
          fact("Invoices", ids(b.invoices)),
          fact("Refunds", refunds.length ? h("ul", { class: "brief-refunds" }, refunds.map(refundLine)) : h("span", { class: "muted" }, "none"))
        ),
        messages.length
          ? h(
              "ol",
              { class: "brief-messages", "aria-label": "The last messages" },
              messages.map(function (m) {
                return h("li", { class: "brief-message", "data-role": m.role }, h("span", { class: "who" }, whoLabel(m.role, m.author) + ": "), h("span", { class: "brief-text" }, m.text || ""));
              })
            )
          : h("p", { class: "muted brief-none" }, "No messages (a ticket with no conversation).")
      );
    }

    function whoLabel(role, author) {
      if (role === "person") return (author || "Support") + " (support)";
      return WHO[role] || role || "?";
    }

    // ------------------------------------------------------------ actions on a hand-off

    function setNote(id, text, error) {
      if (text) st.notes[id] = { text: text, error: !!error };
      else delete st.notes[id];
    }

    function replaced(ho) {
      st.list = st.list.map(function (x) {
        return x.handoffId === ho.handoffId ? ho : x;
      });
      var ws = st.ws;
      if (ws && ws.id === ho.handoffId) {
        ws.ho = ho;
        renderHead(ws);
      }
    }

    /** POSTs one action; resolves the hand-off it answered, or null (the error shown, the list read again). */
    function act(ho, verb, body, pendingText) {
      var id = ho.handoffId;
      if (st.busy[id]) return Promise.resolve(null);
      st.busy[id] = true;
      setNote(id, pendingText, false);
      render();
      var opts = { method: "POST", token: ui.token() };
      if (body) opts.body = body;
      return SA.api("/api/handoffs/" + enc(id) + "/" + verb, opts).then(
        function (r) {
          delete st.busy[id];
          setNote(id, null);
          var now = r.data && r.data.handoffId ? r.data : null;
          if (now) replaced(now);
          render();
          return now;
        },
        function (err) {
          delete st.busy[id];
          setNote(id, (err.message || "failed") + " (" + err.code + ")", true);
          render();
          ui.handleError(err, "Could not " + verb + " the hand-off of customer " + ho.customerId);
          if (err.status === 409 || err.status === 404) load(false).catch(function () {});
          return null;
        }
      );
    }

    function claim(ho) {
      act(ho, "claim", null, "Claiming…").then(function (claimed) {
        if (claimed) openWorkspace(claimed);
      });
    }

    function announce(ho, text) {
      var box = $("outcome");
      box.insertBefore(h("p", { class: "handoff-outcome", "data-handoff-id": ho.handoffId }, text), box.firstChild);
    }

    function closeFromRow(ho, note) {
      act(ho, "close", note ? { note: note } : null, "Closing…").then(function (closed) {
        if (!closed) return;
        setNote(ho.handoffId, "Closed.", false);
        render();
        announce(ho, "Hand-off of customer " + ho.customerId + " closed.");
        if (st.ws && st.ws.id === ho.handoffId) ended(st.ws, "You closed the hand-off.");
      });
    }

    // ------------------------------------------------------------ the workspace: one conversation, live

    function openWorkspace(ho) {
      closeWorkspace();
      var ws = (st.ws = { id: ho.handoffId, ho: ho, gen: 0, cursor: null, request: null, timer: null, failures: 0, shown: {}, reply: null, following: false, sending: false });
      $("workspace").hidden = false;
      $("workspace").setAttribute("data-handoff-id", ho.handoffId);
      SA.clear($("ws-transcript")).appendChild(h("p", { class: "muted ws-loading" }, "Loading the conversation…"));
      SA.showError($("ws-error"), null);
      $("ws-send-status").textContent = "";
      renderHead(ws);
      var title = $("workspace-title");
      if (title.scrollIntoView) title.scrollIntoView({ block: "start" });
      title.focus({ preventScroll: true });
      // The feed first (its cursor is "now"), then the transcript: what the feed brings after is newer than the
      // cursor, and what both show (the moment between the two reads) is shown once.
      catchUp(ws)
        .then(function () {
          return SA.api("/api/handoffs/" + enc(ws.id) + "/conversation", { token: ui.token() });
        })
        .then(
          function (r) {
            if (ws !== st.ws) return;
            SA.clear($("ws-transcript"));
            ((r.data && r.data.messages) || []).forEach(function (m) {
              if (m.text) showMessage(ws, m.role, m.text, m.createdAt, m.author);
              if (m.toolCalls && m.toolCalls.length) toolsLine(m.toolCalls);
            });
            if (live(ws.ho)) follow(ws);
          },
          function (err) {
            if (ws !== st.ws) return;
            SA.clear($("ws-transcript"));
            if (err.status === 401) return ui.handleError(err);
            SA.showError($("ws-error"), err, err.status === 404 ? "This conversation is not yours to read (claim it first)" : "Could not open the conversation");
          }
        );
    }

    /** The hand-off's conversation is followed while someone holds it. */
    function live(ho) {
      return ho.status === "ASSIGNED";
    }

    function catchUp(ws) {
      var path = "/api/handoffs/" + enc(ws.id) + "/events?waitSeconds=0" + (ws.cursor ? "&after=" + enc(ws.cursor) : "");
      return SA.api(path, { token: ui.token() }).then(function (r) {
        var page = r.data || {};
        if (page.nextCursor) ws.cursor = page.nextCursor;
        if ((page.events || []).length && ws === st.ws) return catchUp(ws);
      });
    }

    function closeWorkspace() {
      var ws = st.ws;
      if (!ws) return;
      stopFollowing(ws);
      st.ws = null;
      $("workspace").hidden = true;
      $("workspace").removeAttribute("data-handoff-id");
      SA.clear($("ws-transcript"));
      SA.clear($("ws-brief"));
      $("ws-message").value = "";
    }

    function renderHead(ws) {
      var ho = ws.ho;
      var held = holder(ho);
      var closedAs = ho.closedAs === "returned_to_bot" ? "handed back to the assistant" : "closed";
      $("workspace-title").textContent = "Conversation with customer " + ho.customerId;
      $("workspace").setAttribute("data-status", ho.status || "");
      SA.clear($("ws-status")).appendChild(
        h(
          "span",
          null,
          ui.statusBadge(ho.status, "ws-handoff-status"),
          " ",
          held ? "held by " + held : ho.status === "OPEN" ? "in the queue: claim it to reply" : ho.status === "CLOSED" ? closedAs + (ho.closedBy ? " by " + ho.closedBy : "") : "",
          " · ",
          h("code", { class: "muted" }, ho.handoffId),
          ho.conversationId ? [" · ", h("code", { class: "muted" }, ho.conversationId)] : null
        )
      );
      var old = $("ws-brief").querySelector("details.brief");
      SA.clear($("ws-brief")).appendChild(briefElement(ho.brief, old ? old.open : true) || h("span"));
      // Only its holder replies; its holder or a lead hands it back, releases or closes it.
      $("ws-reply").hidden = !mine(ho);
      $("ws-actions").hidden = !(ho.status === "ASSIGNED" && (mine(ho) || ui.isLead()));
    }

    function scrollDown() {
      var t = $("ws-transcript");
      t.scrollTop = t.scrollHeight;
    }

    /** A message of the conversation, once (the transcript and the feed may both bring it: same role, time, text). */
    function showMessage(ws, role, text, at, author) {
      var key = [role, at || "", text].join("|");
      if (ws.shown[key]) return;
      ws.shown[key] = true;
      var el = h(
        "article",
        { class: "message ws-message from-" + role, "data-role": role, "data-author": role === "person" ? author || null : null, "aria-label": whoLabel(role, author) + " wrote" },
        h("div", { class: "message-head" }, h("span", { class: "who" }, whoLabel(role, author)), at ? h("time", { datetime: at, class: "muted" }, SA.time(at)) : null),
        h("div", { class: "message-text" }, text)
      );
      $("ws-transcript").appendChild(el);
      scrollDown();
    }

    function toolsLine(calls) {
      var names = calls.map(function (c) {
        return c.name;
      });
      $("ws-transcript").appendChild(h("p", { class: "muted ws-tools" }, "The assistant used " + names.join(", ") + "."));
    }

    function newsLine(type, text) {
      $("ws-transcript").appendChild(h("p", { class: "message system ws-news", "data-event": type }, text));
      scrollDown();
    }

    function feedStatus(text) {
      $("ws-feed-status").textContent = text || "";
      $("ws-feed-status").hidden = !text;
    }

    function follow(ws) {
      if (ws !== st.ws || document.hidden || ws.following) return;
      ws.following = true;
      pollSoon(ws, 0);
    }

    function stopFollowing(ws) {
      ws.following = false;
      ws.gen++;
      if (ws.timer) clearTimeout(ws.timer);
      ws.timer = null;
      if (ws.request) ws.request.abort();
      ws.request = null;
      feedStatus(null);
    }

    function pollSoon(ws, ms) {
      if (ws.timer) clearTimeout(ws.timer);
      ws.timer = setTimeout(function () {
        ws.timer = null;
        poll(ws);
      }, ms);
    }

    function poll(ws) {
      if (ws !== st.ws || !ws.following || ws.request || !ui.token()) return;
      var gen = ws.gen;
      var ctrl = typeof AbortController === "function" ? new AbortController() : null;
      ws.request = ctrl || { abort: function () {} };
      var path = "/api/handoffs/" + enc(ws.id) + "/events?waitSeconds=" + FEED_WAIT_SECONDS + (ws.cursor ? "&after=" + enc(ws.cursor) : "");
      SA.api(path, { token: ui.token(), signal: ctrl ? ctrl.signal : undefined }).then(
        function (r) {
          if (gen !== ws.gen) return;
          ws.request = null;
          ws.failures = 0;
          feedStatus(null);
          var page = r.data || {};
          if (page.nextCursor) ws.cursor = page.nextCursor;
          (page.events || []).forEach(function (e) {
            applyEvent(ws, e);
          });
          if (ws.following && gen === ws.gen) pollSoon(ws, 0);
        },
        function (err) {
          if (gen !== ws.gen) return;
          ws.request = null;
          pollFailed(ws, err);
        }
      );
    }

    function pollFailed(ws, err) {
      if (err.status === 401) return ui.handleError(err);
      if (err.status === 404 || err.status === 403) {
        ws.following = false;
        feedStatus("Live updates stopped: this conversation is no longer yours to read.");
        refreshHandoff(ws);
        return;
      }
      ws.failures++;
      var wait = FEED_RETRY_MS[Math.min(ws.failures, FEED_RETRY_MS.length) - 1];
      var retryAfter = Number(err.retryAfter);
      if (err.status === 429 && retryAfter > 0) wait = Math.max(wait, retryAfter * 1000);
      feedStatus("Live updates paused (" + (err.code || "error") + "); retrying in " + Math.ceil(wait / 1000) + " s.");
      pollSoon(ws, wait);
    }

    function applyEvent(ws, e) {
      if (e.type === "message") showMessage(ws, e.role, e.text || "", e.at, e.author);
      else if (NEWS[e.type]) {
        newsLine(e.type, NEWS[e.type](e));
        refreshHandoff(ws);
      } else if (e.type === "approval.decided" || e.type === "refund.settled") {
        newsLine(e.type, "Refund of " + SA.money(e.amountCents) + " for order " + e.orderId + ": " + (e.status || "updated") + ".");
      }
    }

    /** The hand-off read again (its owner moved): the head, the reply box, and whether to go on following. */
    function refreshHandoff(ws) {
      SA.api("/api/handoffs/" + enc(ws.id), { token: ui.token() }).then(
        function (r) {
          if (ws !== st.ws || !r.data) return;
          replaced(r.data);
          render();
          if (!live(r.data)) stopFollowing(ws);
        },
        function (err) {
          if (ws !== st.ws) return;
          if (err.status === 404) {
            stopFollowing(ws);
            $("ws-reply").hidden = true;
            $("ws-actions").hidden = true;
          }
        }
      );
    }

    /** This page ended the hand-off (hand back, release, close): say so, stop following, read the list again. */
    function ended(ws, text) {
      stopFollowing(ws);
      newsLine("ended", text);
      load(false).catch(function () {});
    }

    // ------------------------------------------------------------ replying as a person

    function sendReply() {
      var ws = st.ws;
      if (!ws || ws.sending) return;
      var box = $("ws-message");
      var text = box.value.trim();
      if (!text) return box.focus();
      // One key per message: a retry of the same text (a lost answer, a 409) reuses it, so it is stored once.
      if (!ws.reply || ws.reply.text !== text) ws.reply = { text: text, key: newKey() };
      ws.sending = true;
      $("ws-send").disabled = true;
      $("ws-send-status").textContent = "Sending…";
      SA.showError($("ws-error"), null);
      attemptReply(ws, ws.reply, 0);
    }

    function replyDone(ws) {
      ws.sending = false;
      $("ws-send").disabled = false;
    }

    function attemptReply(ws, reply, tries) {
      SA.api("/api/handoffs/" + enc(ws.id) + "/messages", { method: "POST", token: ui.token(), idempotencyKey: reply.key, body: { message: reply.text } }).then(
        function (r) {
          if (ws !== st.ws) return;
          replyDone(ws);
          var m = r.data || {};
          showMessage(ws, "person", m.text || reply.text, m.createdAt, m.author);
          if (ws.reply === reply) ws.reply = null;
          if ($("ws-message").value.trim() === reply.text) $("ws-message").value = "";
          $("ws-send-status").textContent = "Sent.";
          $("ws-message").focus();
        },
        function (err) {
          if (ws !== st.ws) return;
          if ((err.status === 409 || err.status === 0) && tries < REPLY_RETRIES) {
            // The assistant may be finishing a turn (its lease): try again in a moment, if the hand-off is still ours.
            $("ws-send-status").textContent = err.status === 409 ? "The assistant is finishing a turn; sending again in a moment…" : "No answer; sending again…";
            return stillMine(ws).then(function (ok) {
              if (ok) setTimeout(function () {
                if (ws === st.ws) attemptReply(ws, reply, tries + 1);
              }, REPLY_RETRY_MS);
              else failedReply(ws, err);
            });
          }
          failedReply(ws, err);
        }
      );
    }

    function stillMine(ws) {
      return SA.api("/api/handoffs/" + enc(ws.id), { token: ui.token() }).then(
        function (r) {
          if (r.data && ws === st.ws) replaced(r.data);
          return !!(r.data && mine(r.data));
        },
        function (err) {
          return err.status === 0; // the network again: try again
        }
      );
    }

    function failedReply(ws, err) {
      replyDone(ws);
      $("ws-send-status").textContent = "Not sent.";
      if (err.status === 422) ws.reply = null; // that key went with another text: a new one next time
      if (err.status === 401) return ui.handleError(err);
      SA.showError($("ws-error"), err, "The reply was not sent (the text is kept; Send tries again)");
    }

    // ------------------------------------------------------------ hand back, release, close (from the workspace)

    function wsAct(verb, body, pendingText, doneText) {
      var ws = st.ws;
      if (!ws) return;
      SA.showError($("ws-error"), null);
      $("ws-send-status").textContent = pendingText;
      act(ws.ho, verb, body, pendingText).then(function (now) {
        if (ws !== st.ws) return;
        $("ws-send-status").textContent = "";
        if (!now) return;
        ended(ws, doneText);
        announce(now, "Customer " + now.customerId + ": " + doneText);
      });
    }

    function bind() {
      $("ws-reply").addEventListener("submit", function (e) {
        e.preventDefault();
        sendReply();
      });
      $("ws-message").addEventListener("keydown", function (e) {
        if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
          e.preventDefault();
          sendReply();
        }
      });
      $("ws-return").addEventListener("click", function () {
        var note = $("ws-return-note").value.trim();
        wsAct("return", note ? { note: note } : {}, "Handing back…", "You handed the conversation back to the assistant.");
      });
      $("ws-release").addEventListener("click", function () {
        wsAct("release", null, "Releasing…", "You released the conversation to the queue.");
      });
      $("ws-close").addEventListener("click", function () {
        var note = $("ws-close-note").value.trim();
        wsAct("close", note ? { note: note } : null, "Closing…", "You closed the hand-off.");
      });
      $("ws-leave").addEventListener("click", closeWorkspace);
      // A hidden or left page stops following; shown again, it goes on from its cursor.
      document.addEventListener("visibilitychange", function () {
        var ws = st.ws;
        if (!ws) return;
        if (document.hidden) {
          if (ws.following) {
            stopFollowing(ws);
            ws.resume = true;
          }
        } else if (ws.resume) {
          ws.resume = false;
          follow(ws);
        }
      });
      window.addEventListener("pagehide", function () {
        if (st.ws) stopFollowing(st.ws);
      });
    }

    bind();
    return {
      load: load,
      reset: reset,
      pages: function () {
        return st.pages;
      },
      stop: function () {
        closeWorkspace();
        st.busy = {};
        st.notes = {};
        reset();
      },
    };
  }

  window.SAInbox = SAInbox;
})();
