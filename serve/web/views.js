// The views of what a run did: its diff per repo, and for each attempt
// the agent's transcript, stdout and stderr, the artifacts and the egress
// decisions. Loaded before app.js, whose helpers (el, api, badge, fmtDur,
// fmtBytes) these functions call. Record text only ever goes in through
// textContent or a text node: a record can hold any markup.
"use strict";

// ---- usage and cost ----

function usageTokens(u) {
  return (u.input_tokens || 0) + (u.output_tokens || 0) + (u.cache_read_tokens || 0) + (u.cache_write_tokens || 0);
}

function fmtTokens(n) {
  if (n >= 1e6) return (n / 1e6).toFixed(2) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return String(n);
}

function fmtCost(u) {
  return u && typeof u.cost_usd === "number" ? "$" + u.cost_usd.toFixed(4) : "-";
}

function fmtUsage(u) {
  if (!u) return "-";
  let s = fmtTokens(usageTokens(u)) + " tokens";
  if (typeof u.cost_usd === "number") s += " · " + fmtCost(u);
  if (u.turns) s += " · " + u.turns + " turns";
  return s;
}

// A link only to a web address: a record's URL could be javascript:.
function safeLink(url, text) {
  try {
    const u = new URL(url);
    if (u.protocol === "https:" || u.protocol === "http:") return el("a", { href: u.href, text: text, rel: "noopener noreferrer", target: "_blank" });
  } catch (e) { /* not a URL */ }
  return el("span", { class: "mono", text: text + " (" + url + ")" });
}

function deliveryBlock(d) {
  if (!d) return null;
  const parts = [];
  if (d.merged) parts.push(el("span", { text: `merged into ${d.into || "?"} at ${d.merged.slice(0, 10)}` }));
  if (d.pushed) parts.push(el("span", { text: "pushed to " + d.pushed }));
  if (d.pull_request_url) parts.push(safeLink(d.pull_request_url, "pull request" + (d.pull_request_number ? " #" + d.pull_request_number : "")));
  const ok = d.state === "delivered";
  return el("div", { class: ok ? "delivery" : "reason", id: "delivery" },
    el("b", { text: "delivery " + d.state + (d.repo ? " (" + d.repo + ")" : "") + (parts.length ? ": " : "") }),
    ...parts.flatMap((p, i) => i ? [" · ", p] : [p]),
    !ok && d.failed_step ? el("div", { text: `failed at ${d.failed_step}: ${d.message || ""}` }) : null,
    !ok && d.fix ? el("div", { class: "muted", text: "fix: " + d.fix }) : null);
}

function stepsTable(run) {
  const rows = run.steps.map(s => el("tr", {},
    el("td", { text: s.id }),
    el("td", {}, badge(s.outcome || "pending")),
    el("td", { class: "num", text: String(s.attempts || 0) }),
    el("td", { class: "num", text: s.usage ? fmtTokens(usageTokens(s.usage)) : "-" }),
    el("td", { class: "num", text: fmtCost(s.usage) })));
  return el("table", { id: "steps" },
    el("thead", {}, el("tr", {}, ...["step", "outcome", "attempts", "tokens", "cost"].map(h => el("th", { text: h })))),
    el("tbody", {}, ...rows));
}

// ---- the diff ----

const BIG_FILE_LINES = 400;   // files with more changed lines start collapsed
const MAX_SHOWN_LINES = 5000; // lines drawn per file; the rest is counted

function patchLines(patch) {
  const box = el("div", { class: "patch mono" });
  const lines = patch.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  let inHunk = false;
  for (const [i, l] of lines.entries()) {
    if (i >= MAX_SHOWN_LINES) {
      box.append(el("div", { class: "muted", text: `… ${lines.length - i} more lines` }));
      break;
    }
    let cls = "ctx";
    if (l.startsWith("@@")) { cls = "hunk"; inHunk = true; }
    else if (!inHunk) cls = "meta";
    else if (l.startsWith("+")) cls = "add";
    else if (l.startsWith("-")) cls = "del";
    else if (l.startsWith("\\")) cls = "meta";
    box.append(el("div", { class: cls, text: l === "" ? " " : l }));
  }
  return box;
}

const OPEN_LINES = 3000; // lines drawn at once over a repo's open files

function diffFile(f, budget) {
  const name = f.old_path ? `${f.old_path} → ${f.path}` : f.path;
  const stat = f.binary ? "binary" : `+${f.added} −${f.deleted}`;
  const lines = f.added + f.deleted;
  const big = lines > BIG_FILE_LINES || f.patch_cut;
  // Past the budget, files start collapsed too: a diff of a thousand small
  // files stays quick to open.
  const closed = big || budget.left < lines;
  if (!closed) budget.left -= lines;
  const det = el("details", { class: "diff-file" },
    el("summary", {}, el("span", { class: "st st-" + f.status, text: f.status }), " ", el("span", { class: "mono path", text: name }), " ",
      el("span", { class: "muted", text: stat + (big ? " (large: collapsed)" : closed ? " (collapsed)" : "") })));
  let drawn = false;
  const draw = () => {
    if (drawn) return;
    drawn = true;
    if (f.binary) det.append(el("p", { class: "muted", text: "Binary file; not shown." }));
    else if (f.patch) det.append(patchLines(f.patch));
    if (f.patch_cut) det.append(el("p", { class: "muted", text: f.patch ? "The patch is cut here (too large to show whole)." : "The patch is left out: the diff reached its size bound." }));
  };
  // Large files are drawn when opened, so a huge diff stays cheap.
  det.addEventListener("toggle", () => { if (det.open) draw(); });
  if (!closed) { det.open = true; draw(); }
  return det;
}

function diffRepo(d) {
  const head = el("div", { class: "diff-head" },
    el("b", { text: d.repo }), " ",
    el("span", { class: "mono", text: d.branch }), " ",
    el("span", { class: "muted mono", text: `${(d.base || "").slice(0, 10)} → ${d.head ? d.head.slice(0, 10) : "(no commits yet)"}` }), " ",
    el("span", { text: `${d.files.length} files, +${d.added} −${d.deleted}` }));
  const out = el("section", { class: "diff-repo", "data-repo": d.repo }, head);
  if (d.truncated) out.append(el("p", { class: "reason", text: "This diff is larger than the page shows; see it whole with git diff " + d.base + " " + d.head }));
  if (!d.files.length) out.append(el("p", { class: "muted", text: "No changes." }));
  const budget = { left: OPEN_LINES };
  for (const f of d.files) out.append(diffFile(f, budget));
  return out;
}

// diffSection shows each repo's diff; refresh redraws a repo only when
// its run branch moved.
function diffSection(runId) {
  const node = el("div", { id: "diff" });
  const heads = {};
  const blocks = {};
  async function refresh(run) {
    for (const r of run.repos) {
      let d;
      try { d = await api(`/v1/runs/${encodeURIComponent(runId)}/diff?repo=${encodeURIComponent(r.name)}`); }
      catch (e) { d = null; if (!blocks[r.name]) { blocks[r.name] = el("p", { class: "reason", text: String(e) }); node.append(blocks[r.name]); } continue; }
      if (heads[r.name] === d.head && blocks[r.name]) continue;
      heads[r.name] = d.head;
      const b = diffRepo(d);
      if (blocks[r.name]) blocks[r.name].replaceWith(b); else node.append(b);
      blocks[r.name] = b;
    }
    node.dataset.loaded = "1";
  }
  return { node, refresh };
}

// ---- one attempt: transcript, output, artifacts, egress ----

const TABS = ["transcript", "output", "artifacts", "egress"];
const MAX_OUTPUT = 1 << 20; // characters kept per stream on the page

function attemptPath(runId, a) {
  return `/v1/runs/${encodeURIComponent(runId)}/attempts/${encodeURIComponent(a.step)}/${a.attempt}`;
}

// readLog reads a run log from offset to its current end. With tail, a
// log longer than that is read from its last tail bytes only (skipped
// says how many were left out), so a huge stdout is never downloaded
// whole.
async function readLog(runId, path, offset, tail) {
  const chunks = [];
  let skipped = 0;
  for (;;) {
    const r = await fetch(`/v1/runs/${encodeURIComponent(runId)}/log?path=${encodeURIComponent(path)}&offset=${offset}`, { headers: { "X-Kusaw": "1" } });
    if (!r.ok) throw new Error("log " + path + ": " + r.status);
    const size = parseInt(r.headers.get("X-Kusaw-Log-Size") || "0", 10);
    if (tail && size - offset > tail) {
      // Too far behind: drop this read and jump to the last tail bytes.
      r.body && r.body.cancel();
      skipped += size - tail - offset;
      offset = size - tail;
      continue;
    }
    const b = new Uint8Array(await r.arrayBuffer());
    const next = parseInt(r.headers.get("X-Kusaw-Next-Offset") || "0", 10);
    if (b.length) chunks.push(b);
    offset = next || offset + b.length;
    if (b.length < (4 << 20)) break;
  }
  return { chunks, offset, skipped };
}

function pre(text, cls) { return el("pre", { class: cls || "", text: text }); }

function transcriptView(runId, a) {
  const node = el("div", { id: "transcript" });
  let last = "";
  async function update(att) {
    if (last && att.finished && node.dataset.final) return;
    let t;
    try { t = await api(attemptPath(runId, att) + "/transcript"); } catch (e) { node.replaceChildren(el("p", { class: "reason", text: String(e) })); return; }
    const sig = JSON.stringify(t);
    if (sig === last) return;
    last = sig;
    const open = new Set([...node.querySelectorAll("details[open]")].map(d => d.dataset.key));
    const items = [];
    if (t.prompt) items.push(el("div", { class: "tr tr-prompt" }, el("div", { class: "tr-label", text: "prompt" }), pre(t.prompt)));
    t.entries.forEach((e, i) => {
      const d = e.data || {};
      switch (e.kind) {
        case "probe":
          items.push(el("div", { class: "tr tr-probe muted", text: `${d.provider || t.provider || "agent"} ${d.version || ""} at ${d.path || "?"}` }));
          break;
        case "init":
          items.push(el("div", { class: "tr tr-init muted", text: `session ${d.session_id || ""} · model ${d.model || "?"}${d.version ? " · " + t.provider + " " + d.version : ""}` }));
          break;
        case "text":
          items.push(el("div", { class: "tr tr-text" }, el("div", { class: "tr-label", text: "agent" }), pre(d.text || ""), d.truncated ? el("div", { class: "muted", text: `(cut; ${d.bytes} bytes in stdout)` }) : null));
          break;
        case "thinking": {
          const det = el("details", { class: "tr tr-thinking", "data-key": "k" + i }, el("summary", { text: "thinking" }), pre(d.text || ""));
          det.open = open.has("k" + i);
          items.push(det);
          break;
        }
        case "tool": {
          const c = e.tool;
          const state = !c.done ? "running" : c.is_error ? "error" : "ok";
          const brief = (c.input || "").replace(/\s+/g, " ").slice(0, 120);
          const det = el("details", { class: "tr tr-tool t-" + state, "data-key": "k" + i },
            el("summary", {}, el("span", { class: "tool-name mono", text: c.name || "tool" }), " ", el("span", { class: "badge s-" + (state === "ok" ? "passed" : state === "error" ? "failed" : "running"), text: state }), " ", el("span", { class: "muted mono", text: brief })),
            el("div", { class: "tr-label", text: "input" + (c.mcp_server ? " (MCP " + c.mcp_server + ")" : "") }), pre(c.input || "", "tool-in"),
            el("div", { class: "tr-label", text: "result" }), pre(c.done ? (c.output || "") : "(still running)", "tool-out"),
            c.truncated ? el("div", { class: "muted", text: "(cut; the whole stream is in stdout)" }) : null);
          det.open = open.has("k" + i) || c.is_error;
          items.push(det);
          break;
        }
        case "retry":
          items.push(el("div", { class: "tr tr-retry", text: `API retry ${d.attempt || "?"}/${d.max_retries || "?"}: ${d.error || ""} ${d.status || ""}` }));
          break;
        case "result": {
          const bits = [d.is_error ? "error" : "success"];
          if (d.subtype) bits.push(d.subtype);
          if (d.turns) bits.push(d.turns + " turns");
          if (d.duration_ms) bits.push(fmtDur(d.duration_ms));
          if (typeof d.cost_usd === "number") bits.push("cost $" + d.cost_usd.toFixed(4));
          if (d.usage) bits.push(fmtTokens(usageTokens(d.usage)) + " tokens");
          items.push(el("div", { class: "tr tr-result " + (d.is_error ? "r-error" : "r-ok") }, el("div", { class: "tr-label", text: "result: " + bits.join(" · ") }), pre(d.text || "")));
          break;
        }
        default:
          items.push(el("div", { class: "tr muted", text: e.kind + " " + JSON.stringify(d) }));
      }
    });
    if (t.cut) items.push(el("p", { class: "muted", text: "The transcript stops here; the whole stream is in stdout." }));
    if (!items.length) items.push(el("p", { class: "muted", text: att.kind === "agent" ? "No agent events yet." : "Not an agent step: see its output." }));
    if (t.usage) items.push(el("div", { class: "tr-usage muted", text: "usage: " + fmtUsage(t.usage) }));
    node.replaceChildren(...items);
    if (att.finished) node.dataset.final = "1";
  }
  return { node, update };
}

// outputView follows an attempt's stdout and stderr through the log API:
// what is new since the last read is appended, while the attempt runs.
function outputView(runId, a) {
  const node = el("div", { id: "output" });
  const streams = [];
  let timer = null, busy = false, cur = a;
  for (const [pi, p] of (a.processes.length ? a.processes : [{ stdout: "stdout.log", stderr: "stderr.log", repos: [] }]).entries()) {
    for (const which of ["stdout", "stderr"]) {
      const file = p[which] || which + ".log";
      const box = el("pre", { class: "output " + which, id: `output-${which}${pi ? "-" + pi : ""}` });
      const note = el("div", { class: "muted" });
      node.append(el("h3", { text: which + (a.processes.length > 1 ? " (" + p.repos.join(", ") + ")" : "") }), note, box);
      streams.push({ path: `steps/${a.step}/${a.attempt}/${file}`, box, note, offset: 0, size: 0, dec: new TextDecoder() });
    }
  }
  async function poll() {
    if (busy) return;
    busy = true;
    try {
      for (const s of streams) {
        const { chunks, offset, skipped } = await readLog(runId, s.path, s.offset, MAX_OUTPUT);
        s.offset = offset;
        if (skipped) {
          // Whatever was shown is older than the part read now.
          s.box.replaceChildren();
          s.size = 0;
          s.dec = new TextDecoder();
          s.note.textContent = "Earlier output is not shown here; read it all with kusaw logs.";
        }
        for (const c of chunks) {
          const text = s.dec.decode(c, { stream: true });
          if (!text) continue;
          const stick = s.box.scrollTop + s.box.clientHeight >= s.box.scrollHeight - 4;
          s.box.append(document.createTextNode(text));
          s.size += text.length;
          if (s.size > MAX_OUTPUT) {
            // Keep the newest output: drop whole text nodes from the front.
            while (s.size > MAX_OUTPUT && s.box.firstChild) {
              const f = s.box.firstChild, drop = s.size - MAX_OUTPUT, n = f.textContent.length;
              if (n <= drop) { f.remove(); s.size -= n; }
              else { f.textContent = f.textContent.slice(drop); s.size -= drop; }
            }
            s.note.textContent = "Earlier output is not shown here; read it all with kusaw logs.";
          }
          if (stick) s.box.scrollTop = s.box.scrollHeight;
        }
        if (!s.offset && !s.box.firstChild) s.note.textContent = "(empty)";
        else if (s.note.textContent === "(empty)") s.note.textContent = "";
      }
      node.dataset.offsets = streams.map(s => s.offset).join(",");
    } catch (e) { node.dataset.error = String(e); }
    busy = false;
    if (cur.finished && timer) { clearInterval(timer); timer = null; await poll(); }
  }
  function update(att) { cur = att; poll(); }
  timer = setInterval(poll, 1000);
  return { node, update, stop: () => { if (timer) clearInterval(timer); } };
}

function artifactsView(runId, a) {
  const node = el("div", { id: "artifacts" });
  let done = false;
  async function update(att) {
    if (done) return;
    let list;
    try { list = await api(attemptPath(runId, att) + "/artifacts"); } catch (e) { node.replaceChildren(el("p", { class: "reason", text: String(e) })); return; }
    const base = attemptPath(runId, att) + "/artifacts/";
    const rows = list.files.map(f => el("tr", {},
      el("td", { class: "mono" }, el("a", { href: base + f.path.split("/").map(encodeURIComponent).join("/"), download: f.path.split("/").pop(), text: f.path })),
      el("td", { class: "num", text: fmtBytes(f.size) })));
    node.replaceChildren(...[
      rows.length ? el("table", {}, el("thead", {}, el("tr", {}, el("th", { text: "file" }), el("th", { text: "size" }))), el("tbody", {}, ...rows))
        : el("p", { class: "muted", text: "No artifacts." + (att.finished ? "" : " (The attempt is still running.)") }),
      list.skipped ? el("p", { class: "muted", text: `${list.skipped} entries are not plain files (links, FIFOs) and are not served.` }) : null,
      list.cut ? el("p", { class: "muted", text: "Only the first files are listed." }) : null].filter(Boolean));
    done = !!att.finished;
  }
  return { node, update };
}

const MAX_EGRESS_ROWS = 2000;
const MAX_EGRESS_BYTES = 4 << 20; // of egress.log read at most

function egressView(runId, a) {
  const node = el("div", { id: "egress-log" });
  let offset = 0, buf = "", rows = [], done = false, skipped = 0;
  let dec = new TextDecoder();
  async function update(att) {
    if (done) return;
    const fin = !!att.finished;
    let got;
    try { got = await readLog(runId, `steps/${att.step}/${att.attempt}/egress.log`, offset, MAX_EGRESS_BYTES); } catch (e) { node.replaceChildren(el("p", { class: "reason", text: String(e) })); return; }
    offset = got.offset;
    if (got.skipped) {
      // Only the log's end is read: start over from there (its first,
      // partial line does not parse and is left out).
      rows = []; buf = ""; dec = new TextDecoder(); skipped += got.skipped;
    }
    for (const c of got.chunks) buf += dec.decode(c, { stream: true });
    const lines = buf.split("\n");
    buf = lines.pop();
    for (const l of lines) {
      let m;
      try { m = JSON.parse(l); } catch (e) { continue; }
      if (!m || typeof m !== "object" || !m.host || !m.decision) continue; // seal lines
      rows.push(m);
    }
    const refused = rows.filter(m => m.decision === "refuse" || m.decision === "close").length;
    const shown = rows.slice(-MAX_EGRESS_ROWS);
    const tr = shown.map(m => el("tr", { class: "d-" + m.decision },
      el("td", { text: m.time ? new Date(m.time).toLocaleTimeString() : "" }),
      el("td", { text: m.kind || "" }),
      el("td", { class: "mono", text: m.host }),
      el("td", { class: "num", text: m.port ? String(m.port) : "" }),
      el("td", {}, el("span", { class: "verdict v-" + m.decision, text: m.decision })),
      el("td", { class: "mono", text: m.reason || "" }),
      el("td", { class: "num", text: fmtBytes(m.bytes_up || 0) }),
      el("td", { class: "num", text: fmtBytes(m.bytes_down || 0) }),
      el("td", { class: "muted", text: m.detail || m.rule || "" })));
    node.replaceChildren(...[
      el("p", { class: "muted", text: rows.length ? `${rows.length} decisions, ${refused} refused` + (skipped ? ` in the log's last ${fmtBytes(MAX_EGRESS_BYTES)}` : "") + (rows.length > shown.length ? ` (the last ${shown.length} shown)` : "") : `No egress decisions (network: ${att.network || "?"}).` }),
      rows.length ? el("table", {}, el("thead", {}, el("tr", {}, ...["time", "kind", "host", "port", "verdict", "key", "up", "down", "detail"].map(h => el("th", { text: h })))), el("tbody", {}, ...tr)) : null].filter(Boolean));
    done = fin;
  }
  return { node, update };
}

const VIEWS = { transcript: transcriptView, output: outputView, artifacts: artifactsView, egress: egressView };

// attemptPanel shows one attempt's views; which attempt and view come
// from the page's address (#/runs/RUN/STEP/N/VIEW).
function attemptPanel(runId, want) {
  const node = el("div", { id: "attempt-panel" });
  const picker = el("div", { class: "picker" }), tabs = el("div", { class: "tabs" }), body = el("div", { class: "tab-body" });
  node.append(picker, tabs, body);
  let view = null, key = "";
  // attempts are all of the run's, helpers' too; own are the pipeline's
  // steps', whose last is shown when the address names none.
  function update(attempts, own) {
    if (!attempts.length) { body.replaceChildren(el("p", { class: "muted", text: "No attempts yet." })); return; }
    own = own && own.length ? own : attempts;
    let a = want.step ? attempts.find(x => x.step === want.step && x.attempt === want.n) : own[own.length - 1];
    if (!a) { body.replaceChildren(el("p", { class: "reason", text: `This run has no attempt ${want.n} of step ${want.step}.` })); return; }
    const tab = TABS.includes(want.tab) ? want.tab : (a.kind === "agent" ? "transcript" : "output");
    const href = (x, t) => `#/runs/${encodeURIComponent(runId)}/${encodeURIComponent(x.step)}/${x.attempt}/${t}`;
    picker.replaceChildren(el("span", { class: "muted", text: "attempt: " }), ...attempts.map(x =>
      el("a", { href: href(x, tab), class: "pick" + (x === a ? " on" : "") + " s-" + (x.outcome || "running"), text: `${x.step} #${x.attempt}`, title: x.role ? x.role.label : "" })));
    tabs.replaceChildren(...TABS.map(t => el("a", { href: href(a, t), class: "tab" + (t === tab ? " on" : ""), id: "tab-" + t, text: t })));
    // The output view is drawn again once the attempt's processes are
    // known (per_repo: one pair of logs per repo).
    const k = `${a.step}/${a.attempt}/${tab}` + (tab === "output" ? "/" + a.processes.length : "");
    if (k !== key) {
      if (view && view.stop) view.stop();
      key = k;
      view = VIEWS[tab](runId, a);
      body.replaceChildren(el("h2", { text: `${a.step} attempt ${a.attempt}${a.role ? " (" + a.role.label + ")" : ""}: ${tab}` }), view.node);
      node.dataset.attempt = `${a.step}/${a.attempt}`;
      node.dataset.tab = tab;
    }
    view.update(a);
  }
  return { node, update, stop: () => { if (view && view.stop) view.stop(); } };
}

// ---- the runs list's filters ----

const RUN_STATES = ["queued", "running", "waiting", "succeeded", "failed", "canceled", "interrupted"];
const seenPipelines = new Set();

function runsFilter(cur, runs) {
  for (const r of runs) seenPipelines.add(r.pipeline);
  if (cur.pipeline) seenPipelines.add(cur.pipeline);
  const go = () => {
    const q = new URLSearchParams();
    if (pSel.value) q.set("pipeline", pSel.value);
    if (sSel.value) q.set("state", sSel.value);
    const s = q.toString();
    location.hash = "#/" + (s ? "?" + s : "");
  };
  const opt = (v, label, on) => { const o = el("option", { value: v, text: label }); o.selected = on; return o; };
  const pSel = el("select", { id: "filter-pipeline" }, opt("", "all pipelines", !cur.pipeline), ...[...seenPipelines].sort().map(p => opt(p, p, p === cur.pipeline)));
  const sSel = el("select", { id: "filter-state" }, opt("", "all states", !cur.state), ...RUN_STATES.map(s => opt(s, s, s === cur.state)));
  pSel.addEventListener("change", go);
  sSel.addEventListener("change", go);
  return el("div", { class: "filters", id: "filters" }, el("label", {}, "pipeline ", pSel), el("label", {}, "state ", sSel),
    (cur.pipeline || cur.state) ? el("a", { href: "#/", text: "clear" }) : null);
}
