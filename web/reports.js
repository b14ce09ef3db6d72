/* The Reports page: GET /api/reports/daily drawn as charts (uPlot, vendored in web/vendor/uplot), each with its
 * numbers in a table under it, and the same range as a CSV download. For support leads: the lead console's
 * session token (sign in there). */
(function () {
  "use strict";
  var SA = window.SA;
  var h = SA.h;
  var $ = SA.$;
  var DAY_MS = 86400000;
  var DEFAULT_DAYS = 14;
  var COLORS = ["#1d4ed8", "#b45309", "#15803d", "#b91c1c"];

  var state = { token: null, report: null, plots: [] };

  function isoDay(date) {
    return date.toISOString().slice(0, 10);
  }

  function percent(v) {
    return v === null || v === undefined ? "—" : (v * 100).toFixed(1) + " %";
  }

  function plain(v) {
    return v === null || v === undefined ? "—" : String(v);
  }

  function seconds(v) {
    if (v === null || v === undefined) return "—";
    if (v < 120) return v + " s";
    if (v < 7200) return Math.round(v / 60) + " min";
    return (v / 3600).toFixed(1) + " h";
  }

  function amounts(cents) {
    var keys = Object.keys(cents || {}).sort();
    if (!keys.length) return "—";
    return keys.map(function (c) { return SA.money(cents[c], c); }).join(" + ");
  }

  function totalCents(cents) {
    return Object.keys(cents || {}).reduce(function (sum, c) { return sum + cents[c]; }, 0);
  }

  // Each chart: its series (a label, a value of a day, how a value reads, which axis) and the table's extra columns.
  var CHARTS = [
    {
      id: "rates",
      title: "Resolution and escalation rate",
      note: "Resolved by the agent / conversations; escalated to a person / conversations.",
      scale: "rate",
      series: [
        { label: "resolution rate", value: function (d) { return d.resolution_rate; }, show: percent },
        { label: "escalation rate", value: function (d) { return d.escalation_rate; }, show: percent },
      ],
      extra: [
        { label: "conversations", show: function (d) { return plain(d.conversations); } },
        { label: "resolved", show: function (d) { return plain(d.outcomes.resolved_by_agent); } },
        { label: "escalated", show: function (d) { return plain(d.outcomes.escalated); } },
      ],
    },
    {
      id: "refunds",
      title: "Refunds by day",
      note: "Refunds that succeeded, direct and approved (amount: every currency's minor units, in the axis on the right).",
      scale: "count",
      series: [
        { label: "refunds", value: function (d) { return d.refunds.refunded; }, show: plain },
        {
          label: "amount",
          value: function (d) { return totalCents(d.refunds.refunded_cents) / 100; },
          show: function (v, d) { return amounts(d.refunds.refunded_cents); },
          scale: "money",
        },
      ],
      extra: [
        { label: "direct", show: function (d) { return plain(d.refunds.direct_refunded); } },
        { label: "approved", show: function (d) { return plain(d.refunds.approved_refunded); } },
        { label: "held for a lead", show: function (d) { return plain(d.refunds.held_requested); } },
      ],
    },
    {
      id: "times",
      title: "Decision and settlement times",
      note: "Request → a lead's decision, request → refund settled: median and 95th percentile (nearest rank).",
      scale: "seconds",
      series: [
        { label: "decision median", value: function (d) { return d.refunds.decision.median_s; }, show: seconds },
        { label: "decision p95", value: function (d) { return d.refunds.decision.p95_s; }, show: seconds },
        { label: "settlement median", value: function (d) { return d.refunds.settlement.median_s; }, show: seconds },
        { label: "settlement p95", value: function (d) { return d.refunds.settlement.p95_s; }, show: seconds },
      ],
      extra: [
        { label: "decided", show: function (d) { return plain(d.refunds.decision.count); } },
        { label: "settled", show: function (d) { return plain(d.refunds.settlement.count); } },
      ],
    },
    {
      id: "ratings",
      title: "CSAT and thumbs-up share",
      note: "CSAT: closing ratings of 4–5 / closing ratings. Thumbs-up share: up / (up + down).",
      scale: "rate",
      series: [
        { label: "CSAT", value: function (d) { return d.csat; }, show: percent },
        { label: "thumbs-up share", value: function (d) { return d.thumbs_up_share; }, show: percent },
      ],
      extra: [
        { label: "closing ratings", show: function (d) { return plain(d.ratings.closing); } },
        { label: "thumbs up", show: function (d) { return plain(d.ratings.thumbs_up); } },
        { label: "thumbs down", show: function (d) { return plain(d.ratings.thumbs_down); } },
      ],
    },
  ];

  function axisValues(scale) {
    if (scale === "rate") return function (u, ticks) { return ticks.map(function (t) { return Math.round(t * 100) + "%"; }); };
    if (scale === "seconds") return function (u, ticks) { return ticks.map(seconds); };
    return null;
  }

  function plotOptions(chart, width) {
    var scales = { x: { time: true } };
    scales[chart.scale] = chart.scale === "rate" ? { range: [0, 1] } : { range: function (u, min, max) { return [0, Math.max(1, max)]; } };
    var axes = [{}, { scale: chart.scale, values: axisValues(chart.scale), size: 64 }];
    if (chart.series.some(function (s) { return s.scale === "money"; })) {
      scales.money = { range: function (u, min, max) { return [0, Math.max(1, max)]; } };
      axes.push({ scale: "money", side: 1, grid: { show: false }, size: 64 });
    }
    return {
      width: width,
      height: 220,
      scales: scales,
      axes: axes,
      series: [{}].concat(
        chart.series.map(function (s, i) {
          return {
            label: s.label,
            scale: s.scale || chart.scale,
            stroke: COLORS[i % COLORS.length],
            width: 2,
            points: { show: true, size: 6 },
            spanGaps: false,
          };
        })
      ),
    };
  }

  function table(chart, days) {
    var head = ["day"].concat(chart.series.map(function (s) { return s.label; }), chart.extra.map(function (e) { return e.label; }));
    return h(
      "div",
      { class: "report-table-wrap" },
      h(
        "table",
        { class: "report-table", "data-testid": "table-" + chart.id },
        h("thead", null, h("tr", null, head.map(function (t) { return h("th", { scope: "col" }, t); }))),
        h(
          "tbody",
          null,
          days.map(function (d) {
            var cells = [h("td", null, d.day + (d.complete ? "" : " (so far)"))];
            chart.series.forEach(function (s) { cells.push(h("td", null, s.show(s.value(d), d))); });
            chart.extra.forEach(function (e) { cells.push(h("td", null, e.show(d))); });
            return h("tr", { "data-day": d.day }, cells);
          })
        )
      )
    );
  }

  function render(report) {
    var box = $("charts");
    state.plots.forEach(function (p) { p.destroy(); });
    state.plots = [];
    SA.clear(box);
    var days = report.days;
    $("empty").hidden = days.length > 0;
    if (!days.length) return;
    var xs = days.map(function (d) { return Date.parse(d.day + "T00:00:00Z") / 1000; });
    // Every card first, then the plots: each then measures its own box in the finished grid.
    var boxes = CHARTS.map(function (chart) {
      var plotBox = h("div", { class: "report-chart", "data-testid": "chart-" + chart.id });
      box.appendChild(
        h(
          "section",
          { class: "card", "aria-labelledby": "chart-title-" + chart.id },
          h("h3", { id: "chart-title-" + chart.id }, chart.title),
          h("p", { class: "small-text muted report-summary" }, chart.note),
          plotBox,
          table(chart, days)
        )
      );
      return plotBox;
    });
    CHARTS.forEach(function (chart, i) {
      var data = [xs].concat(
        chart.series.map(function (s) {
          return days.map(function (d) {
            var v = s.value(d);
            return v === undefined ? null : v;
          });
        })
      );
      var width = Math.max(280, boxes[i].clientWidth || 480);
      state.plots.push(new window.uPlot(plotOptions(chart, width), data, boxes[i]));
    });
  }

  function query() {
    return "?from=" + encodeURIComponent($("from").value) + "&to=" + encodeURIComponent($("to").value);
  }

  function load() {
    SA.showError($("reports-error"), null);
    return SA.api("/api/reports/daily" + query(), { token: state.token }).then(
      function (r) {
        state.report = r.data;
        render(r.data);
      },
      function (err) {
        SA.showError($("reports-error"), err, "Could not load the reports");
      }
    );
  }

  // A link cannot carry the bearer token: the CSV is fetched, then saved from a blob.
  function downloadCsv() {
    SA.showError($("reports-error"), null);
    var name = "reports-daily-" + $("from").value + "-" + $("to").value + ".csv";
    fetch(SA.base + "/api/reports/daily" + query() + "&format=csv", {
      headers: { Authorization: "Bearer " + state.token, Accept: "text/csv" },
      cache: "no-store",
    })
      .then(function (res) {
        if (!res.ok) throw new SA.ApiError(res.status, "http_" + res.status, "The CSV could not be made", null);
        return res.blob();
      })
      .then(function (blob) {
        var link = h("a", { href: URL.createObjectURL(blob), download: name });
        document.body.appendChild(link);
        link.click();
        setTimeout(function () { URL.revokeObjectURL(link.href); link.remove(); }, 0);
      })
      .catch(function (err) { SA.showError($("reports-error"), err, "Download failed"); });
  }

  function start() {
    state.token = SA.store.get("leadToken");
    var role = (SA.claims(state.token || "") || {}).role;
    if (!state.token || role === "support_staff" || role === "customer") {
      $("signin").hidden = false;
      return;
    }
    $("whoami-name").textContent = SA.store.get("leadLabel") || "lead";
    $("whoami").hidden = false;
    $("app").hidden = false;
    var today = new Date();
    $("to").value = isoDay(today);
    $("from").value = isoDay(new Date(today.getTime() - (DEFAULT_DAYS - 1) * DAY_MS));
    $("range").addEventListener("submit", function (e) { e.preventDefault(); load(); });
    $("csv").addEventListener("click", downloadCsv);
    load();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
