// Kiln node dashboard: polls this node's /metrics (Prometheus text) and draws it.
// Rates and percentiles are taken between now and the sample about a minute ago, so
// they describe the last minute, as a Grafana panel over rate(...[1m]) would.
"use strict";
const POLL_MS = 2000;
const HISTORY = 150; // samples kept for the charts: 5 minutes
const WINDOW_MS = 60000;
// A metrics key, if the node wants one, from the page's URL: /dashboard#key=...
const KEY = new URLSearchParams(location.hash.slice(1)).get("key");
const samples = [];

// name -> [{labels, value}] from the text exposition format.
function parse(text) {
  const out = new Map();
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = line.match(/^([^{\s]+)(?:\{(.*)\})?\s+(\S+)$/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2].replace(/\\(.)/g, "$1");
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value: Number(m[3]) });
  }
  return out;
}

// Sum of `name` over the series matching `where` (label -> value).
function sum(s, name, where = {}) {
  let total = 0;
  for (const x of s.metrics.get(name) || []) {
    if (Object.entries(where).every(([k, v]) => x.labels[k] === v)) total += x.value;
  }
  return total;
}

function models(s) {
  return [...new Set((s.metrics.get("kiln:model_loaded") || []).map((x) => x.labels.model_name))].sort();
}

// The sample closest to a window before `now`.
function before(now) {
  let then = samples[0];
  for (const s of samples) if (now.t - s.t >= WINDOW_MS) then = s;
  return then;
}

// Per second between the samples; null (drawn "–") from a single sample.
function rate(now, then, name, where) {
  const dt = (now.t - then.t) / 1000;
  if (dt <= 0) return null;
  return Math.max(0, sum(now, name, where) - sum(then, name, where)) / dt;
}

// histogram_quantile over the buckets' increase between the two samples (all of it
// when nothing new was observed).
function quantiles(now, then, name) {
  const buckets = (s) => {
    const by = new Map();
    for (const x of s.metrics.get(name + "_bucket") || []) {
      const le = x.labels.le === "+Inf" ? Infinity : Number(x.labels.le);
      by.set(le, (by.get(le) || 0) + x.value);
    }
    return by;
  };
  const a = buckets(now), b = then === now ? new Map() : buckets(then);
  let les = [...a.keys()].sort((x, y) => x - y);
  let counts = les.map((le) => a.get(le) - (b.get(le) || 0));
  if (!counts.length || counts[counts.length - 1] <= 0) counts = les.map((le) => a.get(le));
  const total = counts[counts.length - 1] || 0;
  const q = (p) => {
    if (!total) return null;
    const rank = p * total;
    for (let i = 0; i < les.length; i++) {
      if (counts[i] >= rank) {
        if (les[i] === Infinity) return les[i - 1] ?? null;
        const lo = i ? les[i - 1] : 0, below = i ? counts[i - 1] : 0;
        return lo + (les[i] - lo) * ((rank - below) / Math.max(1, counts[i] - below));
      }
    }
    return null;
  };
  return { p50: q(0.5), p90: q(0.9), p99: q(0.99), count: total };
}

const fmt = (v, d = 1) => (v === null || v === undefined || !isFinite(v) ? "–" : v.toFixed(d));
const ms = (v) => (v === null ? "–" : (v * 1000).toFixed(v < 0.1 ? 1 : 0));
const esc = (t) => String(t).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

function drawTiles(now, then) {
  const tiles = [
    ["requests", "requests / s", fmt(rate(now, then, "kiln:request_success_total"), 2)],
    ["output", "output tok / s", fmt(rate(now, then, "kiln:generation_tokens_total"))],
    ["prompt", "prompt tok / s", fmt(rate(now, then, "kiln:prompt_tokens_total"))],
    ["running", "running", fmt(sum(now, "kiln:num_requests_running"), 0)],
    ["waiting", "waiting", fmt(sum(now, "kiln:num_requests_waiting"), 0)],
    ["kv", "KV cache use", fmt(100 * Math.max(0, ...(now.metrics.get("kiln:kv_cache_usage_perc") || []).map((x) => x.value), 0)) + " %"],
    ["prefix", "prefix cache hits", hitRate(now, then) + " %"],
    ["disk", "KV disk hits, tok / s", fmt(rate(now, then, "kiln:kv_disk_hit_tokens_total"))],
    ["firewall", "firewall blocks / min", perMinute(now, then, "kiln:firewall_blocks_total")],
    ["rejected", "429s / min", perMinute(now, then, "kiln:requests_rejected_total")],
    ["preempted", "preemptions / min", perMinute(now, then, "kiln:num_preemptions_total")],
    ["errors", "errors (total)", fmt(errors(now), 0)],
  ];
  document.getElementById("tiles").innerHTML = tiles
    .map(([id, label, v]) => `<div class="tile" data-tile="${id}"><b>${v}</b><span>${label}</span></div>`)
    .join("");
}

function perMinute(now, then, name) {
  const r = rate(now, then, name);
  return r === null ? "–" : fmt(60 * r, 1);
}

function hitRate(now, then, where) {
  const q = sum(now, "kiln:prefix_cache_queries_total", where) - sum(then, "kiln:prefix_cache_queries_total", where);
  const h = sum(now, "kiln:prefix_cache_hits_total", where) - sum(then, "kiln:prefix_cache_hits_total", where);
  return q > 0 ? fmt((100 * h) / q) : "–";
}

function errors(s, where = {}) {
  return sum(s, "kiln:non_finite_logits_total", where) + sum(s, "kiln:model_load_failures_total", where);
}

function drawLatency(now, then) {
  const rows = [
    ["time to first token", "kiln:time_to_first_token_seconds"],
    ["inter-token", "kiln:inter_token_latency_seconds"],
    ["request (end to end)", "kiln:e2e_request_latency_seconds"],
    ["queued", "kiln:request_queue_time_seconds"],
  ];
  document.getElementById("latency").innerHTML = rows
    .map(([label, name]) => {
      const q = quantiles(now, then, name);
      return `<tr data-latency="${name}"><td>${label}</td><td>${ms(q.p50)}</td><td>${ms(q.p90)}</td><td>${ms(q.p99)}</td><td>${q.count}</td></tr>`;
    })
    .join("");
}

function drawModels(now, then) {
  document.getElementById("models").innerHTML = models(now)
    .map((m) => {
      const w = { model_name: m };
      const reason = (r) => fmt(sum(now, "kiln:request_success_total", { model_name: m, finished_reason: r }), 0);
      const drafted = sum(now, "kiln:spec_decode_num_draft_tokens_total", w);
      const accepted = sum(now, "kiln:spec_decode_num_accepted_tokens_total", w);
      const state = sum(now, "kiln:model_ready", w) ? "ready" : sum(now, "kiln:model_loaded", w) ? "loading" : "unloaded";
      const kv = (now.metrics.get("kiln:kv_cache_usage_perc") || []).find((x) => x.labels.model_name === m);
      return `<tr data-model="${esc(m)}"><td>${esc(m)}</td><td>${state}</td>` +
        `<td>${fmt(sum(now, "kiln:num_requests_running", w), 0)}</td><td>${fmt(sum(now, "kiln:num_requests_waiting", w), 0)}</td>` +
        `<td>${kv ? fmt(100 * kv.value) + " %" : "–"}</td><td>${hitRate(now, then, w)} %</td>` +
        `<td>${reason("stop")}</td><td>${reason("length")}</td><td>${reason("abort")}</td>` +
        `<td>${fmt(errors(now, w), 0)}</td><td>${fmt(sum(now, "kiln:requests_rejected_total", w), 0)}</td>` +
        `<td>${drafted ? fmt((100 * accepted) / drafted) + " %" : "–"}</td></tr>`;
    })
    .join("");
}

// Up to two series of the history as polylines, y from 0 to the largest value.
function chart(id, series) {
  const svg = document.getElementById(id);
  const w = svg.clientWidth || 400, h = svg.clientHeight || 140;
  const max = Math.max(1e-9, ...series.flat());
  const n = Math.max(2, series[0].length);
  const line = (ys, i) =>
    `<polyline class="s${i}" points="${ys.map((y, j) => `${((j * w) / (n - 1)).toFixed(1)},${(h - 12 - (y / max) * (h - 20)).toFixed(1)}`).join(" ")}"/>`;
  svg.innerHTML = series.map(line).join("") + `<text x="2" y="10">${fmt(max)}</text>`;
}

function drawCharts() {
  const rates = samples.slice(1).map((s, i) => [s, samples[i]]);
  if (!rates.length) return;
  chart("tokens-chart", [
    rates.map(([a, b]) => rate(a, b, "kiln:prompt_tokens_total") ?? 0),
    rates.map(([a, b]) => rate(a, b, "kiln:generation_tokens_total") ?? 0),
  ]);
  chart("queue-chart", [
    samples.map((s) => sum(s, "kiln:num_requests_running")),
    samples.map((s) => sum(s, "kiln:num_requests_waiting")),
  ]);
  chart("kv-chart", [samples.map((s) => 100 * Math.max(0, ...(s.metrics.get("kiln:kv_cache_usage_perc") || []).map((x) => x.value)))]);
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const r = await fetch("/metrics", { headers: KEY ? { Authorization: `Bearer ${KEY}` } : {} });
    if (!r.ok) throw new Error(r.status === 401 ? "401: open /dashboard#key=<metrics key>" : `HTTP ${r.status}`);
    const now = { t: Date.now(), metrics: parse(await r.text()) };
    samples.push(now);
    if (samples.length > HISTORY) samples.shift();
    const colo = r.headers.get("x-kiln-colo");
    document.getElementById("colo").textContent = colo ? `· ${colo}` : "";
    const then = before(now);
    drawTiles(now, then);
    drawLatency(now, then);
    drawModels(now, then);
    drawCharts();
    status.textContent = "live";
    status.className = "muted";
    document.body.dataset.updated = String(now.t);
    document.body.dataset.samples = String(samples.length);
  } catch (e) {
    status.textContent = `error: ${e.message}`;
    status.className = "error";
  }
  setTimeout(poll, POLL_MS);
}

poll();
