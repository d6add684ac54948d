// The console's page: ask, see the answer with its passages, context and graph; add, list, open and
// delete documents, following their jobs; the index's counts. Only the public HTTP API is used.

import { apiKey, call, documentPath, modes, queryStream, setApiKey, waitForJob } from "./api.js";
import { draw, graphOf } from "./graph.js";

const $ = (id) => document.getElementById(id);

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function report(target, message, isError = false) {
  const node = $(target);
  node.textContent = message;
  node.classList.toggle("error", isError);
}

const fmt = (score) => (typeof score === "number" ? score.toFixed(3) : "");

// ---- API key ---------------------------------------------------------------------------------------

function showKeyState() {
  $("key-state").textContent = apiKey() ? "key set for this tab" : "no key";
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  setApiKey($("api-key").value.trim());
  $("api-key").value = "";
  showKeyState();
  loadDocuments();
  loadStats();
});
$("forget-key").addEventListener("click", () => {
  setApiKey("");
  showKeyState();
});

// ---- Ask -------------------------------------------------------------------------------------------

const CONTEXT_KINDS = [
  ["summaries", "Summaries"], ["chunks", "Chunks"], ["entities", "Entities"],
  ["relations", "Relations"], ["hyperedges", "Facts (hyperedges)"],
];

function contextItem(item) {
  const sources = item.sources?.length
    ? h("span", { class: "muted" }, " from ", ...item.sources.flatMap((id, i) => [i ? ", " : "", docLink(id)]))
    : null;
  return h("li", { id: `ctx-${item.number}`, class: "ctx-item" },
    h("span", { class: "num" }, `[${item.number}]`), " ",
    h("span", { class: "muted" }, `score ${fmt(item.score)}${item.layer ? `, layer ${item.layer}` : ""}`),
    sources,
    h("div", { class: "ctx-text" }, item.text));
}

function docLink(id, label = id) {
  return h("button", { type: "button", class: "link", onclick: () => openDocument(id) }, label);
}

function renderContext(context) {
  const box = $("context");
  box.replaceChildren();
  for (const [field, title] of CONTEXT_KINDS) {
    const items = context[field] ?? [];
    if (!items.length) continue;
    // Entities, relations and facts open; summaries and chunks are long and start folded.
    const open = field === "summaries" || field === "chunks" ? {} : { open: "" };
    box.append(h("details", open,
      h("summary", {}, `${title} (${items.length})`),
      h("ol", { class: "ctx", "aria-label": title }, ...items.map(contextItem))));
  }
  const notes = { ...context.notes };
  delete notes.implicit_subgraph; // drawn only as the graph's caption: its tree is long
  if (Object.keys(notes).length) {
    box.append(h("details", {}, h("summary", {}, "Notes"), h("pre", {}, JSON.stringify(notes, null, 2))));
  }
  if (!box.children.length) box.append(h("p", { class: "muted" }, "This mode used no context items."));
}

function renderCitations(context) {
  const byNumber = new Map();
  for (const [field] of CONTEXT_KINDS) for (const item of context[field] ?? []) byNumber.set(item.number, item);
  const list = $("citations");
  list.replaceChildren(...(context.citations ?? []).map((n) => {
    const item = byNumber.get(n);
    const label = item ? `[${n}] ${item.kind}: ${item.text.slice(0, 140)}` : `[${n}]`;
    return h("li", {}, h("a", { href: `#ctx-${n}` }, label));
  }));
  $("citations-box").hidden = !list.children.length;
}

function renderPassages(passages) {
  $("passages").replaceChildren(...passages.map((p) => h("li", { class: "passage" },
    docLink(p.id, p.title || p.id), " ", h("span", { class: "muted" }, `${p.id} · score ${fmt(p.score)}`))));
}

function renderGraph(context) {
  const graph = graphOf(context);
  const detail = $("node-detail");
  detail.replaceChildren();
  draw($("graph"), graph, (node) => {
    detail.replaceChildren(...[
      h("h4", {}, node.label),
      h("p", { class: "muted" }, node.kind === "entity" ? "entity" : "fact (hyperedge)"),
      h("p", {}, node.text || "No description in this answer's context."),
      node.relations?.length ? h("ul", { "aria-label": "Relations" }, ...node.relations.map((r) => h("li", {}, r)))
        : null,
      node.sources?.length ? h("p", {}, "Passages: ", ...node.sources.flatMap((id, i) => [i ? ", " : "", docLink(id)]))
        : null,
    ].filter((child) => child !== null));
  });
  const relations = graph.edges.filter((e) => e.kind === "relation").length;
  $("graph-caption").textContent = graph.nodes.length
    ? `${graph.nodes.length} nodes, ${relations} relations`
    : "This mode's context holds no entities or relations.";
}

function renderResult(out) {
  $("answer").textContent = out.answer;
  const timings = Object.entries(out.timings_ms ?? {}).map(([k, v]) => `${k} ${Math.round(v)} ms`).join(", ");
  $("answer-meta").textContent = `mode ${out.mode} · index version ${out.index_version} · ${timings}`;
  renderCitations(out.context);
  renderPassages(out.passages);
  renderContext(out.context);
  renderGraph(out.context);
}

$("ask-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const request = { question: $("question").value };
  if ($("mode").value) request.mode = $("mode").value;
  if ($("top-k").value) request.top_k = Number($("top-k").value);
  $("ask-button").disabled = true;
  report("ask-status", "Asking…");
  try {
    let out;
    if ($("stream").checked) {
      $("result").hidden = false;
      $("answer").textContent = "";
      out = await queryStream(request, (token) => { $("answer").textContent += token; });
    } else {
      out = await call("POST", "/v1/query", request);
    }
    $("result").hidden = false;
    renderResult(out);
    report("ask-status", `Answered from ${out.passages.length} passages.`);
  } catch (err) {
    report("ask-status", err.message, true);
  } finally {
    $("ask-button").disabled = false;
  }
});

// ---- Add documents and follow their jobs -----------------------------------------------------------

function jobRow(label) {
  const progress = h("progress", { max: "1", "aria-label": `Progress of ${label}` });
  const state = h("span", { class: "job-state" }, "submitting");
  const row = h("li", { class: "job" }, h("span", {}, label), progress, state);
  $("jobs").prepend(row);
  return { row, progress, state };
}

// Submits, then polls the job; refreshes the list and the counts once it is applied.
async function follow(label, submit) {
  const view = jobRow(label);
  try {
    const accepted = await submit();
    view.row.dataset.jobId = accepted.job_id;
    const job = await waitForJob(accepted.job_id, (status) => {
      view.state.textContent = status.status + (status.index_version != null && status.status === "done"
        ? ` (index version ${status.index_version})` : "") + (status.error ? `: ${status.error}` : "");
      view.row.dataset.status = status.status;
      if (status.status === "done" || status.status === "failed") view.progress.value = 1;
    });
    if (job.status === "done") {
      await Promise.all([loadDocuments(), loadStats()]);
    }
    return job;
  } catch (err) {
    view.state.textContent = err.message;
    view.row.dataset.status = "error";
    view.state.classList.add("error");
    return null;
  }
}

function addDocuments(documents, label) {
  report("add-status", "");
  return follow(label, async () => {
    const accepted = await call("POST", "/v1/documents", { documents });
    report("add-status", `Accepted ${accepted.accepted} document(s): ${(accepted.ids ?? []).join(", ")}`);
    return accepted;
  });
}

$("paste-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const doc = { title: $("doc-title").value, text: $("doc-text").value };
  if ($("doc-id").value.trim()) doc.id = $("doc-id").value.trim();
  addDocuments([doc], `“${doc.title || doc.text.slice(0, 30)}”`);
});

// One file's documents; a message naming the file (and line) for what cannot be sent.
async function documentsOf(file) {
  const name = file.name.toLowerCase();
  if (name.endsWith(".pdf")) throw new Error(`${file.name}: PDF is not supported yet; extract its text first`);
  const text = await file.text();
  if (name.endsWith(".jsonl")) {
    return text.split("\n").flatMap((line, i) => {
      if (!line.trim()) return [];
      let doc;
      try {
        doc = JSON.parse(line);
      } catch {
        throw new Error(`${file.name} line ${i + 1}: not valid JSON`);
      }
      if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
        throw new Error(`${file.name} line ${i + 1}: not a JSON object`);
      }
      return [doc];
    });
  }
  if (name.endsWith(".txt") || name.endsWith(".md") || name.endsWith(".markdown")) {
    return [{ title: file.name.replace(/\.(txt|md|markdown)$/i, ""), text }];
  }
  throw new Error(`${file.name}: not a .txt, .md or .jsonl file`);
}

$("upload-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const files = [...$("files").files];
  if (!files.length) {
    report("add-status", "Choose one or more files first.", true);
    return;
  }
  let documents;
  try {
    documents = (await Promise.all(files.map(documentsOf))).flat();
  } catch (err) {
    report("add-status", err.message, true);
    return;
  }
  if (!documents.length) {
    report("add-status", "The files hold no documents.", true);
    return;
  }
  addDocuments(documents, files.map((f) => f.name).join(", "));
});

// ---- Documents --------------------------------------------------------------------------------------

const pages = { cursors: [null], at: 0, next: null };

async function loadDocuments() {
  const params = new URLSearchParams({ limit: $("docs-limit").value });
  const cursor = pages.cursors[pages.at];
  if (cursor) params.set("cursor", cursor);
  try {
    const page = await call("GET", `/v1/documents?${params}`);
    pages.next = page.next_cursor;
    $("docs-rows").replaceChildren(...page.documents.map(documentRow));
    const first = page.documents.length ? pages.at * Number($("docs-limit").value) + 1 : 0;
    $("docs-summary").textContent =
      `${first}–${first + page.documents.length - (first ? 1 : 0)} of ${page.total} · index version ${page.index_version}`;
    $("docs-prev").disabled = pages.at === 0;
    $("docs-next").disabled = !pages.next;
    report("docs-status", "");
  } catch (err) {
    report("docs-status", err.message, true);
  }
}

function documentRow(doc) {
  return h("tr", { "data-doc-id": doc.id },
    h("td", {}, h("code", {}, doc.id)),
    h("td", {}, doc.title),
    h("td", {}, String(doc.chars)),
    h("td", {}, String(doc.chunks)),
    h("td", { class: "actions" },
      h("button", { type: "button", "aria-label": `Open ${doc.id}`, onclick: () => openDocument(doc.id) }, "Open"),
      h("button", { type: "button", class: "danger", "aria-label": `Delete ${doc.id}`,
        onclick: () => deleteDocument(doc.id) }, "Delete")));
}

async function openDocument(id) {
  try {
    const doc = await call("GET", documentPath(id));
    $("doc-view-title").textContent = doc.title || doc.id;
    $("doc-view-meta").textContent =
      `${doc.id} · ${doc.chars} characters · ${doc.chunks} chunks · index version ${doc.index_version}`;
    $("doc-view-text").textContent = doc.text;
    $("doc-view").hidden = false;
    $("doc-view").scrollIntoView({ block: "nearest" });
    report("docs-status", "");
  } catch (err) {
    report("docs-status", `${id}: ${err.message}`, true);
  }
}

async function deleteDocument(id) {
  if (!window.confirm(`Delete document ${id} from the index?`)) return;
  if ($("doc-view-meta").textContent.startsWith(`${id} ·`)) $("doc-view").hidden = true;
  await follow(`delete ${id}`, () => call("DELETE", documentPath(id)));
}

$("docs-refresh").addEventListener("click", loadDocuments);
$("docs-limit").addEventListener("change", () => {
  Object.assign(pages, { cursors: [null], at: 0, next: null });
  loadDocuments();
});
$("docs-next").addEventListener("click", () => {
  pages.cursors[pages.at + 1] = pages.next;
  pages.at += 1;
  loadDocuments();
});
$("docs-prev").addEventListener("click", () => {
  pages.at = Math.max(0, pages.at - 1);
  loadDocuments();
});
$("doc-view-close").addEventListener("click", () => { $("doc-view").hidden = true; });

// ---- Index stats -------------------------------------------------------------------------------------

const STAT_LABELS = {
  index_version: "Index version", updated_at: "Last update", documents: "Documents", chunks: "Chunks",
  entities: "Entities", relations: "Relations", hyperedges: "Hyperedges", summaries: "Summaries",
  layers: "Layers", pending_jobs: "Pending jobs",
};

async function loadStats() {
  try {
    const stats = await call("GET", "/v1/stats");
    const keys = [...Object.keys(STAT_LABELS).filter((k) => k in stats),
      ...Object.keys(stats).filter((k) => !(k in STAT_LABELS))];
    $("stats-list").replaceChildren(...keys.flatMap((k) => [
      h("dt", {}, STAT_LABELS[k] ?? k),
      h("dd", { "data-stat": k }, typeof stats[k] === "object" ? JSON.stringify(stats[k]) : String(stats[k])),
    ]));
    report("stats-status", "");
  } catch (err) {
    report("stats-status", err.message, true);
  }
}
$("stats-refresh").addEventListener("click", loadStats);

// ---- Start ---------------------------------------------------------------------------------------------

async function loadModes() {
  try {
    for (const mode of await modes()) $("mode").append(h("option", { value: mode }, mode));
  } catch (err) {
    report("ask-status", `Could not read the modes: ${err.message}`, true);
  }
}

showKeyState();
loadModes();
loadDocuments();
loadStats();
