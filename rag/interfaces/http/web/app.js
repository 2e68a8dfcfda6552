// The one page of `rag serve`: ask, show the verified answer, show cited lines on click.
// Document text is untrusted: it only ever reaches the page through textContent.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "rag-token";  // sessionStorage: gone when the tab closes
const SKIP_KEY = "rag-public-only";
let claimedGroups = false;  // the server believes the groups field (development only)

function storedToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

/** Headers for every request: the bearer token, when this tab has one. */
function authHeaders(extra) {
  const headers = Object.assign({}, extra || {});
  const token = storedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  return headers;
}

/** A new element; `text` goes in as textContent, never as markup. */
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** A heading path beside a chip, its `code` names shown as code (text nodes only). */
function headingNode(heading) {
  const node = el("span", "muted heading-inline");
  node.append(...inlineNodes(heading));
  return node;
}

function show(id, visible) {
  $(id).hidden = !visible;
}

function span(citation) {
  const lines = citation.start_line === citation.end_line
    ? `${citation.start_line}` : `${citation.start_line}-${citation.end_line}`;
  return `${citation.source_path}:${lines}${cellPlace(citation)}`;
}

/** In a notebook, where the lines are as its author sees them, in the CLI's words:
 * " [cell 3, lines 2-5]" ("from line 2" when they run on into a later cell). */
function cellPlace(citation) {
  if (citation.cell == null || !citation.cell_lines) return "";
  const [first, last] = citation.cell_lines;
  const span = citation.end_cell != null ? `from line ${first}`
    : first === last ? `line ${first}` : `lines ${first}-${last}`;
  return ` [cell ${citation.cell}, ${span}]`;
}

function clear(id) {
  $(id).replaceChildren();
}

function setStatus(text) {
  $("status").textContent = text || "";
}

function showError(text) {
  $("error").textContent = text;
  show("error", Boolean(text));
}

/** Turn a failed response into one sentence a reader can act on. */
async function errorMessage(response) {
  let detail = "";
  try {
    const body = await response.json();
    detail = body && body.error ? String(body.error) : "";
  } catch (_) {
    detail = "";
  }
  return messageFor(response.status, detail);
}

/** One sentence for an HTTP status and the server's own explanation. */
function messageFor(status, detail) {
  const prefix = {
    400: "The request was not accepted",
    401: "Please sign in again",
    403: "Not allowed",
    409: "Busy",
    422: "Please check the question",
    503: "The model is not answering",
  }[status] || `The server failed (HTTP ${status})`;
  return detail ? `${prefix}: ${detail}` : `${prefix}.`;
}

function citationChip(citation, viewer) {
  const chip = el("button", "chip");
  chip.type = "button";
  chip.dataset.label = citation.label;
  chip.setAttribute("aria-pressed", "false");
  chip.title = citation.heading || citation.source_path;
  chip.append(el("span", "label", citation.label), el("span", "path", span(citation)));
  chip.addEventListener("click", () => viewer(citation, chip));
  return chip;
}

function showLines(citation, chip) {
  for (const other of document.querySelectorAll(".chip[aria-pressed='true']")) {
    other.setAttribute("aria-pressed", "false");
  }
  for (const same of document.querySelectorAll(".chip")) {
    if (same.dataset.label === citation.label) same.setAttribute("aria-pressed", "true");
  }
  $("viewer-label").textContent = citation.label;
  $("viewer-path").textContent = citation.source_path;
  $("viewer-range").textContent =
    `lines ${citation.start_line}-${citation.end_line}${cellPlace(citation)}`;
  $("viewer-heading").textContent = citation.heading || "(no heading)";
  $("viewer-heading").classList.toggle("muted", !citation.heading);
  $("viewer-note").textContent = citation.lines_note || "";
  show("viewer-note", Boolean(citation.lines_note));
  const rows = (citation.lines || []).map((line) => {
    const row = el("div", "line");
    row.append(el("span", "line-no", line.number), el("span", "line-text", line.text));
    return row;
  });
  $("viewer-lines").replaceChildren(...rows);
  show("viewer", true);
  if (chip && window.matchMedia("(max-width: 900px)").matches) {
    $("viewer").scrollIntoView({ behavior: "smooth", block: "start" });
  }
}

/** A statement with its citation chips; verified statements are rendered as Markdown,
 * flagged ones are shown exactly as the model wrote them. */
function statementNode(statement, viewer, className) {
  const chips = (statement.citations || []).flatMap((c) => [" ", citationChip(c, viewer)]);
  if (className.includes("unsupported")) {
    const para = el("p", className);
    para.append(el("span", "text", statement.text), ...chips);
    return para;
  }
  const block = el("div", className);
  const blocks = markdownNodes(statement.text);
  const tail = blocks.length && blocks[blocks.length - 1].tagName === "P"
    ? blocks[blocks.length - 1] : el("p", "cites");
  tail.append(...chips);
  block.append(...blocks);
  if (tail.parentNode !== block) block.append(tail);
  return block;
}

/** An evidence passage shown like a citation: its lines as the index holds them. */
function passageAsCitation(item) {
  const lines = String(item.text).split("\n")
    .map((text, n) => ({ number: item.start_line + n, text }));
  return Object.assign({}, item, {
    lines,
    lines_note: "A passage the search found, as indexed; the answer does not cite it.",
  });
}

function badge(text, kind) {
  return el("span", `badge ${kind || ""}`.trim(), text);
}

function renderAnswer(data) {
  show("progress", false);
  clear("draft");
  for (const id of ["answer", "badges", "unsupported", "budget", "closest", "chips"]) clear(id);
  show("viewer", false);
  const badges = $("badges");
  if (data.extractive_fallback) {
    badges.append(badge(
      "Extractive fallback: the model's answer failed verification or was unusable, so these sentences are quoted from the sources instead.",
      "warn"));
  } else if (data.generator === "extractive") {
    badges.append(badge("Extractive answer: sentences quoted from the sources", "info"));
  }
  if (data.insufficient_evidence) {
    $("insufficient").textContent =
      "Insufficient evidence: the docs you can see do not answer this question.";
  }
  show("insufficient", data.insufficient_evidence);

  for (const statement of data.statements || []) {
    $("answer").append(statementNode(statement, showLines, "statement"));
  }

  const unsupported = data.unsupported || [];
  for (const statement of unsupported) {
    const item = el("li");
    item.append(statementNode(statement, showLines, "statement unsupported"));
    $("unsupported").append(item);
  }
  show("unsupported-section", unsupported.length > 0);

  const budget = (data.excluded || []).filter((item) => item.reason === "budget");
  for (const item of budget) {
    const text = item.source_path ? span(item) : item.chunk_id;
    const row = el("li", null, text);
    if (item.heading) row.append(el("span", "muted", ` (${item.heading})`));
    $("budget").append(row);
  }
  show("budget-section", budget.length > 0);

  const closest = data.insufficient_evidence ? (data.evidence || []).slice(0, 3) : [];
  for (const item of closest) {
    const row = el("li");
    row.append(citationChip(passageAsCitation(item), showLines));
    if (item.heading) row.append(headingNode(item.heading));
    $("closest").append(row);
  }
  show("closest-section", closest.length > 0);

  for (const citation of data.citations || []) {
    const wrap = el("div", "source");
    wrap.append(citationChip(citation, showLines));
    if (citation.heading) wrap.append(headingNode(citation.heading));
    $("chips").append(wrap);
  }
  show("sources-section", (data.citations || []).length > 0);

  const timings = Object.entries(data.timings || {})
    .map(([stage, seconds]) => `${stage} ${Math.round(seconds * 1000)} ms`);
  $("timings").textContent = [`generator: ${data.generator}`, ...timings].join(" · ");
  show("result", true);
}

let running = null;  // the question in flight: { controller, timer, started }

function elapsedText() {
  const seconds = running ? Math.floor((performance.now() - running.started) / 1000) : 0;
  return seconds < 60 ? `${seconds} s` : `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

/** A stage the answer has reached, listed under the status line with its time. */
function stage(text) {
  $("stages").append(el("li", null, `${text} (${elapsedText()})`));
}

function startProgress() {
  running = { controller: new AbortController(), started: performance.now(), timer: null };
  running.timer = setInterval(() => { $("elapsed").textContent = elapsedText(); }, 250);
  $("elapsed").textContent = "0 s";
  clear("stages");
  clear("draft");
  show("cancel-button", true);
  show("progress", true);
  return running.controller.signal;
}

function stopProgress() {
  if (running) clearInterval(running.timer);
  show("cancel-button", false);
}

/** Call `handle(event, data)` for each Server-Sent Event of a streamed response. */
async function readEvents(response, handle) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let kind = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) kind = line.slice(7);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      if (data.length) handle(kind, JSON.parse(data.join("\n")));
    }
    if (done) return;
  }
}

/** What each streamed stage changes on the page. */
function onEvent(kind, data) {
  if (kind === "hits") {
    stage(`Found ${data.hits.length} matching passages`);
    setStatus("Choosing the evidence…");
  } else if (kind === "evidence") {
    stage(`Chose ${data.evidence.length} passages as evidence`);
    setStatus(data.evidence.length
      ? "Writing the answer and checking every citation (a local model can take minutes)…"
      : "Nothing you can see matches; finishing…");
  } else if (kind === "statement") {
    if (!$("draft").childElementCount) stage("Verified the first statement");
    $("draft").append(statementNode(data, showLines, "statement"));
  } else if (kind === "done") {
    stage("Done");
    renderAnswer(data);
    setStatus("");
  } else if (kind === "error") {
    show("progress", false);
    showError(messageFor(data.status, data.error));
  }
}

async function ask(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  showError("");
  if (!question) {
    showError("Please type a question first.");
    $("question").focus();
    return;
  }
  const body = { question };
  if (claimedGroups) {
    body.groups = $("groups").value.split(",").map((g) => g.trim()).filter(Boolean);
  }
  if ($("mode").value) body.mode = $("mode").value;
  $("ask-button").disabled = true;
  show("result", false);  // never leave the last answer up as if it answered this question
  show("viewer", false);
  const signal = startProgress();
  setStatus("Searching the docs…");
  try {
    const response = await fetch("/ask", {
      method: "POST",
      headers: authHeaders({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify(body),
      signal,
    });
    if (response.status === 401) {
      show("progress", false);
      await signedOut(await errorMessage(response));
      showError("Your token was not accepted; sign in again or continue with public docs.");
      return;
    }
    if (!response.ok) {
      show("progress", false);
      showError(await errorMessage(response));
      return;
    }
    if ((response.headers.get("content-type") || "").startsWith("text/event-stream")) {
      await readEvents(response, onEvent);
    } else {
      renderAnswer(await response.json());
    }
  } catch (err) {
    if (err && err.name === "AbortError") {
      setStatus(`Cancelled after ${elapsedText()}.`);
      clear("draft");
    } else {
      show("progress", false);
      showError("Cannot reach the server. Is `rag serve` still running?");
    }
  } finally {
    stopProgress();
    $("ask-button").disabled = false;
  }
}

/** Forget the token and ask for one, saying why. */
async function signedOut(reason) {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(SKIP_KEY);
  $("signin-error").textContent = reason || "";
  show("signin-error", Boolean(reason));
  show("whoami", false);
  show("signin", true);
  $("token").focus();
}

/** Ask the server who we are; returns false when it refused the token. */
async function loadHealth() {
  let response;
  try {
    response = await fetch("/health", { headers: authHeaders() });
  } catch (_) {
    $("index-info").textContent = "";
    return true;
  }
  if (response.status === 401) {
    await signedOut(await errorMessage(response));
    return false;
  }
  if (!response.ok) return true;
  const data = await response.json();
  $("index-info").textContent = `${data.chunks} passages indexed`;
  $("index-version").textContent = data.version;
  claimedGroups = Boolean(data.claimed_groups);
  show("groups-field", claimedGroups);
  $("user-name").textContent = data.user || "";
  show("whoami", Boolean(data.user));
  const wantsToken = data.tokens && !data.user && !sessionStorage.getItem(SKIP_KEY);
  show("signin", wantsToken);
  if (!wantsToken) show("signin-error", false);
  return true;
}

async function signIn(event) {
  event.preventDefault();
  const token = $("token").value.trim();
  if (!token) {
    $("signin-error").textContent = "Paste your API token first.";
    show("signin-error", true);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  await loadHealth();
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask-form").addEventListener("submit", ask);
  $("signin").addEventListener("submit", signIn);
  $("skip-button").addEventListener("click", () => {
    sessionStorage.setItem(SKIP_KEY, "1");
    show("signin", false);
  });
  $("signout-button").addEventListener("click", () => signedOut(""));
  $("cancel-button").addEventListener("click", () => {
    if (running) running.controller.abort();
  });
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      $("ask-form").requestSubmit();
    }
  });
  loadHealth();
});
