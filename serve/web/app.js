// kusaw serve's web page: the list of runs (filtered by pipeline and
// state), and a run's page with its steps and attempts as a timeline, its
// diff, each attempt's views (views.js), live events and egress per host.
// It reads the same HTTP API as the CLI; every text goes in with
// textContent.
"use strict";

const app = document.getElementById("app");
let stopPage = () => {};

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k === "onclick") e.addEventListener("click", v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return e;
}

async function api(path, opts) {
  const o = Object.assign({ headers: {} }, opts || {});
  o.headers["X-Kusaw"] = "1";
  const r = await fetch(path, o);
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    const e = body.error || {};
    throw new Error((e.code || r.status) + ": " + (e.message || r.statusText));
  }
  return body;
}

function badge(state) {
  const s = state || "pending";
  return el("span", { class: "badge s-" + s, text: s });
}

function fmtDur(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return "-";
  if (ms < 1000) return Math.round(ms) + "ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
  const m = Math.floor(ms / 60000), s = Math.round((ms % 60000) / 1000);
  return m + "m" + String(s).padStart(2, "0") + "s";
}

function fmtBytes(n) {
  if (!n) return "0 B";
  const u = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function runDuration(r) {
  if (!r.started) return null;
  const end = r.finished ? Date.parse(r.finished) : Date.now();
  return end - Date.parse(r.started);
}

function setPage(page, state) {
  document.body.dataset.page = page;
  if (state) document.body.dataset.state = state; else delete document.body.dataset.state;
}

async function health() {
  try {
    const h = await api("/v1/health");
    document.getElementById("serve-info").textContent =
      `serve pid ${h.pid} · ${h.running} running · ${h.queued} queued · at most ${h.max_parallel} at once`;
    // What keeps serve from working, as kusaw service status says it.
    const alerts = [];
    const s = h.state, c = h.cluster;
    if (s && !s.writable) {
      alerts.push(el("p", { id: "state-full" },
        el("strong", { text: "State folder full or not writable: " }), s.dir,
        s.since ? ` (since ${new Date(s.since).toLocaleString()})` : "",
        `. Attempts fail with ${s.reason || "state.write_failed"}. `, s.message || "",
        el("br"), el("strong", { text: "Fix: " }), s.fix || ""));
    }
    if (c && !c.connected) {
      alerts.push(el("p", { id: "cluster-down" },
        el("strong", { text: "Not connected to NATS: " }), c.nats || "",
        c.disconnected_since ? ` (since ${new Date(c.disconnected_since).toLocaleString()})` : "",
        ". No worker is found lost meanwhile; their results are taken once serve is back."));
    }
    const box = document.getElementById("serve-alert");
    box.replaceChildren(...alerts);
    box.hidden = alerts.length === 0;
  } catch (e) { /* the page works without it */ }
}

// ---- the list of runs ----

async function showRuns(filter) {
  setPage("runs");
  let timer = null, pipes = "", live = true;
  stopPage = () => { live = false; clearInterval(timer); };
  const bar = el("div", {}), list = el("div", {}), workers = el("div", {});
  app.replaceChildren(el("h1", { text: "Runs" }), bar, list, workers);
  const render = async () => {
    let data;
    const q = new URLSearchParams({ limit: "200" });
    if (filter.pipeline) q.set("pipeline", filter.pipeline);
    if (filter.state) q.set("state", filter.state);
    // sandbox exec's and doctor's runs only when asked (kusaw runs --all).
    if (!filter.sandbox) q.set("sandbox", "false");
    try { data = await api("/v1/runs?" + q.toString()); } catch (e) { list.replaceChildren(el("p", { class: "reason", text: String(e) })); return; }
    // The filter bar is redrawn only when a new pipeline shows up, so an
    // open menu is not closed under the reader.
    const names = [...new Set([...seenPipelines, ...data.runs.map(r => r.pipeline)])].sort().join("\n");
    if (names !== pipes || !bar.firstChild) { pipes = names; bar.replaceChildren(runsFilter(filter, data.runs)); }
    const rows = data.runs.map(r => {
      r.steps = r.steps || [];
      const passed = r.steps.filter(s => s.outcome === "passed").length;
      return el("tr", {},
        el("td", { class: "mono" }, el("a", { href: "#/runs/" + encodeURIComponent(r.id), text: r.id })),
        el("td", { text: r.pipeline }),
        el("td", {}, badge(r.state)),
        el("td", { text: r.started ? new Date(r.started).toLocaleString() : "-" }),
        el("td", { class: "num", text: fmtDur(runDuration(r)) }),
        el("td", { class: "num", text: passed + "/" + r.steps.length }),
        el("td", { class: "num", text: fmtCost(r.usage) }),
        el("td", { text: triggerLabel(r.trigger) }),
        el("td", { class: "mono", text: r.reason || "" }));
    });
    const filtered = filter.pipeline || filter.state;
    list.replaceChildren(...[
      rows.length ? el("table", { id: "runs" },
        el("thead", {}, el("tr", {}, ...["run", "pipeline", "state", "started", "duration", "steps", "cost", "trigger", "reason"].map(h => el("th", { text: h })))),
        el("tbody", {}, ...rows))
        : el("p", { class: "muted", text: filtered ? "No runs match the filter." : "No runs yet. Start one with: kusaw run" }),
      data.sandbox_hidden ? el("p", { class: "muted", id: "sandbox-hidden" }, data.sandbox_hidden + " sandbox exec/doctor run" + (data.sandbox_hidden === 1 ? "" : "s") + " not shown: ",
        el("a", { href: "#/?sandbox=1", text: "show them" })) : null].filter(Boolean));
    workers.replaceChildren(await workersSection());
    health();
  };
  await render();
  if (live) timer = setInterval(render, 2000);
}

// The cluster's workers (docs/cluster.md); nothing without a cluster.
async function workersSection() {
  let data;
  try { data = await api("/v1/workers"); } catch (e) { return el("span", {}); }
  if (!data.workers || !data.workers.length) {
    return el("div", {}, el("h2", { text: "Workers" }), el("p", { class: "muted", text: "No worker has joined. Join one with: kusaw cluster token, then kusaw worker --join TOKEN" }));
  }
  const rows = data.workers.map(w => el("tr", {},
    el("td", { class: "mono", text: w.name }),
    el("td", { text: (w.pools || []).join(", ") }),
    el("td", { class: "allowed", text: (w.allowed_pools || []).join(", ").replace(/^\*$/, "any") }),
    el("td", { class: "num", text: w.running + "/" + w.max_parallel }),
    el("td", { text: w.last_heartbeat ? fmtDur(Date.now() - Date.parse(w.last_heartbeat)) + " ago" : "never" }),
    el("td", {}, badge(w.lost ? "lost" : "running")),
    el("td", { class: "mono", text: w.version || "" })));
  return el("div", {}, el("h2", { text: "Workers" }),
    el("table", { id: "workers" },
      el("thead", {}, el("tr", {}, ...["worker", "pools", "allowed pools", "attempts", "last heartbeat", "state", "version"].map(h => el("th", { text: h })))),
      el("tbody", {}, ...rows)));
}

// ---- a run ----

// helperLabel names the part a helper's attempt played.
function helperLabel(a) {
  return a.role ? a.role.label : "helper step " + a.step;
}

function timeline(run, attempts, helpers) {
  const t0 = Date.parse(run.started || run.created);
  let t1 = run.finished ? Date.parse(run.finished) : Date.now();
  for (const a of attempts.concat(helpers)) t1 = Math.max(t1, a.finished ? Date.parse(a.finished) : Date.now());
  const span = Math.max(t1 - t0, 1);
  // Each helper's attempt a shape ran (a fixer, a judge, a resolve) gets a
  // row of its own, named by its role, in the order they ran.
  const rows = run.steps.concat(helpers.map(h => ({ id: h.step, helper: h }))).map(s => {
    const track = el("div", { class: "tl-track" });
    const first = s.first_attempt || 1;
    const mine = s.helper ? [s.helper] : attempts.filter(a => a.step === s.id && (!s.candidates || (a.attempt >= first && a.attempt < first + s.candidates)));
    for (const a of mine) {
      const start = Date.parse(a.started), end = a.finished ? Date.parse(a.finished) : Date.now();
      const outcome = a.outcome || "running";
      const bar = el("div", { class: "tl-bar s-" + outcome, title: `${s.id} attempt ${a.attempt}: ${outcome} in ${fmtDur(end - start)}${a.reason ? " (" + a.reason + ")" : ""}`,
        text: `#${a.attempt} ${outcome} ${fmtDur(end - start)}` });
      bar.style.left = ((start - t0) / span * 100).toFixed(2) + "%";
      bar.style.width = Math.max((end - start) / span * 100, 0.5).toFixed(2) + "%";
      if (s.candidates) {
        // Candidates run at once: one lane each, side by side; the kept
        // one is marked.
        const k = a.attempt - first;
        track.style.height = (s.candidates * 20 + 2) + "px";
        bar.style.top = (2 + k * 20) + "px";
        if (a.attempt === s.chosen) bar.textContent = "✓ " + bar.textContent;
      }
      track.append(bar);
    }
    let label = s.id;
    if (s.group) label = "‖" + s.group + " " + s.id;
    if (s.candidates) label += " ×" + s.candidates;
    if (s.helper) label = "↳ " + helperLabel(s.helper) + ": " + s.id;
    return el("div", { class: "tl-row" + (s.group ? " tl-group" : "") + (s.helper ? " tl-helper" : ""), title: s.group ? "parallel group " + s.group : (s.helper ? label : "") }, el("div", { class: "tl-label", text: label }), track);
  });
  const ticks = [0, 0.25, 0.5, 0.75, 1].map(f => el("span", { text: fmtDur(span * f) }));
  return el("div", { class: "timeline", id: "timeline" }, ...rows, el("div", { class: "tl-axis" }, ...ticks));
}

function attemptsTable(runId, attempts, helpers) {
  // The worker column only when a cluster worker ran any attempt; the
  // role column only when a shape ran helpers, listed after the
  // pipeline's own attempts in the order they ran.
  const all = attempts.concat(helpers);
  const workers = all.some(a => a.worker);
  const roles = helpers.length > 0;
  const rows = all.map(a => el("tr", { class: helpers.includes(a) ? "helper" : "" },
    el("td", {}, el("a", { href: `#/runs/${encodeURIComponent(runId)}/${encodeURIComponent(a.step)}/${a.attempt}`, text: a.step })),
    roles ? el("td", { class: "role", text: helpers.includes(a) ? "↳ " + helperLabel(a) : "" }) : null,
    el("td", { class: "num", text: a.attempt + "/" + a.of }),
    el("td", {}, badge(a.outcome || "running")),
    el("td", { class: "mono", text: a.reason || "" }),
    el("td", { text: (a.message || "") + (a.fix ? " — fix: " + a.fix : "") }),
    el("td", { text: a.mode + (a.network ? " / " + a.network : "") }),
    el("td", { class: "num", text: a.exit_code === undefined || a.exit_code === null ? "-" : String(a.exit_code) }),
    el("td", { class: "num", text: fmtDur((a.finished ? Date.parse(a.finished) : Date.now()) - Date.parse(a.started)) }),
    el("td", { class: "num", text: a.usage ? fmtTokens(usageTokens(a.usage)) : "-" }),
    el("td", { class: "num", text: fmtCost(a.usage) }),
    workers ? el("td", { class: "mono", text: a.worker || "serve" }) : null));
  return el("table", { id: "attempts" },
    el("thead", {}, el("tr", {}, ...["step"].concat(roles ? ["role"] : [], ["attempt", "outcome", "reason", "message", "sandbox", "exit", "duration", "tokens", "cost"], workers ? ["worker"] : []).map(h => el("th", { text: h })))),
    el("tbody", {}, ...rows));
}

function egressChart(a, rep) {
  const max = Math.max(1, ...rep.hosts.map(h => h.bytes_up + h.bytes_down + 1));
  const maxRef = Math.max(1, ...rep.hosts.map(h => h.refusals));
  const cells = [];
  for (const h of rep.hosts) {
    const up = el("div", { class: "bar-up" }), down = el("div", { class: "bar-down" }), ref = el("div", { class: "bar-ref" });
    up.style.width = (h.bytes_up / max * 100).toFixed(2) + "%";
    down.style.width = (h.bytes_down / max * 100).toFixed(2) + "%";
    ref.style.width = (h.refusals ? Math.max(h.refusals / maxRef * 20, 2) : 0).toFixed(2) + "%";
    cells.push(el("div", { class: "host mono", text: h.host, title: h.host }),
      el("div", { class: "bar-wrap" }, up, down, ref),
      el("div", { class: "muted", text: `${h.connections} allowed · ${h.refusals} refused · ${fmtBytes(h.bytes_up + h.bytes_down)}` }));
  }
  return el("div", { class: "egress" },
    el("h2", { text: `Egress of ${a.step} attempt ${a.attempt}` }),
    el("div", { class: "chart" }, ...cells),
    el("div", { class: "legend" }, el("span", {}, el("i", { class: "bar-up" }), "bytes up"), el("span", {}, el("i", { class: "bar-down" }), "bytes down"), el("span", {}, el("i", { class: "bar-ref" }), "refusals")));
}

async function showRun(id, want) {
  setPage("run");
  const diff = diffSection(id), panel = attemptPanel(id, want), steps = el("div", {});
  // The diff is asked for again only when a run branch moved (or the run
  // ended): each request runs git in every repo.
  let diffStale = true;
  let es = null, timer = null, pending = false, ended = false;
  // Off once the reader went to another page: a redraw still due (soon's
  // timer, a request in flight) must not mark the body as this page.
  let live = true;
  stopPage = () => { live = false; if (es) es.close(); clearInterval(timer); panel.stop(); };
  const evBox = el("div", { class: "events", id: "events" });
  const problem = el("p", { class: "reason-text", id: "problem" });
  const top = el("div", {}), tl = el("div", {}), table = el("div", {}), egress = el("div", { id: "egress" });
  const eventsShown = new Set();
  app.replaceChildren(problem, top, el("h2", { text: "Timeline" }), tl, el("h2", { text: "Steps" }), steps, el("h2", { text: "Attempts" }), table,
    el("h2", { text: "Changes" }), diff.node, el("h2", { text: "Attempt" }), panel.node, egress, el("h2", { text: "Events (live)" }), evBox);

  const render = async () => {
    pending = false;
    let d;
    if (!live) return;
    try { d = await api("/v1/runs/" + encodeURIComponent(id)); } catch (e) { if (live) { top.replaceChildren(el("p", { class: "reason", text: String(e) })); setPage("run", "error"); } return; }
    if (!live) return;
    const r = d.run;
    // A run just queued may not have its repos and steps written yet.
    r.repos = r.repos || []; r.steps = r.steps || []; d.attempts = d.attempts || []; d.helpers = d.helpers || [];
    for (const a of d.attempts.concat(d.helpers)) { a.processes = a.processes || []; a.worktrees = a.worktrees || []; }
    const all = d.attempts.concat(d.helpers);
    top.replaceChildren(...[
      el("p", {}, el("a", { href: "#/", text: "← runs" })),
      el("h1", { class: "mono", text: "run " + r.id }),
      el("div", { class: "summary" }, badge(r.state), el("span", { text: "pipeline " + r.pipeline }),
        el("span", { text: "duration " + fmtDur(runDuration(r)) }),
        r.usage ? el("span", { id: "run-usage", text: "usage " + fmtUsage(r.usage) }) : null,
        el("span", { class: "muted", text: r.repos.map(x => `${x.name}: ${x.branch}`).join(" · ") }),
        (r.state === "running" || r.state === "queued" || r.state === "waiting") ? el("button", { id: "cancel", onclick: async () => { try { await api("/v1/runs/" + encodeURIComponent(r.id) + "/cancel", { method: "POST" }); } catch (e) { alert(e); } } }, "Cancel") : null),
      r.reason ? el("div", { class: "reason" }, el("b", { class: "mono", text: r.reason + ": " }), r.message || "", r.fix ? el("div", { class: "muted", text: "fix: " + r.fix }) : null) : null,
      gateBlock(r, render),
      deliveryBlock(r.delivery)].filter(Boolean));
    tl.replaceChildren(timeline(r, d.attempts, d.helpers));
    table.replaceChildren(attemptsTable(r.id, d.attempts, d.helpers));
    steps.replaceChildren(stepsTable(r));
    panel.update(all, d.attempts);
    if (diffStale) {
      diffStale = false;
      await diff.refresh(r);
    }
    const charts = [];
    for (const a of all.filter(a => a.finished && a.network === "allowlist")) {
      try {
        const rep = await api(`/v1/runs/${encodeURIComponent(r.id)}/attempts/${encodeURIComponent(a.step)}/${a.attempt}/egress`);
        if (rep.hosts.length) charts.push(egressChart(a, rep));
      } catch (e) { /* no egress for this attempt */ }
    }
    egress.replaceChildren(...charts);
    health();
    // The state goes on the body last, once everything above is drawn:
    // a test waiting for a final state sees the whole page.
    problem.textContent = "";
    if (live) setPage("run", r.state);
  };
  // A chatty agent writes many events a second: redraw at most about
  // twice a second (each redraw may read the attempt's transcript).
  const soon = () => { if (!pending) { pending = true; setTimeout(draw, 400); } };

  // A failed drawing is shown, and the page keeps following the run.
  const draw = () => render().catch(e => { problem.textContent = "This page failed to draw: " + e; });
  await draw();
  if (!live) return; // the reader left during the first drawing
  // An address that names an attempt shows its views, below the diff.
  if (want.step) panel.node.scrollIntoView();
  es = new EventSource("/v1/runs/" + encodeURIComponent(id) + "/events");
  const onEvent = (m) => {
    if (eventsShown.has(m.lastEventId)) return;
    eventsShown.add(m.lastEventId);
    let ev;
    try { ev = JSON.parse(m.data); } catch (e) { return; }
    const where = ev.step ? `${ev.step}#${ev.attempt}` : "run";
    const data = ev.data ? JSON.stringify(ev.data) : "";
    const line = el("div", {}, new Date(ev.ts).toLocaleTimeString() + " ", el("span", { class: "ev-type", text: ev.type }), ` ${where} ${data.length > 160 ? data.slice(0, 160) + "…" : data}`);
    const stick = evBox.scrollTop + evBox.clientHeight >= evBox.scrollHeight - 4;
    evBox.append(line);
    if (ev.type === "branch.advanced" || ev.type === "run.finished") diffStale = true;
    if (stick) evBox.scrollTop = evBox.scrollHeight;
    soon();
  };
  es.onmessage = onEvent;
  es.addEventListener("end", () => { ended = true; diffStale = true; es.close(); draw(); });
  timer = setInterval(() => { if (!ended) draw(); }, 3000);
}

function route() {
  stopPage();
  stopPage = () => {};
  // #/runs/RUN[/STEP/N[/VIEW]], or #/?pipeline=P&state=S
  const m = location.hash.match(/^#\/runs\/([^/?]+)(?:\/([^/?]+)\/(\d+)(?:\/(\w+))?)?$/);
  if (m) {
    showRun(decodeURIComponent(m[1]), { step: m[2] ? decodeURIComponent(m[2]) : "", n: m[3] ? parseInt(m[3], 10) : 0, tab: m[4] || "" });
    return;
  }
  const q = new URLSearchParams((location.hash.split("?")[1]) || "");
  showRuns({ pipeline: q.get("pipeline") || "", state: q.get("state") || "", sandbox: q.get("sandbox") === "1" });
}

window.addEventListener("hashchange", route);
route();

// gateBlock: a run waiting at an approval gate, with its decision buttons
// (POST /v1/runs/{id}/approve|reject; serve records who decided).
function gateBlock(r, refresh) {
  if (r.state !== "waiting" || !r.gate) return null;
  const decide = async (verb, reason) => {
    try {
      await api("/v1/runs/" + encodeURIComponent(r.id) + "/" + verb, { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ step: r.gate.step, reason: reason || "" }) });
    } catch (e) { alert(e); }
    refresh();
  };
  return el("div", { class: "reason", id: "gate" },
    el("b", { text: "waiting at the gate before step " + r.gate.step + ": " }), r.gate.message || "",
    r.gate.deadline ? el("div", { class: "muted", text: "rejects at " + new Date(r.gate.deadline).toLocaleString() + " if undecided" }) : null,
    el("button", { id: "approve", onclick: () => decide("approve") }, "Approve"),
    el("button", { id: "reject", onclick: () => { const why = prompt("Why reject?"); if (why) decide("reject", why); } }, "Reject"));
}

// triggerLabel is what started a run, in a few words (record.Trigger.Label).
function triggerLabel(t) {
  if (!t) return "";
  if (t.schedule) return "schedule " + t.name;
  if (t.issue) return t.forge + " " + t.repo + "#" + t.issue;
  if (t.pull_request) return t.forge + " " + t.repo + "!" + t.pull_request;
  return (t.forge || "") + " " + t.name;
}
