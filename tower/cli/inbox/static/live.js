// Live updates. The list: server-sent events (/api/list/stream) carry its rows whenever
// they change, put in place without a reload. The decision page (and the list, in a
// browser without EventSource): one small request every few seconds (the server answers
// them from a one-second cache of Temporal's visibility), for at most 30 minutes.
(function () {
  const el = document.getElementById("live");
  if (!el) return;
  if (el.dataset.live === "list" && window.EventSource) {
    const source = new EventSource("/api/list/stream");
    source.addEventListener("list", function (e) {
      const data = JSON.parse(e.data);
      if (data.fingerprint === el.dataset.fingerprint) return;
      document.getElementById("runs").innerHTML = data.html;  // rendered, escaped rows
      el.dataset.fingerprint = data.fingerprint;
    });
    return;  // EventSource reconnects by itself
  }
  const url = el.dataset.live === "run"
    ? "/api/changes?run=" + encodeURIComponent(el.dataset.run) : "/api/changes";
  const started = Date.now();
  async function poll() {
    if (Date.now() - started > 30 * 60 * 1000) return;
    try {
      const r = await fetch(url, {credentials: "same-origin"});
      if (r.ok) {
        const data = await r.json();
        if (data.fingerprint !== el.dataset.fingerprint) {
          if (el.dataset.live === "list") { location.reload(); return; }
          const note = document.getElementById("changed");
          note.textContent = data.message || "This run changed: reload the page.";
          note.hidden = false;
          document.querySelectorAll("form.decide button").forEach(b => { b.disabled = true; });
          el.dataset.fingerprint = data.fingerprint;
        }
      }
    } catch (e) { /* the next poll tries again */ }
    setTimeout(poll, 2000);
  }
  setTimeout(poll, 2000);
})();
