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
    charts(main);
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
  var COLOURS = {succeeded: "#2e8540", failed: "#d83933", other: "#8a94a3"};
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
    charts(document);
  });
})();
