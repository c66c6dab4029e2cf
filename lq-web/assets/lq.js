// lq-web: refreshes <main> every few seconds while the page is visible, and
// asks before destructive actions. Without it every page and form still works.
(function () {
  "use strict";
  var body = document.body;
  var main = document.getElementById("lq-main");
  var button = document.getElementById("lq-refresh");
  var seconds = Number(body.getAttribute("data-refresh") || 0);
  var paused = sessionStorage.getItem("lq-refresh-paused") === "1";
  var timer = null;
  var inFlight = false;

  // A refresh would lose what the user is doing: selected jobs, a field being
  // typed in, an open payload.
  function busy() {
    if (main.querySelector("input[type=checkbox]:checked")) return true;
    if (main.querySelector("details[open]")) return true;
    var a = document.activeElement;
    return !!(a && a !== body && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName));
  }

  function refresh() {
    if (paused || document.hidden || inFlight || busy()) return;
    inFlight = true;
    fetch(location.href, { headers: { "lq-partial": "1" }, credentials: "same-origin" })
      .then(function (r) {
        return r.text().then(function (t) { return { ok: r.ok, status: r.status, text: t }; });
      })
      .then(function (r) {
        if (busy()) return;
        main.innerHTML = r.text;
        if (button) button.classList.toggle("refresh-failed", !r.ok);
      })
      .catch(function () { if (button) button.classList.add("refresh-failed"); })
      .then(function () { inFlight = false; });
  }

  function schedule() {
    if (timer) clearInterval(timer);
    timer = null;
    if (seconds > 0 && !paused && !document.hidden) timer = setInterval(refresh, seconds * 1000);
  }

  function label() {
    if (button) button.textContent = paused ? "Resume refresh" : "Pause refresh";
  }

  if (button && seconds > 0) {
    button.hidden = false;
    label();
    button.addEventListener("click", function () {
      paused = !paused;
      sessionStorage.setItem("lq-refresh-paused", paused ? "1" : "0");
      label();
      schedule();
      if (!paused) refresh();
    });
  }
  document.addEventListener("visibilitychange", function () {
    schedule();
    if (!document.hidden) refresh();
  });
  schedule();

  // "Select all" on the jobs table.
  document.addEventListener("change", function (e) {
    if (e.target && e.target.id === "select-all") {
      var boxes = main.querySelectorAll("input[type=checkbox][name=ids]");
      for (var i = 0; i < boxes.length; i++) boxes[i].checked = e.target.checked;
    }
  });

  // Forms (or the button that submits one) that ask first: data-confirm holds
  // the question.
  document.addEventListener("submit", function (e) {
    var button = e.submitter;
    var question =
      (button && button.getAttribute("data-confirm")) || e.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) e.preventDefault();
  });
})();
