// The node page's commands (issue 28 item 2, issue 30 item 3): every node command of the
// server's command table, each a POST /v1/nodes/{id}/{action} with the options the CLI has
// (its --<name> is the control #<verb>-<name>). What the table confirms is asked in a
// dialog that names the node (a required flag, wipe's --force, wants the node's id typed).
// A refusal shows the server's status, code and message, as the CLI prints them.

import { $, ApiError, api, esc } from "./app.js";

// The node commands as the server's command table has them (herdbook/api/commands.py, served
// at /console/node-commands.json): the buttons, their controls and their questions are built
// from it, so a verb added there appears here with no list of verbs in this file.
let table = null;
export async function loadCommands() {
  if (!table) table = await api("/console/node-commands.json");
  return table;
}

// A deadline as the CLI takes it (30m, 2h, 90s, 1d; a bare number is seconds); null: bad.
export function durationSeconds(text) {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(text);
  if (!m) return null;
  const unit = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 }[m[2] || "s"];
  const seconds = Number(m[1]) * unit;
  return seconds > 0 ? seconds : null;
}

// The controls beside a button: the command's options, as the CLI's --<name> are.
function control(verb, o) {
  const id = `${verb.name}-${o.name}`;
  if (o.kind === "flag") {
    return o.required ? "" : `<label><input type="checkbox" id="${esc(id)}"> ${esc(o.label)}</label>`;
  }
  const size = o.kind === "duration" ? 6 : 10;
  return `<input id="${esc(id)}" size="${size}" placeholder="${esc(o.name)}" aria-label="${esc(verb.name)} ${esc(o.label)}">`;
}

// Asked before every send (not only on some option's value): the button says so with "…".
const alwaysAsked = verb => verb.confirm && !verb.confirm.when;

export function commandBar({ groups, commands }) {
  const onPage = commands.filter(c => c.page);
  return `<div class="card commands" id="commands">
    <input id="reason" placeholder="reason (recorded with the event)" aria-label="reason">
    ${groups.map(group => [group, onPage.filter(c => c.group === group)]).filter(([, verbs]) => verbs.length)
      .map(([group, verbs]) => `<div class="cmdgroup" role="group" aria-label="${esc(group)}">` +
      `<span class="muted">${esc(group)}</span>` + verbs.map(v =>
        `<span class="cmd"><button type="button" data-action="${esc(v.name)}" title="${esc(v.summary)}">` +
        `${esc(v.name)}${alwaysAsked(v) ? "…" : ""}</button>` +
        `${v.options.map(o => control(v, o)).join("")}</span>`).join("") + `</div>`).join("")}
    <dialog id="cmd-dialog" aria-labelledby="cmd-question">
      <form method="dialog">
        <p id="cmd-question"></p><p class="muted" id="cmd-detail"></p>
        <p id="cmd-type" hidden><label>type <b id="cmd-id"></b> to confirm <input id="cmd-typed" autocomplete="off"></label></p>
        <div class="actions"><button value="cancel" formnovalidate>Cancel</button>
          <button value="ok" id="cmd-ok">Confirm</button></div>
      </form>
    </dialog>
  </div>`;
}

// Resolves true when confirmed; `typed`: the node id must be typed first.
function confirmDialog(id, confirm) {
  const dialog = $("#cmd-dialog");
  const typed = confirm.typed;
  $("#cmd-question").textContent = confirm.question.replace("{id}", id);
  $("#cmd-detail").textContent = confirm.detail;
  $("#cmd-type").hidden = !typed;
  $("#cmd-id").textContent = id;
  const box = $("#cmd-typed");
  const ok = $("#cmd-ok");
  box.value = "";
  ok.disabled = typed;
  box.oninput = () => { ok.disabled = typed && box.value.trim() !== id; };
  return new Promise(resolve => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    (typed ? box : ok).focus();
  });
}

// The body of `verb` from the page's controls; a string: why it is not sent.
function body(verb, reason) {
  const sent = { reason };
  for (const o of verb.options) {
    const box = $(`#${verb.name}-${o.name}`);
    if (o.kind === "flag") {
      sent[o.field] = o.required || box.checked;   // a required flag: the typed confirmation is it
      continue;
    }
    const text = box.value.trim();
    if (!text) {
      if (o.required) return `${verb.name}: write ${o.label} (${o.name})`;
      if (o.kind === "text") sent[o.field] = "";
      continue;
    }
    if (o.kind === "duration") {
      const seconds = durationSeconds(text);
      if (seconds === null) return `${verb.name}: ${o.name} ${JSON.stringify(text)} is not a duration (30m, 2h, 90s)`;
      sent[o.field] = seconds;
    } else {
      sent[o.field] = text;
    }
  }
  return sent;
}

// Wires the bar's buttons of node `id`'s page; `after(action)` runs after a command landed.
export function mountCommands(id, { commands }, after) {
  const byName = new Map(commands.map(c => [c.name, c]));
  for (const button of document.querySelectorAll("#commands [data-action]")) {
    button.addEventListener("click", () => run(id, byName.get(button.dataset.action), after));
  }
}

async function run(id, verb, after) {
  const action = verb.name;
  const notice = $("#notice");
  const sent = body(verb, $("#reason").value.trim());
  if (typeof sent === "string") {
    notice.innerHTML = `<div class="notice bad">${esc(sent)}</div>`;
    return;
  }
  const ask = verb.confirm && (!verb.confirm.when || sent[verb.confirm.when]);
  if (ask && !(await confirmDialog(id, verb.confirm))) {
    notice.innerHTML = `<div class="notice">${esc(action)}: cancelled, nothing sent</div>`;
    return;
  }
  try {
    const result = await api(`/v1/nodes/${encodeURIComponent(id)}/${action}`, { method: "POST", body: sent });
    // unchanged: the goal already held ("node x already cordoned"), nothing appended
    notice.innerHTML = `<div class="notice good" data-action="${esc(action)}">${esc(action)}: ` +
      `${esc(result?.unchanged || result?.event || "done")}` +
      `${result?.seq && !result?.unchanged ? ` (seq ${result.seq})` : ""}</div>`;
    await after(action);
  } catch (err) {
    const text = err instanceof ApiError ? `${action} refused (${err.status} ${err.code}): ${err.message}` : String(err);
    notice.innerHTML = `<div class="notice bad" data-status="${esc(err.status)}">${esc(text)}</div>`;
  }
}
