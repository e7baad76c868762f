// The dashboard's script (served at /dashboard.js: no inline script, so the page's content
// security policy allows scripts from its own origin only, without 'unsafe-inline').
"use strict";
// Everything a plugin provides is inserted with textContent: never as HTML.
(function () {
  const MAX_ROWS = 2000;        // rendered lines
  const MAX_KEPT = 10000;       // records kept for re-filtering
  const LEVELS = { debug: 0, info: 1, warn: 2, error: 3 };
  const params = new URLSearchParams(location.search);
  const token = params.get("token");
  const withToken = (path) => token ? path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token) : path;
  const $ = (id) => document.getElementById(id);
  const text = (tag, value, cls) => {
    const el = document.createElement(tag);
    el.textContent = value == null ? "" : String(value);
    if (cls) el.className = cls;
    return el;
  };

  // ---- plugins table ----
  const knownPlugins = new Set();
  function row(cells) {
    const tr = document.createElement("tr");
    for (const c of cells) tr.appendChild(c);
    return tr;
  }
  function renderPlugins(report) {
    const files = report.files || [];
    const byPlugin = new Map(files.filter(f => f.plugin).map(f => [f.plugin, f]));
    const body = $("plugins").tBodies[0];
    const rows = (report.running || []).map(p => {
      const f = byPlugin.get(p.name);
      const reload = f ? (f.error ? "failed: " + f.error : "ok") : "";
      const tr = row([
        text("td", p.name), text("td", p.version), text("td", (p.digest || "").slice(0, 12), "mono"),
        text("td", p.mode), text("td", p.reconciles), text("td", p.queued, "num"),
        text("td", p.reconcilesTotal ?? "–", "num"), text("td", p.errorsTotal ?? "–", "num"),
        text("td", reload),
      ]);
      tr.dataset.plugin = p.name;
      if (f && f.error) tr.className = "bad";
      if (!knownPlugins.has(p.name)) {
        knownPlugins.add(p.name);
        $("f-plugin").appendChild(text("option", p.name));
      }
      return tr;
    });
    body.replaceChildren(...rows);
    const fbody = $("files").tBodies[0];
    fbody.replaceChildren(...files.map(f => {
      const tr = row([
        text("td", f.file, "mono"), text("td", f.plugin || ""), text("td", (f.digest || "").slice(0, 12), "mono"),
        text("td", f.error ? f.error : (f.running ? "running" : "")),
      ]);
      if (f.error) tr.className = "bad";
      return tr;
    }));
    $("plugins-status").textContent = "updated " + new Date().toLocaleTimeString();
  }
  async function pollPlugins() {
    try {
      const res = await fetch(withToken("/plugins"), { cache: "no-store" });
      if (!res.ok) throw new Error("HTTP " + res.status);
      renderPlugins(await res.json());
    } catch (err) {
      $("plugins-status").textContent = "cannot read /plugins: " + err.message;
    }
    setTimeout(pollPlugins, 2000);
  }

  // ---- live stream ----
  const kept = [];        // every record received (bounded), for re-filtering
  let pending = [];       // records waiting for the next animation frame
  let paused = false;
  let frameQueued = false;
  let received = 0;
  const log = $("log");

  function matches(r) {
    const plugin = $("f-plugin").value, type = $("f-type").value;
    const level = LEVELS[$("f-level").value] ?? 0, needle = $("f-text").value.toLowerCase();
    if (plugin && r.plugin !== plugin) return false;
    if (type && r.type !== type) return false;
    if ((LEVELS[r.level] ?? 1) < level && r.type !== "lagged") return false;
    if (needle && !(String(r.message || "") + " " + (r.key || "")).toLowerCase().includes(needle)) return false;
    return true;
  }
  function line(r) {
    const div = document.createElement("div");
    const cls = ["lv-" + (r.level || "info")];
    if (r.decision === "denied") cls.push("denied");
    if (r.decision === "failed" || r.result === "failed") cls.push("failed");
    if (r.type === "reconcile" && r.result && r.result !== "success" && r.result !== "deleted") cls.push("failed");
    if (r.type === "lagged") cls.push("lagged");
    div.className = cls.join(" ");
    div.appendChild(text("span", r.timestamp, "t"));
    if (r.plugin) div.appendChild(text("span", r.plugin, "p"));
    div.appendChild(text("span", r.type || "", "ty"));
    div.appendChild(text("span", r.message, "m"));
    if (r.decision === "denied" && r.grant) div.appendChild(text("span", "  (denied by " + r.grant + ")"));
    return div;
  }
  function flush() {
    frameQueued = false;
    if (paused || pending.length === 0) return;
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 30;
    const batch = pending.filter(matches).slice(-MAX_ROWS);
    pending = [];
    const frag = document.createDocumentFragment();
    for (const r of batch) frag.appendChild(line(r));
    log.appendChild(frag);
    let extra = log.childElementCount - MAX_ROWS;
    while (extra-- > 0) log.firstElementChild.remove();
    if (atBottom) log.scrollTop = log.scrollHeight;
    updateCounts();
  }
  function schedule() {
    if (!frameQueued) { frameQueued = true; requestAnimationFrame(flush); }
  }
  function rerender() {
    pending = kept.slice();
    log.replaceChildren();
    schedule();
  }
  function updateCounts() {
    $("counts").textContent = received + " received, " + log.childElementCount + " shown" + (paused ? " (paused)" : "");
  }
  function receive(r) {
    if (!r || typeof r !== "object") return;
    received++;
    kept.push(r);
    if (kept.length > MAX_KEPT) kept.splice(0, kept.length - MAX_KEPT);
    if (r.plugin && !knownPlugins.has(r.plugin) && typeof r.plugin === "string") {
      knownPlugins.add(r.plugin);
      $("f-plugin").appendChild(text("option", r.plugin));
    }
    pending.push(r);
    if (pending.length > MAX_KEPT) pending.splice(0, pending.length - MAX_KEPT);
    schedule();
  }
  // For tests and for debugging from the console: feed records as the stream would.
  window.kubeplugDashboard = { receive };

  let backoff = 500;
  function connect() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(proto + "//" + location.host + withToken("/api/wds/logs"));
    const status = $("status");
    ws.onopen = () => { backoff = 500; status.textContent = "connected"; status.className = "up"; };
    ws.onmessage = (ev) => {
      let r;
      try { r = JSON.parse(ev.data); } catch (_) { r = { timestamp: "", message: String(ev.data), type: "log" }; }
      receive(r);
    };
    ws.onclose = () => {
      status.textContent = "disconnected, retrying in " + Math.round(backoff / 1000 * 10) / 10 + " s";
      status.className = "down";
      setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 30000);
    };
    ws.onerror = () => ws.close();
  }

  $("pause").addEventListener("click", () => {
    paused = !paused;
    $("pause").textContent = paused ? "Resume" : "Pause";
    if (!paused) schedule();
    updateCounts();
  });
  $("clear").addEventListener("click", () => { kept.length = 0; pending = []; log.replaceChildren(); updateCounts(); });
  for (const id of ["f-plugin", "f-type", "f-level"]) $(id).addEventListener("change", rerender);
  $("f-text").addEventListener("input", rerender);

  pollPlugins();
  connect();
})();
