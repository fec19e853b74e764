// The fleet page (issue 28 items 1, 2, 7): every node as a virtualised table or as a map
// grouped by a label; filters and sort in the URL (#/?state=READY&label=rack=r1&sort=temp);
// live over /v1/events; a selection acted on with one reason and one confirmation.
//
// At 10,000 nodes: the data stays as /v1/fleet's row arrays in one Map; a sort computes
// each row's key once then sorts indexes; the table draws only the rows in view (~40
// <tr>s whatever the fleet's size); live patches are coalesced into one redraw a frame.
import { $, main, api, esc, onLive, probe, subjectNode, labelsText, STATES } from "./app.js";
import { loadCommands } from "./commands.js";

const ROW_H = 26;            // px, every row: rows in view are computed from scrollTop
const OVERSCAN = 8;          // rows drawn above and below the view, so a scroll shows no gap
const CONCURRENCY = 8;       // bulk actions in flight at once
const REFRESH_MS = 15000;    // GPU readings and heartbeat ages (not events): re-read this often
const BULK = 64;             // more nodes than this waiting: one /v1/fleet instead of one each
const SHOWN_RESULTS = 300;   // result rows drawn after a bulk action (every refusal, then these)

const HEALTHS = ["HEALTHY", "DEGRADED", "UNHEALTHY", "UNKNOWN"];
// Each state's mark, so that no state is told by its colour alone (the legend names them).
export const GLYPH = { READY: "", CORDONED: "C", DRAINING: "d", DRAINED: "D", DISABLED: "–",
                       BOOTING: "b", DEGRADED: "~", UNHEALTHY: "!", DOWN: "×", FAILED: "F",
                       QUARANTINED: "Q", UNKNOWN: "?", TERMINATED: "T", VALIDATING: "V" };

const F = {
  columns: {}, rows: new Map(), version: 0, shown: [], selected: new Set(), cursor: 0,
  view: "table", sort: "id", desc: false, group: "rack", zoom: 1,
  filters: { q: "", state: "", health: "", label: "", pool: "", class: "" },
  dirty: new Set(), probes: [], cells: new Map(), lastClicked: null,
};

const c = (row, name) => row[F.columns[name]];
const num = v => (v === null || v === undefined ? null : Number(v));
const fmt = (v, digits = 0) => (v === null || v === undefined ? "—" : Number(v).toFixed(digits));

function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  return s < 90 ? `${Math.round(s)} s ago` : s < 5400 ? `${Math.round(s / 60)} min ago`
       : s < 172800 ? `${Math.round(s / 3600)} h ago` : `${Math.round(s / 86400)} d ago`;
}

export function stateTag(state) {
  const glyph = GLYPH[state] ?? "?";
  return `<span class="st" data-state="${esc(state)}"><i aria-hidden="true">${esc(glyph)}</i>${esc(state)}</span>`;
}

// -- columns: what a cell shows and the key it sorts by --------------------------------------
const COLUMNS = [
  { key: "id", label: "node", width: 128, sort: r => c(r, "id"),
    html: r => `<a href="#/node/${encodeURIComponent(c(r, "id"))}" tabindex="-1">${esc(c(r, "id"))}</a>` },
  { key: "state", label: "state", width: 112, sort: r => c(r, "state"), html: r => stateTag(c(r, "state")) },
  { key: "approval", label: "approval", width: 84, sort: r => c(r, "approval") },
  { key: "health", label: "health", width: 90, sort: r => c(r, "health") },
  { key: "intent", label: "intent", width: 76, sort: r => c(r, "intent") },
  { key: "class", label: "class", width: 72, sort: r => c(r, "class") },
  { key: "pool", label: "pool", width: 72, sort: r => c(r, "pool") ?? null },
  { key: "labels", label: "labels", sort: r => labelsText(c(r, "labels")) || null,
    text: r => labelsText(c(r, "labels")) },
  { key: "gpus", label: "GPUs", width: 56, num: true,
    sort: r => (c(r, "gpus") ? (c(r, "gpus_healthy") ?? -1) / c(r, "gpus") : null),
    text: r => (c(r, "gpus") ? `${c(r, "gpus_healthy") ?? "?"}/${c(r, "gpus")}` : "—") },
  { key: "temp", label: "hot °C", width: 56, num: true, sort: r => num(c(r, "gpu_temp_max")),
    text: r => fmt(c(r, "gpu_temp_max")) },
  { key: "util", label: "util %", width: 54, num: true, sort: r => num(c(r, "gpu_util")),
    text: r => fmt(c(r, "gpu_util")) },
  { key: "heartbeat", label: "hb age", width: 58, num: true, sort: r => num(c(r, "last_heartbeat_age")),
    text: r => (c(r, "last_heartbeat_age") === null ? "never" : `${fmt(c(r, "last_heartbeat_age"), 1)} s`) },
  { key: "allocs", label: "allocs", width: 50, num: true, sort: r => num(c(r, "allocs")),
    text: r => String(c(r, "allocs") ?? "—") },
  { key: "event", label: "last event", width: 150, sort: r => c(r, "last_event_at") ?? null,
    text: r => `${c(r, "last_event") ?? ""} ${ago(c(r, "last_event_at"))}`,
    title: r => `${c(r, "last_event") ?? ""} at ${c(r, "last_event_at") ?? "?"}` },
];
const BY_KEY = Object.fromEntries(COLUMNS.map(col => [col.key, col]));

// -- filters: pure, from the URL and back ---------------------------------------------------
// The CLI's label selector (herd node list -l rack=r1,zone=b): every pair must match.
export function parseSelector(text) {
  const labels = {};
  for (const part of (text || "").split(",")) {
    if (!part.trim()) continue;
    const at = part.indexOf("=");
    if (at < 1 || !part.slice(0, at).trim()) {
      return { error: `invalid label ${JSON.stringify(part)}: write key=value[,key=value]` };
    }
    labels[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  return { labels };
}

const haystacks = new WeakMap();    // row -> its lowercase text for the free-text search
function haystack(row) {
  let text = haystacks.get(row);
  if (text === undefined) {
    text = [c(row, "id"), c(row, "state"), c(row, "health"), c(row, "pool"), c(row, "class"),
            labelsText(c(row, "labels")), c(row, "last_event")].join(" ").toLowerCase();
    haystacks.set(row, text);
  }
  return text;
}

function predicate(f) {
  const q = f.q.trim().toLowerCase();
  const { labels = {} } = parseSelector(f.label);
  const pairs = Object.entries(labels);
  return row => {
    if (f.state && c(row, "state") !== f.state) return false;
    if (f.health && c(row, "health") !== f.health) return false;
    if (f.pool && c(row, "pool") !== f.pool) return false;
    if (f.class && c(row, "class") !== f.class) return false;
    if (pairs.length) {
      const own = c(row, "labels") || {};
      for (const [k, v] of pairs) if (own[k] !== v) return false;
    }
    return !q || haystack(row).includes(q);
  };
}

const URL_KEYS = { q: "q", state: "state", health: "health", label: "label", pool: "pool", class: "class" };

function readUrl(params) {
  for (const [name, key] of Object.entries(URL_KEYS)) F.filters[name] = params.get(key) ?? "";
  F.view = params.get("view") === "map" ? "map" : "table";
  F.sort = BY_KEY[params.get("sort")] ? params.get("sort") : "id";
  F.desc = params.get("desc") === "1";
  F.group = params.get("group") || "rack";
  F.zoom = Math.min(3, Math.max(1, Number(params.get("zoom")) || 1));
}

export function fleetQuery() {
  const params = new URLSearchParams();
  if (F.view !== "table") params.set("view", F.view);
  for (const [name, key] of Object.entries(URL_KEYS)) if (F.filters[name]) params.set(key, F.filters[name]);
  if (F.sort !== "id") params.set("sort", F.sort);
  if (F.desc) params.set("desc", "1");
  if (F.view === "map" && F.group !== "rack") params.set("group", F.group);
  if (F.view === "map" && F.zoom !== 1) params.set("zoom", String(F.zoom));
  return params.toString();
}

// The view in the address bar, so that it can be shared; replaceState: no new route.
function writeUrl() {
  const query = fleetQuery();
  history.replaceState(null, "", query ? `#/?${query}` : "#/");
}

// -- the page ---------------------------------------------------------------------------------
export async function fleetPage(_arg, params = new URLSearchParams()) {
  // the bulk toolbar: the command table's verbs that take many nodes (herdbook/api/commands.py)
  const bulk = (await loadCommands()).commands.filter(c => c.bulk);
  readUrl(params);
  F.selected = new Set();
  F.cursor = 0;
  F.cells = new Map();
  mapShape = "";
  main().innerHTML = `<h1>Fleet</h1>
    <div class="countsrow"><div class="counts" id="counts"></div>
    <div class="counts" id="health-counts"></div></div>
    <form class="filters" id="filters" role="search" onsubmit="return false">
      <input id="search" type="search" placeholder="search (press /)" aria-label="free text: id, label, state, event" size="18">
      <select id="f-state" aria-label="state"><option value="">any state</option></select>
      <select id="f-health" aria-label="health"><option value="">any health</option></select>
      <input id="f-label" placeholder="rack=r1,zone=b" aria-label="label selector (key=value[,key=value])" size="16">
      <select id="f-pool" aria-label="pool"><option value="">any pool</option></select>
      <select id="f-class" aria-label="class"><option value="">any class</option></select>
      <span class="seg" role="group" aria-label="view">
        <button type="button" id="v-table" data-view="table">Table</button><button type="button" id="v-map" data-view="map">Map</button>
      </span>
      <label class="map-only">group by <select id="group"></select></label>
      <label class="map-only">zoom <input id="zoom" type="range" min="1" max="3" step="1"></label>
      <span id="shown" class="muted" role="status"></span>
    </form>
    <div id="label-error" class="notice bad" hidden></div>
    <div id="bulk" class="bulk">
      <span id="sel-count" role="status">0 selected</span>
      <input id="bulk-reason" placeholder="reason (recorded with each event)" aria-label="reason for the action" size="28">
      ${bulk.map(c => `<button type="button" data-bulk="${esc(c.name)}" title="${esc(c.summary)}" disabled>${esc(c.name)}</button>`).join("")}
      <button type="button" id="sel-clear" disabled>clear selection</button>
    </div>
    <div id="results"></div>
    <div id="table-view">
      <div class="tscroll" id="tscroll" tabindex="0" role="grid" aria-label="nodes: arrows move, space selects, enter opens, ctrl+a selects every shown node">
        <table id="ftable" class="ftable">
          <colgroup><col style="width: 30px">${COLUMNS.map(col => `<col${col.width ? ` style="width: ${col.width}px"` : ""}>`).join("")}</colgroup>
          <thead><tr><th><input type="checkbox" id="sel-all" aria-label="select every shown node"></th>
            ${COLUMNS.map(col => `<th data-col="${col.key}"${col.num ? ' class="num"' : ""}><button type="button" data-sort="${col.key}">${esc(col.label)}</button></th>`).join("")}</tr></thead>
          <tbody id="fbody"></tbody>
        </table>
      </div>
    </div>
    <div id="map-view" hidden><div class="legend" id="legend"></div><div id="map"></div></div>
    <dialog id="confirm" aria-labelledby="confirm-text">
      <form method="dialog">
        <p id="confirm-text"></p><p id="confirm-reason" class="muted"></p><p id="confirm-ids" class="muted ids"></p>
        <div class="actions"><button value="cancel">Cancel</button><button value="ok" id="confirm-ok" autofocus></button></div>
      </form>
    </dialog>`;
  wire();
  const reply = await api("/v1/fleet");
  replaceAll(reply);
  fillFilters();
  syncControls();
  refresh();
  probe.fleetVersion = F.version;
  probe.fleetRows = F.rows.size;
  probe.fleetRenderedAt = performance.now();
  requestAnimationFrame(() => setTimeout(() => { probe.fleetPaintedAt = performance.now(); }, 0));
  const timer = setInterval(() => { if (!pending.size && !flushing) reloadAll().catch(() => {}); }, REFRESH_MS);
  const stop = onLive(fleetEvent);
  const onResize = () => refresh();
  window.addEventListener("resize", onResize);
  return () => { stop(); clearInterval(timer); window.removeEventListener("resize", onResize); };
}

function replaceAll(reply) {
  F.columns = Object.fromEntries(reply.columns.map((name, i) => [name, i]));
  F.version = reply.version;
  F.rows = new Map(reply.rows.map(row => [row[F.columns.id], row]));
  for (const id of [...F.selected]) if (!F.rows.has(id)) F.selected.delete(id);
}

async function reloadAll() {
  replaceAll(await api("/v1/fleet"));
  fillFilters();
  refresh();
}

function wire() {
  const filterInputs = { search: "q", "f-state": "state", "f-health": "health", "f-label": "label",
                         "f-pool": "pool", "f-class": "class" };
  for (const [id, name] of Object.entries(filterInputs)) {
    $(`#${id}`).addEventListener("input", e => { F.filters[name] = e.target.value; F.cursor = 0; changed(); });
  }
  $("#filters").addEventListener("click", e => {
    const view = e.target.closest("[data-view]")?.dataset.view;
    if (view) { F.view = view; changed(); }
  });
  $("#group").addEventListener("input", e => { F.group = e.target.value; changed(); });
  $("#zoom").addEventListener("input", e => { F.zoom = Number(e.target.value); changed(); });
  $("#counts").addEventListener("click", e => {
    const state = e.target.closest(".count")?.dataset.state;
    if (state !== undefined) { F.filters.state = state; syncControls(); changed(); }
  });
  $("#health-counts").addEventListener("click", e => {
    const health = e.target.closest(".count")?.dataset.health;
    if (health !== undefined) { F.filters.health = health; syncControls(); changed(); }
  });
  $("#ftable thead").addEventListener("click", e => {
    const key = e.target.closest("[data-sort]")?.dataset.sort;
    if (key) sortBy(key);
  });
  $("#sel-all").addEventListener("change", e => {
    for (const id of F.shown) e.target.checked ? F.selected.add(id) : F.selected.delete(id);
    refresh();
  });
  const scroll = $("#tscroll");
  let scrolling = false;
  scroll.addEventListener("scroll", () => {
    if (scrolling) return;
    scrolling = true;
    requestAnimationFrame(() => { scrolling = false; drawTable(); });
  });
  $("#fbody").addEventListener("click", e => {
    const tr = e.target.closest("tr[data-i]");
    if (!tr) return;
    const i = Number(tr.dataset.i);
    if (e.target.matches("input[data-sel]")) {
      if (e.shiftKey && F.lastClicked !== null) selectRange(F.lastClicked, i, e.target.checked);
      else toggle(F.shown[i], e.target.checked);
      F.lastClicked = i;
    }
    F.cursor = i;
    refresh();
  });
  scroll.addEventListener("keydown", tableKey);
  $("#map").addEventListener("click", e => {
    const groupSel = e.target.closest("input[data-group-sel]");
    if (groupSel) {
      for (const id of groupMembers(groupSel.dataset.groupSel)) groupSel.checked ? F.selected.add(id) : F.selected.delete(id);
      refresh();
      return;
    }
    const inTable = e.target.closest("button[data-group-table]");
    if (inTable) {
      const own = parseSelector(F.filters.label).labels || {};
      own[F.group] = inTable.dataset.groupTable;
      F.filters.label = Object.entries(own).map(([k, v]) => `${k}=${v}`).join(",");
      F.view = "table";
      syncControls();
      changed();
      return;
    }
    const id = e.target.closest(".cell")?.dataset.id;
    if (id) location.hash = `#/node/${encodeURIComponent(id)}`;
  });
  $("#bulk").addEventListener("click", e => {
    const action = e.target.closest("[data-bulk]")?.dataset.bulk;
    if (action) confirmBulk(action);
    if (e.target.id === "sel-clear") { F.selected.clear(); refresh(); }
  });
  document.addEventListener("keydown", slashKey);
}

// "/" anywhere on the page (not in a field): the search box, as Nomad's and GitHub's UIs do.
function slashKey(e) {
  if (!$("#search")) { document.removeEventListener("keydown", slashKey); return; }
  if (e.key === "/" && !e.target.closest("input, select, textarea, dialog")) {
    e.preventDefault();
    $("#search").focus();
  }
}

function tableKey(e) {
  if (e.target !== $("#tscroll")) return;     // a control inside the table keeps its keys
  const n = F.shown.length;
  const page = Math.max(1, Math.floor($("#tscroll").clientHeight / ROW_H) - 2);
  const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page, Home: -n, End: n };
  if (e.key in moves) {
    e.preventDefault();
    const from = F.cursor;
    F.cursor = Math.max(0, Math.min(n - 1, F.cursor + moves[e.key]));
    if (e.shiftKey) selectRange(from, F.cursor, true);
    reveal();
  } else if (e.key === " " && n) {
    e.preventDefault();
    const id = F.shown[F.cursor];
    toggle(id, !F.selected.has(id));
    refresh();
  } else if (e.key === "Enter" && n) {
    location.hash = `#/node/${encodeURIComponent(F.shown[F.cursor])}`;
  } else if (e.key === "a" && (e.ctrlKey || e.metaKey)) {
    e.preventDefault();
    for (const id of F.shown) F.selected.add(id);
    refresh();
  } else if (e.key === "Escape") {
    F.selected.clear();
    refresh();
  }
}

function toggle(id, on) { on ? F.selected.add(id) : F.selected.delete(id); }

function selectRange(a, b, on) {
  for (let i = Math.min(a, b); i <= Math.max(a, b); i++) toggle(F.shown[i], on);
}

function reveal() {
  const scroll = $("#tscroll");
  const head = $("#ftable thead").offsetHeight;
  const top = F.cursor * ROW_H;
  if (top < scroll.scrollTop) scroll.scrollTop = top;
  else if (top + ROW_H > scroll.scrollTop + scroll.clientHeight - head) {
    scroll.scrollTop = top + ROW_H - scroll.clientHeight + head;
  }
  refresh();
}

function sortBy(key) {
  const started = performance.now();
  if (F.sort === key) F.desc = !F.desc;
  else { F.sort = key; F.desc = false; }
  changed();
  probe.sortMs = performance.now() - started;
}

function changed() {
  writeUrl();
  refresh();
}

// -- drawing -----------------------------------------------------------------------------------
// Filter then sort: each row's key once (the precomputed key), then indexes compared.
function recompute() {
  const keep = predicate(F.filters);
  const key = BY_KEY[F.sort].sort;
  const ids = [];
  const keys = [];
  for (const [id, row] of F.rows) {
    if (!keep(row)) continue;
    ids.push(id);
    keys.push(key(row));
  }
  const sign = F.desc ? -1 : 1;
  const order = Array.from(ids.keys());
  order.sort((a, b) => {
    const x = keys[a], y = keys[b];
    if (x !== y) {
      if (x === null || x === undefined) return 1;       // unknown values last, either way
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * sign;
    }
    return ids[a] < ids[b] ? -1 : ids[a] > ids[b] ? 1 : 0;
  });
  F.shown = order.map(i => ids[i]);
  if (F.cursor >= F.shown.length) F.cursor = Math.max(0, F.shown.length - 1);
}

function refresh() {
  if (!$("#fbody")) return;
  recompute();
  const selector = parseSelector(F.filters.label);
  $("#label-error").hidden = !selector.error;
  $("#label-error").textContent = selector.error ?? "";
  $("#shown").textContent = `${F.shown.length} of ${F.rows.size} shown`;
  $("#table-view").hidden = F.view !== "table";
  $("#map-view").hidden = F.view !== "map";
  for (const el of document.querySelectorAll(".map-only")) el.hidden = F.view !== "map";
  for (const b of document.querySelectorAll("[data-view]")) b.setAttribute("aria-pressed", String(b.dataset.view === F.view));
  for (const th of document.querySelectorAll("#ftable th[data-col]")) {
    th.setAttribute("aria-sort", th.dataset.col === F.sort ? (F.desc ? "descending" : "ascending") : "none");
  }
  drawSelection();
  scheduleCounts();
  if (F.view === "table") drawTable();
  else drawMap();
  F.dirty.clear();
  const now = performance.timeOrigin + performance.now();
  for (const want of F.probes.splice(0)) {
    probe.updates.push({ id: want.id, seq: want.seq, state: c(F.rows.get(want.id) ?? [], "state"),
                         latency_ms: want.at ? now - Date.parse(want.at) : null,
                         sse_ms: want.at ? performance.timeOrigin + want.got - Date.parse(want.at) : null,
                         in_page_ms: performance.now() - want.got, bulk: !!want.bulk });
  }
}

let refreshScheduled = false;
function scheduleRefresh() {
  if (refreshScheduled) return;
  refreshScheduled = true;
  requestAnimationFrame(() => { refreshScheduled = false; refresh(); });
}

function fitHeight(el) {
  const top = el.getBoundingClientRect().top + window.scrollY;
  el.style.height = `${Math.max(240, window.innerHeight - top - 20)}px`;
}

function drawTable() {
  const scroll = $("#tscroll");
  if (!scroll || F.view !== "table") return;
  fitHeight(scroll);
  const total = F.shown.length;
  const view = scroll.clientHeight || 600;
  const first = Math.max(0, Math.floor(scroll.scrollTop / ROW_H) - OVERSCAN);
  const last = Math.min(total, Math.ceil((scroll.scrollTop + view) / ROW_H) + OVERSCAN);
  const span = COLUMNS.length + 1;
  const html = [`<tr class="pad" aria-hidden="true"><td colspan="${span}" style="height: ${first * ROW_H}px"></td></tr>`];
  for (let i = first; i < last; i++) html.push(rowHtml(F.shown[i], i));
  html.push(`<tr class="pad" aria-hidden="true"><td colspan="${span}" style="height: ${(total - last) * ROW_H}px"></td></tr>`);
  $("#fbody").innerHTML = html.join("");
  scroll.setAttribute("aria-rowcount", String(total + 1));
  if (total) scroll.setAttribute("aria-activedescendant", `row-${F.cursor}`);
  else scroll.removeAttribute("aria-activedescendant");
  const all = $("#sel-all");
  const picked = F.shown.reduce((n, id) => n + F.selected.has(id), 0);
  all.checked = total > 0 && picked === total;
  all.indeterminate = picked > 0 && picked < total;
}

function rowHtml(id, i) {
  const row = F.rows.get(id);
  const on = F.selected.has(id);
  const cells = COLUMNS.map(col => {
    const inner = col.html ? col.html(row) : esc(col.text ? col.text(row) : (row[F.columns[col.key]] ?? "—"));
    const title = col.title ? col.title(row) : col.html ? "" : (col.text ? col.text(row) : row[F.columns[col.key]] ?? "");
    return `<td${col.num ? ' class="num"' : ""}${title ? ` title="${esc(title)}"` : ""}>${inner}</td>`;
  }).join("");
  return `<tr id="row-${i}" data-i="${i}" data-id="${esc(id)}" data-state="${esc(c(row, "state"))}" ` +
         `data-health="${esc(c(row, "health"))}" aria-rowindex="${i + 2}" aria-selected="${on}"` +
         `${i === F.cursor ? ' class="cursor"' : ""}><td><input type="checkbox" data-sel tabindex="-1" ` +
         `aria-label="select ${esc(id)}"${on ? " checked" : ""}></td>${cells}</tr>`;
}

function drawSelection() {
  const n = F.selected.size;
  const shown = n ? new Set(F.shown) : null;
  const hidden = n ? [...F.selected].filter(id => !shown.has(id)).length : 0;
  $("#sel-count").textContent = `${n} selected` + (hidden ? ` (${hidden} not shown by the filter)` : "");
  for (const b of document.querySelectorAll("#bulk button")) b.disabled = n === 0;
  $("#bulk").classList.toggle("on", n > 0);
}

// -- the map: one block per value of the chosen label ------------------------------------------
const NONE = "(none)";
function groupOf(row) { return (c(row, "labels") || {})[F.group] ?? NONE; }

function groupMembers(value) {
  return F.shown.filter(id => groupOf(F.rows.get(id)) === value);
}

function labelKeys() {
  const keys = new Set(["rack", "pool", "zone"]);
  for (const row of F.rows.values()) for (const k of Object.keys(c(row, "labels") || {})) keys.add(k);
  return [...keys].sort();
}

let mapShape = "";     // what the drawn map shows: its groups and members; same shape: patch cells
function drawMap() {
  const groups = new Map();
  for (const id of F.shown) {
    const g = groupOf(F.rows.get(id));
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(id);
  }
  const names = [...groups.keys()].sort((a, b) => (a === NONE) - (b === NONE) ||
                                                  a.localeCompare(b, undefined, { numeric: true }));
  const shape = `${F.group}|${F.zoom}|${names.map(g => `${g}:${groups.get(g).join(",")}`).join(";")}`;
  if (shape === mapShape && F.cells.size) {
    for (const id of F.dirty) {
      const cell = F.cells.get(id);
      const row = F.rows.get(id);
      if (cell && row) paintCell(cell, row);
    }
  } else {
    $("#map").innerHTML = names.map(g => `<section class="group" data-group="${esc(g)}">
        <header><label><input type="checkbox" data-group-sel="${esc(g)}"> <b>${esc(F.group)}=${esc(g)}</b></label>
        <span class="gcount"></span><span class="gstates muted"></span>
        <button type="button" data-group-table="${esc(g)}" title="show this group in the table">table</button></header>
        <div class="cells z${F.zoom}">${groups.get(g).map(id => cellHtml(id)).join("")}</div></section>`).join("") ||
      `<p class="muted">no node matches</p>`;
    F.cells = new Map();
    for (const cell of $("#map").querySelectorAll(".cell")) F.cells.set(cell.dataset.id, cell);
    mapShape = shape;
    $("#legend").innerHTML = STATES.map(s => `<span class="cell-key">${cellSwatch(s)} ${esc(s)}</span>`).join("");
  }
  for (const section of $("#map").querySelectorAll("section.group")) {
    const members = groups.get(section.dataset.group) ?? [];
    const counts = new Map();
    for (const id of members) { const s = c(F.rows.get(id), "state"); counts.set(s, (counts.get(s) || 0) + 1); }
    section.querySelector(".gcount").textContent = `${members.length} node${members.length === 1 ? "" : "s"}`;
    section.querySelector(".gstates").textContent = [...counts].sort((a, b) => b[1] - a[1]).map(([s, n]) => `${s} ${n}`).join(" · ");
    const box = section.querySelector("input[data-group-sel]");
    const picked = members.reduce((n, id) => n + F.selected.has(id), 0);
    box.checked = members.length > 0 && picked === members.length;
    box.indeterminate = picked > 0 && picked < members.length;
    box.setAttribute("aria-label", `select the ${members.length} nodes of ${F.group}=${section.dataset.group}`);
  }
  for (const [id, cell] of F.cells) cell.classList.toggle("picked", F.selected.has(id));
}

function cellSwatch(state) {
  return `<span class="cell" data-state="${esc(state)}" aria-hidden="true">${esc(GLYPH[state] ?? "?")}</span>`;
}

function cellHtml(id) {
  const row = F.rows.get(id);
  const state = c(row, "state");
  const text = F.zoom >= 3 ? `${esc(GLYPH[state] ?? "")} ${esc(id)}` : esc(GLYPH[state] ?? "?");
  return `<span class="cell" data-id="${esc(id)}" data-state="${esc(state)}" data-health="${esc(c(row, "health"))}" ` +
         `title="${esc(cellTitle(row))}">${text}</span>`;
}

function paintCell(cell, row) {
  const state = c(row, "state");
  if (cell.dataset.state === state && cell.dataset.health === c(row, "health")) return;
  cell.dataset.state = state;
  cell.dataset.health = c(row, "health");
  cell.title = cellTitle(row);
  cell.textContent = F.zoom >= 3 ? `${GLYPH[state] ?? ""} ${c(row, "id")}` : (GLYPH[state] ?? "?");
}

function cellTitle(row) {
  return `${c(row, "id")} ${c(row, "state")} ${c(row, "health")}` +
         (c(row, "pool") ? ` pool=${c(row, "pool")}` : "") +
         (c(row, "gpu_temp_max") !== null && c(row, "gpu_temp_max") !== undefined ? ` ${c(row, "gpu_temp_max")}°C` : "");
}

// -- counts and filter options -----------------------------------------------------------------
function countBy(name) {
  const counts = new Map();
  for (const row of F.rows.values()) counts.set(c(row, name), (counts.get(c(row, name)) || 0) + 1);
  return counts;
}

let countsScheduled = false;
function scheduleCounts() {
  if (countsScheduled) return;
  countsScheduled = true;
  requestAnimationFrame(() => { countsScheduled = false; drawCounts(); });
}

function drawCounts() {
  const box = $("#counts");
  if (!box) return;
  const states = countBy("state");
  const ordered = [...STATES.filter(s => states.has(s)), ...[...states.keys()].filter(s => !STATES.includes(s))];
  box.innerHTML = `<button type="button" class="count" data-state=""><b>${F.rows.size}</b>nodes</button>` +
    ordered.map(s => `<button type="button" class="count" data-state="${esc(s)}" data-count="${states.get(s)}" ` +
                     `aria-pressed="${F.filters.state === s}">${cellSwatch(s)}<b>${states.get(s)}</b>${esc(s)}</button>`).join("");
  const health = countBy("health");
  $("#health-counts").innerHTML = [...health.entries()].map(([h, n]) =>
    `<button type="button" class="count health" data-health="${esc(h)}" aria-pressed="${F.filters.health === h}">` +
    `<i class="hdot" data-health="${esc(h)}"></i><b>${n}</b>${esc(h)}</button>`).join("");
  if (F.view === "table") drawTable();     // the counts may have moved the table: fit it again
}

function fillFilters() {
  const options = (select, values, keep) => {
    select.length = 1;
    const all = new Set([...values].filter(v => v));
    if (keep) all.add(keep);            // a value from a shared URL stays chosen
    for (const v of [...all].sort()) select.add(new Option(v, v));
    select.value = keep;
  };
  options($("#f-state"), countBy("state").keys(), F.filters.state);
  options($("#f-health"), [...HEALTHS, ...countBy("health").keys()], F.filters.health);
  options($("#f-pool"), countBy("pool").keys(), F.filters.pool);
  options($("#f-class"), countBy("class").keys(), F.filters.class);
  const group = $("#group");
  group.innerHTML = labelKeys().map(k => `<option value="${esc(k)}">${esc(k)}</option>`).join("");
  if (![...group.options].some(o => o.value === F.group)) group.add(new Option(F.group, F.group));
  group.value = F.group;
}

function syncControls() {
  $("#search").value = F.filters.q;
  $("#f-label").value = F.filters.label;
  for (const [id, name] of [["f-state", "state"], ["f-health", "health"], ["f-pool", "pool"], ["f-class", "class"]]) {
    const select = $(`#${id}`);
    if (F.filters[name] && ![...select.options].some(o => o.value === F.filters[name])) {
      select.add(new Option(F.filters[name], F.filters[name]));
    }
    select.value = F.filters[name];
  }
  $("#group").value = F.group;
  $("#zoom").value = String(F.zoom);
}

// -- acting on the selection ---------------------------------------------------------------------
function confirmBulk(action) {
  const ids = [...F.selected].filter(id => F.rows.has(id)).sort();
  if (!ids.length) return;
  const reason = $("#bulk-reason").value.trim();
  const dialog = $("#confirm");
  const nodes = `${ids.length} node${ids.length === 1 ? "" : "s"}`;
  $("#confirm-text").textContent = `${action} ${nodes}?`;
  $("#confirm-reason").textContent = reason ? `reason: ${reason}` : "no reason given";
  $("#confirm-ids").textContent = ids.slice(0, 24).join(", ") + (ids.length > 24 ? ` and ${ids.length - 24} more` : "");
  $("#confirm-ok").textContent = `${action} ${nodes}`;
  $("#confirm-ok").dataset.action = action;
  dialog.returnValue = "";
  dialog.onclose = () => {
    if (dialog.returnValue === "ok") runBulk(action, ids, reason);
  };
  dialog.showModal();
  $("#confirm-ok").focus();
}

// "node web-a already cordoned (state CORDONED)" -> "already cordoned (state CORDONED)"
export function already(message, id) {
  const text = String(message || "").replace(new RegExp(`^node ${id.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} `), "");
  return text.startsWith("already") ? text : `already: ${text}`;
}

async function runBulk(action, ids, reason) {
  const results = new Map(ids.map(id => [id, { kind: "pending", text: "…" }]));
  const run = { action, results, started: performance.now(), done: false };
  probe.bulk = run;
  drawResults(run);
  let next = 0;
  let drawScheduled = false;
  const redraw = () => {
    if (drawScheduled) return;
    drawScheduled = true;
    requestAnimationFrame(() => { drawScheduled = false; drawResults(run); });
  };
  const worker = async () => {
    while (next < ids.length) {
      const id = ids[next++];
      try {
        const result = await api(`/v1/nodes/${encodeURIComponent(id)}/${action}`, { method: "POST", body: { reason } });
        results.set(id, result?.unchanged ? { kind: "unchanged", text: already(result.unchanged, id) }
                                          : { kind: "done", text: result?.event || "done" });
      } catch (err) {
        results.set(id, { kind: "refused", text: err.status ? `refused (${err.status} ${err.code}): ${err.message}`
                                                            : `failed: ${err.message || err}` });
      }
      redraw();
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, ids.length) }, worker));
  run.done = true;
  run.ms = performance.now() - run.started;
  drawResults(run);
}

const RESULT_ORDER = { refused: 0, pending: 1, unchanged: 2, done: 3 };
function drawResults(run) {
  const box = $("#results");
  if (!box || probe.bulk !== run) return;
  const counts = { done: 0, unchanged: 0, refused: 0, pending: 0 };
  for (const r of run.results.values()) counts[r.kind] += 1;
  const rows = [...run.results].sort((a, b) => RESULT_ORDER[a[1].kind] - RESULT_ORDER[b[1].kind] || (a[0] < b[0] ? -1 : 1));
  const limit = Math.max(SHOWN_RESULTS, counts.refused);
  const word = { done: "done", unchanged: "already", refused: "refused", pending: "waiting" };
  box.innerHTML = `<div class="card results" role="status" aria-live="polite" data-done="${run.done}">
    <h2>${esc(run.action)}: ${counts.done} done, ${counts.unchanged} already, ${counts.refused} refused` +
    `${counts.pending ? `, ${counts.pending} waiting` : ""}</h2>
    <button type="button" id="results-close">dismiss</button>
    <table><thead><tr><th>node</th><th>result</th><th>message</th></tr></thead><tbody>` +
    rows.slice(0, limit).map(([id, r]) => `<tr data-id="${esc(id)}" data-result="${r.kind}">` +
      `<td><a href="#/node/${encodeURIComponent(id)}">${esc(id)}</a></td><td>${word[r.kind]}</td><td>${esc(r.text)}</td></tr>`).join("") +
    `</tbody></table>${rows.length > limit ? `<p class="muted">and ${rows.length - limit} more done</p>` : ""}</div>`;
  $("#results-close").addEventListener("click", () => { probe.bulk = null; box.innerHTML = ""; });
}

// -- live: a node event patches that node's row; a burst reads the whole fleet ----------------------
const pending = new Map();
let flushing = false;

function fleetEvent(message) {
  const id = message.subject.startsWith("herd.node.") ? subjectNode(message.subject) : null;
  if (!id) return;
  pending.set(id, { id, seq: message.seq, at: message.event?.at, tries: 0, got: performance.now() });
  if (!flushing) { flushing = true; setTimeout(flush, 0); }
}

async function flush() {
  try {
    while (pending.size) {
      if (pending.size > BULK) {
        const batch = new Map(pending);
        pending.clear();
        await patchFleet(batch);
        continue;
      }
      const batch = [...pending.values()].slice(0, 16);
      for (const want of batch) pending.delete(want.id);
      await Promise.all(batch.map(want => patchNode(want)));
    }
  } finally {
    flushing = false;
  }
}

async function patchFleet(batch) {
  const newest = Math.max(...[...batch.values()].map(w => w.seq));
  let reply = await api("/v1/fleet");
  for (let tries = 0; reply.version < newest && tries < 40; tries++) {
    await new Promise(resolve => setTimeout(resolve, 25));
    reply = await api("/v1/fleet");
  }
  const before = F.rows;
  replaceAll(reply);
  for (const id of F.rows.keys()) if (before.get(id) !== F.rows.get(id)) F.dirty.add(id);
  for (const want of batch.values()) F.probes.push({ ...want, bulk: true });
  fillFilters();
  scheduleRefresh();
}

// One node from node describe, as /v1/fleet's row (web/fleet_rows.py computes the same columns).
export function rowOfNode(node, columns) {
  const gpus = node.gpu_health ?? [];
  const temps = gpus.map(g => g.temperature_c).filter(v => v !== null && v !== undefined);
  const utils = gpus.map(g => g.gpu_util_pct).filter(v => v !== null && v !== undefined);
  const values = {
    id: node.id, state: node.state, health: node.health, pool: node.pool, class: node.class,
    labels: node.labels, schedulable: node.schedulable, gpus: node.gpus, approval: node.approval,
    intent: node.intent, allocs: node.allocations, last_event: node.last_event,
    last_event_at: node.updated_at, last_heartbeat_age: node.heartbeat_age,
    gpus_healthy: node.health === "UNKNOWN" ? null
      : (node.gpu_devices ?? []).filter(d => (gpus.find(g => g.index === d.index)?.health ?? "healthy") === "healthy").length,
    gpu_temp_max: temps.length ? Math.max(...temps) : null,
    gpu_util: utils.length ? Math.round(10 * utils.reduce((a, b) => a + b, 0) / utils.length) / 10 : null,
  };
  const row = [];
  for (const [name, i] of Object.entries(columns)) row[i] = values[name] ?? null;
  return row;
}

async function patchNode(want) {
  const id = want.id;
  let node;
  try {
    node = await api(`/v1/nodes/${encodeURIComponent(id)}`);
  } catch (err) {
    if (err.status === 404) { F.rows.delete(id); F.selected.delete(id); scheduleRefresh(); }
    return;
  }
  if (node.version < want.seq && want.tries < 60) {   // the projector has not folded it yet
    want.tries += 1;
    setTimeout(() => { if (!pending.has(id)) pending.set(id, want);
                       if (!flushing) { flushing = true; flush(); } }, 25);
    return;
  }
  const fresh = !F.rows.has(id);
  F.rows.set(id, rowOfNode(node, F.columns));
  F.dirty.add(id);
  F.probes.push(want);
  if (fresh) fillFilters();
  scheduleRefresh();
}
