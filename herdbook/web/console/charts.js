// Charts over a chosen window (issue 28 item 4), drawn with uPlot (vendored under
// vendor/, MIT, no CDN: the console works offline). What the event log holds (states,
// health, faults) comes from GET /v1/fleet/history, folded from the log on the server;
// heartbeat ages from the web server's 30 s samples; GPU readings from the control
// plane's in-memory ring (GET /v1/nodes/{id}/gpus/history). Missing values are gaps.

import { $, api, esc, main, onLive, showError } from "./app.js";

export const WINDOWS = ["15m", "1h", "6h", "24h", "7d"];
const COLORS = ["#2b7bb9", "#d9822b", "#3a9d5d", "#c23030", "#8f5bd4", "#6b7785", "#bf8b00",
                "#00998c", "#d45b93", "#5b6fd4"];
const STATE_COLORS = { READY: "#3a9d5d", CORDONED: "#bf8b00", DRAINING: "#d9822b",
                       DRAINED: "#a66b00", DISABLED: "#6b7785", BOOTING: "#2b7bb9",
                       DEGRADED: "#d9822b", UNHEALTHY: "#c23030", DOWN: "#8a1c1c",
                       FAILED: "#5c0f0f", QUARANTINED: "#8f5bd4", UNKNOWN: "#999", TERMINATED: "#444",
                       VALIDATING: "#0c8599" };

// What tests read: per chart id, its series' labels and data as drawn.
const probe = window.herdCharts = window.herdCharts || {};

export function windowPicker(current, onPick) {
  const box = document.createElement("span");
  box.className = "windows";
  box.setAttribute("role", "group");
  box.setAttribute("aria-label", "time window");
  box.innerHTML = WINDOWS.map(w => `<button type="button" data-window="${w}" ` +
    `aria-pressed="${w === current}" class="${w === current ? "on" : ""}">${w}</button>`).join("");
  box.addEventListener("click", e => {
    const w = e.target.dataset?.window;
    if (!w) return;
    for (const b of box.querySelectorAll("button")) {
      b.classList.toggle("on", b.dataset.window === w);
      b.setAttribute("aria-pressed", String(b.dataset.window === w));
    }
    onPick(w);
  });
  return box;
}

// One chart in `el` (replacing what was there): xs in epoch seconds, one series per
// {label, values, color?, bars?}; null values are gaps, never zeros.
export function lineChart(el, id, title, xs, series, { height = 180, unit = "" } = {}) {
  probe[id] = { title, xs, series: series.map(s => ({ label: s.label, values: s.values })) };
  el.dataset.chart = id;
  el.replaceChildren();
  if (!window.uPlot) {
    el.innerHTML = `<p class="muted">charts unavailable (vendor/uPlot.iife.min.js not loaded)</p>`;
    return null;
  }
  if (!xs.length) {
    el.innerHTML = `<p class="muted">${esc(title)}: no data in this window</p>`;
    return null;
  }
  const bars = window.uPlot.paths?.bars?.({ size: [0.8, 40] });
  const opts = {
    title, width: Math.max(320, el.clientWidth || 600), height,
    scales: { x: { time: true } },
    axes: [{}, { label: unit, size: 50 }],
    series: [{}, ...series.map((s, i) => ({
      label: s.label, stroke: s.color || COLORS[i % COLORS.length], width: 1.5,
      spanGaps: false, points: { show: xs.length < 60 },
      ...(s.bars && bars ? { paths: bars, fill: `${s.color || COLORS[i % COLORS.length]}88` } : {}),
    }))],
    legend: { live: true },
  };
  return new window.uPlot(opts, [xs, ...series.map(s => s.values)], el);
}

const seconds = iso => Date.parse(iso) / 1000;

// -- the fleet over time (#/history?window=1h) ---------------------------------------------
export async function historyPage(_arg, params) {
  let window_ = WINDOWS.includes(params?.get("window")) ? params.get("window") : "1h";
  main().innerHTML = `<h1>Fleet over time <span id="window-picker"></span></h1>
    <p class="muted" id="history-note"></p>
    <div class="charts">
      <div class="card"><div id="chart-states"></div></div>
      <div class="card"><div id="chart-score"></div></div>
      <div class="card"><div id="chart-detections"></div></div>
      <div class="card"><div id="chart-heartbeat"></div></div>
    </div>
    <div class="card"><h2>Detections and recoveries</h2><div id="marks"></div></div>`;
  const draw = async () => {
    const h = await api(`/v1/fleet/history?window=${encodeURIComponent(window_)}`);
    drawFleetHistory(h);
  };
  $("#window-picker").append(windowPicker(window_, w => {
    window_ = w;
    history.replaceState(null, "", `#/history?window=${w}`);
    draw().catch(showError);
  }));
  await draw();
  let timer = null;
  const stop = onLive(message => {
    if (!message.subject?.startsWith("herd.node.")) return;
    clearTimeout(timer);
    timer = setTimeout(() => draw().catch(showError), 1000);
  });
  const every = setInterval(() => draw().catch(showError), 30000);
  return () => { stop(); clearTimeout(timer); clearInterval(every); };
}

export function drawFleetHistory(h) {
  const xs = h.points.map(p => seconds(p.at));
  const states = [...new Set(h.points.flatMap(p => Object.keys(p.states)))];
  $("#history-note").textContent = `${h.from} → ${h.to}, one point per ${Math.round(h.step_s)} s ` +
    `(the state at each bucket's end), folded from the event log up to seq ${h.as_of_seq}; ` +
    `${h.detections} detection(s), ${h.recoveries} recovery(ies).`;
  lineChart($("#chart-states"), "states", "Nodes by state", xs,
            states.map(s => ({ label: s, color: STATE_COLORS[s], values: h.points.map(p => p.states[s] ?? 0) })),
            { unit: "nodes" });
  lineChart($("#chart-score"), "score", "Fleet health score", xs,
            [{ label: "score", values: h.points.map(p => p.score) }], { unit: "0-100" });
  lineChart($("#chart-detections"), "detections", "Detections and recoveries", xs,
            [{ label: "detections", color: "#c23030", bars: true, values: h.points.map(p => p.detections) },
             { label: "recoveries", color: "#3a9d5d", bars: true, values: h.points.map(p => p.recoveries) }],
            { unit: "per bucket" });
  lineChart($("#chart-heartbeat"), "heartbeat", "Heartbeat age", xs,
            [{ label: "p50", values: h.points.map(p => p.heartbeat_age?.p50 ?? null) },
             { label: "p99", values: h.points.map(p => p.heartbeat_age?.p99 ?? null) }],
            { unit: "s" });
  const marks = [...h.marks].reverse();
  $("#marks").innerHTML = marks.length ? `<table><tr><th>at</th><th>node</th><th>what</th>` +
    `<th>fault</th><th>event</th><th>reason</th></tr>` + marks.map(m =>
      `<tr class="mark ${esc(m.kind)}" data-node="${esc(m.node_id)}" data-kind="${esc(m.kind)}">` +
      `<td>${esc(m.at.slice(0, 19))}</td><td><a href="#/node/${encodeURIComponent(m.node_id)}">` +
      `${esc(m.node_id)}</a></td><td>${esc(m.kind)}</td><td>${esc(m.fault)}</td>` +
      `<td>${esc(m.event)}</td><td>${esc(m.reason)}</td></tr>`).join("") + `</table>`
    : `<p class="muted">none in this window</p>`;
}
