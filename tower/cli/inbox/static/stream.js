// The minimal stream client (docs/streaming.md): the reply as it forms, and each step.
// It does not fold attempts itself: each model event carries `reply`, the server's fold
// (the live attempt's whole text, and "retrying" once an attempt is lost). EventSource
// resumes from the last event id by itself after a dropped connection; a stream that
// could not open (its run not there yet, past the server's wait) is opened again here.
// On the inbox's run page the run comes from the section's data-stream-run attribute;
// on stream.html from ?run=.
(function () {
  const section = document.querySelector("[data-stream-run]");
  const run = section ? section.dataset.streamRun
    : new URLSearchParams(location.search).get("run");
  if (!run) return;
  const title = document.getElementById("run");
  if (title) title.textContent = run;
  const reply = document.getElementById("reply");
  const steps = document.getElementById("steps");
  const status = document.getElementById("status");
  let last = 0;
  let ended = false;
  function step(text) {
    const li = document.createElement("li");
    li.textContent = text;  // text, never HTML: the model's words are not markup
    steps.appendChild(li);
  }
  function connect() {
    const source = new EventSource(
      "/api/runs/" + encodeURIComponent(run) + "/stream?after=" + last);
    source.onopen = function () { status.textContent = "live"; };
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED && !ended) {
        status.textContent = "connecting…";
        setTimeout(connect, 2000);
      }
    };
    function on(kind, handle) {
      source.addEventListener(kind, function (e) {
        if (e.lastEventId) last = Number(e.lastEventId);
        handle(JSON.parse(e.data));
      });
    }
    function shown(d) {
      reply.textContent = d.reply.text;
      status.textContent = d.reply.state === "retrying" ? "retrying (" + d.reply.reason + ")" : "live";
    }
    on("model_started", shown);
    on("delta", shown);
    on("model_finished", shown);
    on("discard", function (d) { shown(d); step("discarded a partial reply (" + d.reason + ")"); });
    on("transition", function (d) { step(d.source + " → " + d.target + " (" + d.reason + ")"); });
    on("custom", function (d) { step(d.node + ": " + d.label + " " + JSON.stringify(d.data)); });
    on("tool_started", function (d) { step("tool " + d.tool + "…"); });
    on("gate_opened", function (d) { step("waiting at gate " + d.gate + " for " + d.role); });
    on("gate_decided", function (d) { step("gate " + d.gate + ": " + d.status); });
    on("run_end", function (d) { step("ended " + d.status); });
    on("end", function () { ended = true; status.textContent = "ended"; source.close(); });
  }
  connect();
})();
