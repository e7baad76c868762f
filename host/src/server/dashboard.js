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
  // The kind each running plugin reconciles (its keys' kind, for the per-object view).
  const pluginKinds = new Map();
  let relink = false;
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
      const name = document.createElement("td");
      name.appendChild(pluginLink(p.name));
      const tr = row([
        name, text("td", p.version), text("td", (p.digest || "").slice(0, 12), "mono"),
        text("td", p.mode), text("td", p.reconciles), text("td", p.queued, "num"),
        text("td", p.reconcilesTotal ?? "–", "num"), text("td", p.errorsTotal ?? "–", "num"),
        text("td", reload),
      ]);
      tr.dataset.plugin = p.name;
      const kind = String(p.reconciles || "").split(/[ /]/).pop();
      if (pluginKinds.get(p.name) !== kind) {
        // Lines drawn before the kind was known get their "why" links.
        pluginKinds.set(p.name, kind);
        relink = true;
      }
      if (f && f.error) tr.className = "bad";
      if (!knownPlugins.has(p.name)) {
        knownPlugins.add(p.name);
        $("f-plugin").appendChild(text("option", p.name));
      }
      return tr;
    });
    body.replaceChildren(...rows);
    if (relink) { relink = false; rerender(); }
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
    const kind = typeof r.plugin === "string" && pluginKinds.get(r.plugin);
    if (kind && typeof r.key === "string" && r.key) {
      const a = text("a", "why", "why");
      a.href = "#why=" + encodeURIComponent(kind + "/" + r.key);
      div.appendChild(text("span", " "));
      div.appendChild(a);
    }
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


  // ---- plots: the host keeps 15 minutes of points per plugin (/api/plugins) ----
  const SVG = "http://www.w3.org/2000/svg";
  const svg = (tag, attrs) => {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    return el;
  };
  function pluginLink(name) {
    const a = text("a", name);
    a.href = "#plugin=" + encodeURIComponent(name);
    return a;
  }
  const fmt = (v, digits) => (v == null || !isFinite(v)) ? "–" : Number(v).toFixed(digits);
  // What each chart plots: lines of values per point, and the caption.
  const CHARTS = [
    { id: "reconciles", title: "reconciles/s", lines: [["rate", p => p.reconciles / p.dt]] },
    { id: "errors", title: "errors & denied/s", lines: [["bad", p => p.errors / p.dt], ["warn", p => p.denied / p.dt]] },
    { id: "latency", title: "call latency p50 / p99 (ms)", lines: [["rate", p => p.p50 == null ? null : p.p50 * 1000], ["bad", p => p.p99 == null ? null : p.p99 * 1000]] },
    { id: "depth", title: "queue depth", lines: [["rate", p => p.depth]] },
    { id: "waiting", title: "writes waiting for budget", lines: [["warn", p => p.waiting]] },
  ];
  function chart(plugin, spec, points, windowSeconds, big) {
    const w = big ? 440 : 200, h = big ? 120 : 56, pad = 2;
    const box = document.createElement("figure");
    box.className = "chart";
    const el = svg("svg", { viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: "img" });
    el.dataset.plugin = plugin;
    el.dataset.metric = spec.id;
    el.appendChild(svg("rect", { x: 0, y: 0, width: w, height: h, class: "frame" }));
    const end = points.length ? points[points.length - 1].t : Date.now();
    const start = end - windowSeconds * 1000;
    let max = 0;
    for (const [, f] of spec.lines) for (const p of points) { const v = f(p); if (v != null && isFinite(v)) max = Math.max(max, v); }
    const top = max > 0 ? max * 1.1 : 1;
    const x = t => pad + (w - 2 * pad) * Math.max(0, (t - start)) / (windowSeconds * 1000);
    const y = v => h - pad - (h - 2 * pad) * v / top;
    // One polyline per run of points with a value (a step without calls has no latency:
    // the line breaks there); a lone point is a dot.
    for (const [cls, f] of spec.lines) {
      let run = [];
      const end = () => {
        if (run.length === 1) {
          const [cx, cy] = run[0].split(",");
          el.appendChild(svg("circle", { cx, cy, r: 2, class: "dot " + cls }));
        } else if (run.length > 1) {
          el.appendChild(svg("polyline", { points: run.join(" "), class: "line " + cls }));
        }
        run = [];
      };
      for (const p of points) {
        const v = f(p);
        if (v != null && isFinite(v)) run.push(x(p.t).toFixed(1) + "," + y(v).toFixed(1));
        else end();
      }
      end();
    }
    const label = svg("text", { x: w - 4, y: 12, class: "max", "text-anchor": "end" });
    label.textContent = "max " + fmt(max, max >= 10 ? 0 : 2);
    el.appendChild(label);
    const caption = document.createElement("figcaption");
    caption.textContent = spec.title;
    if (spec.id === "reconciles") {
      const sum = points.reduce((n, p) => n + p.reconciles, 0);
      el.dataset.sum = String(sum);
      const total = text("span", " · " + sum + " reconciles", "total");
      total.dataset.plugin = plugin;
      total.dataset.reconciles = String(sum);
      caption.appendChild(total);
    }
    if (spec.id === "errors") {
      const errs = points.reduce((n, p) => n + p.errors, 0), denied = points.reduce((n, p) => n + p.denied, 0);
      caption.appendChild(text("span", " · " + errs + " errors, " + denied + " denied", "total"));
    }
    if (spec.id === "latency") {
      const last = [...points].reverse().find(p => p.p50 != null);
      caption.appendChild(text("span", last ? " · " + fmt(last.p50 * 1000, 2) + " / " + fmt(last.p99 * 1000, 2) : "", "total"));
    }
    box.appendChild(el);
    box.appendChild(caption);
    return box;
  }
  function plotRow(plugin, points, windowSeconds, big) {
    const frag = document.createDocumentFragment();
    for (const spec of CHARTS) frag.appendChild(chart(plugin, spec, points, windowSeconds, big));
    return frag;
  }
  async function pollPlots() {
    try {
      const res = await fetch(withToken("/api/plugins"), { cache: "no-store" });
      if (!res.ok) throw new Error("HTTP " + res.status);
      const report = await res.json();
      const rows = Object.entries(report.plugins || {}).map(([name, points]) => {
        const div = document.createElement("div");
        div.className = "plot-row";
        div.dataset.plugin = name;
        const h = document.createElement("h3");
        h.appendChild(pluginLink(name));
        div.appendChild(h);
        const charts = document.createElement("div");
        charts.className = "plots";
        charts.appendChild(plotRow(name, points, report.windowSeconds, false));
        div.appendChild(charts);
        return div;
      });
      $("plots").replaceChildren(...rows);
      $("plots-status").textContent = "one point every " + report.stepSeconds + " s; updated " + new Date().toLocaleTimeString();
    } catch (err) {
      $("plots-status").textContent = "cannot read /api/plugins: " + err.message;
    }
    setTimeout(pollPlots, 5000);
  }

  // ---- per-plugin view (#plugin=NAME) ----
  let viewTimer = null;
  function viewed() {
    const m = /^#plugin=(.+)$/.exec(location.hash);
    return m ? decodeURIComponent(m[1]) : null;
  }
  function fact(dl, name, value, cls) {
    dl.appendChild(text("dt", name));
    dl.appendChild(text("dd", value, cls));
  }
  function renderView(v) {
    $("pv-name").textContent = v.name;
    const dl = $("pv-facts");
    dl.replaceChildren();
    fact(dl, "declared name", v.declared);
    fact(dl, "revision", v.version);
    fact(dl, "digest", v.digest, "mono");
    fact(dl, "reconciles", v.reconciles);
    fact(dl, "mode", v.mode);
    const object = /^([a-z0-9-]+)\/([a-z0-9-]+)(@shadow)?$/.exec(v.name);
    if (object) fact(dl, "Plugin object", "kubectl -n " + object[1] + " get plugin " + object[2] + " -o yaml", "mono");
    const status = v.objectStatus;
    if (status) {
      for (const c of status.conditions || []) {
        fact(dl, c.type, c.status + " " + (c.reason || "") + ": " + (c.message || ""));
      }
      if (status.grant) fact(dl, "grant", status.grant, "mono");
      if (status.runner) fact(dl, "runner", status.runner);
      const r = status.rollout;
      if (r) fact(dl, "rollout", r.phase + ": " + r.keysCompared + " keys compared, " + r.differing + " differing");
    }
    $("pv-plots").replaceChildren(plotRow(v.name, v.points || [], 900, true));
    $("pv-problems").tBodies[0].replaceChildren(...(v.problems || []).map(r => {
      const tr = row([
        text("td", r.timestamp), text("td", r.type === "audit" ? r.action + " " + r.decision : "reconcile " + (r.result || "")),
        text("td", r.grant || r.error || ""), text("td", r.target || r.key || ""), text("td", r.message),
      ]);
      tr.className = "bad";
      return tr;
    }));
    $("pv-audits").tBodies[0].replaceChildren(...(v.audits || []).map(r => {
      const tr = row([
        text("td", r.timestamp), text("td", r.action), text("td", r.decision), text("td", r.target || r.key || ""), text("td", r.grant || ""),
      ]);
      if (r.decision === "denied" || r.decision === "failed") tr.className = "bad";
      return tr;
    }));
    $("pv-policy-source").textContent = v.policy ? v.policy : "no policy: the dry-run default";
    $("pv-policy").textContent = v.policyDocument || "";
    $("pv-grants").textContent = v.grants;
    $("pv-limits").textContent = v.limits;
  }
  async function pollView() {
    clearTimeout(viewTimer);
    const name = viewed();
    $("plugin-view").hidden = !name;
    if (!name) return;
    try {
      const res = await fetch(withToken("/api/plugins/" + encodeURIComponent(name)), { cache: "no-store" });
      if (!res.ok) throw new Error("HTTP " + res.status + ": " + (await res.text()));
      renderView(await res.json());
    } catch (err) {
      $("pv-name").textContent = name + " (cannot read it: " + err.message + ")";
    }
    viewTimer = setTimeout(pollView, 5000);
  }
  window.addEventListener("hashchange", pollView);

  // ---- per-object view (#why=KIND/NAMESPACE/NAME, or KIND/NAME): /api/why ----
  let whyTimer = null;
  function whyViewed() {
    const m = /^#why=(.+)$/.exec(location.hash);
    if (!m) return null;
    const parts = decodeURIComponent(m[1]).split("/");
    if (parts.length === 3) return { kind: parts[0], namespace: parts[1], name: parts[2] };
    if (parts.length === 2) return { kind: parts[0], namespace: "", name: parts[1] };
    return null;
  }
  const joined = (items) => (items || []).join("\n");
  function renderWhy(report) {
    $("wv-entries").tBodies[0].replaceChildren(...(report.entries || []).map(e => {
      const queued = (e.triggers || []).map(t =>
        (t.via ? t.via + " " : "") + t.reason + (t.by ? " by " + t.by : "") +
        (t.rvBefore && t.rvAfter ? " (rv " + t.rvBefore + "→" + t.rvAfter + ")" : t.rvAfter ? " (rv " + t.rvAfter + ")" : "") +
        ((t.changed || []).length ? ": " + t.changed.join(", ") : ""));
      if ((e.queued || 0) > queued.length) queued.push("and " + (e.queued - queued.length) + " earlier, merged");
      const actions = (e.actions || []).map(a => a.action + " " + a.target + " → " + a.decision + (a.detail ? ": " + a.detail : ""));
      if (e.error) actions.push("failed: " + e.error);
      if (actions.length === 0) actions.push("no action");
      const writes = (e.writes || []).map(w => w.change + " " + w.object + (w.resourceVersion ? " (now rv " + w.resourceVersion + ")" : ""));
      const tr = row([
        text("td", e.time), text("td", e.plugin + " " + String(e.digest || "").slice(0, 12)),
        text("td", joined(queued), "pre"), text("td", joined(e.reads), "pre"),
        text("td", joined(actions), "pre"), text("td", joined(writes), "pre"),
      ]);
      if ((e.actions || []).some(a => a.decision === "denied" || a.decision === "failed") || e.error) tr.className = "bad";
      return tr;
    }));
  }
  async function pollWhy() {
    clearTimeout(whyTimer);
    const object = whyViewed();
    $("why-view").hidden = !object;
    if (!object) return;
    const shown = object.kind + " " + (object.namespace ? object.namespace + "/" : "") + object.name;
    $("wv-name").textContent = shown;
    try {
      const q = new URLSearchParams({ kind: object.kind, namespace: object.namespace, name: object.name, limit: "50" });
      const res = await fetch(withToken("/api/why?" + q.toString()), { cache: "no-store" });
      if (!res.ok) throw new Error("HTTP " + res.status + ": " + (await res.text()));
      renderWhy(await res.json());
    } catch (err) {
      $("wv-name").textContent = shown + " (cannot read it: " + err.message + ")";
    }
    whyTimer = setTimeout(pollWhy, 5000);
  }
  window.addEventListener("hashchange", pollWhy);

  pollPlugins();
  pollPlots();
  pollView();
  pollWhy();
  connect();
})();
