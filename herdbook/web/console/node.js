// The node page's GPUs as numbers (issue 28 item 3): one card per GPU with its readings
// (gpu.describe: the latest telemetry sample), its verdict and cause (the classifier's,
// never parsed from text) and its recent faults; under them temperature, power and
// utilisation over a window from the control plane's in-memory ring (samples, then
// 1-minute, 10-minute and 1-hour means: reactors/telemetry_ring.py). A reading a GPU
// does not measure is absent in the API and shown "n/a", never 0.
// app.js's node page calls mountGpus(id); it refreshes on the node's live events and
// every POLL_MS (telemetry is not an event: it arrives every --telemetry-interval).

import { $, api, esc, showError } from "./app.js";
import { lineChart, windowPicker } from "./charts.js";

const POLL_MS = 3000;
const FAULTS_SHOWN = 5;
const COLOR_KEY = { healthy: "HEALTHY", degraded: "DEGRADED", unhealthy: "UNHEALTHY",
                    critical: "UNHEALTHY", fatal: "UNHEALTHY", unknown: "UNKNOWN" };

// What tests read: the cards as last drawn.
const probe = window.herdGpus = window.herdGpus || { draws: 0, cards: [] };

export const na = v => (v === null || v === undefined ? "n/a" : v);
const num = (v, unit = "", digits = 0) =>
  (v === null || v === undefined || Number.isNaN(v) ? "n/a" : `${Number(v).toFixed(digits)}${unit}`);

export function pcie(r) {
  if (r.pcie_width == null && r.pcie_gen == null) return "n/a";
  const width = r.pcie_width == null ? "x?" : `x${r.pcie_width}`;
  const max = r.pcie_width_max == null ? "" : ` of x${r.pcie_width_max}`;
  const gen = r.pcie_gen == null ? "" : ` gen ${r.pcie_gen}${r.pcie_gen_max == null ? "" : `/${r.pcie_gen_max}`}`;
  return `${width}${max}${gen}${r.pcie_width != null && r.pcie_width_max != null && r.pcie_width < r.pcie_width_max ? " (degraded)" : ""}`;
}

export function nvlink(r) {
  if (!Array.isArray(r.nvlink_up)) return "n/a";
  const up = r.nvlink_up.filter(Boolean).length;
  return `${up}/${r.nvlink_up.length} up`;
}

export function powerText(r) {
  if (r.power_w == null) return "n/a";
  return r.power_limit_w == null ? `${num(r.power_w, " W")}` :
    `${num(r.power_w, " W")} of ${num(r.power_limit_w, " W")} (${Math.round(100 * r.power_w / r.power_limit_w)} %)`;
}

export function readingRows(r) {
  const pair = (a, b) => (a == null && b == null ? "n/a" : `${na(a)} / ${na(b)}`);
  return [
    ["temperature", num(r.temperature_c, " °C"), "temperature_c"],
    ["power", powerText(r), "power_w"],
    ["utilisation", r.gpu_util_pct == null ? "n/a" :
      `${num(r.gpu_util_pct, " %")}${r.mem_util_pct == null ? "" : ` (memory ${num(r.mem_util_pct, " %")})`}`, "gpu_util_pct"],
    ["memory", r.fb_used_mib == null ? "n/a" :
      `${num(r.fb_used_mib / 1024, "", 1)} of ${r.fb_total_mib == null ? "n/a" : num(r.fb_total_mib / 1024, "", 1)} GiB`, "fb_used_mib"],
    ["clocks SM / mem", r.sm_clock_mhz == null && r.mem_clock_mhz == null ? "n/a" :
      `${num(r.sm_clock_mhz)} / ${num(r.mem_clock_mhz)} MHz`, "sm_clock_mhz"],
    ["throttle", Array.isArray(r.throttle_names) ? (r.throttle_names.join(", ") || "none") : "n/a", "throttle_names"],
    ["ECC SBE / DBE (volatile)", pair(r.ecc_sbe_volatile, r.ecc_dbe_volatile), "ecc_dbe_volatile"],
    ["ECC SBE / DBE (aggregate)", pair(r.ecc_sbe_aggregate, r.ecc_dbe_aggregate), "ecc_dbe_aggregate"],
    ["retired pages SBE / DBE", pair(r.retired_pages_sbe, r.retired_pages_dbe) +
      (r.retired_pages_pending ? " (pending)" : ""), "retired_pages_dbe"],
    ["remapped rows corr / uncorr", pair(r.remapped_rows_correctable, r.remapped_rows_uncorrectable) +
      (r.remapped_rows_pending ? " (pending)" : "") + (r.remapped_rows_failed ? " (FAILED)" : ""),
     "remapped_rows_uncorrectable"],
    ["PCIe", pcie(r), "pcie_width"],
    ["PCIe replays", na(r.pcie_replay_count), "pcie_replay_count"],
    ["NVLink", nvlink(r), "nvlink_up"],
  ];
}

export function gpuCard(g) {
  const r = g.readings || {};
  const key = COLOR_KEY[g.health] || "UNKNOWN";
  const counts = Object.entries(g.fault_counts?.["24h"] || {}).map(([k, n]) => `${k} ×${n}`).join(", ");
  const faults = (g.faults || []).slice(0, FAULTS_SHOWN);
  return `<article class="gpu gpu-card" data-gpu="${g.index}" data-health="${key}" ` +
    `data-level="${esc(g.health)}" data-temp="${esc(r.temperature_c ?? "")}" ` +
    `title="${esc(g.model ?? "")} ${esc(g.uuid ?? "")} ${esc([g.health, g.cause].filter(Boolean).join(": "))}">` +
    `<header><b>GPU ${g.index}</b> <span class="muted">${esc(g.model ?? "")}</span>` +
    `<span class="badge" style="background: var(--${key})">${esc(g.health)}</span></header>` +
    (g.cause ? `<p class="cause">${esc(g.cause)}${g.since ? ` <span class="muted">since ${esc(g.since.slice(0, 19))}</span>` : ""}</p>` : "") +
    `<dl class="kv readings">${readingRows(r).map(([k, v, f]) =>
      `<dt>${esc(k)}</dt><dd data-reading="${f}">${esc(v)}</dd>`).join("")}</dl>` +
    `<div class="faults"><b>recent faults</b> ${counts ? `<span class="muted">(24 h: ${esc(counts)})</span>` : ""}` +
    (faults.length ? `<ul>${faults.map(f => `<li>${esc(f.at.slice(0, 19))} ${esc(f.kind)}` +
      `${f.xid != null ? ` XID ${f.xid}` : ""}</li>`).join("")}</ul>` : ` <span class="muted">none</span>`) +
    `</div><footer class="muted">${g.sampled_at ? `sampled ${esc(g.sampled_at.slice(0, 19))}` : "no telemetry yet"}` +
    `${g.uuid ? ` · ${esc(g.uuid)}` : ""}</footer></article>`;
}

async function drawCards(id, box) {
  const list = await api(`/v1/nodes/${encodeURIComponent(id)}/gpus`);
  const rows = list?.items ?? [];
  const details = await Promise.all(rows.map(g =>
    api(`/v1/gpus/${encodeURIComponent(g.node_id)}/${g.index}`).catch(() => g)));
  box.innerHTML = details.map(gpuCard).join("") || `<p class="muted">no GPUs</p>`;
  probe.draws += 1;
  probe.cards = details.map(g => ({ index: g.index, health: g.health,
                                    temperature_c: g.readings?.temperature_c ?? g.temperature_c ?? null }));
}

// The node as one line beside its GPUs' (issue 28 item 4's per-node charts): the hottest
// GPU, the node's total power, its mean utilisation; a time with no GPU reading is a gap.
export const NODE_SERIES = { temperature_c: ["hottest GPU", vs => Math.max(...vs)],
                             power_w: ["node total", vs => vs.reduce((a, b) => a + b, 0)],
                             gpu_util_pct: ["node mean", vs => vs.reduce((a, b) => a + b, 0) / vs.length] };

export function nodeLine(columns, field) {
  const [label, fold] = NODE_SERIES[field];
  const length = Math.max(0, ...columns.map(c => c.length));
  const values = Array.from({ length }, (_, i) => {
    const vs = columns.map(c => c[i]).filter(v => v !== null && v !== undefined);
    return vs.length ? Math.round(10 * fold(vs)) / 10 : null;
  });
  return { label, values, color: "#1d2330" };
}

// Which tier of the control plane's ring the window was read from, and how far back it
// reaches when that is short of the window's start (a restart keeps none of it).
function historyNote(h) {
  if (!h.resolution) return "no telemetry from this node since this control plane started";
  const kept = h.kept_from && Date.parse(h.from) / 1000 < h.kept_from - (h.step_s || 0)
    ? `; kept only since ${new Date(h.kept_from * 1000).toISOString().slice(0, 16).replace("T", " ")} ` +
      "(the ring is in memory: a restart or a new node starts it again)" : "";
  return `${h.resolution} from this control plane's memory (per node: the last ${h.samples} samples, ` +
    `then 1-minute means for 6 h, 10-minute means for 24 h, 1-hour means for 7 d; lost on restart)${kept}`;
}

async function drawCharts(id, window_) {
  const h = await api(`/v1/nodes/${encodeURIComponent(id)}/gpus/history?window=${window_}`);
  const gpus = Object.keys(h.gpus).sort((a, b) => a - b);
  const box = $("#gpu-charts");
  if (!box) return;
  const note = $("#gpu-charts-note");
  note.dataset.resolution = h.resolution ?? "";
  note.textContent = historyNote(h);
  for (const [field, title, unit] of [["temperature_c", "GPU temperature", "°C"],
                                      ["power_w", "GPU power", "W"],
                                      ["gpu_util_pct", "GPU utilisation", "%"]]) {
    const el = box.querySelector(`[data-field="${field}"]`);
    const series = gpus.map(g => ({ label: `GPU ${g}`, values: h.gpus[g][field] }));
    lineChart(el, `gpu-${field}`, title, h.times,
              series.length ? [...series, nodeLine(series.map(s => s.values), field)] : series,
              { unit, height: 160 });
  }
}

// The GPU section of node `id`'s page: cards in #gpus, charts after that card.
export async function mountGpus(id) {
  const box = $("#gpus");
  if (!box) return () => {};
  box.classList.add("gpu-cards");
  const card = box.closest(".card");
  const charts = document.createElement("div");
  charts.className = "card";
  charts.innerHTML = `<h2>GPU and node readings over time <span id="gpu-window"></span></h2>
    <p class="muted" id="gpu-charts-note"></p>
    <div id="gpu-charts">${["temperature_c", "power_w", "gpu_util_pct"].map(f =>
      `<div data-field="${f}"></div>`).join("")}</div>`;
  card?.after(charts);
  let window_ = "15m";
  $("#gpu-window").append(windowPicker(window_, w => { window_ = w; drawCharts(id, w).catch(showError); }));
  let busy = false;
  const refresh = async () => {
    if (busy) return;
    busy = true;
    try {
      await drawCards(id, box);
      await drawCharts(id, window_);
    } catch (err) {
      if (err.status !== 404) showError(err);
    } finally {
      busy = false;
    }
  };
  await refresh();
  const timer = setInterval(refresh, POLL_MS);
  return () => clearInterval(timer);
}
