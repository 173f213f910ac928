// The minimal stream client (docs/streaming.md): the reply as it forms, and each step.
// A model attempt's text shows until it is discarded (a failed or superseded attempt);
// EventSource resumes from the last event id by itself after a dropped connection.
(function () {
  const run = new URLSearchParams(location.search).get("run");
  if (!run) return;
  document.getElementById("run").textContent = run;
  const reply = document.getElementById("reply");
  const steps = document.getElementById("steps");
  const status = document.getElementById("status");
  let attempt = "";
  const source = new EventSource("/api/runs/" + encodeURIComponent(run) + "/stream");
  source.onopen = function () { status.textContent = "live"; };
  function on(kind, handle) {
    source.addEventListener(kind, function (e) { handle(JSON.parse(e.data)); });
  }
  function step(text) {
    const li = document.createElement("li");
    li.textContent = text;  // text, never HTML: the model's words are not markup
    steps.appendChild(li);
  }
  on("model_started", function (d) { attempt = d.attempt; reply.textContent = ""; });
  on("delta", function (d) { if (d.attempt === attempt) reply.textContent += d.text; });
  on("discard", function (d) {
    if (d.attempt === attempt) { attempt = ""; reply.textContent = ""; }
    step("discarded a partial reply (" + d.reason + ")");
  });
  on("transition", function (d) { step(d.source + " → " + d.target + " (" + d.reason + ")"); });
  on("custom", function (d) { step(d.node + ": " + d.label + " " + JSON.stringify(d.data)); });
  on("tool_started", function (d) { step("tool " + d.tool + "…"); });
  on("gate_opened", function (d) { step("waiting at gate " + d.gate + " for " + d.role); });
  on("gate_decided", function (d) { step("gate " + d.gate + ": " + d.status); });
  on("run_end", function (d) { step("ended " + d.status); });
  on("end", function () { status.textContent = "ended"; source.close(); });
})();
