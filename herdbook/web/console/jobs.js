// Jobs that explain themselves (issue 28 item 5): the jobs table with each job's phase
// (job.list's `phase`: a finished batch job is complete or dead, never running) and its
// allocations counted by status; a job's page with its allocations (node, status, exit,
// requeues, times), its evaluations and, while a slot waits, why: job.status's
// `placement` (per constraint and resource, how many nodes ruled it out, from the
// scheduler's own tests), and each allocation's output (alloc.logs, POST /v1/alloc/logs,
// read from its node's agent as `herd alloc logs` does: the last lines, then more of
// them or what was written since; not a read, so a read-only token is refused).

import { $, api, esc, items, main, onLive, showError } from "./app.js";

const PHASE_COLOR = { running: "var(--READY)", complete: "var(--DRAINED, #6b7785)",
                      pending: "var(--BOOTING, #2b7bb9)", blocked: "var(--UNHEALTHY)",
                      dead: "var(--DISABLED, #6b7785)" };

const probe = window.herdJobs = window.herdJobs || { drawn: 0 };

function phaseBadge(job) {
  const phase = job.phase || job.status;
  return `<span class="badge phase" data-phase="${esc(phase)}" style="background: ${PHASE_COLOR[phase] || "var(--UNKNOWN)"}">` +
    `${esc(phase)}</span>${job.status === "dead" ? ` <span class="muted">stopped</span>` : ""}`;
}

export function allocCounts(counts) {
  const order = ["running", "pending", "stopping", "complete", "failed", "lost", "stopped"];
  const keys = Object.keys(counts || {}).sort((a, b) => (order.indexOf(a) + 99) % 99 - (order.indexOf(b) + 99) % 99);
  return keys.map(k => `<span class="alloc-count" data-status="${esc(k)}">${esc(k)} ${counts[k]}</span>`).join(" · ") ||
    `<span class="muted">none</span>`;
}

function link(href, text) { return `<a href="${href}">${esc(text)}</a>`; }
const time = t => (t ? esc(t.slice(0, 19).replace("T", " ")) : `<span class="muted">—</span>`);

let sortKey = "id";
export async function jobsPage() {
  main().innerHTML = `<h1>Jobs</h1><div class="card" id="list"><table id="jobs" class="sortable"></table></div>`;
  const draw = async () => {
    const rows = items(await api("/v1/jobs"));
    const by = { id: j => j.id, phase: j => j.phase, count: j => -j.count, priority: j => -j.priority };
    rows.sort((a, b) => (by[sortKey](a) < by[sortKey](b) ? -1 : by[sortKey](a) > by[sortKey](b) ? 1 : 0));
    $("#jobs").innerHTML = `<tr>${[["id", "job"], ["phase", "status"], ["count", "count"],
                                   ["priority", "priority"]].map(([k, label]) =>
        `<th><button type="button" class="sort" data-sort="${k}" aria-sort="${k === sortKey ? "ascending" : "none"}">${label}</button></th>`).join("")}` +
      `<th>allocations</th><th>version</th></tr>` +
      rows.map(j => `<tr data-job="${esc(j.id)}" data-phase="${esc(j.phase || j.status)}">` +
        `<td>${link(`#/job/${encodeURIComponent(j.id)}`, j.id)}</td><td>${phaseBadge(j)}</td>` +
        `<td>${j.count}</td><td>${j.priority}</td><td>${allocCounts(j.allocations)}</td><td>${j.version}</td></tr>`).join("") +
      (rows.length ? "" : `<tr><td colspan="6" class="muted">no jobs</td></tr>`);
    probe.drawn += 1;
  };
  $("#jobs").addEventListener("click", e => {
    const key = e.target.closest("[data-sort]")?.dataset.sort;
    if (key) { sortKey = key; draw().catch(showError); }
  });
  await draw();
  let timer = null;
  const stop = onLive(m => {
    if (!/^herd\.(job|alloc|eval)\./.test(m.subject || "")) return;
    clearTimeout(timer);
    timer = setTimeout(() => draw().catch(showError), 300);
  });
  return () => { stop(); clearTimeout(timer); };
}

// Why a slot waits: the placement reply in words an operator reads.
export function whyText(p) {
  if (!p) return "";
  const needs = `needs ${p.needs.gpus} GPU(s), ${p.needs.cpu} CPU, ${p.needs.memory_mb} MB`;
  const lines = [
    `${p.unplaced} allocation(s) wait to be placed; each ${needs}.`,
    `${p.nodes_evaluated} compute node(s) evaluated, ${p.fit} with room.`,
    ...Object.entries(p.filtered).map(([why, n]) => `constraint ${why}: filtered ${n} node(s)`),
    ...Object.entries(p.exhausted).map(([what, n]) => `resources exhausted (${what}): ${n} node(s)`),
  ];
  const largest = Object.entries(p.largest_free || {}).map(([what, l]) =>
    `${what} ${l.free} on ${l.nodes} node(s)`);
  if (largest.length) lines.push(`largest free on a node that passes the constraints: ${largest.join(", ")}`);
  lines.push(...(p.reasons || []).map(r => `scheduler: ${r}`));
  if (!p.nodes_evaluated) lines.push("no compute node is registered.");
  return lines;
}

export async function jobPage(id) {
  main().innerHTML = `<h1>Job <span id="job-id">${esc(id)}</span> <span id="job-phase"></span></h1>
    <div id="why"></div>
    <div class="columns">
      <div class="card"><h2>Spec</h2><div id="job-spec"></div></div>
      <div class="card"><h2>Evaluations</h2><div id="job-evals"></div></div>
    </div>
    <div class="card"><h2>Allocations</h2><div id="job-allocs"></div></div>
    <div class="card" id="alloc-logs" hidden></div>`;
  $("#job-allocs").addEventListener("click", e => {
    const alloc = e.target.closest("[data-logs]")?.dataset.logs;
    if (alloc) showLogs($("#alloc-logs"), alloc).catch(showError);
  });
  const draw = async () => {
    const [job, allocs] = await Promise.all([
      api(`/v1/jobs/${encodeURIComponent(id)}`),
      api(`/v1/allocs?job=${encodeURIComponent(id)}`).then(items),
    ]);
    $("#job-phase").innerHTML = phaseBadge(job);
    $("#job-phase").dataset.phase = job.phase || job.status;
    const why = whyText(job.placement);
    const blocked = (job.evals || []).filter(e => e.status === "blocked");
    $("#why").innerHTML = why ? `<div class="card why" role="status"><h2>Why it is not placed</h2>` +
      `<ul>${why.map(l => `<li>${esc(l)}</li>`).join("")}</ul>` +
      (blocked.length ? `<p class="muted">blocked evaluation ${esc(blocked[0].id)}: ${esc(blocked[0].status_reason)}; ` +
        `it runs again when capacity changes</p>` : "") + `</div>` : "";
    const r = job.resources || {};
    $("#job-spec").innerHTML = `<dl class="kv">` + [
      ["status", `${job.phase} (registration: ${job.status}${job.stop_reason ? `, ${job.stop_reason}` : ""})`],
      ["count", job.count], ["priority", job.priority], ["version", job.version],
      ["command", (job.command || []).join(" ")],
      ["resources", `${r.cpu} CPU, ${r.memory_mb} MB, ${r.gpus} GPU(s)`],
      ["constraints", [job.constraints?.class ? `class=${job.constraints.class}` : "",
                       ...Object.entries(job.constraints?.labels || {}).map(([k, v]) => `${k}=${v}`)]
                        .filter(Boolean).join(", ") || "none"],
      ["requeue", `${job.requeue?.policy}, at most ${job.requeue?.max_requeue}`],
      ["allocations", null],
    ].map(([k, v]) => `<dt>${esc(k)}</dt><dd>${k === "allocations" ? allocCounts(job.allocations) : esc(v ?? "—")}</dd>`).join("") + `</dl>`;
    $("#job-evals").innerHTML = (job.evals || []).length ? `<table><tr><th>eval</th><th>status</th>` +
      `<th>trigger</th><th>node</th><th>reason</th><th>created</th></tr>` +
      [...job.evals].reverse().map(e => `<tr data-eval="${esc(e.id)}" data-status="${esc(e.status)}">` +
        `<td title="${esc(e.id)}">${esc(e.id.slice(0, 12))}</td><td>${esc(e.status)}</td><td>${esc(e.triggered_by)}</td>` +
        `<td>${e.node_id ? link(`#/node/${encodeURIComponent(e.node_id)}`, e.node_id) : ""}</td>` +
        `<td>${esc(e.status_reason)}</td><td>${time(e.created_at)}</td></tr>`).join("") + `</table>`
      : `<p class="muted">none</p>`;
    $("#job-allocs").innerHTML = allocs.length ? `<table><tr><th>alloc</th><th>slot</th><th>node</th>` +
      `<th>status</th><th>desired</th><th>exit</th><th>requeues</th><th>created</th><th>started</th>` +
      `<th>finished</th><th>reason</th><th>output</th></tr>` +
      allocs.sort((a, b) => (a.created_at || "").localeCompare(b.created_at || "")).reverse().map(a =>
        `<tr data-alloc="${esc(a.id)}" data-status="${esc(a.status)}"><td title="${esc(a.id)}">${esc(a.id.slice(0, 12))}</td>` +
        `<td>${a.index}</td><td>${link(`#/node/${encodeURIComponent(a.node_id)}`, a.node_id)}</td>` +
        `<td>${esc(a.status)}</td><td>${esc(a.desired)}</td><td>${esc(a.exit_code ?? "—")}</td>` +
        `<td>${a.requeue_count}</td><td>${time(a.created_at)}</td><td>${time(a.started_at)}</td>` +
        `<td>${time(a.finished_at)}</td><td>${esc(a.status_reason)}</td>` +
        `<td><button type="button" data-logs="${esc(a.id)}" aria-label="logs of allocation ${esc(a.id)}">logs</button></td></tr>`)
        .join("") + `</table>`
      : `<p class="muted">none placed</p>`;
    probe.drawn += 1;
  };
  await draw();
  let timer = null;
  const stop = onLive(m => {
    if (!/^herd\.(job|alloc|eval|node)\./.test(m.subject || "")) return;
    clearTimeout(timer);
    timer = setTimeout(() => draw().catch(showError), 300);
  });
  return () => { stop(); clearTimeout(timer); };
}

// -- an allocation's output ----------------------------------------------------------------
// The last TAIL lines first; "more" asks for four times as many (up to the API's 10,000
// lines / 128 KiB, as `herd alloc logs --tail N`); "refresh" appends what was written
// after the last byte shown (the reply's next_offset, as `-f` polls), at most
// REFRESH_PIECES replies of 128 KiB a press. The text is always set as text.
const TAIL = 100;
const MAX_TAIL = 10000;
const REFRESH_PIECES = 8;

const logsProbe = window.herdLogs = window.herdLogs || { reads: 0 };

async function readLogs(body) {
  logsProbe.reads += 1;
  return api("/v1/alloc/logs", { method: "POST", body });
}

function logsRefusal(err) {
  const why = err.status === 403 ? "; a workload's output may hold secrets: alloc.logs needs an operator token, not a read-only one" : "";
  return `logs refused (${err.status ?? "?"} ${err.code ?? "error"}): ${err.message}${why}`;
}

export async function showLogs(box, allocId) {
  const state = { id: allocId, tail: TAIL, piece: null };
  box.hidden = false;
  box.dataset.alloc = allocId;
  box.innerHTML = `<h2>Output of allocation <span title="${esc(allocId)}">${esc(allocId.slice(0, 12))}</span> ` +
    `<span class="muted" id="logs-where"></span></h2>
    <div class="logs-bar"><button type="button" id="logs-more">more (earlier lines)</button>
      <button type="button" id="logs-refresh">refresh (newer output)</button>
      <button type="button" id="logs-close">close</button>
      <span class="muted" id="logs-status" role="status"></span></div>
    <pre class="logs" id="logs-text" tabindex="0" aria-label="allocation output"></pre>`;
  const text = $("#logs-text", box);
  const status = $("#logs-status", box);
  const fail = err => {
    if (!err.status) throw err;
    box.dataset.state = "refused";
    status.textContent = "";
    text.textContent = logsRefusal(err);
    text.classList.add("bad");
  };
  const told = () => {
    const p = state.piece;
    const earlier = p.offset > 0;
    $("#logs-where", box).textContent = `on ${p.node_id}${p.running ? ", running: it may write more" : ", ended"}`;
    status.textContent = `bytes ${p.offset}-${p.next_offset} of ${p.size}` +
      (earlier ? (state.tail >= MAX_TAIL ? `; the first ${p.offset} bytes: herd alloc logs ${allocId.slice(0, 12)}`
                                          : `; ${p.offset} earlier bytes not shown`) : "; from the start");
    $("#logs-more", box).disabled = !earlier || state.tail >= MAX_TAIL;
    box.dataset.state = "shown";
    box.dataset.offset = String(p.offset);
    box.dataset.next = String(p.next_offset);
  };
  const tail = async () => {
    try {
      state.piece = await readLogs({ id: allocId, tail: state.tail });
    } catch (err) { fail(err); return; }
    text.classList.remove("bad");
    text.textContent = state.piece.data || "";
    if (!state.piece.data) text.textContent = state.piece.running ? "(no output yet)" : "(no output)";
    text.scrollTop = state.tail === TAIL ? text.scrollHeight : 0;    // the tail at the bottom; more: from the top
    told();
  };
  $("#logs-more", box).addEventListener("click", () => {
    state.tail = Math.min(MAX_TAIL, state.tail * 4);
    tail().catch(showError);
  });
  $("#logs-refresh", box).addEventListener("click", async () => {
    if (!state.piece) { await tail().catch(showError); return; }
    try {
      for (let i = 0; i < REFRESH_PIECES; i++) {
        const p = await readLogs({ id: allocId, offset: state.piece.next_offset });
        if (p.data) text.textContent = (state.piece.next_offset === state.piece.offset ? "" : text.textContent) + p.data;
        state.piece = { ...p, offset: state.piece.offset };
        if (p.next_offset >= p.size) break;
      }
    } catch (err) { fail(err); return; }
    text.scrollTop = text.scrollHeight;
    told();
  });
  $("#logs-close", box).addEventListener("click", () => { box.hidden = true; box.replaceChildren(); });
  await tail();
  text.focus();
}
