// The herdbook console: hash routes over the /v1 HTTP API, live through /v1/events (SSE).
// No build step and no library: plain DOM. Untrusted text (ids, labels, reasons) goes
// through esc() or textContent, never into innerHTML raw.

import { fleetPage } from "./fleet.js";
import { mountGpus } from "./node.js";
import { jobPage, jobsPage } from "./jobs.js";
import { gpusPage } from "./gpus.js";
import { historyPage } from "./charts.js";
import { commandBar, loadCommands, mountCommands } from "./commands.js";

export const $ = (sel, root = document) => root.querySelector(sel);
export const main = () => $("#main");
const TOKEN_KEY = "herd.token";

// What tests and benchmarks read: when the fleet grid was drawn, each live patch.
export const probe = window.herdConsole = { fleetRenderedAt: null, fleetPaintedAt: null, fleetRows: 0, fleetVersion: null,
                                     updates: [], sseOpen: false, route: null };

export function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;",
                                                         '"': "&quot;", "'": "&#39;" })[c]);
}

// -- the API ---------------------------------------------------------------------------
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function token() { return localStorage.getItem(TOKEN_KEY) || ""; }

export async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers,
                                       body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!response.ok) {
    const code = data?.code || String(response.status);
    const message = data?.message || data?.error || text || response.statusText;
    throw new ApiError(response.status, code, message);
  }
  return data;
}

export function items(reply) { return Array.isArray(reply) ? reply : (reply?.items ?? []); }

export function showError(err) {
  const box = $("#error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  const hint = err.status === 401 ? " (set a token from `herd creds operator <name> --http`)" : "";
  box.textContent = err instanceof ApiError ? `${err.status} ${err.code}: ${err.message}${hint}`
                                            : String(err.message || err);
  box.hidden = false;
}

// -- the live stream ----------------------------------------------------------------------
const listeners = new Set();
let source = null;

function connectLive() {
  if (source) source.close();
  const params = new URLSearchParams({ since: "now" });
  if (token()) params.set("token", token());
  source = new EventSource(`/v1/events?${params}`);
  const live = $("#live");
  source.onopen = () => { probe.sseOpen = true; live.textContent = "live"; live.classList.add("on"); };
  source.onerror = () => { probe.sseOpen = false; live.textContent = "reconnecting"; live.classList.remove("on"); };
  source.onmessage = deliver;   // messages without an event: line
  return source;
}

function deliver(message) {
  let data;
  try { data = JSON.parse(message.data); } catch { return; }
  for (const listener of listeners) listener(data);
}

// The server names each message by its event type (its tag) and an EventSource dispatches
// a named message only to listeners of that name: listen to every tag the server knows.
let eventTypes = [];
async function listenAll() {
  if (!eventTypes.length) eventTypes = await api("/console/event-types.json").catch(() => []);
  for (const type of eventTypes) source.addEventListener(type, deliver);
}

export function onLive(listener) { listeners.add(listener); return () => listeners.delete(listener); }

export function subjectNode(subject) {
  const parts = subject.split(".");
  return parts[1] === "node" ? parts[2] : parts[1] === "alloc" ? parts[2] : null;
}

// -- routing ------------------------------------------------------------------------------
let leave = () => {};

async function route() {
  leave();
  leave = () => {};
  showError(null);
  const full = location.hash.replace(/^#\/?/, "");
  const cut = full.indexOf("?");    // #/?state=READY: a page's view in its query (fleet.js)
  const hash = cut < 0 ? full : full.slice(0, cut);
  const params = new URLSearchParams(cut < 0 ? "" : full.slice(cut + 1));
  const [page, ...rest] = hash.split("/");
  probe.route = page || "fleet";
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.dataset.route === probe.route);
  }
  const pages = { "": fleetPage, fleet: fleetPage, node: nodePage, pools: poolsPage, jobs: jobsPage,
                  evals: evalsPage, status: statusPage, job: jobPage, gpus: gpusPage,
                  history: historyPage };
  const render = pages[page] ?? notFound;
  try {
    const cleanup = await render(decodeURIComponent(rest.join("/")), params);
    if (typeof cleanup === "function") leave = cleanup;
  } catch (err) {
    showError(err);
  }
}

function notFound() { main().innerHTML = `<h1>No such page</h1><p><a href="#/">the fleet</a></p>`; }

// -- shared by the pages -------------------------------------------------------------------
export const STATES = ["READY", "CORDONED", "DRAINING", "DRAINED", "DISABLED", "BOOTING", "DEGRADED",
                       "UNHEALTHY", "VALIDATING", "DOWN", "FAILED", "QUARANTINED", "UNKNOWN", "TERMINATED"];

export function labelsText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(" ");
}

// -- a node -------------------------------------------------------------------------------
export function badge(text, color) {
  return `<span class="badge" style="background: ${color || `var(--${esc(text)}, var(--UNKNOWN))`}">${esc(text)}</span>`;
}

function kv(pairs) {
  return `<dl class="kv">${pairs.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v ?? "—")}</dd>`).join("")}</dl>`;
}

function table(rows, columns) {
  if (!rows.length) return `<p class="muted">none</p>`;
  columns = columns ?? Object.keys(rows[0]);
  const cell = v => v !== null && typeof v === "object" ? JSON.stringify(v) : v;
  return `<table><tr>${columns.map(c => `<th>${esc(c)}</th>`).join("")}</tr>` +
         rows.map(r => `<tr>${columns.map(c => `<td>${esc(cell(r[c]))}</td>`).join("")}</tr>`).join("") +
         `</table>`;
}

async function nodePage(id) {
  const commands = await loadCommands();   // the server's command table, read once
  main().innerHTML = `<h1>Node <span id="node-id">${esc(id)}</span> <span id="node-state"></span></h1>
    ${commandBar(commands)}
    <div id="notice"></div>
    <div class="columns">
      <div>
        <div class="card"><h2>Info</h2><div id="info"></div></div>
        <div class="card"><h2>Validation</h2><div id="validation"></div></div>
      </div>
      <div>
        <div class="card"><h2>GPUs</h2><div class="gpus" id="gpus"></div></div>
        <div class="card"><h2>Allocations</h2><div id="allocs"></div></div>
        <div class="card"><h2>As of</h2>
          <div class="slider"><input type="range" id="at" min="0" max="1000" value="1000">
            <span id="at-label">now</span></div>
          <div id="as-of"></div></div>
        <div class="card"><h2>Cause chains</h2><div id="chains"></div></div>
      </div>
    </div>
    <div class="card"><h2>History</h2><ul class="timeline" id="timeline"></ul></div>`;
  const range = probe.asOfRange = { from: 0, to: Date.now() };
  let timer = null;
  $("#at").addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => showAsOf(id, range), 150);
  });
  // a deleted node is out of the view (404) but its history stays in the log
  const load = () => loadNode(id, range).catch(err => (err.status === 404 ? gone(id) : showError(err)));
  mountCommands(id, commands, load);       // commands.js: every verb of the command table
  await loadNode(id, range);
  const stopGpus = await mountGpus(id);    // node.js: a card per GPU, charts
  let reload = null;
  const stopLive = onLive(message => {
    if (subjectNode(message.subject) !== id) return;
    clearTimeout(reload);
    reload = setTimeout(load, 100);
  });
  leave = () => { stopLive(); stopGpus(); clearTimeout(reload); };
}

function gone(id) {
  $("#node-state").innerHTML = badge("DELETED", "var(--TERMINATED)");
  $("#node-state").dataset.state = "DELETED";
  $("#info").innerHTML = `<p class="muted">${esc(id)} is not in the view (deleted); its events stay in the log ` +
    `(herd node history ${esc(id)}). An agent that registers again under this id is PENDING.</p>`;
}

// The validation gate's fields of node describe (docs/remediation.md#validation).
function validationRows(node) {
  const status = node.validation ?? "never validated";
  const waiting = node.validation_waiting ? " (due, waiting for a free slot: validation.max_concurrent)" : "";
  const window = node.validation_window_s == null ? "" : ` within ${Math.round(node.validation_window_s / 3600)} h`;
  return [["status", `${status}${waiting}`], ["due", node.validation_due ?? "no"],
          ["trigger", node.validation_trigger], ["check", node.validation_check],
          ["allocation", node.validation_alloc], ["started", node.validation_started_at?.slice(0, 19)],
          ["ended", node.validation_at?.slice(0, 19)], ["reason", node.validation_reason],
          ["failures", `${node.validation_failures ?? 0}${window}`]];
}

async function loadNode(id, range) {
  const [node, history, allocs] = await Promise.all([
    api(`/v1/nodes/${encodeURIComponent(id)}`),
    api(`/v1/nodes/${encodeURIComponent(id)}/history`).catch(err => { showError(err); return null; }),
    api(`/v1/allocs?node_id=${encodeURIComponent(id)}`).catch(() => []),
  ]);
  if ($("#node-id")?.textContent !== id) return;    // the page was left meanwhile
  $("#node-state").innerHTML = badge(node.state);
  $("#node-state").dataset.state = node.state;
  $("#info").innerHTML = kv([
    ["state", node.state], ["approval", node.approval], ["lifecycle", `${node.lifecycle} ${node.lifecycle_reason ?? ""}`],
    ["health", `${node.health} ${node.health_reason ?? ""}`],
    ["recommended action", node.recommended_action ?? "none"],
    ["intent", `${node.intent} ${node.intent_reason ?? ""}`],
    ...(node.drain_urgent || node.drain_deadline ? [["drain", `${node.drain_urgent ? "urgent" : "not urgent"}` +
      `${node.drain_deadline ? `, deadline ${node.drain_deadline.slice(0, 19)}` : ""}`]] : []),
    ...(node.class === "sensitive" ? [["claimed by", node.claimed_by ? `${node.claimed_by}${node.tenant ? ` (tenant ${node.tenant})` : ""}` : "nobody"],
                                      ["wipe", node.wipe_status ? `${node.wipe_status} (attempt ${node.wipe_attempt})` : "none"]] : []),
    ["schedulable", node.schedulable], ["class", node.class], ["pool", node.pool],
    ["labels", labelsText(node.labels)], ["hostname", node.hostname], ["agent", node.agent_version],
    ["cpus", node.cpus], ["memory", node.memory_bytes ? `${(node.memory_bytes / 2 ** 30).toFixed(1)} GiB` : null],
    ["last heartbeat", node.heartbeat_age == null ? "never" : `${node.heartbeat_age.toFixed(1)} s ago`],
    ["heartbeat warning", node.heartbeat_warning], ["last event", node.last_event], ["version", node.version],
  ]);
  $("#validation").innerHTML = kv(validationRows(node));
  $("#validation").dataset.validation = node.validation ?? "";
  const items = history?.items ?? [];
  const short = (text, n) => (text && text.length > n ? `${text.slice(0, n - 1)}…` : text);
  $("#allocs").innerHTML = table(items_(allocs).map(a => ({ id: a.id.slice(0, 12), job: a.job_id,
    status: a.status, desired: a.desired, exit: a.exit_code, requeues: a.requeue_count,
    reason: short(a.status_reason, 60), started: a.started_at?.slice(0, 19) })));
  $("#chains").innerHTML = [...(history?.chains ?? [])].reverse().map(c =>
    `<pre class="chain" data-root="${esc(c.root)}">${esc(c.lines.join("\n"))}</pre>`).join("") ||
    `<p class="muted">no event caused another</p>`;
  $("#timeline").innerHTML = [...items].reverse().map(item =>
    `<li data-seq="${item.seq}" data-at="${esc(item.at)}" data-event="${esc(item.event)}">` +
    `<span class="at">${esc(item.at)}</span> <b>${esc(item.event)}</b> by ${esc(item.actor)}` +
    (item.reason ? ` — ${esc(item.reason)}` : "") +
    (item.caused_by ? ` <span class="caused">(caused by ${esc(item.caused_by)})</span>` : "") +
    (item.caused?.length ? `<div class="caused">→ ${item.caused.map(c => esc(`${c.event}${c.on && c.on !== node.id ? ` on ${c.on}` : ""}`)).join(" → ")}</div>` : "") +
    `</li>`).join("");
  if (items.length) range.from = Date.parse(items[0].at);
  range.to = Date.now();
}

function items_(reply) { return items(reply); }

async function showAsOf(id, range) {
  const value = Number($("#at").value);
  if (value >= 1000) { $("#at-label").textContent = "now"; $("#as-of").innerHTML = ""; return; }
  const at = new Date(range.from + (range.to - range.from) * value / 1000);
  $("#at-label").textContent = at.toISOString();
  try {
    const past = await api("/v1/node/describe_at", { method: "POST", body: { id, at: at.toISOString() } });
    $("#as-of").innerHTML = kv([["state", past.state], ["approval", past.approval], ["lifecycle", past.lifecycle],
                                ["health", past.health], ["intent", past.intent], ["last event", past.last_event]]);
    for (const li of document.querySelectorAll("#timeline li")) {
      li.style.opacity = Date.parse(li.dataset.at) > at.getTime() ? 0.35 : 1;
    }
  } catch (err) {
    $("#as-of").innerHTML = `<div class="notice bad">${esc(err.message)}</div>`;
  }
}

// -- pools, jobs, evaluations, the control plane -----------------------------------------
async function listPage(title, path, columns) {
  main().innerHTML = `<h1>${esc(title)}</h1><div id="list"></div>`;
  const draw = async () => { $("#list").innerHTML = table(items(await api(path)), columns); };
  await draw();
  let timer = null;
  leave = onLive(() => { clearTimeout(timer); timer = setTimeout(() => draw().catch(showError), 500); });
}

function poolsPage() { return listPage("Pools", "/v1/pools"); }
function evalsPage() {
  return listPage("Evaluations", "/v1/evals", ["id", "job_id", "status", "triggered_by", "node_id",
                                               "status_reason", "created_at"]);
}

// The fleet health score of the status reply: one number and what it is made of.
function healthScoreRows(score) {
  if (!score || typeof score !== "object") return [];
  const share = v => (typeof v === "number" ? `${(100 * v).toFixed(1)} %` : v);
  const faults = Object.entries(score.faults || {}).map(([k, n]) => `${k} ${n}`).join(", ") || "none";
  return [["fleet health score", `${score.score} / 100`],
          ["GPUs healthy", share(score.gpus_healthy)], ["nodes schedulable", share(score.schedulable)],
          ["open faults", faults],
          ["validating", `${score.validating ?? 0} node(s)` +
            `${score.validation_waiting ? `, ${score.validation_waiting} due and waiting for a slot` : ""}`]];
}

// A duration in seconds as an operator reads it; null (no episode back in service): "—".
function duration(s) {
  if (typeof s !== "number") return "—";
  return s < 120 ? `${s.toFixed(s < 10 ? 1 : 0)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min`
       : s < 172800 ? `${(s / 3600).toFixed(1)} h` : `${(s / 86400).toFixed(1)} d`;
}

// The four durations of a repair episode (docs/remediation.md#repairs), as the status
// reply names them.
const DURATIONS = [["time to quarantine", "time_to_quarantine"], ["time to drain", "time_to_drain"],
                   ["time in repair", "time_in_repair"], ["MTTR", "mttr"]];

// The status reply's repairs: the repair fold's last 7 days (the same as GET /v1/repairs'
// default window, docs/remediation.md#repairs), without a second request each 2 s; the
// four durations' p50 / p90 for the fleet, then per pool (with its availability) and per
// fault kind. Exported for the browser test, which draws a reply with episodes.
export function repairsHtml(r) {
  if (!r) return `<p class="muted">not served by this control plane</p>`;
  if (r.reading_log) return `<p class="muted">still reading the event log${r.error ? `: ${esc(r.error)}` : ""}</p>`;
  const share = v => (typeof v === "number" ? `${(100 * v).toFixed(2)} %` : "—");
  const p = row => (row ? `${duration(row.p50_s)} / ${duration(row.p90_s)} (${row.count})` : "—");
  const groups = (title, rows, withAvailability) => {
    const keys = Object.keys(rows || {});
    if (!keys.length) return "";
    return `<table class="repairs-by"><tr><th>${esc(title)}</th>` +
      DURATIONS.map(([label]) => `<th>${esc(label)} p50 / p90 (episodes)</th>`).join("") +
      `${withAvailability ? "<th>availability</th>" : ""}</tr>` +
      keys.map(k => `<tr data-key="${esc(k)}"><td>${esc(k)}</td>` +
        DURATIONS.map(([, key]) => `<td>${esc(p(rows[k][key]))}</td>`).join("") +
        `${withAvailability ? `<td>${esc(share(rows[k].availability))}</td>` : ""}</tr>`).join("") + `</table>`;
  };
  return kv([["window", r.window], ["episodes back in service", r.back_in_service], ["open episodes", r.open],
             ...DURATIONS.map(([label, key]) => [`${label} p50 / p90`, p(r[key])]),
             ["availability", `${share(r.availability)} (${r.gpu_hours_in_service ?? "?"} of ` +
                              `${r.gpu_hours_owned ?? "?"} GPU-hours in service)`]]) +
    groups("pool", r.by_pool, true) + groups("fault kind", r.by_kind, false);
}

async function statusPage() {
  main().innerHTML = `<h1>Control plane</h1><div class="card" id="status"></div>
    <div class="card"><h2>Repairs <span class="muted">(herd fleet repairs; every episode: GET /v1/repairs)</span></h2>
      <div id="repairs"></div></div>`;
  const draw = async () => {
    const status = await api("/v1/status");
    const extra = await api("/v1/health-summary").catch(() => ({}));
    if (!$("#status")) return;    // the page was left meanwhile
    const all = { ...status, ...extra };
    const pct = all.heartbeat_age ?? all.heartbeat_age_percentiles ?? {};
    const fmt = v => (typeof v === "number" ? `${v.toFixed(2)} s` : v);
    $("#status").innerHTML =
      `<p id="leader" data-leader="${!!all.leader}">${all.leader ? badge("LEADER", "var(--READY)")
                                                              : badge("STANDBY", "var(--DISABLED)")}</p>` +
      kv([...healthScoreRows(all.health_score),
          ["projector lag", `${all.projector_lag ?? "?"} events`],
          ["heartbeat age p50", fmt(pct.p50 ?? all.heartbeat_age_p50)],
          ["heartbeat age p99", fmt(pct.p99 ?? all.heartbeat_age_p99)],
          ["heartbeat age max", fmt(pct.max ?? all.heartbeat_age_max)],
          ...Object.entries(all).filter(([, v]) => v === null || typeof v !== "object")
                                .map(([k, v]) => [k.replaceAll("_", " "), v])]);
    $("#repairs").innerHTML = repairsHtml(all.repairs);
  };
  await draw();
  const timer = setInterval(() => draw().catch(showError), 2000);
  leave = () => clearInterval(timer);
}

// -- start -------------------------------------------------------------------------------
function start() {
  $("#token").value = token();
  $("#token-form").addEventListener("submit", e => {
    e.preventDefault();
    localStorage.setItem(TOKEN_KEY, $("#token").value.trim());
    connectLive();
    listenAll();
    route();
  });
  connectLive();
  listenAll();
  window.addEventListener("hashchange", route);
  route();
}

start();
