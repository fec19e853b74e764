// The fleet's GPUs (issue 28 item 3): every GPU from GET /v1/gpus (paged by next_token),
// sortable by health, temperature, power, utilisation and errors, filterable by health
// and node prefix; the first ROWS rows of the order drawn (a 10,000-node fleet has
// 80,000 GPUs: sort or filter to reach the others). A reading a GPU lacks is "n/a" and
// sorts last, never as 0. #/gpus?sort=temp&health=critical is a shareable view.

import { $, api, esc, main, showError } from "./app.js";

const ROWS = 500;
const HEALTH_RANK = { fatal: 0, critical: 1, unhealthy: 2, degraded: 3, unknown: 4, healthy: 5 };
const COLOR_KEY = { healthy: "HEALTHY", degraded: "DEGRADED", unhealthy: "UNHEALTHY",
                    critical: "UNHEALTHY", fatal: "UNHEALTHY", unknown: "UNKNOWN" };

// errors: uncorrectable first (DBE, uncorrectable remapped rows), then correctable (SBE).
export function errorScore(g) {
  const parts = [g.ecc_dbe_volatile, g.remapped_rows_uncorrectable, g.ecc_sbe_volatile];
  if (parts.every(v => v == null)) return null;
  return ((g.ecc_dbe_volatile ?? 0) + (g.remapped_rows_uncorrectable ?? 0)) * 1e6 + (g.ecc_sbe_volatile ?? 0);
}

const COLUMNS = {
  node: { label: "node", get: g => g.node_id, text: true },
  health: { label: "health", get: g => HEALTH_RANK[g.health] ?? 9 },
  temp: { label: "°C", get: g => g.temperature_c, desc: true },
  power: { label: "power W", get: g => g.power_w, desc: true },
  util: { label: "util %", get: g => g.gpu_util_pct, desc: true },
  memory: { label: "memory GiB", get: g => g.fb_used_mib, desc: true },
  errors: { label: "errors (DBE+remap / SBE)", get: errorScore, desc: true },
};

export function sortGpus(rows, key) {
  const col = COLUMNS[key] ?? COLUMNS.node;
  const sign = col.desc ? -1 : 1;
  return rows.sort((a, b) => {
    const x = col.get(a), y = col.get(b);
    if (x == null || y == null) return x == null && y == null ? 0 : x == null ? 1 : -1;   // n/a last
    if (x !== y) return (x < y ? -1 : 1) * sign;
    return a.node_id < b.node_id ? -1 : a.node_id > b.node_id ? 1 : a.index - b.index;
  });
}

const na = (v, f = x => x) => (v == null ? `<span class="na">n/a</span>` : esc(f(v)));

async function allGpus() {
  const out = [];
  let next = null;
  do {
    const reply = await api(`/v1/gpus${next ? `?next_token=${encodeURIComponent(next)}` : ""}`);
    out.push(...(reply.items || []));
    next = reply.next_token;
  } while (next);
  return out;
}

export async function gpusPage(_arg, params) {
  const state = { sort: COLUMNS[params?.get("sort")] ? params.get("sort") : "health",
                  health: params?.get("health") || "", node: params?.get("node") || "" };
  main().innerHTML = `<h1>GPUs</h1>
    <div class="filters">
      <label>health <select id="g-health"><option value="">any</option>${Object.keys(HEALTH_RANK).map(h =>
        `<option value="${h}">${h}</option>`).join("")}</select></label>
      <label>node <input id="g-node" placeholder="id prefix" size="14"></label>
      <span id="g-shown" class="muted"></span>
    </div>
    <div class="card"><table id="gpu-table" class="sortable"></table></div>`;
  $("#g-health").value = state.health;
  $("#g-node").value = state.node;
  let rows = [];
  const draw = () => {
    const shown = sortGpus(rows.filter(g => (!state.health || g.health === state.health) &&
                                            (!state.node || g.node_id.startsWith(state.node))), state.sort);
    $("#g-shown").textContent = `${Math.min(ROWS, shown.length)} of ${shown.length} shown (${rows.length} GPUs)`;
    $("#gpu-table").innerHTML = `<tr>${Object.entries(COLUMNS).map(([k, c]) =>
        `<th><button type="button" class="sort" data-sort="${k}" aria-sort="${k === state.sort ? (c.desc ? "descending" : "ascending") : "none"}">` +
        `${esc(c.label)}</button></th>`).join("")}<th>GPU</th><th>cause</th></tr>` +
      shown.slice(0, ROWS).map(g => `<tr data-node="${esc(g.node_id)}" data-gpu="${g.index}" data-health="${esc(g.health)}">` +
        `<td><a href="#/node/${encodeURIComponent(g.node_id)}">${esc(g.node_id)}</a></td>` +
        `<td><span class="badge" style="background: var(--${COLOR_KEY[g.health] || "UNKNOWN"})">${esc(g.health)}</span></td>` +
        `<td>${na(g.temperature_c, v => v.toFixed(0))}</td>` +
        `<td>${na(g.power_w, v => `${v.toFixed(0)}${g.power_limit_w != null ? ` / ${g.power_limit_w.toFixed(0)}` : ""}`)}</td>` +
        `<td>${na(g.gpu_util_pct, v => v.toFixed(0))}</td>` +
        `<td>${na(g.fb_used_mib, v => `${(v / 1024).toFixed(1)}${g.fb_total_mib != null ? ` / ${(g.fb_total_mib / 1024).toFixed(0)}` : ""}`)}</td>` +
        `<td>${errorScore(g) == null ? na(null) : `${(g.ecc_dbe_volatile ?? 0) + (g.remapped_rows_uncorrectable ?? 0)} / ${g.ecc_sbe_volatile ?? "n/a"}`}</td>` +
        `<td>${g.index} <span class="muted">${esc(g.model ?? "")}</span></td><td>${esc(g.cause ?? "")}</td></tr>`).join("");
    const query = new URLSearchParams(Object.entries({ sort: state.sort, health: state.health, node: state.node })
                                      .filter(([, v]) => v));
    history.replaceState(null, "", `#/gpus?${query}`);
  };
  $("#gpu-table").addEventListener("click", e => {
    const key = e.target.closest("[data-sort]")?.dataset.sort;
    if (key) { state.sort = key; draw(); }
  });
  $("#g-health").addEventListener("input", e => { state.health = e.target.value; draw(); });
  $("#g-node").addEventListener("input", e => { state.node = e.target.value.trim(); draw(); });
  rows = await allGpus();
  draw();
  const timer = setInterval(() => allGpus().then(r => { rows = r; draw(); }).catch(showError), 10000);
  return () => clearInterval(timer);
}
