/* The console: approvals (approve, reject, retry, release) and the audit trail for support leads; the inbox of
 * hand-offs (web/inbox.js) for leads and support staff alike. */
(function () {
  "use strict";
  var SA = window.SA;
  var h = SA.h;
  var $ = SA.$;

  var REFRESH_MS = 5000;
  var POLL_MS = 1000;
  var POLL_LIMIT_MS = 120000;
  // APPROVED: RefundFlow runs; SETTLING: the payment provider has the refund and has not confirmed it.
  var RUNNING = { APPROVED: 1, SETTLING: 1 };
  var RUNNING_TEXT = { APPROVED: "refund running…", SETTLING: "at the payment provider, not confirmed yet…" };
  var OUTCOMES_SHOWN = 6;

  var state = {
    token: null,
    label: null,
    approvals: [], // the loaded pages, newest first
    approvalsNext: null,
    approvalPages: 0,
    approvalsLoading: false,
    pinned: {}, // approvalId → approval decided in this session (kept visible with its outcome)
    pinnedAt: {}, // approvalId → clock tick of its last pin
    clock: 0, // ticks on each request start and each pin, to tell stale pages from fresh ones
    approvalsFetchedAt: 0,
    busy: {}, // approvalId or handoffId → true while an action runs
    notes: {}, // approvalId or handoffId → {text, error}
    role: null, // the token's role claim, for what the page shows (the API decides what is allowed)
    sub: null,
    auditNext: null,
    auditQuery: null,
    refreshTimer: null,
    ageTimer: null,
  };

  // ---------------------------------------------------------------- sign in

  function leadLabel(token, fallback) {
    if (fallback) return fallback;
    var c = SA.claims(token) || {};
    return c.name && c.sub ? c.name + " (" + c.sub + ")" : c.name || c.sub || "lead";
  }

  function isLead() {
    return state.role !== "support_staff";
  }

  function renderDevLeads(tokens) {
    var box = $("dev-leads");
    SA.clear(box);
    var leads = (tokens && tokens.leads) || [];
    var staff = (tokens && tokens.staff) || [];
    function button(p, key, what) {
      var label = p.name ? p.name + " (" + p.sub + ")" : p.sub;
      box.appendChild(
        h(
          "button",
          {
            type: "button",
            id: "signin-" + key,
            "data-testid": "signin-" + key,
            class: "signin-button",
            onclick: function () {
              signIn(p.token, label);
            },
          },
          "Sign in as " + label + ", " + what
        )
      );
    }
    leads.forEach(function (l) {
      // sub "lead-1" → #signin-lead-1 (a sub without the prefix gets it: "ana" → #signin-lead-ana)
      button(l, /^lead-/.test(l.sub) ? l.sub : "lead-" + l.sub, "support lead");
    });
    staff.forEach(function (p) {
      button(p, "staff-" + p.sub, "support staff"); // agent-1 → #signin-staff-agent-1
    });
    $("dev-signin").hidden = leads.length + staff.length === 0;
  }

  /** A lead sees everything; support staff the inbox only (approvals and the audit trail answer them 403). */
  function applyRole() {
    var lead = isLead();
    Array.prototype.forEach.call(document.querySelectorAll(".lead-only"), function (el) {
      el.hidden = !lead;
      if (el.tagName === "OPTION") el.disabled = !lead;
    });
    $("role-note").hidden = lead;
    var f = $("handoff-filter");
    if (f.options[f.selectedIndex] && f.options[f.selectedIndex].disabled) f.value = "OPEN";
  }

  var PAGE = {
    key: "lead",
    refuse: function (c) {
      return c.role === "customer"
        ? "This is a customer token; the lead console needs a support_lead or support_staff token (customers use the chat page)."
        : null;
    },
    check: function (token, label) {
      var c = SA.claims(token) || {};
      state.token = token;
      state.label = label;
      state.role = c.role || null;
      state.sub = c.sub || null;
      applyRole();
      // The first call checks the token: the approvals for a lead, the inbox for support staff.
      return isLead() ? loadApprovals(false) : inbox.load(false);
    },
    opened: function () {
      if (isLead()) {
        inbox.load(false).catch(function (err) {
          handleError(err, "Could not list hand-offs");
        });
      }
      startTimers();
      $(isLead() ? "approvals-title" : "handoffs-title").focus();
    },
    failed: function () {
      state.token = null;
    },
  };

  function signIn(token, label) {
    SA.signIn(PAGE, token, leadLabel(String(token || "").trim(), label));
  }

  function signOut(err) {
    stopTimers();
    inbox.stop();
    state.token = null;
    state.role = state.sub = null;
    state.pinned = {};
    state.busy = {};
    state.notes = {};
    SA.clear($("approvals"));
    SA.clear($("audit"));
    SA.clear($("outcome"));
    $("audit-summary").textContent = "";
    SA.signedOut(PAGE, err);
  }

  function handleError(err, context) {
    if (err && err.status === 401 && state.token) {
      signOut(err);
      return;
    }
    SA.showError($("lead-error"), err, context);
  }

  // ----------------------------------------------------------------- timers

  function startTimers() {
    stopTimers();
    state.refreshTimer = setInterval(function () {
      if (document.hidden || !state.token) return;
      if (!isLead() || $("auto-refresh").checked) {
        if (inbox.pages() <= 1) inbox.load(false).catch(function () {});
      }
      if (!isLead() || !$("auto-refresh").checked) return;
      if (state.approvalPages <= 1) loadApprovals(false).catch(function (err) {
        handleError(err, "Auto-refresh failed");
      });
    }, REFRESH_MS);
    state.ageTimer = setInterval(updateAges, 15000);
  }

  function stopTimers() {
    if (state.refreshTimer) clearInterval(state.refreshTimer);
    if (state.ageTimer) clearInterval(state.ageTimer);
    state.refreshTimer = state.ageTimer = null;
  }

  function updateAges() {
    var els = document.querySelectorAll("time.age");
    for (var i = 0; i < els.length; i++) els[i].textContent = SA.age(els[i].getAttribute("datetime"));
  }

  // -------------------------------------------------------------- approvals

  function loadApprovals(append) {
    if (state.approvalsLoading) return Promise.resolve();
    state.approvalsLoading = true;
    var status = $("status-filter").value;
    var params = [];
    if (status) params.push("status=" + encodeURIComponent(status));
    if (append && state.approvalsNext) params.push("nextToken=" + encodeURIComponent(state.approvalsNext));
    var path = "/api/approvals" + (params.length ? "?" + params.join("&") : "");
    var started = ++state.clock;
    return SA.api(path, { token: state.token }).then(
      function (r) {
        state.approvalsLoading = false;
        state.approvalsFetchedAt = started;
        if (status !== $("status-filter").value) return; // the filter changed meanwhile
        var data = r.data || {};
        var list = data.approvals || [];
        state.approvals = append ? state.approvals.concat(list) : list;
        state.approvalPages = append ? state.approvalPages + 1 : 1;
        state.approvalsNext = data.nextToken || null;
        renderApprovals();
        $("approvals-updated").textContent = "Updated " + new Date().toLocaleTimeString() + ".";
        $("approvals-paused").hidden = state.approvalPages <= 1;
        SA.showError($("lead-error"), null);
      },
      function (err) {
        state.approvalsLoading = false;
        throw err;
      }
    );
  }

  function visibleApprovals() {
    var seen = {};
    var out = state.approvals.map(function (a) {
      var id = a.approvalId;
      seen[id] = true;
      if (!state.pinned[id]) return a;
      // A page fetched before this session's own decision is stale for that row.
      if (state.busy[id] || state.approvalsFetchedAt <= (state.pinnedAt[id] || 0)) return state.pinned[id];
      state.pinned[id] = a;
      return a;
    });
    Object.keys(state.pinned).forEach(function (id) {
      if (!seen[id]) out.push(state.pinned[id]);
    });
    out.sort(function (x, y) {
      return String(y.createdAt || "").localeCompare(String(x.createdAt || ""));
    });
    return out;
  }

  function renderApprovals() {
    var tbody = $("approvals");
    var list = visibleApprovals();
    var existing = {};
    Array.prototype.forEach.call(tbody.querySelectorAll("tr.approval-row"), function (tr) {
      existing[tr.getAttribute("data-approval-id")] = tr;
    });
    var keep = {};
    list.forEach(function (a, i) {
      keep[a.approvalId] = true;
      var sig = approvalSignature(a);
      var row = existing[a.approvalId];
      if (!row) {
        row = h("tr", { class: "approval-row", "data-approval-id": a.approvalId });
        fillApprovalRow(row, a);
        row.setAttribute("data-sig", sig);
      } else if (row.getAttribute("data-sig") !== sig) {
        fillApprovalRow(row, a);
        row.setAttribute("data-sig", sig);
      }
      if (tbody.children[i] !== row) tbody.insertBefore(row, tbody.children[i] || null);
    });
    Object.keys(existing).forEach(function (id) {
      if (!keep[id]) existing[id].remove();
    });
    updateAges();
    $("approvals-empty").hidden = list.length > 0;
    $("approvals-more").hidden = !state.approvalsNext;
    $("clear-decided").hidden = Object.keys(state.pinned).length === 0;
  }

  function approvalSignature(a) {
    return JSON.stringify([a.status, a.decidedBy, a.decidedAt, a.reason, a.refund || null, !!state.busy[a.approvalId], state.notes[a.approvalId] || null, !!state.pinned[a.approvalId]]);
  }

  function td(label, cls) {
    var inner = h("div", { class: "cell" });
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c !== null && c !== undefined) inner.appendChild(c.nodeType ? c : document.createTextNode(String(c)));
    }
    return h("td", { "data-label": label, class: cls || null }, inner);
  }

  function ageCell(iso) {
    return h("time", { class: "age", datetime: iso || "", title: SA.time(iso) }, SA.age(iso));
  }

  function statusBadge(status, cls) {
    return h("span", { class: cls + " status status-" + String(status || "").toLowerCase() }, status || "?");
  }

  function auditButton(conversationId) {
    if (!conversationId) return h("span", { class: "muted" }, "—");
    if (!isLead()) return h("code", { "data-conversation-id": conversationId }, conversationId); // no audit for staff
    return h(
      "button",
      {
        type: "button",
        class: "link open-audit",
        "data-conversation-id": conversationId,
        title: "Show the audit trail of " + conversationId,
        "aria-label": "Show the audit trail of conversation " + conversationId,
        onclick: function () {
          openAudit(conversationId);
        },
      },
      h("code", null, conversationId)
    );
  }

  function fillApprovalRow(row, a) {
    var id = a.approvalId;
    var amount = SA.money(a.amountCents, a.currency);
    var what = "refund of " + amount + " for order " + a.orderId;
    var busy = !!state.busy[id];
    var note = state.notes[id];
    row.setAttribute("data-status", a.status || "");
    row.classList.toggle("decided", !!state.pinned[id]);
    row.setAttribute("aria-busy", busy ? "true" : "false");

    var actions = h("td", { "data-label": "Actions", class: "actions" });
    if (a.status === "PENDING") {
      var reasonId = "reject-reason-" + id;
      var oldInput = row.querySelector("input.reject-reason");
      var input = oldInput || h("input", { type: "text", id: reasonId, class: "reject-reason", maxlength: "500", placeholder: "Reason (optional)" });
      input.setAttribute("aria-label", "Reason for rejecting the " + what + " (optional)");
      input.disabled = busy;
      actions.appendChild(
        h(
          "button",
          {
            type: "button",
            class: "approve",
            "data-approval-id": id,
            "aria-label": "Approve " + what,
            disabled: busy,
            onclick: function () {
              approve(a);
            },
          },
          "Approve"
        )
      );
      actions.appendChild(input);
      actions.appendChild(
        h(
          "button",
          {
            type: "button",
            class: "reject danger",
            "data-approval-id": id,
            "aria-label": "Reject " + what,
            disabled: busy,
            onclick: function () {
              reject(a, input.value.trim());
            },
          },
          "Reject"
        )
      );
    } else if (a.status === "FAILED") {
      actions.appendChild(
        h(
          "button",
          { type: "button", class: "retry", "data-approval-id": id, "aria-label": "Retry " + what, disabled: busy, onclick: function () { retry(a); } },
          "Retry"
        )
      );
      actions.appendChild(
        h(
          "button",
          { type: "button", class: "release secondary", "data-approval-id": id, "aria-label": "Release the reservation of the " + what, disabled: busy, onclick: function () { release(a); } },
          "Release"
        )
      );
    } else {
      actions.appendChild(h("span", { class: "muted" }, RUNNING_TEXT[a.status] || "—"));
    }

    var statusCell = td(
      "Status",
      "status-cell",
      statusBadge(a.status, "approval-status"),
      refundId(a),
      providerNote(a),
      a.decidedBy ? h("span", { class: "muted decided-by" }, " by " + a.decidedBy + (a.decidedAt ? ", " + SA.age(a.decidedAt) : "")) : null,
      note ? h("p", { class: "row-note" + (note.error ? " error-text" : ""), role: note.error ? "alert" : null }, note.text) : null
    );

    SA.clear(row);
    row.appendChild(td("Age", "age-cell", ageCell(a.createdAt)));
    row.appendChild(td("Order", "approval-order", String(a.orderId)));
    row.appendChild(td("Customer", "approval-customer", String(a.customerId)));
    row.appendChild(td("Amount", "approval-amount num", amount));
    row.appendChild(td("Reason", "approval-reason", a.reason || "—"));
    row.appendChild(statusCell);
    row.appendChild(td("Conversation", "approval-conversation", auditButton(a.conversationId)));
    row.appendChild(actions);
  }

  /** The payment provider's refund id (re_…) once it has one: what to look up in its dashboard. */
  function refundId(a) {
    var id = a.refund && a.refund.refundId;
    if (!id) return null;
    return h("code", { class: "refund-id", title: "Payment provider (" + a.refund.provider + ") refund id, " + a.refund.status }, id);
  }

  /** What the provider said when it did not (or no longer) make the refund: its reason, and whether it failed late. */
  function providerNote(a) {
    var r = a.refund;
    if (!r || r.status !== "FAILED") return null;
    var text = (r.failedLateAt ? "failed at the provider after it had succeeded" : "refused by the provider") + (r.failureReason ? ": " + r.failureReason : "");
    return h("span", { class: "provider-note error-text" }, " " + text);
  }

  function setNote(id, text, error) {
    if (text) state.notes[id] = { text: text, error: !!error };
    else delete state.notes[id];
  }

  function pin(a) {
    state.pinned[a.approvalId] = a;
    state.pinnedAt[a.approvalId] = ++state.clock;
    // Also update the loaded copy, so the row shows the outcome at once.
    state.approvals = state.approvals.map(function (x) {
      return x.approvalId === a.approvalId ? a : x;
    });
  }

  function announce(a, text) {
    var box = $("outcome");
    var item = h(
      "p",
      { class: "decision-outcome", "data-approval-id": a.approvalId, "data-status": a.status },
      h("strong", null, "Order " + a.orderId + ": "),
      statusBadge(a.status, "outcome-status"),
      " " + text
    );
    box.insertBefore(item, box.firstChild);
    while (box.children.length > OUTCOMES_SHOWN) box.removeChild(box.lastChild);
  }

  /** Runs one decision: POST, then (on 202, APPROVED or SETTLING) polls until the refund finished. */
  function decide(a, verb, body, pendingText) {
    var id = a.approvalId;
    if (state.busy[id]) return;
    state.busy[id] = true;
    setNote(id, pendingText, false);
    renderApprovals();
    var opts = { method: "POST", token: state.token };
    if (body) opts.body = body;
    SA.api("/api/approvals/" + encodeURIComponent(id) + "/" + verb, opts)
      .then(function (r) {
        var result = r.data && r.data.approvalId ? r.data : Object.assign({}, a, { status: verb === "reject" ? "REJECTED" : a.status });
        pin(result);
        if (r.status === 202 || RUNNING[result.status]) {
          setNote(id, "Refund running…", false);
          renderApprovals();
          return poll(id, Date.now());
        }
        return result;
      })
      .then(
        function (final) {
          delete state.busy[id];
          if (final) {
            pin(final);
            var refunded = SA.money(final.amountCents, final.currency) + " refunded" + (final.refund && final.refund.refundId ? " (" + final.refund.refundId + ")." : ".");
            var text = final.status === "REFUNDED" ? refunded : final.status === "FAILED" ? "the refund failed — retry or release it." : final.status === "REJECTED" ? "rejected; the reservation is released." : final.status === "RELEASED" ? "reservation released." : final.status === "SETTLING" ? "the payment provider has the refund and has not confirmed it yet; refresh later." : RUNNING[final.status] ? "still running; refresh later." : "";
            setNote(id, RUNNING[final.status] ? (final.status === "SETTLING" ? "Not confirmed by the payment provider after " : "Still running after ") + POLL_LIMIT_MS / 1000 + " s — refresh later." : null, false);
            announce(final, text);
          }
          renderApprovals();
        },
        function (err) {
          delete state.busy[id];
          setNote(id, (err.message || "failed") + " (" + err.code + ")", true);
          renderApprovals();
          handleError(err, "Could not " + verb + " the refund for order " + a.orderId);
          if (err.status === 409 || err.status === 404) loadApprovals(false).catch(function () {});
        }
      );
  }

  function poll(id, started) {
    return new Promise(function (resolve) {
      setTimeout(resolve, POLL_MS);
    })
      .then(function () {
        return SA.api("/api/approvals/" + encodeURIComponent(id), { token: state.token });
      })
      .then(function (r) {
        var a = r.data;
        if (a && !RUNNING[a.status]) return a;
        if (a) pin(a);
        if (Date.now() - started > POLL_LIMIT_MS) return a;
        return poll(id, started);
      });
  }

  function approve(a) {
    decide(a, "approve", null, "Approving…");
  }

  function reject(a, reason) {
    decide(a, "reject", reason ? { reason: reason } : null, "Rejecting…");
  }

  function retry(a) {
    decide(a, "retry", null, "Retrying…");
  }

  function release(a) {
    decide(a, "release", null, "Releasing…");
  }

  // ------------------------------------------------------------------ audit

  function openAudit(conversationId) {
    $("audit-by").value = "conversationId";
    $("audit-key").value = conversationId;
    syncAuditPlaceholder();
    loadAudit(false);
    var title = $("audit-title");
    if (title.scrollIntoView) title.scrollIntoView({ block: "start" });
    title.focus({ preventScroll: true });
  }

  function syncAuditPlaceholder() {
    var byCustomer = $("audit-by").value === "customerId";
    $("audit-key").placeholder = byCustomer ? "7" : "conv_01…";
    $("audit-key").setAttribute("inputmode", byCustomer ? "numeric" : "text");
  }

  function loadAudit(append) {
    var by = $("audit-by").value;
    var key = $("audit-key").value.trim();
    if (!key) {
      $("audit-key").focus();
      return;
    }
    var query = append ? state.auditQuery : { by: by, key: key };
    if (!query) return;
    var q = "?" + query.by + "=" + encodeURIComponent(query.key) + (append && state.auditNext ? "&nextToken=" + encodeURIComponent(state.auditNext) : "");
    $("audit-summary").textContent = "Loading…";
    SA.api("/api/audit" + q, { token: state.token }).then(
      function (r) {
        var data = r.data || {};
        var records = data.records || [];
        state.auditQuery = query;
        state.auditNext = data.nextToken || null;
        var tbody = $("audit");
        // A customer's trail mixes conversations: each row says which, and opens that conversation's trail.
        var byCustomer = query.by === "customerId";
        $("audit-conversation-head").hidden = !byCustomer;
        if (!append) SA.clear(tbody);
        records.forEach(function (rec) {
          tbody.appendChild(auditRow(rec, byCustomer));
        });
        var n = tbody.children.length;
        $("audit-summary").textContent = n + (n === 1 ? " record" : " records") + " for " + (query.by === "customerId" ? "customer " : "") + query.key + " (oldest first).";
        $("audit-more").hidden = !state.auditNext;
        SA.showError($("lead-error"), null);
        if (!append) verifyTrail(query);
      },
      function (err) {
        $("audit-summary").textContent = "";
        handleError(err, "Could not load the audit trail");
      }
    );
  }

  // The hash-chain check beside the trail (GET /api/audit/verify): a conversation's trail only.
  function verifyLine() {
    var line = $("audit-verify");
    if (!line) {
      line = h("p", { id: "audit-verify", class: "small-text", "aria-live": "polite", "data-testid": "audit-verify" });
      $("audit-summary").insertAdjacentElement("afterend", line);
    }
    return line;
  }

  function verifyTrail(query) {
    var line = verifyLine();
    line.className = "small-text";
    if (query.by !== "conversationId") {
      line.textContent = "";
      return;
    }
    line.textContent = "Checking the hash chain…";
    SA.api("/api/audit/verify?conversationId=" + encodeURIComponent(query.key), { token: state.token }).then(
      function (r) {
        var v = r.data || {};
        var streams = v.streams || [];
        if (v.status === "ok") {
          line.className = "small-text status-ok";
          var seal = v.sealedAt
            ? " Sealed in S3 (Object Lock) at " + v.sealedAt + ", through row " + v.sealedThrough + "."
            : " Not sealed yet.";
          line.textContent = "Chain verified: " + streams.length + (streams.length === 1 ? " stream" : " streams") + ", every row intact." + seal;
          return;
        }
        var at = v.firstBreak || {};
        line.className = "small-text error-text";
        line.textContent = "Chain BROKEN: " + (at.kind || "?") + " in " + (at.stream || v.stream) + (at.eventId ? " at " + at.eventId : "") + ". Follow docs/OPERATIONS.md.";
      },
      function () {
        line.className = "small-text muted";
        line.textContent = "The hash chain could not be checked.";
      }
    );
  }

  function jsonCell(label, cls, value) {
    if (value === null || value === undefined || value === "") return td(label, cls, h("span", { class: "muted" }, "—"));
    var short = SA.shortJson(value, 60);
    var full = SA.json(value);
    if (SA.shortJson(value, Infinity) === short && short.length <= 60) return td(label, cls, h("code", null, short));
    return td(label, cls, h("details", { class: "json-cell" }, h("summary", null, h("code", null, short)), h("pre", null, full)));
  }

  function auditRow(rec, byCustomer) {
    var outcome = String(rec.outcome || "");
    var bad = /error|fail|denied|reject|not_/i.test(outcome);
    var conversation = td("Conversation", "audit-conversation", auditButton(rec.conversationId));
    conversation.hidden = !byCustomer;
    return h(
      "tr",
      { class: "audit-row" + (bad ? " is-error" : ""), "data-event-id": rec.eventId || null, "data-action": rec.action || null, "data-tool": rec.tool || null },
      td("Time", "audit-time", h("time", { datetime: rec.createdAt || "", title: rec.createdAt || "" }, SA.time(rec.createdAt))),
      conversation,
      td("Actor", "audit-actor", rec.actor || "—"),
      td("Action", "audit-action", rec.action || "—"),
      td("Tool", "audit-tool", rec.tool || "—"),
      td("Outcome", "audit-outcome", h("span", { class: "status" + (bad ? " status-failed" : " status-ok") }, outcome || "—")),
      jsonCell("Input", "audit-input", rec.input),
      jsonCell("Output", "audit-output", rec.output)
    );
  }

  // ------------------------------------------------------------------ inbox

  var inbox = window.SAInbox({
    token: function () {
      return state.token;
    },
    sub: function () {
      return state.sub;
    },
    isLead: isLead,
    handleError: handleError,
    td: td,
    ageCell: ageCell,
    statusBadge: statusBadge,
    auditButton: auditButton,
    updateAges: updateAges,
  });

  // ------------------------------------------------------------------- init

  function init() {
    $("token-form").addEventListener("submit", function (e) {
      e.preventDefault();
      signIn($("token-input").value, null);
    });
    $("signout").addEventListener("click", function () {
      signOut(null);
    });
    $("refresh").addEventListener("click", function () {
      loadApprovals(false).catch(function (err) {
        handleError(err, "Could not list approvals");
      });
      inbox.load(false).catch(function () {});
    });
    $("status-filter").addEventListener("change", function () {
      state.pinned = {};
      state.approvals = [];
      state.approvalsNext = null;
      state.approvalsLoading = false;
      SA.clear($("approvals"));
      loadApprovals(false).catch(function (err) {
        handleError(err, "Could not list approvals");
      });
    });
    $("approvals-more").addEventListener("click", function () {
      loadApprovals(true).catch(function (err) {
        handleError(err, "Could not list approvals");
      });
    });
    $("clear-decided").addEventListener("click", function () {
      state.pinned = {};
      renderApprovals();
    });
    $("handoff-filter").addEventListener("change", function () {
      inbox.reset();
      inbox.load(false).catch(function (err) {
        handleError(err, "Could not list hand-offs");
      });
    });
    $("refresh-handoffs").addEventListener("click", function () {
      inbox.load(false).catch(function (err) {
        handleError(err, "Could not list hand-offs");
      });
    });
    $("handoffs-more").addEventListener("click", function () {
      inbox.load(true).catch(function (err) {
        handleError(err, "Could not list hand-offs");
      });
    });
    $("audit-by").addEventListener("change", syncAuditPlaceholder);
    $("audit-form").addEventListener("submit", function (e) {
      e.preventDefault();
      loadAudit(false);
    });
    $("audit-more").addEventListener("click", function () {
      loadAudit(true);
    });

    SA.devTokens().then(function (tokens) {
      renderDevLeads(tokens);
      SA.detectSimulated(tokens).then(SA.setBanner);
      var saved = SA.store.get("leadToken");
      if (saved && !state.token) signIn(saved, SA.store.get("leadLabel"));
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
