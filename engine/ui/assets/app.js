// dcc-flow dashboard (docs/guide/ui.md). Plain ES modules, no build step. Run data is shown with
// textContent and attributes only (dom.js): never parsed as HTML.
import {el, clear, fill, fmtTime, fmtRelative, durationOf} from "./dom.js";
import {drawGraph, drawGantt} from "./draw.js";

const main = document.getElementById("main");
const actor = document.getElementById("actor");
const live = document.getElementById("live");
const STATUSES = ["", "running", "completed", "failed", "cancelled", "interrupted", "paused", "waiting_approval"];
const TERMINAL = new Set(["completed", "failed", "cancelled", "interrupted"]);

// ---- session, CSRF, API ------------------------------------------------------------------

function cookie(name) {
  for (const part of document.cookie.split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return decodeURIComponent(v.join("="));
  }
  return "";
}

// The cookies' names end with the port (a host's cookies go to all its ports: two dashboards of
// one host keep theirs apart). With a session, the server sets this cookie to the session's own
// CSRF value; without a token, any random value the page sets works (double submit).
const PORT = location.port || (location.protocol === "https:" ? "443" : "80");
const CSRF_COOKIE = "dccflow_csrf_" + PORT;

function csrf() {
  let t = cookie(CSRF_COOKIE);
  if (!t) {
    const b = new Uint8Array(24);
    crypto.getRandomValues(b);
    t = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
    document.cookie = `${CSRF_COOKIE}=${t}; path=/; samesite=strict` + (location.protocol === "https:" ? "; secure" : "");
  }
  return t;
}

class APIError extends Error {
  constructor(status, code, message, details) { super(message); this.status = status; this.code = code; this.details = details || {}; }
}

// api GETs path, or POSTs body (an object, or a string that is already JSON) with the CSRF
// header; it resolves to the JSON answer or throws an APIError (its details are the error's).
async function api(path, body) {
  const opts = {credentials: "same-origin", headers: {Accept: "application/json"}};
  if (body !== undefined) {
    opts.method = "POST";
    opts.headers["Content-Type"] = "application/json";
    opts.headers["X-DCC-Flow-CSRF"] = csrf();
    opts.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  let data = null;
  try { data = await res.json(); } catch { /* not JSON */ }
  if (!res.ok) {
    const e = (data && data.error) || {};
    if (res.status === 401) showLogin();
    throw new APIError(res.status, e.code || "http_" + res.status, e.message || res.statusText, e.details);
  }
  return data;
}

// showLogin shows the sign-in form: it posts the token to /login (never in a URL), which sets
// the session cookie and comes back here.
function showLogin() {
  cleanup();
  signout.hidden = true;
  const input = el("input", {type: "password", name: "token", placeholder: "token", "data-testid": "login-token",
    autocomplete: "current-password", required: ""});
  fill(main, el("form", {class: "card login", method: "post", action: "/login", "data-testid": "login-form"},
    el("div", {class: "card-head"}, el("h2", {text: "This dashboard needs its token"})),
    el("div", {class: "card-body"},
      el("p", {class: "muted", text: "Type the token the server was started with (dcc-flow serve --token-file, DCCFLOW_TOKEN or --token). It is posted once; this browser then holds a session until you sign out or it expires."}),
      input, el("button", {class: "btn primary", type: "submit", "data-testid": "login-submit", text: "Sign in"}))));
  input.focus();
}

// The sign-out button shows when this browser holds a session (GET /api/session).
const signout = document.getElementById("signout");
signout.addEventListener("click", async () => {
  try { await api("/api/logout", {}); } catch (e) { if (e.status !== 401) { toast(e.message, true); return; } }
  showLogin();
});
api("/api/session").then((s) => { signout.hidden = s.auth !== "session"; }, () => {});

// ---- actor name, confirm dialog, toasts ----------------------------------------------------

actor.value = localStorage.getItem("dccflow.actor") || "";
actor.addEventListener("input", () => localStorage.setItem("dccflow.actor", actor.value.trim()));

const dialog = document.getElementById("confirm");
const dialogBy = document.getElementById("confirm-by");

// confirm opens the confirm dialog; extra (nodes) go above the name field. It resolves to the
// name typed (also kept as the header's name) or null when cancelled.
function confirmAction(title, text, extra = [], okLabel = "OK", danger = false) {
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  fill(document.getElementById("confirm-extra"), ...extra);
  const ok = document.getElementById("confirm-ok");
  ok.textContent = okLabel;
  ok.className = "btn " + (danger ? "danger" : "primary");
  dialogBy.value = actor.value.trim();
  return new Promise((resolve) => {
    const form = document.getElementById("confirm-form");
    const cancel = document.getElementById("confirm-cancel");
    const done = (v) => {
      form.removeEventListener("submit", onSubmit);
      cancel.removeEventListener("click", onCancel);
      dialog.removeEventListener("cancel", onCancel);
      if (dialog.open) dialog.close();
      resolve(v);
    };
    const onSubmit = (e) => {
      e.preventDefault();
      const by = dialogBy.value.trim();
      if (!by) { dialogBy.focus(); dialogBy.setCustomValidity("Type your name: every action is recorded with it"); dialogBy.reportValidity(); return; }
      actor.value = by;
      localStorage.setItem("dccflow.actor", by);
      done(by);
    };
    const onCancel = (e) => { e.preventDefault(); done(null); };
    dialogBy.oninput = () => dialogBy.setCustomValidity("");
    form.addEventListener("submit", onSubmit);
    cancel.addEventListener("click", onCancel);
    dialog.addEventListener("cancel", onCancel);
    dialog.showModal();
    (extra.find((n) => n.querySelector && n.querySelector("input,textarea"))?.querySelector("input,textarea") || (dialogBy.value ? ok : dialogBy)).focus();
  });
}

function toast(message, error = false) {
  const t = el("div", {"data-testid": "toast", class: "toast" + (error ? " error" : ""), role: error ? "alert" : "status", text: message});
  document.getElementById("toasts").append(t);
  setTimeout(() => t.remove(), error ? 9000 : 5000);
}

// act confirms, posts and toasts; it returns the answer or null.
async function act({title, text, path, body = {}, extra = [], ok = "OK", danger = false, success, collect}) {
  const by = await confirmAction(title, text, extra, ok, danger);
  if (by === null) return null;
  try {
    const res = await api(path, {...body, ...(collect ? collect() : {}), by});
    toast(success || "Done");
    return res;
  } catch (e) {
    toast(`${title} failed: ${e.message}`, true);
    return null;
  }
}

// ---- shared widgets ----------------------------------------------------------------------

// waitingText says what a waiting_resources step waits for (its record's waiting):
// "houdini ×1: 2nd of 3 in this engine's queue", or in the one queue of a PostgreSQL database's
// engines (all_engines) "houdini ×1: 3rd in the database's queue (all engines)".
function waitingText(w) {
  const what = Object.keys(w.resources || {}).sort().map((n) => `${n} ×${w.resources[n]}`).join(", ");
  if (w.other_engines) return `${what}: first in this engine's queue; other engines hold the units`;
  const n = w.place, mod = n % 100, suffix = mod >= 11 && mod <= 13 ? "th" : ({1: "st", 2: "nd", 3: "rd"}[n % 10] || "th");
  if (w.all_engines) return `${what}: ${n}${suffix} in the database's queue (all engines)`;
  return `${what}: ${n}${suffix} of ${w.of} in this engine's queue`;
}

function badge(status, testid) {
  return el("span", {class: `badge s-${status}`, "data-testid": testid, text: status});
}

function progress(p, status) {
  const done = (p && p.completed) || 0, total = (p && p.total) || 0;
  const pct = total ? Math.min(100, (100 * done) / total) : (TERMINAL.has(status) ? 100 : 0);
  const fill = el("span");
  fill.style.width = pct.toFixed(1) + "%";
  return el("span", {class: `progress s-${status}`, "data-testid": "run-progress", "data-done": done, "data-total": total},
    el("span", {class: "bar"}, fill), el("span", {class: "count", text: `${done} / ${total}`}));
}

function updateProgress(node, p, status) {
  if (!node) return;
  const done = (p && p.completed) || 0, total = (p && p.total) || 0;
  node.setAttribute("data-done", done);
  node.setAttribute("data-total", total);
  node.className = `progress s-${status}`;
  const pct = total ? Math.min(100, (100 * done) / total) : (TERMINAL.has(status) ? 100 : 0);
  node.querySelector(".bar > span").style.width = pct.toFixed(1) + "%";
  node.querySelector(".count").textContent = `${done} / ${total}`;
}

function setBadge(node, status) {
  if (!node) return;
  node.textContent = status;
  node.className = `badge s-${status}`;
}

function card(title, body, {head = [], cls = ""} = {}) {
  return el("section", {class: "card " + cls}, el("div", {class: "card-head"}, el("h2", {text: title}), el("span", {class: "spacer"}), ...head),
    el("div", {class: "card-body"}, body));
}

// ---- routing -----------------------------------------------------------------------------

let cleanups = [];
function onCleanup(fn) { cleanups.push(fn); }
function cleanup() { for (const fn of cleanups.splice(0)) { try { fn(); } catch { /* ignore */ } } live.classList.remove("on"); }

function parseHash() {
  const h = location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = h.split("?");
  return {parts: path.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query)};
}

async function route() {
  cleanup();
  const {parts, query} = parseHash();
  const page = parts[0] || "runs";
  const tab = page === "stale" ? "files" : page;
  for (const a of document.querySelectorAll(".nav a")) a.classList.toggle("active", a.getAttribute("href") === "#/" + tab);
  try {
    if (page === "runs" && parts[1]) await runPage(parts[1], query.get("step") || "");
    else if (page === "runs") await runsPage(query);
    else if (page === "workflows" && parts[1]) await workflowPage(parts[1]);
    else if (page === "workflows") await workflowsPage();
    else if (page === "schedules" && parts[1]) await schedulePage(parts[1]);
    else if (page === "schedules") await schedulesPage();
    else if (page === "start") await startPage(parts[1] || "");
    else if (page === "files") await filesPage(query);
    else if (page === "stale") await stalePage(query);
    else { location.hash = "#/runs"; }
  } catch (e) {
    if (e instanceof APIError && e.status === 401) return;
    fill(main, el("div", {class: "error-box"}, el("b", {text: e.code || "error"}), " ", e.message));
  }
}

// events opens an EventSource on /api/events and calls handlers[name](data). The stream sends
// what happens after it opened, so what changed between the page's read and then is not in it:
// opened(), when given, runs each time the stream (re)opens, for the page to read again.
function events(query, handlers, opened) {
  const es = new EventSource("/api/events" + query);
  es.onopen = () => { live.classList.add("on"); if (opened) opened(); };
  es.onerror = () => live.classList.remove("on");
  for (const [name, fn] of Object.entries(handlers)) {
    es.addEventListener(name, (ev) => { try { fn(JSON.parse(ev.data)); } catch (e) { console.error(e); } });
  }
  onCleanup(() => es.close());
  return es;
}

// frame batches DOM work to one animation frame, whatever the event rate.
function framed(fn) {
  let queued = false;
  return () => { if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; fn(); }); } };
}

// ---- runs page ---------------------------------------------------------------------------

async function runsPage(query) {
  const status = query.get("status") || "", workflow = query.get("workflow") || "", since = query.get("since") || "";
  // The search of docs/reference/cli/inspecting.md "runs": an input value, a tool, a text of an error message.
  const input = query.get("input") || "", tool = query.get("tool") || "", errText = query.get("error_text") || "";
  const searching = !!(input || tool || errText);
  const setQuery = (k, v) => {
    const q = new URLSearchParams(parseHash().query);
    if (v) q.set(k, v); else q.delete(k);
    const s = q.toString();
    location.hash = "#/runs" + (s ? "?" + s : "");
  };
  const statusSel = el("select", {"data-testid": "filter-status", "aria-label": "status"},
    ...STATUSES.map((s) => el("option", {value: s, text: s ? s.replace("_", " ") : "all statuses", selected: s === status})));
  statusSel.addEventListener("change", () => setQuery("status", statusSel.value));
  const wfInput = el("input", {"data-testid": "filter-workflow", placeholder: "workflow name", list: "wf-names", value: workflow, spellcheck: "false"});
  let t;
  wfInput.addEventListener("change", () => setQuery("workflow", wfInput.value.trim()));
  wfInput.addEventListener("input", () => { clearTimeout(t); t = setTimeout(() => { if (wfInput.value.trim() !== workflow) setQuery("workflow", wfInput.value.trim()); }, 600); });
  onCleanup(() => clearTimeout(t));
  const sinceSel = el("select", {"data-testid": "filter-since", "aria-label": "created"},
    ...[["", "any time"], ["1h", "last hour"], ["24h", "last 24 hours"], ["7d", "last 7 days"], ["30d", "last 30 days"]]
      .map(([v, l]) => el("option", {value: v, text: l, selected: v === since})));
  sinceSel.addEventListener("change", () => setQuery("since", sinceSel.value));
  const searchInput = (key, value, placeholder, title) => {
    const box = el("input", {"data-testid": "filter-" + key.replace("_", "-"), placeholder, title, value, spellcheck: "false", size: 14});
    box.addEventListener("change", () => setQuery(key, box.value.trim()));
    return box;
  };
  const inputBox = searchInput("input", input, "input=value", "runs whose input has this value, e.g. shot=sh010");
  const toolBox = searchInput("tool", tool, "tool", "runs with an attempt that called this tool");
  const errBox = searchInput("error_text", errText, "error text", "runs with an error message containing this text (any attempt)");
  const datalist = el("datalist", {id: "wf-names"});
  api("/api/workflows").then((d) => datalist.append(...d.workflows.map((w) => el("option", {value: w.name})))).catch(() => {});

  const tbody = el("tbody");
  const table = el("table", {class: "data", "data-testid": "runs-table"},
    el("thead", {}, el("tr", {}, ...["Status", "Workflow", "Run", "Progress", "Created", "Duration", "Origin", "Error"].map((h) => el("th", {text: h})))),
    tbody);
  const more = el("button", {class: "btn", "data-testid": "runs-more", text: "Load more"});
  const count = el("span", {class: "muted"});
  const rows = new Map();

  const params = new URLSearchParams();
  if (status) params.set("status", status);
  if (workflow) params.set("workflow", workflow);
  if (since) {
    const n = parseInt(since, 10), unit = since.slice(-1);
    params.set("since", new Date(Date.now() - n * (unit === "h" ? 3600e3 : 86400e3)).toISOString().replace(/\.\d+Z$/, "Z"));
  }
  if (input) params.append("input", input);
  if (tool) params.set("tool", tool);
  if (errText) params.set("error_text", errText);
  let cursor = "";
  // A run that starts meanwhile is listed only without a search (its attempts are not known here).
  const matches = (r) => !searching && (!status || r.status === status || (status === "waiting_approval" && r.status === "waiting")) &&
    (!workflow || r.name === workflow);

  // errorText is the ERROR cell's text and title (the cell clips it with an ellipsis).
  const errorText = (r) => r.error ? `${r.error.kind}: ${r.error.message}` : "";
  function row(r) {
    const tr = el("tr", {"data-testid": "run-row", "data-run-id": r.id, "data-status": r.status, "data-workflow": r.name, "data-created": r.created_at, class: "clickable"},
      el("td", {}, badge(r.status, "run-status")),
      el("td", {}, el("a", {href: "#/runs?workflow=" + encodeURIComponent(r.name), text: r.name, title: "runs of this workflow"})),
      el("td", {class: "mono"}, el("a", {"data-testid": "run-link", href: "#/runs/" + encodeURIComponent(r.id), text: r.id})),
      el("td", {}, progress(r.progress, r.status)),
      el("td", {title: r.created_at, text: fmtTime(r.created_at)}),
      el("td", {class: "num", text: durationOf(r.created_at, r.finished_at)}),
      el("td", {class: "muted", text: r.origin || ""}),
      el("td", {class: "err", "data-testid": "run-error", title: errorText(r), text: errorText(r)}));
    tr.addEventListener("click", (e) => { if (!e.target.closest("a")) location.hash = "#/runs/" + encodeURIComponent(r.id); });
    return tr;
  }
  function update(tr, r) {
    tr.setAttribute("data-status", r.status);
    setBadge(tr.querySelector('[data-testid="run-status"]'), r.status);
    updateProgress(tr.querySelector('[data-testid="run-progress"]'), r.progress, r.status);
    tr.cells[5].textContent = durationOf(r.created_at, r.finished_at);
    tr.cells[7].textContent = tr.cells[7].title = errorText(r);
  }
  async function load() {
    const q = new URLSearchParams(params);
    q.set("limit", "50");
    if (cursor) q.set("cursor", cursor);
    more.disabled = true;
    const d = await api("/api/runs?" + q);
    for (const r of d.runs) {
      if (rows.has(r.id)) continue;
      const tr = row(r);
      rows.set(r.id, tr);
      tbody.append(tr);
    }
    cursor = d.next_cursor;
    more.disabled = false;
    more.classList.toggle("hidden", !cursor);
    count.textContent = rows.size ? `${rows.size} run${rows.size === 1 ? "" : "s"} shown` : "";
    empty.classList.toggle("hidden", rows.size > 0);
  }
  more.addEventListener("click", () => load().catch((e) => toast(e.message, true)));
  const empty = el("div", {class: "empty hidden", text: "No runs match these filters."});

  fill(main,
    el("div", {class: "page-head"}, el("h1", {text: "Runs"}),
      el("div", {class: "toolbar"}, statusSel, wfInput, datalist, sinceSel, inputBox, toolBox, errBox), el("span", {class: "spacer"}), count,
      el("a", {class: "btn primary", "data-testid": "start-run-button", href: "#/start" + (workflow ? "/" + encodeURIComponent(workflow) : ""), text: "Start a run"})),
    el("section", {class: "card runs-card"}, el("div", {class: "table-wrap"}, table, empty), el("div", {class: "more"}, more)));
  await load();

  // Live: run summaries coalesced by the server; DOM work batched per frame.
  const pending = new Map();
  const apply = framed(() => {
    for (const r of pending.values()) {
      const tr = rows.get(r.id);
      if (tr) update(tr, r);
      else if (matches(r) && !since) {
        const nr = row(r);
        rows.set(r.id, nr);
        tbody.prepend(nr);
        empty.classList.add("hidden");
      }
    }
    pending.clear();
  });
  events("", {run: (r) => { pending.set(r.id, r); apply(); }});
  const timer = setInterval(() => {
    for (const tr of rows.values()) {
      if (!TERMINAL.has(tr.getAttribute("data-status"))) tr.cells[5].textContent = durationOf(tr.getAttribute("data-created"), null);
    }
  }, 5000);
  onCleanup(() => clearInterval(timer));
}

// ---- run page ----------------------------------------------------------------------------

function stepStatusOf(instances) {
  // The status of a step id over its instances (a foreach body step has one per item).
  const s = new Set(instances.map((i) => i.status));
  for (const k of ["failed", "running", "retrying", "waiting_approval", "waiting_resources"]) if (s.has(k)) return k;
  if (s.size === 0) return "pending";
  if (s.size === 1) return [...s][0];
  if (s.has("pending")) return "running";
  if (s.has("cancelled")) return "cancelled";
  return "completed";
}

// runPage shows run id; step, when given (#/runs/ID?step=KEY, the file page's links), is the
// step instance selected at once.
async function runPage(id, step = "") {
  let data = await api("/api/runs/" + encodeURIComponent(id));
  let selected = "";
  const title = el("h1", {"data-testid": "run-title"}, el("span", {text: data.name}), el("span", {class: "faint mono", text: "  " + data.run_id}));
  const status = badge(data.status, "run-status");
  const prog = progress(data.progress, data.status);
  const actions = el("div", {class: "toolbar"});
  const meta = el("div", {class: "meta"});
  const errorBox = el("div");
  const approvals = el("div");
  const graphBody = el("div", {class: "graph-wrap"});
  const ganttBody = el("div", {class: "gantt-wrap"});
  const stepsBody = el("div", {class: "table-wrap"});
  const stepFilter = el("input", {placeholder: "filter steps", spellcheck: "false", "aria-label": "filter steps"});
  const stepCount = el("span", {class: "muted"});
  const detail = el("div", {"data-testid": "step-detail"}, el("div", {class: "empty", text: "Select a step to see its inputs, output, error, logs and worker."}));
  detail.classList.add("hidden");
  const detailEmpty = el("div", {class: "empty", text: "Select a step (in the list, the graph or the timeline) to see its inputs, output, error, logs and worker."});

  fill(main,
    el("div", {class: "page-head run-head"}, title, status, prog, el("span", {class: "spacer"}), actions),
    meta, errorBox, approvals,
    el("div", {class: "grid run-top"},
      card("Graph", graphBody, {cls: "scroll"}),
      card("Timeline", ganttBody, {cls: "scroll"})),
    el("div", {class: "grid run-bottom"},
      card("Steps", stepsBody, {cls: "steps-card", head: [stepCount, stepFilter]}),
      card("Step", el("div", {}, detailEmpty, detail))));

  function renderMeta() {
    fill(meta,
      el("span", {}, "Created ", el("b", {text: fmtTime(data.created_at), title: data.created_at})),
      data.finished_at ? el("span", {}, "Finished ", el("b", {text: fmtTime(data.finished_at)})) : null,
      el("span", {}, "Duration ", el("b", {text: durationOf(data.created_at, data.finished_at)})),
      el("span", {}, "Origin ", el("b", {text: data.origin})),
      data.origin === "ui" && data.trigger && data.trigger.by ? el("span", {"data-testid": "run-started-by"}, "Started by ", el("b", {text: String(data.trigger.by)})) : null,
      data.workflow_version ? el("span", {}, "Version ", el("a", {href: "#/workflows/" + encodeURIComponent(data.name), text: "v" + data.workflow_version})) : null,
      el("span", {}, "Spec ", el("b", {class: "mono", text: (data.spec_hash || "").slice(0, 12)})),
      (data.resumes || []).length ? el("span", {"data-testid": "run-resumes", title: data.resumes.map((r) => `${fmtTime(r.at)}${r.by ? " by " + r.by : ""}${r.forced ? ", forced: " + r.forced.join(", ") : ""}`).join("\n")},
        "Resumed ", el("b", {text: `${data.resumes.length}×` + (data.resumes[data.resumes.length - 1].by ? ", last by " + data.resumes[data.resumes.length - 1].by : "")})) : null,
      data.parent_run_id ? el("span", {}, "Parent ", el("a", {href: "#/runs/" + encodeURIComponent(data.parent_run_id), text: data.parent_run_id})) : null,
      Object.keys(data.inputs || {}).length ? el("span", {title: JSON.stringify(data.inputs, null, 2)}, "Inputs ", el("b", {class: "mono", text: truncate(JSON.stringify(data.inputs), 120)})) : null);
    clear(errorBox);
    if (data.error) {
      errorBox.append(el("div", {class: "error-box"}, el("b", {text: data.error.kind + ": "}), el("span", {text: data.error.message}),
        data.error.step_key ? el("span", {class: "muted", text: "  (step " + data.error.step_key + ")"}) : null));
    }
  }

  function renderActions() {
    clear(actions);
    const s = data.status;
    if (s === "running" || s === "waiting" || s === "pending") {
      actions.append(el("button", {class: "btn", "data-testid": "pause-button", text: "Pause", onclick: () => runAction("pause")}));
    }
    if (s === "paused") {
      actions.append(el("button", {class: "btn good", "data-testid": "unpause-button", text: "Unpause", onclick: () => runAction("unpause")}));
    }
    if (!data.terminal) {
      actions.append(el("button", {class: "btn danger", "data-testid": "cancel-button", text: "Cancel run", onclick: () => runAction("cancel")}));
    }
    if (s === "failed" || s === "cancelled" || s === "interrupted" || s === "completed") {
      actions.append(el("button", {class: "btn primary", "data-testid": "resume-button", text: s === "completed" ? "Re-run steps…" : "Resume", onclick: () => runAction("resume")}));
    }
  }

  async function runAction(kind) {
    const path = `/api/runs/${encodeURIComponent(id)}/${kind}`;
    if (kind === "resume") {
      const force = el("input", {"data-testid": "resume-force", placeholder: "e.g. export, per_file[3].publish", spellcheck: "false"});
      const res = await act({title: "Resume run", text: `Run ${data.name} ${id} again, reusing its completed steps. Name steps to force them to run again (comma-separated step ids or instance keys; required for a completed run).`,
        path, extra: [el("label", {class: "field"}, "Force steps", force)], ok: "Resume",
        collect: () => ({force: force.value.split(",").map((s) => s.trim()).filter(Boolean)}), success: `Run ${id} resumed`});
      if (res) refresh();
      return;
    }
    const reason = el("input", {placeholder: "reason (optional)", "data-testid": "action-reason"});
    const words = {cancel: ["Cancel run", "Cancel", `Cancel ${data.name} ${id}? No new step starts; calls in flight are told to stop.`, "cancelled"],
      pause: ["Pause run", "Pause", `Pause ${data.name} ${id}? No step starts until it is unpaused; steps in flight finish.`, "paused"],
      unpause: ["Unpause run", "Unpause", `Let ${data.name} ${id} go on?`, "unpaused"]}[kind];
    const res = await act({title: words[0], text: words[2], path, extra: [el("label", {class: "field"}, "Reason", reason)],
      ok: words[1], danger: kind === "cancel", collect: () => ({reason: reason.value.trim()}), success: `Run ${id} ${words[3]}`});
    if (res) refresh();
  }

  function renderApprovals() {
    clear(approvals);
    for (const a of data.approvals || []) {
      const comment = el("textarea", {"data-testid": "approval-comment", placeholder: "comment (recorded with your decision)"});
      const decide = async (approved) => {
        const res = await act({title: approved ? "Approve" : "Reject", text: `${approved ? "Approve" : "Reject"} ${a.step_key} of ${data.name}?`,
          path: `/api/runs/${encodeURIComponent(id)}/approve`, ok: approved ? "Approve" : "Reject", danger: !approved,
          collect: () => ({step: a.step_key, approved, comment: comment.value.trim()}),
          success: `${a.step_key} ${approved ? "approved" : "rejected"}`});
        if (res) refresh();
      };
      approvals.append(el("div", {class: "approval", "data-testid": "approval", "data-step": a.step_key},
        el("h2", {}, "Approval needed: ", el("span", {class: "mono", text: a.step_key})),
        el("div", {class: "prompt", text: a.prompt || ""}),
        el("div", {class: "muted", text: "Requested " + fmtTime(a.requested_at) + (a.expires_at ? " · expires " + fmtRelative(a.expires_at) : "")}),
        comment,
        el("div", {class: "buttons"},
          el("button", {class: "btn good", "data-testid": "approve-button", text: "Approve", onclick: () => decide(true)}),
          el("button", {class: "btn danger", "data-testid": "reject-button", text: "Reject", onclick: () => decide(false)}))));
    }
  }

  function byStepID() {
    const m = new Map();
    for (const i of data.instances) {
      if (!m.has(i.step_id)) m.set(i.step_id, []);
      m.get(i.step_id).push(i);
    }
    return m;
  }

  function renderGraph() {
    const m = byStepID();
    const g = drawGraph(data.graph, {
      testid: "run-graph",
      status: (n) => stepStatusOf(m.get(n.id) || []),
      sub: (n) => {
        const is = m.get(n.id) || [];
        if (is.length > 1) return `${is.filter((i) => TERMINAL.has(i.status) || i.status === "skipped").length}/${is.length} · ${n.tool || n.kind}`;
        return n.tool || n.kind;
      },
      onPick: (n) => { const is = m.get(n.id); if (is && is.length) select(is[0].key); },
    });
    fill(graphBody, g);
    markSelected();
  }

  function renderGantt() {
    const w = Math.max(ganttBody.clientWidth - 4, 600);
    fill(ganttBody, drawGantt(data.attempts, w, (k) => select(k)));
    if (data.attempts_truncated) ganttBody.append(el("div", {class: "muted", text: "This run has too many events for every attempt: one bar per step instance (its last attempt)."}));
  }

  function renderSteps() {
    const f = stepFilter.value.trim().toLowerCase();
    const tbody = el("tbody");
    let shown = 0;
    for (const i of data.instances) {
      if (f && !i.key.toLowerCase().includes(f) && !i.status.includes(f)) continue;
      if (shown++ >= 1000) break;
      const tr = el("tr", {"data-testid": "step-row", "data-step-key": i.key, "data-status": i.status, class: "clickable" + (i.key === selected ? " selected" : "")},
        el("td", {class: "mono", text: i.key}),
        el("td", {class: "muted", text: i.kind}),
        el("td", {title: i.waiting ? "waiting for " + waitingText(i.waiting) : ""}, badge(i.status)),
        el("td", {class: "num", text: i.attempts || ""}),
        el("td", {class: "num", text: i.started_at ? durationOf(i.started_at, i.finished_at) : ""}),
        el("td", {class: "muted", text: i.worker || (i.cached ? "cached" : "")}));
      tr.addEventListener("click", () => select(i.key));
      tbody.append(tr);
    }
    const more = data.instances_total > data.instances.length ? ` (first ${data.instances.length} of ${data.instances_total} listed)` : "";
    stepCount.textContent = `${data.instances_total} instance${data.instances_total === 1 ? "" : "s"}${more}`;
    fill(stepsBody, el("table", {class: "data"},
      el("thead", {}, el("tr", {}, ...["Step", "Kind", "Status", "Tries", "Duration", "Worker"].map((h) => el("th", {text: h})))), tbody));
  }
  // Over 2,000 instances the server lists 2,000: the filter then asks it for the matching ones.
  let filterTimer = 0;
  stepFilter.addEventListener("input", () => {
    if (data.instances_total > 2000 || listedFilter) {
      clearTimeout(filterTimer);
      filterTimer = setTimeout(() => refresh(), 300);
    } else renderSteps();
  });
  onCleanup(() => clearTimeout(filterTimer));

  function markSelected() {
    for (const n of graphBody.querySelectorAll(".node")) n.classList.remove("sel");
    const inst = data.instances.find((i) => i.key === selected);
    if (inst) graphBody.querySelector(`.node[data-step="${CSS.escape(inst.step_id)}"]`)?.classList.add("sel");
    for (const tr of stepsBody.querySelectorAll("tr[data-step-key]")) tr.classList.toggle("selected", tr.getAttribute("data-step-key") === selected);
  }

  async function select(key) {
    selected = key;
    markSelected();
    let st;
    try { st = await api(`/api/runs/${encodeURIComponent(id)}/steps/${encodeURIComponent(key)}`); } catch (e) { toast(e.message, true); return; }
    if (selected !== key) return;
    detailEmpty.classList.add("hidden");
    detail.classList.remove("hidden");
    const pre = (testid, value, cls = "") => el("pre", {class: "block " + cls, "data-testid": testid, text: value});
    const json = (v) => (v === undefined ? "" : JSON.stringify(v, null, 2));
    const logs = el("pre", {class: "block logs", "data-testid": "step-logs"});
    for (const l of st.logs || []) {
      const tag = l.stream === "stderr" ? "[stderr] " : l.level ? `[${[l.level, l.logger].filter(Boolean).join(" ")}] ` : "";
      logs.append(el("span", {class: l.stream, text: (l.attempt ? `#${l.attempt} ` : "") + tag + l.text + "\n"}));
    }
    if (!(st.logs || []).length) logs.textContent = "(no log lines)";
    if (st.logs_dropped) logs.prepend(el("span", {class: "muted", text: `(${st.logs_dropped} older lines not kept)\n`}));
    const err = st.error;
    fill(detail,
      el("div", {class: "page-head"}, el("h2", {class: "mono", text: st.key}), badge(st.status),
        st.cached ? el("span", {class: "tag", text: "cached"}) : null, el("span", {class: "spacer"})),
      el("dl", {class: "detail-grid"},
        el("dt", {text: "Kind"}), el("dd", {text: st.kind + (st.tool ? " · " + st.tool : "")}),
        el("dt", {text: "Attempts"}), el("dd", {text: String(st.attempts || 0)}),
        el("dt", {text: "Started"}), el("dd", {text: st.started_at ? fmtTime(st.started_at) : "—"}),
        el("dt", {text: "Duration"}), el("dd", {text: st.started_at ? durationOf(st.started_at, st.finished_at) : "—"}),
        el("dt", {text: "Worker"}), el("dd", {"data-testid": "step-worker", class: "mono", text: st.worker || "in process"}),
        st.waiting ? el("dt", {text: "Waiting for"}) : null,
        st.waiting ? el("dd", {"data-testid": "step-waiting", text: `${waitingText(st.waiting)}, since ${fmtTime(st.waiting.since)}`}) : null,
        st.progress && !st.waiting ? el("dt", {text: "Progress"}) : null,
        st.progress && !st.waiting ? el("dd", {text: `${st.progress.done}${st.progress.total != null ? " / " + st.progress.total : ""} ${st.progress.message || ""}`}) : null,
        st.child_run_id ? el("dt", {text: "Child run"}) : null,
        st.child_run_id ? el("dd", {}, el("a", {href: "#/runs/" + encodeURIComponent(st.child_run_id), text: st.child_run_id})) : null),
      el("div", {"data-testid": "step-error", class: err ? "" : "hidden"},
        el("h3", {text: "Error"}),
        err ? pre("step-error-message", `${err.kind || "error"}: ${err.message}`, "err") : null,
        err && err.trace ? el("pre", {class: "block err", "data-testid": "step-traceback", text: err.trace}) : null),
      el("h3", {text: "Arguments (rendered, latest attempt)"}), pre("step-args", st.args ? json(st.args) : "(not recorded)"),
      el("h3", {text: "Arguments as declared"}), pre("step-inputs", st.declared_args ? json(st.declared_args) : "(none)"),
      (st.attempt_history || []).length ? el("h3", {text: "Attempts"}) : null,
      (st.attempt_history || []).length ? attemptsTable(st) : null,
      (st.attempt_history || []).some((a) => (a.files || []).length) ? el("h3", {text: "Files"}) : null,
      (st.attempt_history || []).some((a) => (a.files || []).length) ? filesTable(st.attempt_history) : null,
      el("h3", {text: "Output"}), pre("step-output", st.output === undefined ? "(none)" : json(st.output)),
      (st.file_refs || []).length ? el("h3", {text: "File refs"}) : null,
      (st.file_refs || []).length ? pre("step-file-refs", json(st.file_refs)) : null,
      el("h3", {text: "Logs"}), logs);
  }

  // attemptsTable lists a step's attempts: number, start, duration, where, outcome, error.
  function attemptsTable(st) {
    const body = el("tbody", {});
    let prev = 0;
    for (const a of st.attempt_history) {
      if (st.attempts_dropped && prev && a.attempt - prev > 1) {
        body.append(el("tr", {}, el("td", {colspan: "6", class: "muted", text: `… ${st.attempts_dropped} attempts not kept`})));
      }
      prev = a.attempt;
      const where = [a.worker, a.pid ? `pid ${a.pid}${a.host ? "@" + a.host : ""}` : ""].filter(Boolean).join(" ");
      const err = a.error ? `${a.error.kind || "error"}: ${a.error.message}${a.exit ? " (" + a.exit + ")" : ""}` : "";
      body.append(el("tr", {"data-testid": "step-attempt", title: a.args ? JSON.stringify(a.args) : ""},
        el("td", {class: "mono", text: "#" + a.attempt}),
        el("td", {text: a.started_at ? fmtTime(a.started_at) : "—"}),
        el("td", {text: a.started_at && a.finished_at ? durationOf(a.started_at, a.finished_at) : "—"}),
        el("td", {class: "mono", text: where}),
        el("td", {}, badge(a.status)),
        el("td", {class: "err", text: err})));
    }
    return el("table", {class: "steps", "data-testid": "step-attempts"},
      el("thead", {}, el("tr", {}, ...["#", "Started", "Duration", "Where", "Outcome", "Error"].map((t) => el("th", {text: t})))), body);
  }

  function renderAll() {
    setBadge(status, data.status);
    updateProgress(prog, data.progress, data.status);
    renderMeta(); renderActions(); renderApprovals(); renderGraph(); renderGantt(); renderSteps();
  }
  renderAll();
  if (step) select(step);

  // Live: the server coalesces; the page updates status and progress at once and reloads the
  // whole run at most once a second (every 4 s for very large runs).
  let refreshing = false, again = false, lastRefresh = 0, timer = 0, listedFilter = "";
  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    try {
      const f = stepFilter.value.trim();
      const fresh = await api("/api/runs/" + encodeURIComponent(id) + (f && data.instances_total > 2000 ? "?instances=" + encodeURIComponent(f) : ""));
      listedFilter = f && data.instances_total > 2000 ? f : "";
      data = fresh;
      lastRefresh = Date.now();
      renderAll();
      if (selected) select(selected);
    } catch (e) { if (e.status !== 401) toast(e.message, true); } finally {
      refreshing = false;
      if (again) { again = false; schedule(); }
    }
  }
  function schedule() {
    if (timer) return;
    const gap = data.instances_total > 1000 ? 4000 : 1000;
    timer = setTimeout(() => { timer = 0; refresh(); }, Math.max(0, lastRefresh + gap - Date.now()));
  }
  onCleanup(() => clearTimeout(timer));
  events("?run=" + encodeURIComponent(id), {
    run: (r) => {
      if (r.id !== id) return;
      const changed = r.status !== data.status || (r.approvals || 0) !== (data.approvals || []).length;
      data.progress = r.progress;
      updateProgress(prog, r.progress, r.status);
      setBadge(status, r.status);
      if (changed) { data.status = r.status; refresh(); } else schedule();
    },
    step: (s) => {
      if (s.run_id !== id) return;
      updateProgress(prog, s.progress, data.status);
      const tr = stepsBody.querySelector(`tr[data-step-key="${CSS.escape(s.key)}"]`);
      if (tr && s.status) { tr.setAttribute("data-status", s.status); setBadge(tr.cells[2].firstChild, s.status); }
      schedule();
    },
  }, () => refresh());  // a run that ended between the read above and the stream's start
  window.addEventListener("resize", renderGantt);
  onCleanup(() => window.removeEventListener("resize", renderGantt));
}

function truncate(s, n) { return s.length > n ? s.slice(0, n - 1) + "…" : s; }

// ---- files: lineage and staleness (docs/guide/ui.md, "Files") -----------------------------

// A file's page, and a run's page with one step selected.
const fileHref = (path) => "#/files?path=" + encodeURIComponent(path);
const stepHref = (runID, key) => "#/runs/" + encodeURIComponent(runID) + "?step=" + encodeURIComponent(key);

// shortHash is the first 12 hex digits of a "blake3:…" hash.
function shortHash(h) { return h ? h.replace(/^blake3:/, "").slice(0, 12) : ""; }

function fmtSize(n) {
  if (n == null) return "";
  if (n < 1024) return n + " B";
  const u = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024, i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return v.toFixed(v < 10 ? 1 : 0) + " " + u[i];
}

// splitPath cuts a path (POSIX or Windows) into its directory and its name.
function splitPath(p) {
  const i = Math.max(p.lastIndexOf("/"), p.lastIndexOf("\\"));
  return i < 0 ? ["", p] : [p.slice(0, i + 1), p.slice(i + 1) || p];
}

// filesTable lists the files of a step's attempts (AttemptInfo.files): attempt, role, path (a
// link to the file's page), state, size, short hash. Paths come from tools: text only.
function filesTable(history) {
  const body = el("tbody");
  for (const a of history) {
    for (const f of a.files || []) {
      body.append(el("tr", {"data-testid": "step-file", "data-role": f.role, "data-state": f.state, "data-path": f.path},
        el("td", {class: "mono", text: "#" + a.attempt}),
        el("td", {text: f.role}),
        el("td", {class: "mono path"}, el("a", {"data-testid": "step-file-link", href: fileHref(f.path), text: f.path, title: "lineage of this file"})),
        el("td", {}, el("span", {class: "now now-" + (f.state === "ok" ? "unchanged" : f.state), text: f.state, title: f.error || ""})),
        el("td", {class: "num", text: f.state === "ok" || f.size ? fmtSize(f.size) : ""}),
        el("td", {class: "mono", title: f.hash || f.error || "", text: shortHash(f.hash)})));
    }
  }
  return el("table", {class: "steps", "data-testid": "step-files"},
    el("thead", {}, el("tr", {}, ...["#", "Role", "Path", "State", "Size", "Hash"].map((t) => el("th", {text: t})))), body);
}

const NOW_TEXT = {unchanged: "unchanged since recorded", changed: "changed since recorded", missing: "missing", unreadable: "unreadable or not hashed"};

// lineageFile is a file's box: its name and directory, its state now and its recorded hash.
function lineageFile(n, root, staleBy) {
  const [dir, name] = splitPath(n.path);
  const stale = n.made && staleBy ? staleBy.get(n.path) : undefined;
  return el("div", {class: `lin-file now-${n.now}` + (root ? " root" : ""), "data-testid": "lineage-file", "data-path": n.path, "data-now": n.now,
    "data-stale": stale ? "true" : null},
    el("div", {class: "lin-name mono"}, root ? el("span", {text: name, title: n.path}) : el("a", {href: fileHref(n.path), text: name, title: n.path})),
    dir ? el("div", {class: "lin-dir mono faint", text: dir, title: n.path}) : null,
    el("div", {class: "lin-state"}, el("span", {class: "now now-" + n.now, "data-testid": "lineage-now", text: n.now, title: NOW_TEXT[n.now] || ""}),
      n.hash ? el("span", {class: "mono faint", title: n.hash, text: " " + shortHash(n.hash)}) : null,
      stale ? el("span", {class: "tag stale", "data-testid": "lineage-stale", title: stale, text: "stale"}) : null),
    n.cut ? el("div", {class: "lin-note"}, el("a", {href: fileHref(n.path), "data-testid": "lineage-more", text: "made by more steps…"})) : null,
    n.repeat ? el("div", {class: "lin-note muted", text: "its making is drawn above"}) : null,
    !n.made && !n.cut && !n.repeat && !root ? el("div", {class: "lin-note faint", text: "source: no recorded step wrote it"}) : null);
}

// lineageMaking is the box of the attempt that wrote a file: tool, run, step and attempt (links
// to the run page with the step selected), status, when, and its arguments as the box's title.
function lineageMaking(m) {
  return el("div", {class: "lin-made", "data-testid": "lineage-making", "data-run-id": m.run_id, "data-step-key": m.step_key, "data-tool": m.tool || ""},
    el("div", {class: "lin-line"},
      el("span", {class: "lin-tool mono", text: m.tool || "(tool not recorded)", title: m.args ? "arguments: " + JSON.stringify(m.args, null, 2) : ""}),
      el("a", {"data-testid": "lineage-step", class: "mono", href: stepHref(m.run_id, m.step_key), text: m.step_key + " #" + m.attempt, title: "the step on its run's page"}),
      m.status ? badge(m.status) : null),
    el("div", {class: "lin-line faint"},
      el("a", {"data-testid": "lineage-run", class: "mono", href: "#/runs/" + encodeURIComponent(m.run_id), text: m.run_id}),
      el("span", {text: (m.workflow ? m.workflow + " · " : "") + fmtTime(m.at), title: m.at})),
    m.env ? el("div", {class: "faint mono lin-env", text: truncate(JSON.stringify(m.env), 80), title: JSON.stringify(m.env, null, 2)}) : null);
}

// lineageTree draws a lineage graph as nested boxes: a row of a file and the attempt that made
// it, and under it, indented, the files that attempt read, each drawn the same way.
function lineageTree(n, staleBy, root = false) {
  const row = el("div", {class: "lin-row"}, lineageFile(n, root, staleBy));
  const node = el("div", {class: "lin-node"}, row);
  if (n.made) {
    row.append(el("span", {class: "lin-arrow", "aria-hidden": "true", text: "← made by"}), lineageMaking(n.made));
    const ins = n.made.inputs || [];
    node.append(el("div", {class: "lin-inputs", "data-testid": "lineage-inputs"},
      el("div", {class: "lin-label faint", text: ins.length ? `from ${ins.length} file${ins.length === 1 ? "" : "s"} it read` : "it read no recorded file"}),
      ...ins.map((i) => lineageTree(i, staleBy))));
  }
  return node;
}

// filesPage is #/files?path=P&depth=N: the file's lineage drawn, and whether it is stale; without
// a path, the forms that lead to a file and to the stale view.
async function filesPage(query) {
  const path = query.get("path") || "", depth = query.get("depth") || "";
  const pathBox = el("input", {"data-testid": "file-path", placeholder: "/shots/sh010/shot.usda", value: path, spellcheck: "false", size: 60, required: true});
  const depthSel = el("select", {"data-testid": "file-depth", "aria-label": "depth"},
    ...[["", "depth 10"], ["1", "depth 1"], ["2", "depth 2"], ["3", "depth 3"], ["5", "depth 5"], ["20", "depth 20"], ["50", "depth 50"]]
      .map(([v, l]) => el("option", {value: v, text: l, selected: v === depth})));
  const go = () => {
    const p = pathBox.value.trim();
    if (!p) { pathBox.focus(); return; }
    location.hash = fileHref(p) + (depthSel.value ? "&depth=" + depthSel.value : "");
  };
  depthSel.addEventListener("change", go);
  const form = el("form", {class: "toolbar", "data-testid": "file-form"}, pathBox, depthSel,
    el("button", {class: "btn primary", type: "submit", text: "Lineage"}));
  form.addEventListener("submit", (e) => { e.preventDefault(); go(); });
  const staleBox = el("input", {"data-testid": "stale-path-input", placeholder: "/shots/sh010", spellcheck: "false", size: 40});
  const staleForm = el("form", {class: "toolbar"}, staleBox, el("button", {class: "btn", type: "submit", text: "Stale outputs"}));
  staleForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const d = staleBox.value.trim();
    location.hash = "#/stale" + (d ? "?path=" + encodeURIComponent(d) : "");
  });
  const head = el("div", {class: "page-head"}, el("h1", {text: "Files"}), form);
  if (!path) {
    fill(main, head, card("Stale outputs", el("div", {},
      el("p", {class: "muted", text: "Recorded outputs modified or deleted since they were made, or made from an input whose content changed since. Give a directory, or none for every recorded output."}),
      staleForm)),
    el("div", {class: "empty", text: "Type the path of a file a step read or wrote to see how it came to be. The Files list of a step (on its run's page) links here."}));
    return;
  }
  const q = new URLSearchParams({path});
  if (depth) q.set("depth", depth);
  const n = await api("/api/lineage?" + q);
  // Which outputs of the graph are stale, and why: the stale check is asked about every file
  // drawn (at most the route's 100), so that an output made from another stale output drawn
  // here is seen as such.
  const drawn = [];
  (function walk(x) {
    if (!drawn.includes(x.path)) drawn.push(x.path);
    for (const i of (x.made && x.made.inputs) || []) walk(i);
  })(n);
  const sq = new URLSearchParams();
  for (const p of drawn.slice(0, 100)) sq.append("path", p);
  const st = n.made ? await api("/api/stale?" + sq).catch(() => ({stale: []})) : {stale: []};
  const staleBy = new Map((st.stale || []).map((s) => [s.path, s.reason]));
  const stale = staleBy.has(n.path) ? {reason: staleBy.get(n.path)} : null;
  const [, name] = splitPath(n.path);
  const summary = el("div", {class: "meta"},
    el("span", {}, "Path ", el("b", {class: "mono", "data-testid": "file-title", text: n.path})),
    el("span", {}, "Now ", el("span", {class: "now now-" + n.now, "data-testid": "file-now", text: n.now})),
    n.hash ? el("span", {}, "Recorded hash ", el("b", {class: "mono", title: n.hash, text: shortHash(n.hash)})) : null,
    n.made ? el("span", {}, "Made by ", el("a", {href: stepHref(n.made.run_id, n.made.step_key), text: `${n.made.tool || n.made.step_key} (${n.made.step_key} #${n.made.attempt})`})) : el("span", {class: "muted", text: "No recorded step wrote it: only read."}));
  const staleBox2 = stale
    ? el("div", {class: "error-box", "data-testid": "file-stale"}, el("b", {text: "Stale: "}), el("span", {text: stale.reason}))
    : n.made ? el("div", {class: "ok-box", "data-testid": "file-fresh", text: "Not stale: this output and everything it was made from are as recorded."}) : null;
  const legend = el("div", {class: "lin-legend muted"}, "States now: ",
    ...["unchanged", "changed", "missing", "unreadable"].map((k) => el("span", {class: "now now-" + k, text: k, title: NOW_TEXT[k]})));
  fill(main, el("div", {class: "page-head"}, el("h1", {}, el("span", {text: "File "}), el("span", {class: "mono", text: name})), form),
    summary, staleBox2,
    card("Lineage", el("div", {class: "lin-wrap", "data-testid": "lineage-graph"}, lineageTree(n, staleBy, true)), {cls: "scroll", head: [legend]}));
}

// stalePage is #/stale?path=DIR: the stale outputs under DIR (every recorded one without), why,
// and the attempt that made each.
async function stalePage(query) {
  const path = query.get("path") || "";
  const box = el("input", {"data-testid": "stale-path-input", placeholder: "a directory, or empty for every output", value: path, spellcheck: "false", size: 50});
  const form = el("form", {class: "toolbar"}, box, el("button", {class: "btn primary", type: "submit", text: "Check"}));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const d = box.value.trim();
    location.hash = "#/stale" + (d ? "?path=" + encodeURIComponent(d) : "");
    if (d === path) route();
  });
  const q = path ? "?" + new URLSearchParams({path}) : "";
  const d = await api("/api/stale" + q);
  const tbody = el("tbody", {}, ...d.stale.map((s) => {
    const m = /^(input changed: |input deleted: |made from stale )(.+)$/.exec(s.reason);
    return el("tr", {"data-testid": "stale-row", "data-path": s.path},
      el("td", {class: "mono path"}, el("a", {href: fileHref(s.path), text: s.path, title: "lineage of this file"})),
      el("td", {class: "path", "data-testid": "stale-reason"}, m ? [m[1], el("a", {class: "mono", href: fileHref(m[2]), text: m[2]})] : s.reason),
      el("td", {class: "mono"}, el("a", {href: stepHref(s.run_id, s.step_key), text: `${s.step_key} #${s.attempt}`})),
      el("td", {class: "mono"}, el("a", {href: "#/runs/" + encodeURIComponent(s.run_id), text: s.run_id})));
  }));
  fill(main, el("div", {class: "page-head"}, el("h1", {text: "Stale outputs"}), form, el("span", {class: "spacer"}),
    el("span", {class: "muted", "data-testid": "stale-count", text: `${d.stale.length} stale` + (path ? " under " + path : "")})),
  el("section", {class: "card"}, el("div", {class: "table-wrap"}, el("table", {class: "data", "data-testid": "stale-table"},
    el("thead", {}, el("tr", {}, ...["Output", "Why", "Made by step", "Run"].map((h) => el("th", {text: h})))), tbody)),
  d.stale.length ? null : el("div", {class: "empty", "data-testid": "stale-empty", text: "Nothing is stale" + (path ? " under " + path : "") + ": every recorded output is as it was made, from inputs as they were."})));
}

// ---- workflows ---------------------------------------------------------------------------

async function workflowsPage() {
  const d = await api("/api/workflows");
  const tbody = el("tbody");
  for (const w of d.workflows) {
    const tr = el("tr", {"data-testid": "workflow-row", "data-workflow": w.name, class: "clickable"},
      el("td", {}, el("a", {href: "#/workflows/" + encodeURIComponent(w.name), text: w.name})),
      el("td", {class: "wrap muted", text: w.description || ""}),
      el("td", {class: "num", text: "v" + w.version}),
      el("td", {class: "num", text: String(w.steps)}),
      el("td", {class: "mono muted", text: (w.inputs || []).map((i) => i.name + (i.required ? "*" : "")).join(", ")}),
      el("td", {}, el("a", {href: "#/runs?workflow=" + encodeURIComponent(w.name), text: "runs"})));
    tr.addEventListener("click", (e) => { if (!e.target.closest("a")) location.hash = "#/workflows/" + encodeURIComponent(w.name); });
    tbody.append(tr);
  }
  fill(main, el("div", {class: "page-head"}, el("h1", {text: "Workflows"}), el("span", {class: "muted", text: `${d.workflows.length} registered`})),
    el("section", {class: "card"}, el("div", {class: "table-wrap"}, el("table", {class: "data", "data-testid": "workflows-table"},
      el("thead", {}, el("tr", {}, ...["Name", "Description", "Version", "Steps", "Inputs", ""].map((h) => el("th", {text: h})))), tbody)),
    d.workflows.length ? null : el("div", {class: "empty", text: "No workflow is registered in this engine's catalog."})));
}

async function workflowPage(name) {
  const d = await api("/api/workflows/" + encodeURIComponent(name));
  const versions = el("tbody");
  for (const v of d.versions) { // newest first, as the API lists them
    versions.append(el("tr", {"data-testid": "version-row", "data-version": v.version},
      el("td", {text: "v" + v.version}), el("td", {class: "mono", text: v.spec_hash.slice(0, 16)}),
      el("td", {text: fmtTime(v.registered_at)}), el("td", {}, v.current ? el("span", {class: "tag", text: "current"}) : "")));
  }
  const inputs = (d.entry && d.entry.inputs) || [];
  fill(main,
    el("div", {class: "page-head"}, el("h1", {text: name}), el("span", {class: "muted", text: d.description || ""}), el("span", {class: "spacer"}),
      el("a", {class: "btn", href: "#/runs?workflow=" + encodeURIComponent(name), text: "Runs of this workflow"}),
      el("a", {class: "btn primary", "data-testid": "start-run-button", href: "#/start/" + encodeURIComponent(name), text: "Start a run"})),
    el("div", {class: "grid run-top"},
      card("Graph", el("div", {class: "graph-wrap"}, drawGraph(d.graph, {testid: "workflow-graph"})), {cls: "scroll"}),
      el("div", {},
        card("Versions", el("table", {class: "data fit", "data-testid": "workflow-versions"},
          el("thead", {}, el("tr", {}, ...["Version", "Spec hash", "Registered", ""].map((h) => el("th", {text: h})))), versions)),
        el("div", {class: "grid"}),
        card("Inputs", inputs.length ? el("table", {class: "data"},
          el("thead", {}, el("tr", {}, ...["Name", "Type", "Required", "Default", "Description"].map((h) => el("th", {text: h})))),
          el("tbody", {}, ...inputs.map((i) => el("tr", {}, el("td", {class: "mono", text: i.name}), el("td", {text: i.type + (i.format ? " (" + i.format + ")" : "")}),
            el("td", {text: i.required ? "yes" : ""}), el("td", {class: "mono", text: i.default === undefined ? "" : JSON.stringify(i.default)}),
            el("td", {class: "wrap muted", text: i.description || ""})))))
          : el("div", {class: "empty", text: "No inputs."})))));
}

// ---- schedules ---------------------------------------------------------------------------

async function toggleSchedule(s, after) {
  const enable = !s.enabled;
  const res = await act({title: enable ? "Enable schedule" : "Disable schedule",
    text: `${enable ? "Enable" : "Disable"} schedule ${s.id} (${s.workflow}, ${s.trigger})? The change lasts while this engine runs; the schedules file decides again when it is loaded.`,
    path: `/api/schedules/${encodeURIComponent(s.id)}/${enable ? "enable" : "disable"}`, ok: enable ? "Enable" : "Disable", danger: !enable,
    success: `Schedule ${s.id} ${enable ? "enabled" : "disabled"}`});
  if (res) after();
}

function scheduleRow(s, after) {
  return el("tr", {"data-testid": "schedule-row", "data-schedule-id": s.id, "data-enabled": String(s.enabled)},
    el("td", {}, el("a", {href: "#/schedules/" + encodeURIComponent(s.id), text: s.id})),
    el("td", {}, el("a", {href: "#/workflows/" + encodeURIComponent(s.workflow), text: s.workflow})),
    el("td", {class: "mono", text: s.trigger + (s.spec.trigger.timezone ? " (" + s.spec.trigger.timezone + ")" : "")}),
    el("td", {}, badge(s.enabled ? "enabled" : "disabled")),
    el("td", {title: s.next_fire || "", text: s.next_fire ? `${fmtTime(s.next_fire)} (${fmtRelative(s.next_fire)})` : "—"}),
    el("td", {class: "muted", text: s.toggled ? `${s.toggled.enabled ? "enabled" : "disabled"} by ${s.toggled.by}, ${fmtTime(s.toggled.at)}` : ""}),
    el("td", {}, el("button", {class: "btn small", "data-testid": "schedule-toggle", text: s.enabled ? "Disable" : "Enable", onclick: () => toggleSchedule(s, after)})));
}

function schedulesTable(list, after) {
  return el("table", {class: "data", "data-testid": "schedules-table"},
    el("thead", {}, el("tr", {}, ...["Schedule", "Workflow", "Trigger", "State", "Next fire", "Last change", ""].map((h) => el("th", {text: h})))),
    el("tbody", {}, ...list.map((s) => scheduleRow(s, after))));
}

async function schedulesPage() {
  const d = await api("/api/schedules");
  fill(main, el("div", {class: "page-head"}, el("h1", {text: "Schedules"}), el("span", {class: "muted", text: `${d.schedules.length} registered`})),
    el("section", {class: "card"}, el("div", {class: "table-wrap"}, schedulesTable(d.schedules, route)),
      d.schedules.length ? null : el("div", {class: "empty", text: "No schedule is registered (dcc-flow serve --schedules DIR)."})));
}

async function schedulePage(id) {
  const d = await api("/api/schedules");
  const s = d.schedules.find((x) => x.id === id);
  if (!s) throw new APIError(404, "not_found", `no schedule ${id}`);
  const f = await api(`/api/schedules/${encodeURIComponent(id)}/fires?limit=100`);
  const fires = el("tbody", {}, ...f.fires.map((x) => el("tr", {"data-testid": "fire-row", "data-kind": x.kind},
    el("td", {text: fmtTime(x.fired_at), title: x.fired_at}), el("td", {class: "muted", text: fmtTime(x.scheduled_at)}),
    el("td", {}, badge(x.kind === "fired" ? "completed" : x.kind === "failed" ? "failed" : "cancelled")), el("td", {text: x.kind}),
    el("td", {class: "muted", text: x.reason || ""}),
    el("td", {class: "mono"}, x.run_id ? el("a", {href: "#/runs/" + encodeURIComponent(x.run_id), text: x.run_id}) : ""),
    el("td", {class: "wrap muted", text: x.message || ""}))));
  fill(main, el("div", {class: "page-head"}, el("h1", {text: id}), el("span", {class: "spacer"})),
    el("section", {class: "card"}, el("div", {class: "table-wrap"}, schedulesTable([s], route))),
    el("div", {class: "grid"}),
    card("Fire history", el("table", {class: "data", "data-testid": "schedule-fires"},
      el("thead", {}, el("tr", {}, ...["Fired", "Scheduled", "", "Kind", "Reason", "Run", "Message"].map((h) => el("th", {text: h})))), fires)),
    f.fires.length ? null : el("div", {class: "empty", text: "It has not fired yet."}));
}

// ---- start a run -------------------------------------------------------------------------

// A JSON number as JSON writes it: sent as typed, so an integer beyond 2^53 stays exact.
const JSON_NUMBER = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;

// inputField builds the form field of a declared input (GET /api/workflows/NAME's "inputs"). Its
// read() returns the JSON text to send, undefined to leave the input out (the engine then
// applies its default, or reports a required input), or {error} for text that is not JSON in a
// JSON field. The form checks nothing else: the engine checks every value and its problems are
// shown next to their field (show).
function inputField(i) {
  const has = i.has_default && i.default !== null;
  const shown = (v) => (typeof v === "string" ? v : JSON.stringify(v));
  const unset = (text) => el("option", {value: "", text});
  let control, read;
  if (i.enum && i.enum.length) {
    control = el("select", {},
      has ? null : unset(i.required ? "choose…" : "(not set)"),
      ...i.enum.map((v, n) => el("option", {value: String(n), text: shown(v), selected: has && JSON.stringify(v) === JSON.stringify(i.default)})));
    read = () => (control.value === "" ? undefined : JSON.stringify(i.enum[Number(control.value)]));
  } else if (i.type === "boolean") {
    control = el("select", {},
      has ? null : unset(i.required ? "choose…" : "(not set)"),
      el("option", {value: "true", text: "true", selected: has && i.default === true}),
      el("option", {value: "false", text: "false", selected: has && i.default === false}));
    read = () => (control.value === "" ? undefined : control.value);
  } else if (i.type === "array" || i.type === "object" || i.type === "any") {
    control = el("textarea", {spellcheck: "false", class: "mono", rows: 3,
      placeholder: i.type === "array" ? "JSON array, e.g. [\"sh010\", \"sh020\"]" : i.type === "object" ? "JSON object, e.g. {\"key\": \"value\"}" : "JSON value, or text"});
    if (has) control.value = JSON.stringify(i.default, null, 2);
    read = () => {
      const t = control.value.trim();
      if (t === "") return undefined;
      try { JSON.parse(t); } catch (e) {
        if (i.type === "any") return JSON.stringify(control.value);
        return {error: `is not JSON (${i.type === "array" ? "an array like [1, 2]" : "an object like {\"a\": 1}"}): ${e.message}`};
      }
      return t;
    };
  } else {
    const numeric = i.type === "number" || i.type === "integer";
    const hint = i.format === "date" ? "YYYY-MM-DD, e.g. 2026-03-08" : i.format === "date-time" ? "e.g. 2026-03-08T03:00:00Z" : numeric ? i.type : "";
    control = el("input", {type: "text", spellcheck: "false", inputmode: i.type === "integer" ? "numeric" : numeric ? "decimal" : null, placeholder: hint || null});
    if (has) control.value = shown(i.default);
    read = () => {
      const t = numeric ? control.value.trim() : control.value;
      if (t.trim() === "") return undefined;
      return numeric && JSON_NUMBER.test(t) ? t : JSON.stringify(t); // text in a number field: the engine says so
    };
  }
  const initial = control.value;
  control.setAttribute("data-testid", "start-input");
  control.id = "in-" + i.name;
  const error = el("div", {class: "field-error hidden", "data-testid": "field-error", role: "alert"});
  const row = el("div", {class: "start-field", "data-testid": "start-field", "data-input": i.name},
    el("label", {for: control.id},
      el("span", {class: "mono", text: i.name}), i.required ? el("span", {class: "req", title: "required", text: " *"}) : null,
      el("span", {class: "tag", text: i.type + (i.format ? " · " + i.format : "")})),
    control,
    i.description ? el("div", {class: "help", text: i.description}) : null,
    has ? el("div", {class: "help faint", text: "default: " + shown(i.default)}) : null,
    error);
  const show = (message) => {
    error.textContent = message || "";
    error.classList.toggle("hidden", !message);
    row.classList.toggle("bad", !!message);
    control.setAttribute("aria-invalid", message ? "true" : "false");
  };
  control.addEventListener("input", () => show(""));
  control.addEventListener("change", () => show(""));
  // An input left at its default is left out: the engine applies the default itself (exactly).
  return {name: i.name, row, control, show, read: () => (has && control.value === initial ? undefined : read())};
}

async function startPage(name) {
  const list = await api("/api/workflows");
  const pick = el("select", {"data-testid": "start-workflow", "aria-label": "workflow"},
    el("option", {value: "", text: "choose a workflow…", selected: !name}),
    ...list.workflows.map((w) => el("option", {value: w.name, text: w.name, selected: w.name === name})));
  pick.addEventListener("change", () => { location.hash = "#/start" + (pick.value ? "/" + encodeURIComponent(pick.value) : ""); });
  const head = el("div", {class: "page-head"}, el("h1", {text: "Start a run"}), pick);
  if (!name) {
    fill(main, head, el("div", {class: "empty", text: list.workflows.length
      ? "Choose a workflow of the catalog: its inputs make the form."
      : "No workflow is registered in this engine's catalog (dcc-flow serve --workflows DIR)."}));
    return;
  }
  if (!list.workflows.some((w) => w.name === name)) throw new APIError(404, "not_found", `no workflow named ${name} is registered`);
  const d = await api("/api/workflows/" + encodeURIComponent(name));
  const fields = (d.inputs || []).map(inputField);
  const by = el("input", {"data-testid": "start-by", id: "start-by", autocomplete: "name", spellcheck: "false", value: actor.value.trim()});
  const byError = el("div", {class: "field-error hidden", "data-testid": "field-error", role: "alert"});
  const showBy = (m) => { byError.textContent = m || ""; byError.classList.toggle("hidden", !m); };
  by.addEventListener("input", () => showBy(""));
  const formError = el("div", {class: "error-box hidden", "data-testid": "start-error", role: "alert"});
  const submit = el("button", {type: "submit", class: "btn primary", "data-testid": "start-submit", text: "Start run"});
  const form = el("form", {class: "start-form", "data-testid": "start-form", "data-workflow": name, novalidate: true},
    fields.length ? fields.map((f) => f.row) : el("p", {class: "muted", text: "This workflow declares no inputs."}),
    el("div", {class: "start-field"}, el("label", {for: "start-by", text: "Started by (recorded with the run)"}), by, byError),
    formError,
    el("div", {class: "buttons"}, submit, el("a", {class: "btn", href: "#/workflows/" + encodeURIComponent(name), text: "Cancel"})));

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    formError.classList.add("hidden");
    for (const f of fields) f.show("");
    showBy("");
    const parts = [];
    let bad = null;
    for (const f of fields) {
      const v = f.read();
      if (v === undefined) continue;
      if (typeof v === "object") { f.show(`input "${f.name}" ${v.error}`); bad = bad || f.control; continue; }
      parts.push(JSON.stringify(f.name) + ":" + v);
    }
    const name_ = by.value.trim();
    if (!name_) { showBy("Type your name: the run is recorded as started by it."); bad = bad || by; }
    if (bad) { bad.focus(); return; }
    actor.value = name_;
    localStorage.setItem("dccflow.actor", name_);
    const body = `{"workflow":${JSON.stringify(name)},"by":${JSON.stringify(name_)},"spec_hash":${JSON.stringify(d.spec_hash)},"inputs":{${parts.join(",")}}}`;
    submit.disabled = true;
    try {
      const res = await api("/api/runs", body);
      toast(`Run ${res.run_id} of ${name} started`);
      location.hash = "#/runs/" + encodeURIComponent(res.run_id);
    } catch (err) {
      submit.disabled = false;
      const problems = (err.details && err.details.problems) || [];
      const rest = [];
      let first = null;
      for (const p of problems) {
        const f = fields.find((x) => x.name === p.input);
        if (f) { f.show(p.message); first = first || f.control; } else rest.push(p.message);
      }
      if (!problems.length) rest.push(err.message);
      if (rest.length) {
        fill(formError, el("b", {text: (err.code || "error") + ": "}), el("span", {text: rest.join("; ")}));
        formError.classList.remove("hidden");
      }
      if (err.code === "spec_changed") {
        formError.append(" ", el("a", {href: "#/start/" + encodeURIComponent(name), text: "reload the form", onclick: (ev) => { ev.preventDefault(); route(); }}));
      }
      (first || submit).focus();
    }
  });
  fill(main, head, d.description ? el("p", {class: "muted", text: d.description}) : null,
    el("section", {class: "card start-card"}, el("div", {class: "card-body"}, form)));
  (fields[0] ? fields[0].control : by).focus();
}

// ---- start -------------------------------------------------------------------------------

csrf();
window.addEventListener("hashchange", route);
if (!location.hash || location.hash === "#" || location.hash === "#/") history.replaceState(null, "", "#/runs");
route();
