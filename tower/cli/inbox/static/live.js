// Live updates (server-sent events, /api/changes): the list's rows put in place whenever
// they change, without a reload; on a decision page, what became of its run once it changed
// (its buttons disabled). EventSource reconnects by itself.
(function () {
  const el = document.getElementById("live");
  if (!el || !window.EventSource) return;
  const query = new URLSearchParams({fingerprint: el.dataset.fingerprint});
  if (el.dataset.live === "run") query.set("run", el.dataset.run);
  const source = new EventSource("/api/changes?" + query);
  source.addEventListener("change", function (e) {
    const data = JSON.parse(e.data);
    if (data.fingerprint === el.dataset.fingerprint) return;
    el.dataset.fingerprint = data.fingerprint;
    if (el.dataset.live === "list") {
      document.getElementById("runs").innerHTML = data.html;  // rendered, escaped rows
      return;
    }
    const note = document.getElementById("changed");
    note.textContent = data.message || "This run changed: reload the page.";
    note.hidden = false;
    document.querySelectorAll("form.decide button").forEach(b => { b.disabled = true; });
  });
})();
