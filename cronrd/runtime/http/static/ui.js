// cronrd web UI: pages that follow the cluster's event stream, a run's log
// streamed as it is written, and buttons that POST to the API with the
// page's CSRF token. Every page works without it (links and forms).
(function () {
  "use strict";
  var EVENTS = ["run_started", "run_ended", "job_paused", "job_resumed", "alert_raised",
    "alert_acked", "alert_resolved", "notice", "leader_changed", "reset"];
  var REFRESH_GAP = 700;   // ms: at most one page refresh this often, however many events

  // A stream left open when the page goes (into the back-forward cache)
  // keeps one of the browser's six connections to the host: after six pages
  // the next could not load. Closed on pagehide; a page shown again from
  // that cache is loaded afresh (what it showed is old).
  function owned(es) {
    window.addEventListener("pagehide", function () { es.close(); });
    return es;
  }
  window.addEventListener("pageshow", function (ev) { if (ev.persisted) { location.reload(); } });

  function append(pre, text) {
    var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.appendChild(document.createTextNode(text));
    if (atEnd) { pre.scrollTop = pre.scrollHeight; }
  }
  function ended(pre) {
    var live = document.getElementById("live");
    if (live) { live.textContent = "ended"; }
    pre.setAttribute("data-done", "1");
  }
  function say(text) {
    var err = document.getElementById("log-error");
    if (err) { err.textContent = text || ""; }
  }

  // A run's log over Server-Sent Events (GET /api/v1/runs/ID/log/stream):
  // its output as it is written; a dropped connection resumes from the last
  // byte received (EventSource sends Last-Event-ID); "end" closes it.
  function streamLog(pre) {
    var es = owned(new EventSource("/api/v1/runs/" + pre.getAttribute("data-run") +
                                   "/log/stream"));
    es.addEventListener("log", function (ev) { append(pre, JSON.parse(ev.data).text || ""); say(""); });
    es.addEventListener("problem", function (ev) { say(JSON.parse(ev.data).detail); });
    es.addEventListener("end", function () { es.close(); ended(pre); });
  }

  // Without EventSource: the log polled (GET /runs/ID/log?offset=N).
  function pollLog(pre) {
    var offset = 0, src = pre.getAttribute("data-src");
    function poll() {
      fetch(src + "?offset=" + offset, {credentials: "same-origin", cache: "no-store"})
        .then(function (r) { return r.json(); })
        .then(function (d) {
          if (d.text) { append(pre, d.text); }
          if (typeof d.offset === "number") { offset = d.offset; }
          say(d.error);
          if (d.active || d.text) { setTimeout(poll, d.text ? 300 : 1000); } else { ended(pre); }
        })
        .catch(function () { setTimeout(poll, 3000); });
    }
    poll();
  }

  // Put the freshly rendered <main> in place of the shown one, keeping the
  // streamed log (the server's page has it empty) and the focus.
  function swap(main, fresh) {
    var log = document.getElementById("log"), blank = fresh.querySelector("#log");
    if (log && blank) { blank.parentNode.replaceChild(document.adoptNode(log), blank); }
    var nodes = [];
    while (fresh.firstChild) { nodes.push(document.adoptNode(fresh.firstChild)); }
    main.replaceChildren.apply(main, nodes);
    postButtons(main);
    pictures(main);
  }

  // A page that shows state follows /api/v1/events: on a change it may show
  // (of its job only, on a job's or run's page), it fetches itself again and
  // swaps its <main>, at most once per REFRESH_GAP; not while a field of a
  // form on it has the focus (the operator is typing).
  function livePage(main) {
    if (!window.EventSource || !window.DOMParser || !window.fetch) { return; }
    var job = main.getAttribute("data-live-job");
    var busy = false, again = false, timer = null, last = 0;
    function typing() {
      var el = document.activeElement;
      return el && main.contains(el) && /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName);
    }
    function refresh() {
      if (busy) { again = true; return; }
      var wait = Math.max(REFRESH_GAP - (Date.now() - last), typing() ? 1000 : 0);
      if (wait > 0) {
        if (!timer) { timer = setTimeout(function () { timer = null; refresh(); }, wait); }
        return;
      }
      busy = true;
      last = Date.now();
      fetch(location.href, {credentials: "same-origin", cache: "no-store"})
        .then(function (r) {
          var type = r.headers.get("Content-Type") || "";
          return r.ok && type.indexOf("text/html") === 0 ? r.text() : null;
        })
        .then(function (html) {
          if (html === null) { return; }
          var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
          if (fresh) { swap(main, fresh); main.setAttribute("data-refreshed", String(Date.now())); }
        })
        .catch(function () {})
        .then(function () { busy = false; if (again) { again = false; refresh(); } });
    }
    function mine(ev) {
      if (!job || ev.type === "reset" || ev.type === "leader_changed") { return true; }
      try {
        var d = JSON.parse(ev.data);
        return d.job === undefined || d.job === "" || d.job === job;  // "": pause --all
      } catch (e) {
        return true;
      }
    }
    var es = owned(new EventSource("/api/v1/events"));
    EVENTS.forEach(function (kind) {
      es.addEventListener(kind, function (ev) { if (mine(ev)) { refresh(); } });
    });
    main.setAttribute("data-following", "1");
  }

  // The job page's charts (uPlot, vendored: static/uPlot.LICENSE): duration
  // and start lateness per fire time, a series per outcome, points only.
  var OUTCOMES = ["succeeded", "failed", "other"];
  var COLOURS = {succeeded: "#2e8540", failed: "#d83933", skipped: "#b9c0ca", other: "#8a94a3"};
  function charts(root) {
    var data = root.querySelector("#job-chart-data");
    if (!data || !window.uPlot) { return; }
    var d = JSON.parse(data.textContent);
    root.querySelectorAll("div.chart[data-series]").forEach(function (el) {
      var s = d.series[el.getAttribute("data-series")];
      var opts = {
        width: Math.max(300, el.clientWidth || 600), height: 180,
        scales: {x: {time: true}},
        series: [{}].concat(OUTCOMES.map(function (k) {
          return {label: k, stroke: COLOURS[k], paths: function () { return null; },
                  points: {show: true, size: 6, fill: COLOURS[k], stroke: COLOURS[k]}};
        })),
        axes: [{}, {label: el.getAttribute("data-label")}]
      };
      el.textContent = "";
      new window.uPlot(opts, [d.x].concat(OUTCOMES.map(function (k) { return s[k]; })), el);
      el.setAttribute("data-points", String(d.x.length));
    });
  }

  // The overview's charts (same library): from #activity-data, a chart per
  // data-activity: runs ended per outcome, lateness p50/p99, running per node.
  var NODE_COLOURS = ["#2457c5", "#a15c00", "#6b3fa0", "#1f7a3d", "#b42318", "#0e7c86",
    "#7a4d2b", "#5c6470"];
  function activityCharts(root) {
    var data = root.querySelector("#activity-data");
    if (!data || !window.uPlot) { return; }
    var d = JSON.parse(data.textContent);
    function line(label, colour, dash) {
      return {label: label, stroke: colour, width: 1.5, dash: dash, spanGaps: false,
              points: {show: true, size: 4, fill: colour, stroke: colour}};
    }
    var make = {
      outcomes: function () {
        return {series: ["succeeded", "failed", "skipped", "other"].map(function (k) {
          return line(k, COLOURS[k] || "#8a94a3"); }),
                values: ["succeeded", "failed", "skipped", "other"].map(function (k) {
                  return d.outcomes[k]; })};
      },
      lateness: function () {
        return {series: [line("p50", "#2457c5"), line("p99", "#a15c00", [4, 3])],
                values: [d.lateness.p50, d.lateness.p99]};
      },
      running: function () {
        var nodes = Object.keys(d.running);
        return {series: nodes.map(function (n, i) {
          var s = line(n, NODE_COLOURS[i % NODE_COLOURS.length]);
          s.paths = window.uPlot.paths.stepped({align: 1});
          return s; }),
                values: nodes.map(function (n) { return d.running[n]; })};
      }
    };
    root.querySelectorAll("div.chart[data-activity]").forEach(function (el) {
      var c = make[el.getAttribute("data-activity")]();
      el.textContent = "";
      new window.uPlot({width: Math.max(300, el.clientWidth || 600), height: 160,
                        scales: {x: {time: true}}, series: [{}].concat(c.series),
                        axes: [{}, {label: el.getAttribute("data-label")}]},
                       [d.x].concat(c.values), el);
      el.setAttribute("data-points", String(d.x.length));
      el.setAttribute("data-series-count", String(c.series.length));
    });
  }

  // The timeline: drag across it to zoom to that stretch of time (the
  // page's links do the rest without a script).
  function timelineZoom(root) {
    var svg = root.querySelector("svg#timeline");
    if (!svg) { return; }
    var t0 = +svg.getAttribute("data-start"), t1 = +svg.getAttribute("data-end");
    var left = +svg.getAttribute("data-left"), plot = +svg.getAttribute("data-plot");
    var NS = "http://www.w3.org/2000/svg", from = null, box = null, dragged = false;
    svg.addEventListener("click", function (ev) {
      if (dragged) { ev.preventDefault(); dragged = false; }
    }, true);
    function xOf(ev) {
      var r = svg.getBoundingClientRect();
      return Math.max(left, Math.min(left + plot, (ev.clientX - r.left) * svg.viewBox.baseVal.width / r.width));
    }
    function timeOf(x) { return t0 + (x - left) / plot * (t1 - t0); }
    function iso(t) { return new Date(t * 1000).toISOString().slice(0, 19) + "Z"; }
    svg.addEventListener("mousedown", function (ev) {
      if (ev.button !== 0) { return; }
      ev.preventDefault();   // no native drag of a bar's link, no text selection
      from = xOf(ev);
      box = document.createElementNS(NS, "rect");
      box.setAttribute("class", "select");
      box.setAttribute("y", "14"); box.setAttribute("height", svg.getAttribute("height"));
      box.setAttribute("x", String(from)); box.setAttribute("width", "0");
      svg.appendChild(box);
    });
    svg.addEventListener("mousemove", function (ev) {
      if (from === null) { return; }
      var x = xOf(ev);
      box.setAttribute("x", String(Math.min(from, x)));
      box.setAttribute("width", String(Math.abs(x - from)));
    });
    svg.addEventListener("mouseup", function (ev) {
      if (from === null) { return; }
      var a = from, b = xOf(ev);
      from = null;
      if (Math.abs(b - a) < 6) { box.remove(); return; }   // a click: the bar's link
      dragged = true;   // not a click on the bar it ends on
      location.href = "/timeline?start=" + encodeURIComponent(iso(timeOf(Math.min(a, b)))) +
        "&end=" + encodeURIComponent(iso(timeOf(Math.max(a, b))));
    });
  }

  function pictures(root) {
    charts(root);
    activityCharts(root);
    timelineZoom(root);
  }

  function postButtons(root) {
    root.querySelectorAll("button[data-post]").forEach(function (b) {
      b.addEventListener("click", function () {
        fetch(b.getAttribute("data-post"), {method: "POST", credentials: "same-origin",
          headers: {"X-CSRF-Token": b.getAttribute("data-csrf")}})
          .then(function (r) { if (r.ok) { location.reload(); } else { return r.json().then(function (p) { alert(p.detail || p.title); }); } });
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var pre = document.getElementById("log");
    if (pre) { (window.EventSource && pre.getAttribute("data-run") ? streamLog : pollLog)(pre); }
    var main = document.querySelector("main[data-live]");
    if (main) { livePage(main); }
    postButtons(document);
    pictures(document);
  });
})();
