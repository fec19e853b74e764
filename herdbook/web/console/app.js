// The herdbook console: hash routes over the /v1 HTTP API, live through /v1/events (SSE).
// No build step and no library: plain DOM. Untrusted text (ids, labels, reasons) goes
// through esc() or textContent, never into innerHTML raw.

const $ = (sel, root = document) => root.querySelector(sel);
const main = () => $("#main");
const TOKEN_KEY = "herd.token";
const ACTIONS = ["approve", "cordon", "drain", "uncordon"];
const HEALTH_COLOR = { HEALTHY: "var(--HEALTHY)", DEGRADED: "var(--DEGRADED)",
                       UNHEALTHY: "var(--UNHEALTHY)", UNKNOWN: "var(--UNKNOWN)" };

// What tests and benchmarks read: when the fleet grid was drawn, each live patch.
const probe = window.herdConsole = { fleetRenderedAt: null, fleetPaintedAt: null, fleetRows: 0, fleetVersion: null,
                                     updates: [], sseOpen: false, route: null };

export function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;",
                                                         '"': "&quot;", "'": "&#39;" })[c]);
}

// -- the API ---------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function token() { return localStorage.getItem(TOKEN_KEY) || ""; }

async function api(path, { method = "GET", body } = {}) {
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

function items(reply) { return Array.isArray(reply) ? reply : (reply?.items ?? []); }

function showError(err) {
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

function onLive(listener) { listeners.add(listener); return () => listeners.delete(listener); }

function subjectNode(subject) {
  const parts = subject.split(".");
  return parts[1] === "node" ? parts[2] : parts[1] === "alloc" ? parts[2] : null;
}

// -- routing ------------------------------------------------------------------------------
let leave = () => {};

async function route() {
  leave();
  leave = () => {};
  showError(null);
  const hash = location.hash.replace(/^#\/?/, "");
  const [page, ...rest] = hash.split("/");
  probe.route = page || "fleet";
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.dataset.route === probe.route);
  }
  const pages = { "": fleetPage, fleet: fleetPage, node: nodePage, pools: poolsPage, jobs: jobsPage,
                  evals: evalsPage, status: statusPage };
  const render = pages[page] ?? notFound;
  try {
    await render(decodeURIComponent(rest.join("/")));
  } catch (err) {
    showError(err);
  }
}

function notFound() { main().innerHTML = `<h1>No such page</h1><p><a href="#/">the fleet</a></p>`; }

// -- the fleet ----------------------------------------------------------------------------
const fleet = { columns: {}, rows: new Map(), cells: new Map(), version: 0 };
const STATES = ["READY", "CORDONED", "DRAINING", "DRAINED", "DISABLED", "BOOTING", "DEGRADED",
                "UNHEALTHY", "DOWN", "FAILED", "QUARANTINED", "UNKNOWN", "TERMINATED"];

function col(row, name) { return row[fleet.columns[name]]; }

function labelsText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(" ");
}

function cellTitle(row) {
  return `${col(row, "id")} ${col(row, "state")} ${col(row, "health")}` +
         (col(row, "pool") ? ` pool=${col(row, "pool")}` : "");
}

async function fleetPage() {
  main().innerHTML = `<h1>Fleet</h1><div class="counts" id="counts"></div>
    <div class="counts" id="health-counts"></div>
    <div class="filters">
      <input id="search" placeholder="id prefix" size="14">
      <select id="f-state"><option value="">any state</option></select>
      <input id="f-label" placeholder="label k=v" size="14">
      <select id="f-pool"><option value="">any pool</option></select>
      <select id="f-class"><option value="">any class</option></select>
      <span id="shown" class="muted"></span>
    </div>
    <div class="grid" id="grid"></div>`;
  const reply = await api("/v1/fleet");
  fleet.columns = Object.fromEntries(reply.columns.map((name, i) => [name, i]));
  fleet.version = reply.version;
  fleet.rows = new Map(reply.rows.map(row => [col(row, "id"), row]));
  drawGrid();
  drawCounts();
  fillFilters();
  for (const id of ["search", "f-state", "f-label", "f-pool", "f-class"]) {
    $(`#${id}`).addEventListener("input", applyFilters);
  }
  $("#grid").addEventListener("click", e => {
    const id = e.target.dataset?.id;
    if (id) location.hash = `#/node/${encodeURIComponent(id)}`;
  });
  $("#counts").addEventListener("click", e => {
    const state = e.target.closest(".count")?.dataset.state;
    if (state !== undefined) { $("#f-state").value = state; applyFilters(); }
  });
  probe.fleetVersion = fleet.version;
  probe.fleetRows = fleet.rows.size;
  probe.fleetRenderedAt = performance.now();
  requestAnimationFrame(() => setTimeout(() => { probe.fleetPaintedAt = performance.now(); }, 0));
  leave = onLive(fleetEvent);
}

function drawGrid() {
  const html = [];
  for (const row of fleet.rows.values()) {
    const id = esc(col(row, "id"));
    html.push(`<div class="cell" data-id="${id}" data-state="${esc(col(row, "state"))}" ` +
              `data-health="${esc(col(row, "health"))}" title="${esc(cellTitle(row))}"></div>`);
  }
  const grid = $("#grid");
  grid.innerHTML = html.join("");
  fleet.cells = new Map();
  for (const cell of grid.children) fleet.cells.set(cell.dataset.id, cell);
}

function countBy(name) {
  const counts = new Map();
  for (const row of fleet.rows.values()) counts.set(col(row, name), (counts.get(col(row, name)) || 0) + 1);
  return counts;
}

function drawCounts() {
  const box = $("#counts");
  if (!box) return;
  const states = countBy("state");
  const ordered = [...STATES.filter(s => states.has(s)), ...[...states.keys()].filter(s => !STATES.includes(s))];
  box.innerHTML = `<span class="count" data-state=""><b>${fleet.rows.size}</b>nodes</span>` +
    ordered.map(s => `<span class="count" data-state="${esc(s)}" data-count="${states.get(s)}">` +
                     `<i style="background: var(--${esc(s)}, var(--UNKNOWN))"></i><b>${states.get(s)}</b>${esc(s)}</span>`).join("");
  const health = countBy("health");
  $("#health-counts").innerHTML = [...health.entries()].map(([h, n]) =>
    `<span class="count health" data-health="${esc(h)}"><i style="background: ${HEALTH_COLOR[h] || "var(--UNKNOWN)"}">` +
    `</i><b>${n}</b>${esc(h)}</span>`).join("");
}

function fillFilters() {
  const options = (select, values) => {
    const keep = select.value;
    select.length = 1;
    for (const v of [...values].filter(v => v).sort()) select.add(new Option(v, v));
    select.value = keep;
  };
  options($("#f-state"), countBy("state").keys());
  options($("#f-pool"), countBy("pool").keys());
  options($("#f-class"), countBy("class").keys());
}

function matches(row, f) {
  if (f.prefix && !col(row, "id").startsWith(f.prefix)) return false;
  if (f.state && col(row, "state") !== f.state) return false;
  if (f.pool && col(row, "pool") !== f.pool) return false;
  if (f.cls && col(row, "class") !== f.cls) return false;
  if (f.label) {
    const labels = col(row, "labels") || {};
    const [k, v] = f.label.split("=", 2);
    if (v === undefined ? !(k in labels) : labels[k] !== v) return false;
  }
  return true;
}

function filters() {
  return { prefix: $("#search")?.value.trim() ?? "", state: $("#f-state")?.value ?? "",
           label: $("#f-label")?.value.trim() ?? "", pool: $("#f-pool")?.value ?? "",
           cls: $("#f-class")?.value ?? "" };
}

function applyFilters() {
  const f = filters();
  let shown = 0;
  for (const [id, row] of fleet.rows) {
    const on = matches(row, f);
    shown += on;
    fleet.cells.get(id)?.classList.toggle("off", !on);
  }
  $("#shown").textContent = `${shown} of ${fleet.rows.size} shown`;
}

// A node event: fetch that node once the view holds the event (its version is the stream
// sequence of its last event), then patch its one cell. Bursts coalesce per node.
const pending = new Map();
let flushing = false;

function fleetEvent(message) {
  const id = message.subject.startsWith("herd.node.") ? subjectNode(message.subject) : null;
  if (!id) return;
  pending.set(id, { seq: message.seq, at: message.event?.at, tries: 0, got: performance.now() });
  if (!flushing) { flushing = true; setTimeout(flush, 0); }
}

const BULK = 64;   // more nodes than this waiting: one /v1/fleet instead of a request each

async function flush() {
  try {
    while (pending.size) {
      if (pending.size > BULK) {
        const batch = new Map(pending);
        pending.clear();
        await patchFleet(batch);
        continue;
      }
      const batch = [...pending.entries()].slice(0, 16);
      for (const [id] of batch) pending.delete(id);
      await Promise.all(batch.map(([id, want]) => patchNode(id, want)));
    }
  } finally {
    flushing = false;
  }
}

// A burst (a partition, a rebuild): the whole fleet once the view holds the newest event,
// every changed cell patched.
async function patchFleet(batch) {
  const newest = Math.max(...[...batch.values()].map(w => w.seq));
  let reply = await api("/v1/fleet");
  for (let tries = 0; reply.version < newest && tries < 40; tries++) {
    await new Promise(resolve => setTimeout(resolve, 25));
    reply = await api("/v1/fleet");
  }
  const seen = new Set();
  for (const row of reply.rows) {
    const id = row[fleet.columns.id];
    seen.add(id);
    fleet.rows.set(id, row);
    let cell = fleet.cells.get(id);
    if (!cell && $("#grid")) {
      cell = document.createElement("div");
      cell.className = "cell";
      cell.dataset.id = id;
      $("#grid").append(cell);
      fleet.cells.set(id, cell);
    }
    if (cell && (cell.dataset.state !== col(row, "state") || cell.dataset.health !== col(row, "health"))) {
      cell.dataset.state = col(row, "state");
      cell.dataset.health = col(row, "health");
      cell.title = cellTitle(row);
    }
  }
  for (const id of [...fleet.rows.keys()]) if (!seen.has(id)) removeNode(id);
  fleet.version = reply.version;
  applyFilters();
  fillFilters();
  scheduleCounts();
  const now = performance.timeOrigin + performance.now();
  for (const [id, want] of batch) {
    probe.updates.push({ id, seq: want.seq, state: col(fleet.rows.get(id) ?? [], "state"),
                         latency_ms: want.at ? now - Date.parse(want.at) : null,
                         sse_ms: want.at ? performance.timeOrigin + want.got - Date.parse(want.at) : null,
                         in_page_ms: performance.now() - want.got, bulk: true });
  }
}

let countsScheduled = false;
function scheduleCounts() {
  if (countsScheduled) return;
  countsScheduled = true;
  requestAnimationFrame(() => { countsScheduled = false; drawCounts(); });
}

async function patchNode(id, want) {
  let node;
  try {
    node = await api(`/v1/nodes/${encodeURIComponent(id)}`);
  } catch (err) {
    if (err.status === 404) { removeNode(id); return; }
    showError(err);
    return;
  }
  if (node.version < want.seq && want.tries < 60) {   // the projector has not folded it yet
    want.tries += 1;
    setTimeout(() => { if (!pending.has(id)) pending.set(id, want);
                       if (!flushing) { flushing = true; flush(); } }, 25);
    return;
  }
  const row = fleet.rows.get(id) ?? [];
  const values = { id: node.id, state: node.state, health: node.health, pool: node.pool,
                   class: node.class, labels: node.labels, schedulable: node.schedulable,
                   gpus: node.gpus, last_heartbeat_age: node.heartbeat_age };
  for (const [name, i] of Object.entries(fleet.columns)) if (name in values) row[i] = values[name];
  const fresh = !fleet.rows.has(id);
  fleet.rows.set(id, row);
  let cell = fleet.cells.get(id);
  if (!cell && $("#grid")) {
    cell = document.createElement("div");
    cell.className = "cell";
    cell.dataset.id = id;
    $("#grid").append(cell);
    fleet.cells.set(id, cell);
  }
  if (cell) {
    cell.dataset.state = node.state;
    cell.dataset.health = node.health;
    cell.title = cellTitle(row);
    cell.classList.toggle("off", !matches(row, filters()));
  }
  scheduleCounts();
  if (fresh) fillFilters();
  const now = performance.timeOrigin + performance.now();
  probe.updates.push({ id, seq: want.seq, state: node.state,
                       latency_ms: want.at ? now - Date.parse(want.at) : null,
                       sse_ms: want.at ? performance.timeOrigin + want.got - Date.parse(want.at) : null,
                       in_page_ms: performance.now() - want.got });
}

function removeNode(id) {
  fleet.rows.delete(id);
  fleet.cells.get(id)?.remove();
  fleet.cells.delete(id);
  scheduleCounts();
}

// -- a node -------------------------------------------------------------------------------
function badge(text, color) {
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

// Each GPU's health as the API says it (node describe's gpu_health: the classifier's
// per-GPU verdict with its cause, never read from reason text), as the grid's colours.
const GPU_COLOR_KEY = { healthy: "HEALTHY", degraded: "DEGRADED", unhealthy: "UNHEALTHY",
                        critical: "UNHEALTHY", fatal: "UNHEALTHY", unknown: "UNKNOWN" };
export function gpuHealth(rows) {
  return {
    health: rows.map(g => GPU_COLOR_KEY[g.health] || "UNKNOWN"),
    reasons: rows.map(g => [g.health, g.cause].filter(Boolean).join(": ")),
  };
}

async function nodePage(id) {
  main().innerHTML = `<h1>Node <span id="node-id">${esc(id)}</span> <span id="node-state"></span></h1>
    <div class="card actions">
      <input id="reason" placeholder="reason (recorded with the event)">
      ${ACTIONS.map(a => `<button data-action="${a}">${a}</button>`).join("")}
    </div>
    <div id="notice"></div>
    <div class="columns">
      <div class="card"><h2>Info</h2><div id="info"></div></div>
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
  for (const button of document.querySelectorAll("[data-action]")) {
    button.addEventListener("click", () => act(id, button.dataset.action));
  }
  const range = probe.asOfRange = { from: 0, to: Date.now() };
  let timer = null;
  $("#at").addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => showAsOf(id, range), 150);
  });
  await loadNode(id, range);
  let reload = null;
  leave = onLive(message => {
    if (subjectNode(message.subject) !== id) return;
    clearTimeout(reload);
    reload = setTimeout(() => loadNode(id, range).catch(showError), 100);
  });
}

async function loadNode(id, range) {
  const [node, history, allocs] = await Promise.all([
    api(`/v1/nodes/${encodeURIComponent(id)}`),
    api(`/v1/nodes/${encodeURIComponent(id)}/history`).catch(err => { showError(err); return null; }),
    api(`/v1/allocs?node_id=${encodeURIComponent(id)}`).catch(() => []),
  ]);
  $("#node-state").innerHTML = badge(node.state);
  $("#node-state").dataset.state = node.state;
  $("#info").innerHTML = kv([
    ["state", node.state], ["approval", node.approval], ["lifecycle", `${node.lifecycle} ${node.lifecycle_reason ?? ""}`],
    ["health", `${node.health} ${node.health_reason ?? ""}`], ["intent", `${node.intent} ${node.intent_reason ?? ""}`],
    ["schedulable", node.schedulable], ["class", node.class], ["pool", node.pool],
    ["labels", labelsText(node.labels)], ["hostname", node.hostname], ["agent", node.agent_version],
    ["cpus", node.cpus], ["memory", node.memory_bytes ? `${(node.memory_bytes / 2 ** 30).toFixed(1)} GiB` : null],
    ["last heartbeat", node.heartbeat_age == null ? "never" : `${node.heartbeat_age.toFixed(1)} s ago`],
    ["heartbeat warning", node.heartbeat_warning], ["last event", node.last_event], ["version", node.version],
  ]);
  const items = history?.items ?? [];
  const rows = node.gpu_health ?? [];
  const { health, reasons } = gpuHealth(rows);
  $("#gpus").innerHTML = health.map((h, i) =>
    `<div class="gpu" data-gpu="${rows[i].index}" data-health="${h}" style="background: ${HEALTH_COLOR[h]}" ` +
    `title="${esc(rows[i].model ?? "")} ${esc(rows[i].uuid ?? "")} ${esc(reasons[i])}">GPU ${rows[i].index}<br>${h}</div>`
  ).join("") || `<p class="muted">no GPUs</p>`;
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

async function act(id, action) {
  const reason = $("#reason").value.trim();
  const notice = $("#notice");
  try {
    const result = await api(`/v1/nodes/${encodeURIComponent(id)}/${action}`, { method: "POST", body: { reason } });
    // unchanged: the goal already held ("node x already cordoned"), nothing appended
    notice.innerHTML = `<div class="notice good">${esc(action)}: ${esc(result?.unchanged || result?.event || "done")}` +
                       `${result?.seq && !result?.unchanged ? ` (seq ${result.seq})` : ""}</div>`;
    await loadNode(id, { from: 0, to: Date.now() });
  } catch (err) {
    const text = err instanceof ApiError ? `${action} refused (${err.status} ${err.code}): ${err.message}` : String(err);
    notice.innerHTML = `<div class="notice bad" data-status="${esc(err.status)}">${esc(text)}</div>`;
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
function jobsPage() { return listPage("Jobs", "/v1/jobs"); }
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
          ["open faults", faults]];
}

async function statusPage() {
  main().innerHTML = `<h1>Control plane</h1><div class="card" id="status"></div>`;
  const draw = async () => {
    const status = await api("/v1/status");
    const extra = await api("/v1/health-summary").catch(() => ({}));
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
