// Kiln router dashboard: one SSE stream of snapshots (see src/dashboard/mod.rs); every
// panel is redrawn from the latest. Tiles are reused by colo so a thousand stay cheap.
"use strict";
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const ms = (v) => (v == null ? "–" : v < 1000 ? `${v.toFixed(0)} ms` : `${(v / 1000).toFixed(2)} s`);
const num = (v, d = 2) => (v == null ? "–" : Number(v).toFixed(d));
let last = null;
const tiles = new Map();

function band(p50) {
  if (p50 == null) return "cx";
  if (p50 < 100) return "c0";
  if (p50 < 300) return "c1";
  if (p50 < 1000) return "c2";
  if (p50 < 3000) return "c3";
  return "c4";
}

function drawColos(rows) {
  const filter = $("colo-filter").value.trim().toLowerCase();
  const sort = $("colo-sort").value;
  const shown = rows.filter((r) => !filter || r.key.toLowerCase().includes(filter));
  shown.sort((a, b) =>
    sort === "name" ? a.key.localeCompare(b.key)
      : sort === "requests" ? b.requests - a.requests
        : (b.p50_ms ?? -1) - (a.p50_ms ?? -1));
  const grid = $("colos");
  const keep = new Set();
  const frag = document.createDocumentFragment();
  for (const r of shown) {
    let t = tiles.get(r.key);
    if (!t) {
      t = document.createElement("div");
      t.dataset.colo = r.key;
      tiles.set(r.key, t);
    }
    t.className = `tile ${band(r.p50_ms)}`;
    t.title = `${r.key}: p50 ${ms(r.p50_ms)}, p99 ${ms(r.p99_ms)}, ${r.requests} requests, ${r.fallbacks} fallbacks, ${r.cold_starts} cold starts`;
    t.dataset.p50 = r.p50_ms ?? "";
    t.dataset.p99 = r.p99_ms ?? "";
    t.innerHTML = `<b>${esc(r.key)}</b>${ms(r.p50_ms)}`;
    keep.add(r.key);
    frag.appendChild(t);
  }
  grid.replaceChildren(frag);
  for (const k of [...tiles.keys()]) if (!keep.has(k)) tiles.delete(k);
  $("colo-count").textContent = `${shown.length} of ${rows.length} colos`;
}

function drawFallbacks(events) {
  const max = Math.max(1, ...events.map((e) => e.fallback.added_ms));
  $("fallbacks").innerHTML = events.map((e) => {
    const f = e.fallback;
    const w = Math.max(1, Math.round((80 * f.added_ms) / max));
    return `<tr data-reason="${esc(f.reason)}"><td>${new Date(e.time_ms).toLocaleTimeString()}</td><td>${esc(f.from ?? "–")}</td><td>${esc(e.colo)}</td><td>${esc(f.reason)}</td><td>${esc(e.model)}</td><td><span class="bar" style="width:${w}px"></span>${ms(f.added_ms)}</td></tr>`;
  }).join("") || `<tr><td colspan="6" class="muted">no fallbacks in the window</td></tr>`;
}

function drawCost(models) {
  $("cost").innerHTML = models.map((m) =>
    `<tr data-model="${esc(m.key)}"><td>${esc(m.key)}</td><td>${m.requests}</td><td>${num(m.useful_neurons_per_request, 4)}</td><td>${num(m.wasted_neurons, 4)}</td><td>${num(m.mean_confidence, 3)}</td></tr>`).join("");
}

function chart(svg, minutes, series) {
  const w = svg.clientWidth || 400, h = svg.clientHeight || 140, pad = 24;
  const all = series.flatMap((s) => minutes.map(s.get)).filter((v) => v != null);
  const max = Math.max(1e-9, ...all);
  const n = Math.max(1, minutes.length - 1);
  const lines = series.map((s) => {
    const pts = minutes.map((m, i) => [pad + ((w - pad - 4) * i) / n, h - pad - ((h - 2 * pad) * (s.get(m) ?? 0)) / max]);
    const dots = pts.map((p) => `<circle cx="${p[0]}" cy="${p[1]}" r="2" fill="${s.color}"></circle>`).join("");
    return `<polyline stroke="${s.color}" points="${pts.map((p) => p.join(",")).join(" ")}"><title>${esc(s.name)}</title></polyline>${dots}`;
  });
  const legend = series.map((s, i) => `<text x="${pad + i * 90}" y="12" fill="${s.color}">${esc(s.name)}</text>`).join("");
  svg.innerHTML = `${lines.join("")}${legend}<text x="2" y="${pad + 4}">${num(max, max < 10 ? 2 : 0)}</text><text x="2" y="${h - pad}">0</text>`;
}

function drawSeries(minutes) {
  chart($("requests-chart"), minutes, [{ name: "requests", color: "#4a90d9", get: (m) => m.requests }]);
  chart($("latency-chart"), minutes, [
    { name: "p50", color: "#3fb950", get: (m) => m.p50_ms },
    { name: "p99", color: "#d73027", get: (m) => m.p99_ms },
    { name: "TTFT", color: "#fee08b", get: (m) => m.mean_ttft_ms },
  ]);
  chart($("tokens-chart"), minutes, [
    { name: "in", color: "#a6d96a", get: (m) => m.tokens_in / 60 },
    { name: "out", color: "#4a90d9", get: (m) => m.tokens_out / 60 },
  ]);
  chart($("errors-chart"), minutes, [
    { name: "errors", color: "#d73027", get: (m) => m.errors },
    { name: "fallbacks", color: "#fc8d59", get: (m) => m.fallbacks },
    { name: "cold starts", color: "#4a90d9", get: (m) => m.cold_starts },
  ]);
}

function drawNodes(nodes) {
  $("nodes").innerHTML = (nodes || []).map((n) =>
    `<tr><td>${esc(n.id)}</td><td>${esc(n.colo)}</td><td>${esc(n.health)}</td><td>${n.in_flight}</td><td>${num(n.running, 0)}</td><td>${num(n.waiting, 0)}</td><td>${n.kv_cache_usage == null ? "–" : (100 * n.kv_cache_usage).toFixed(1) + "%"}</td><td>${esc((n.loaded || []).join(", "))}</td></tr>`).join("");
}

function drawAlerts(alerts) {
  $("alerts").innerHTML = alerts.map((a) =>
    `<div class="alert ${esc(a.severity)}" data-alert="${esc(a.name)}"><b>${esc(a.name)}</b> ${esc(a.message)}</div>`).join("");
}

function draw(s) {
  last = s;
  $("window").textContent = `last ${s.window_minutes} min · ${new Date(s.time_ms).toLocaleTimeString()}`;
  drawAlerts(s.alerts || []);
  drawColos(s.summary.colos);
  drawFallbacks(s.fallbacks || []);
  drawCost(s.summary.models);
  drawSeries(s.summary.minutes);
  drawNodes(s.nodes);
  document.body.dataset.updated = String(s.time_ms);
}

function connect() {
  const key = new URLSearchParams(location.hash.slice(1)).get("key");
  const url = key ? `/dashboard/events?key=${encodeURIComponent(key)}` : "/dashboard/events";
  const src = new EventSource(url);
  src.addEventListener("snapshot", (e) => {
    $("status").textContent = "live";
    draw(JSON.parse(e.data));
  });
  src.onerror = () => { $("status").textContent = "reconnecting…"; };
}

$("colo-filter").addEventListener("input", () => last && drawColos(last.summary.colos));
$("colo-sort").addEventListener("change", () => last && drawColos(last.summary.colos));
connect();
