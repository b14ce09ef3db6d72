/*
 * Shared helpers for the chat page and the lead console: API calls, token
 * handling, formatting. Plain script, no build step; exposes window.SA.
 */
(function () {
  "use strict";

  var base = String(window.SUPPORT_AGENT_API_BASE || "").replace(/\/+$/, "");

  /** An error answered by the API ({"error": {"code", "message"}}) or the network. */
  function ApiError(status, code, message, retryAfter) {
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.message = message;
    this.retryAfter = retryAfter;
  }
  ApiError.prototype = Object.create(Error.prototype);
  ApiError.prototype.constructor = ApiError;

  /**
   * Call the API. Resolves {status, data}; rejects with ApiError.
   * opts: {method, body (object, sent as JSON), token, idempotencyKey, prefer (the Prefer header, e.g.
   * "respond-async"), signal (an AbortSignal: a cancelled call rejects with code "aborted")}
   */
  function api(path, opts) {
    opts = opts || {};
    var headers = { Accept: "application/json" };
    if (opts.token) headers.Authorization = "Bearer " + opts.token;
    if (opts.idempotencyKey) headers["Idempotency-Key"] = opts.idempotencyKey;
    if (opts.prefer) headers.Prefer = opts.prefer;
    var init = { method: opts.method || "GET", headers: headers, cache: "no-store" };
    if (opts.signal) init.signal = opts.signal;
    if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    return fetch(base + path, init).then(
      function (res) {
        return res.text().then(function (text) {
          var data = null;
          if (text) {
            try {
              data = JSON.parse(text);
            } catch (e) {
              data = null;
            }
          }
          if (res.ok) return { status: res.status, data: data };
          var err = (data && data.error) || {};
          var retry = res.headers.get("Retry-After");
          throw new ApiError(
            res.status,
            err.code || "http_" + res.status,
            err.message || res.statusText || "Request failed",
            retry
          );
        });
      },
      function (e) {
        if (e && e.name === "AbortError") throw new ApiError(0, "aborted", "The request was cancelled", null);
        throw new ApiError(0, "network_error", "Could not reach the API" + (base ? " at " + base : "") + " (" + (e && e.message ? e.message : e) + ")", null);
      }
    );
  }

  /** Dev tokens (local stack only). Resolves null when the API has none. */
  function devTokens() {
    return api("/api/dev/tokens").then(
      function (r) {
        return r.data && (r.data.customers || r.data.leads) ? r.data : null;
      },
      function () {
        return null;
      }
    );
  }

  function health() {
    return api("/api/health").then(
      function (r) {
        return r.data || null;
      },
      function () {
        return null;
      }
    );
  }

  /** Shows the simulated-model banner when the dev tokens or health say so. */
  function detectSimulated(tokens) {
    if (tokens && tokens.simulatedModel === true) return Promise.resolve(true);
    return health().then(function (h) {
      return !!(h && h.simulatedModel === true);
    });
  }

  /** Decodes a JWT's payload for display only (never trusted: the API verifies it). */
  function claims(token) {
    try {
      var part = String(token).split(".")[1];
      part = part.replace(/-/g, "+").replace(/_/g, "/");
      while (part.length % 4) part += "=";
      var bin = atob(part);
      var bytes = new Uint8Array(bin.length);
      for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      return JSON.parse(new TextDecoder().decode(bytes));
    } catch (e) {
      return null;
    }
  }

  var store = {
    get: function (key) {
      try {
        return window.sessionStorage.getItem("supportAgent." + key);
      } catch (e) {
        return null;
      }
    },
    set: function (key, value) {
      try {
        if (value === null || value === undefined) window.sessionStorage.removeItem("supportAgent." + key);
        else window.sessionStorage.setItem("supportAgent." + key, value);
      } catch (e) {
        /* storage unavailable: the session simply is not remembered */
      }
    },
  };

  var ZERO_DECIMALS = { BIF: 1, CLP: 1, DJF: 1, GNF: 1, ISK: 1, JPY: 1, KMF: 1, KRW: 1, PYG: 1, RWF: 1, UGX: 1, VND: 1, VUV: 1, XAF: 1, XOF: 1, XPF: 1 };
  var THREE_DECIMALS = { BHD: 1, IQD: 1, JOD: 1, KWD: 1, LYD: 1, OMR: 1, TND: 1 };

  /** 18900, "USD" → "189.00 USD" (integer arithmetic, no floating point). */
  function money(cents, currency) {
    if (cents === null || cents === undefined || cents === "") return "—";
    var n = Number(cents);
    if (!isFinite(n)) return String(cents);
    var cur = currency ? String(currency).toUpperCase() : "";
    var digits = ZERO_DECIMALS[cur] ? 0 : THREE_DECIMALS[cur] ? 3 : 2;
    var neg = n < 0;
    var abs = Math.abs(Math.round(n));
    var div = Math.pow(10, digits);
    var whole = Math.floor(abs / div);
    var frac = String(abs % div);
    while (frac.length < digits) frac = "0" + frac;
    var text = (neg ? "-" : "") + whole + (digits ? "." + frac : "");
    return cur ? text + " " + cur : text;
  }

  function parseTime(iso) {
    if (!iso) return null;
    var t = Date.parse(iso);
    return isNaN(t) ? null : new Date(t);
  }

  /** "just now", "3 min ago", "2 h ago", "4 days ago". */
  function age(iso, now) {
    var d = parseTime(iso);
    if (!d) return "—";
    var s = Math.max(0, Math.round(((now || Date.now()) - d.getTime()) / 1000));
    if (s < 45) return "just now";
    var m = Math.round(s / 60);
    if (m < 60) return m + " min ago";
    var h = Math.round(m / 60);
    if (h < 48) return h + " h ago";
    return Math.round(h / 24) + " days ago";
  }

  function time(iso) {
    var d = parseTime(iso);
    if (!d) return iso || "—";
    return d.toLocaleString();
  }

  /** Pretty JSON for display. */
  function json(value) {
    if (value === undefined) return "";
    if (typeof value === "string") return value;
    try {
      return JSON.stringify(value, null, 2);
    } catch (e) {
      return String(value);
    }
  }

  /** One-line JSON, cut to max characters. */
  function shortJson(value, max) {
    if (value === undefined || value === null) return "";
    var text;
    try {
      text = typeof value === "string" ? value : JSON.stringify(value);
    } catch (e) {
      text = String(value);
    }
    max = max || 80;
    return text.length > max ? text.slice(0, max - 1) + "…" : text;
  }

  /**
   * Element builder: h("div", {class: "x", "data-id": 1, onclick: fn}, child, "text", [more]).
   * Strings become text nodes (never HTML).
   */
  function h(tag, attrs) {
    var el = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v === null || v === undefined || v === false) return;
        if (k.slice(0, 2) === "on" && typeof v === "function") el.addEventListener(k.slice(2), v);
        else if (k === "class") el.className = v;
        else if (k === "text") el.textContent = v;
        else if (k in el && typeof v !== "string" && k !== "style") el[k] = v;
        else el.setAttribute(k, v === true ? "" : String(v));
      });
    }
    for (var i = 2; i < arguments.length; i++) append(el, arguments[i]);
    return el;
  }

  function append(el, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) {
      child.forEach(function (c) {
        append(el, c);
      });
    } else if (typeof child === "object" && child.nodeType) {
      el.appendChild(child);
    } else {
      el.appendChild(document.createTextNode(String(child)));
    }
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
  }

  function $(id) {
    return document.getElementById(id);
  }

  /** Renders an ApiError (message + code + status) into an alert box. */
  function showError(box, err, context) {
    clear(box);
    if (!err) {
      box.hidden = true;
      return;
    }
    var code = err.code || "error";
    var status = err.status ? " · HTTP " + err.status : "";
    box.appendChild(
      h(
        "p",
        null,
        context ? h("strong", null, context + ": ") : null,
        h("span", { class: "error-message" }, err.message || String(err)),
        " ",
        h("code", { class: "error-code" }, code + status)
      )
    );
    if (err.retryAfter) box.appendChild(h("p", { class: "error-retry" }, "Try again in " + err.retryAfter + " s."));
    box.hidden = false;
  }

  /**
   * Sign-in as both pages do it. A token of the wrong role is refused before any call; otherwise the
   * page's own first call checks it, and only a token that worked is remembered and opens the app.
   * page: {key ("customer"|"lead"), refuse(claims) → message or null, check(token, label) → Promise,
   *        opened(), failed()}
   */
  function signIn(page, token, label) {
    token = String(token || "").trim();
    if (!token) return;
    var box = $("signin-error");
    showError(box, null);
    var refusal = page.refuse(claims(token) || {});
    if (refusal) {
      showError(box, { code: "forbidden", message: refusal });
      return;
    }
    page.check(token, label).then(
      function () {
        store.set(page.key + "Token", token);
        store.set(page.key + "Label", label);
        $("whoami-name").textContent = label;
        $("whoami").hidden = false;
        $("signin").hidden = true;
        $("app").hidden = false;
        page.opened();
      },
      function (err) {
        page.failed();
        store.set(page.key + "Token", null);
        showError(box, err, "Sign-in failed");
      }
    );
  }

  /** Back to the sign-in form (the page has cleared its own state); `err` says why, if it was not asked. */
  function signedOut(page, err) {
    store.set(page.key + "Token", null);
    store.set(page.key + "Label", null);
    $("whoami").hidden = true;
    $("app").hidden = true;
    $("signin").hidden = false;
    if (err) showError($("signin-error"), err, "Signed out");
    $("token-input").value = "";
    var first = document.querySelector("#signin button.signin-button") || $("token-input");
    first.focus();
  }

  var SOCKET_RETRY_MS = [1000, 2000, 5000, 10000, 30000];
  var SOCKET_STEADY_MS = 10000; // open this long: the next failure starts the backoff again
  // API Gateway closes a connection that carries no frame for 10 minutes: a page that sent nothing for this long
  // sends {"action": "ping"}, which API Gateway answers itself ({"type": "pong"}: no function runs).
  var SOCKET_KEEPALIVE_MS = window.SUPPORT_AGENT_SOCKET_KEEPALIVE_MS || 5 * 60 * 1000;

  /**
   * The page's WebSocket (docs/API.md#websocket): a single-use ticket from POST /api/ws-ticket (a browser cannot set
   * an Authorization header on a socket), then the socket at the ticket's url. What the page does with it is its
   * own: opts {token() → the bearer or null, opened(), message(parsed JSON), closed()}. A failed ticket or socket,
   * or one that closes, is tried again after a backoff (1 s … 30 s) while the page wants it; `stop` ends it.
   */
  function LiveSocket(opts) {
    this.opts = opts;
    this.ws = null;
    this.wanted = false;
    this.failures = 0;
    this.timer = null;
    this.gen = 0;
    this.openedAt = 0;
    this.keepalive = null; // the ping's timer: set again by each frame the page sends
  }

  LiveSocket.prototype.start = function () {
    if (this.wanted) return;
    this.wanted = true;
    this.connect();
  };

  LiveSocket.prototype.stop = function () {
    this.wanted = false;
    this.gen++;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.quiet();
    var ws = this.ws;
    this.ws = null;
    if (ws) {
      try {
        ws.close(1000, "");
      } catch (e) {
        /* closing anyway */
      }
      this.opts.closed();
    }
  };

  LiveSocket.prototype.isOpen = function () {
    return !!(this.ws && this.ws.readyState === 1);
  };

  /** Sends a frame; false when the socket is not open. */
  LiveSocket.prototype.send = function (frame) {
    if (!this.isOpen()) return false;
    try {
      this.ws.send(JSON.stringify(frame));
    } catch (e) {
      return false;
    }
    this.idle();
    return true;
  };

  /** The keepalive's timer starts again: a ping once the page has sent nothing for SOCKET_KEEPALIVE_MS. */
  LiveSocket.prototype.idle = function () {
    var self = this;
    this.quiet();
    this.keepalive = setTimeout(function () {
      self.keepalive = null;
      self.send({ action: "ping" });
    }, SOCKET_KEEPALIVE_MS);
  };

  LiveSocket.prototype.quiet = function () {
    if (this.keepalive) clearTimeout(this.keepalive);
    this.keepalive = null;
  };

  /** Closes the socket as a failure (an answer that says it is no good): the page falls back, tries again later. */
  LiveSocket.prototype.drop = function () {
    if (this.ws) this.ws.close(4000, "dropped by the page");
  };

  LiveSocket.prototype.connect = function () {
    var self = this;
    var gen = ++this.gen;
    var token = this.opts.token();
    if (!this.wanted || !token) return;
    api("/api/ws-ticket", { method: "POST", token: token }).then(
      function (r) {
        if (gen !== self.gen) return;
        var url = r.data && r.data.url;
        var ws;
        try {
          ws = new WebSocket(String(url));
        } catch (e) {
          self.retry(gen);
          return;
        }
        self.ws = ws;
        ws.onopen = function () {
          if (self.ws !== ws) return;
          self.openedAt = Date.now();
          self.idle();
          self.opts.opened();
        };
        ws.onmessage = function (e) {
          if (self.ws !== ws || typeof e.data !== "string") return;
          var m = null;
          try {
            m = JSON.parse(e.data);
          } catch (err) {
            return;
          }
          if (m && m.type === "pong") return; // the keepalive's answer: the connection lives on
          self.opts.message(m);
        };
        ws.onclose = function () {
          if (self.ws !== ws) return;
          self.ws = null;
          self.quiet();
          if (self.openedAt && Date.now() - self.openedAt >= SOCKET_STEADY_MS) self.failures = 0;
          self.openedAt = 0;
          self.opts.closed();
          self.retry(gen);
        };
      },
      function () {
        if (gen === self.gen) self.retry(gen);
      }
    );
  };

  LiveSocket.prototype.retry = function (gen) {
    var self = this;
    if (!this.wanted || gen !== this.gen) return;
    var wait = SOCKET_RETRY_MS[Math.min(this.failures, SOCKET_RETRY_MS.length - 1)];
    this.failures++;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(function () {
      self.timer = null;
      self.connect();
    }, wait);
  };

  function setBanner(simulated) {
    var b = $("simulated-banner");
    if (b) b.hidden = !simulated;
  }

  window.SA = {
    base: base,
    ApiError: ApiError,
    api: api,
    devTokens: devTokens,
    health: health,
    detectSimulated: detectSimulated,
    claims: claims,
    store: store,
    money: money,
    age: age,
    time: time,
    json: json,
    shortJson: shortJson,
    h: h,
    clear: clear,
    $: $,
    showError: showError,
    signIn: signIn,
    signedOut: signedOut,
    setBanner: setBanner,
    LiveSocket: LiveSocket,
  };
})();
