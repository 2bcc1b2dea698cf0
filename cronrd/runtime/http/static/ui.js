// cronrd web UI: the live log of a run (polled), and buttons that POST to
// the API with the page's CSRF token. Pages work without it (forms).
(function () {
  "use strict";
  function liveLog(pre) {
    var offset = 0, src = pre.getAttribute("data-src"), err = document.getElementById("log-error");
    function poll() {
      fetch(src + "?offset=" + offset, {credentials: "same-origin", cache: "no-store"})
        .then(function (r) { return r.json(); })
        .then(function (d) {
          if (d.text) {
            var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
            pre.appendChild(document.createTextNode(d.text));
            if (atEnd) { pre.scrollTop = pre.scrollHeight; }
          }
          if (typeof d.offset === "number") { offset = d.offset; }
          if (err) { err.textContent = d.error || ""; }
          var st = document.getElementById("run-state");
          if (st && d.state) {
            st.innerHTML = "";
            var span = document.createElement("span");
            span.className = "st " + ({succeeded: "ok", failed: "bad", lost: "bad", timed_out: "bad",
              running: "run", assigned: "run", cancelled: "warn"}[d.state] || "muted");
            span.textContent = d.state;
            st.appendChild(span);
          }
          var code = document.getElementById("exit-code");
          if (code && d.exit_code !== null && d.exit_code !== undefined) { code.textContent = d.exit_code; }
          if (d.active || d.text) {
            setTimeout(poll, d.text ? 300 : 1000);
          } else {
            var live = document.getElementById("live");
            if (live) { live.textContent = "ended"; }
            pre.setAttribute("data-done", "1");
          }
        })
        .catch(function () { setTimeout(poll, 3000); });
    }
    poll();
  }
  function postButtons() {
    document.querySelectorAll("button[data-post]").forEach(function (b) {
      b.addEventListener("click", function () {
        fetch(b.getAttribute("data-post"), {method: "POST", credentials: "same-origin",
          headers: {"X-CSRF-Token": b.getAttribute("data-csrf")}})
          .then(function (r) { if (r.ok) { location.reload(); } else { return r.json().then(function (p) { alert(p.detail || p.title); }); } });
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var pre = document.getElementById("log");
    if (pre) { liveLog(pre); }
    postButtons();
  });
})();
