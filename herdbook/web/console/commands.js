// The node page's commands (issue 28 item 2): every node command of the CLI that acts on
// one node, each a POST /v1/nodes/{id}/{action} with the options the CLI has (drain
// --urgent/--deadline, enable --force, claim --user/--tenant, admin node wipe --force).
// What the CLI asks to confirm (disable, an urgent drain, wipe), and delete, is confirmed
// in a dialog that names the node; wipe's dialog wants the node's id typed, its --force.
// A refusal shows the server's status, code and message, as the CLI prints them.

import { $, ApiError, api, esc } from "./app.js";

// In the CLI's groups; every one is a native button, in tab order.
export const COMMAND_GROUPS = [
  ["scheduling", ["cordon", "uncordon", "drain", "undrain"]],
  ["service", ["disable", "enable", "reboot", "validate"]],
  ["membership", ["approve", "reject", "delete"]],
  ["sensitive nodes", ["claim", "release", "wipe"]],
];

// A deadline as the CLI takes it (30m, 2h, 90s, 1d; a bare number is seconds); null: bad.
export function durationSeconds(text) {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(text);
  if (!m) return null;
  const unit = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 }[m[2] || "s"];
  const seconds = Number(m[1]) * unit;
  return seconds > 0 ? seconds : null;
}

// The controls beside some buttons: what the CLI's options are.
const EXTRAS = {
  drain: `<label><input type="checkbox" id="drain-urgent"> urgent (checkpoint running work)</label>
    <input id="drain-deadline" size="6" placeholder="deadline" aria-label="drain deadline, e.g. 30m">`,
  enable: `<label><input type="checkbox" id="enable-force"> even without a recent heartbeat</label>`,
  claim: `<input id="claim-user" size="10" placeholder="user" aria-label="claim for user">
    <input id="claim-tenant" size="10" placeholder="tenant" aria-label="claim for tenant">`,
};

export function commandBar() {
  return `<div class="card commands" id="commands">
    <input id="reason" placeholder="reason (recorded with the event)" aria-label="reason">
    ${COMMAND_GROUPS.map(([group, names]) => `<div class="cmdgroup" role="group" aria-label="${esc(group)}">` +
      `<span class="muted">${esc(group)}</span>` + names.map(a =>
        `<span class="cmd"><button type="button" data-action="${a}">${a}${CONFIRMED.has(a) ? "…" : ""}</button>` +
        `${EXTRAS[a] ?? ""}</span>`).join("") + `</div>`).join("")}
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

// Commands asked about first, with what the dialog says (the CLI's own warnings).
const CONFIRMED = new Set(["disable", "delete", "wipe"]);
const QUESTIONS = {
  disable: id => [`Disable ${id}?`, "It goes DOWN at once; its allocations are requeued elsewhere."],
  delete: id => [`Delete node ${id}?`, "It leaves the view; an agent that registers again under this id is PENDING."],
  wipe: id => [`Wipe ${id}?`, "GPU memory, NVMe and RAM are erased (herd admin node wipe --force)."],
  urgent: id => [`Drain ${id} urgently?`, "Running allocations are checkpointed and stopped now."],
};

// Resolves true when confirmed; `typed`: the node id must be typed first.
function confirmDialog(id, which, typed) {
  const dialog = $("#cmd-dialog");
  const [question, detail] = QUESTIONS[which](id);
  $("#cmd-question").textContent = question;
  $("#cmd-detail").textContent = detail;
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

// The body of `action` from the page's controls; a string: why it is not sent.
function body(action, reason) {
  if (action === "drain") {
    const text = $("#drain-deadline").value.trim();
    const deadline = text ? durationSeconds(text) : null;
    if (text && deadline === null) return `drain: deadline ${JSON.stringify(text)} is not a duration (30m, 2h, 90s)`;
    return { reason, urgent: $("#drain-urgent").checked, ...(deadline ? { deadline_s: deadline } : {}) };
  }
  if (action === "enable") return { reason, force: $("#enable-force").checked };
  if (action === "claim") {
    const user = $("#claim-user").value.trim();
    if (!user) return "claim: write who claims the node (user)";
    return { reason, user, tenant: $("#claim-tenant").value.trim() };
  }
  if (action === "wipe") return { reason, force: true };
  return { reason };
}

// Wires the bar's buttons of node `id`'s page; `after(action)` runs after a command landed.
export function mountCommands(id, after) {
  for (const button of document.querySelectorAll("#commands [data-action]")) {
    button.addEventListener("click", () => run(id, button.dataset.action, after));
  }
}

async function run(id, action, after) {
  const notice = $("#notice");
  const sent = body(action, $("#reason").value.trim());
  if (typeof sent === "string") {
    notice.innerHTML = `<div class="notice bad">${esc(sent)}</div>`;
    return;
  }
  const ask = CONFIRMED.has(action) ? action : action === "drain" && sent.urgent ? "urgent" : null;
  if (ask && !(await confirmDialog(id, ask, action === "wipe"))) {
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
